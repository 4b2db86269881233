"""`vramfit review` on every row of LitGPT's own benchmark table: config_hub/finetune/README.md against the config it names.

Source: Lightning-AI/litgpt at 26857050fe3ff627cd714fe92f5838f51a3d5efa, config_hub/finetune/README.md and
config_hub/finetune/*/*.yaml, kept as published under tests/review/corpus/files/Lightning-AI+litgpt/ (three of them are
review corpus cases: tests/review/corpus/cases/litgpt-llama-2-7b-*.yaml). The table gives each config's machine
(1xA10G / 4xA10G) and its peak memory, or OOM. Each row is reviewed with `--gpu a10g --gpus N` (N from the machine),
offline: a model without a config in vramfit's table is exit 3 and not compared.

Prints per row: the exit code, the predicted allocated peak (GB = 1e9 bytes, as LitGPT prints torch.cuda.max_memory_allocated()
/ 1e9 in utils.create_finetuning_performance_report; no allocator reserve, no CUDA context) beside the published one,
the errors and warnings; then the counts: OOM rows caught, fitting rows with an error or a warning, and the predicted
peaks' error on the rows that ran. The table's "4xA10G" rows of a `devices: 1` config report the 1xA10G peak (the same
figure and runtime): LitGPT starts `devices` processes, so those runs used one GPU of the four. Rows whose published
peak is below the plan's weights + gradients + optimizer states (pure bf16 AdamW: 8 bytes per weight) cannot be the
config's run on the machine named and are listed apart (the "1xA10G" full fine-tuning rows of 1B-4B models: their
figures match the same configs with devices: 4 instead). Per method (full / lora / qlora) the same figures follow.

What the table ran, read from litgpt's code at the commits that wrote its rows (5895df10 2024-04-26 .. 00af8b0d
2024-09-27), and how each is planned (no constant fitted to a row):
- bitsandbytes 0.42.0 (their pyproject pin): MatMul4Bit keeps each 4-bit linear's input as `ctx.tensors = (A, B)`
  (fixed in 0.43.2, bitsandbytes#1270) -> review(bitsandbytes_version="0.42.0"), planner knob bitsandbytes_version;
- finetune/*.py fit() binds `logits = model(...)`: the last step's logits (and, with that bitsandbytes, the inputs its
  graph kept as ctx attributes) live until the next forward returns -> planner knob keeps_previous_output, set by the
  LitGPT reader;
- litgpt/model.py's GPT: its own lm_head (a tied checkpoint's embedding copied into it), no dropout module, F.gelu for
  Phi-2's gelu_new -> the reader plans the config as LitGPT builds it;
- Lightning's BitsandbytesPrecision quantizes lm_head too, and each 128-token chunk of it dequantizes the whole
  vocabulary matrix at the forward's end -> planner knob quantize_lm_head, set by the reader for quantize.
Not modelled: Lightning quantizes from fp16 (`weight.to(torch.half)`), so each dequantization is an fp16 matrix and
then its bf16 copy (the plan counts one); Phi-3's sliding-window mask
(an explicit float mask to SDPA for every layer); bitsandbytes' paged optimizer states are cudaMallocManaged memory,
outside max_memory_allocated (the plan counts them). The StableEmbedding swap of quantized runs (litgpt ae798aba,
2024-10-04) postdates the table.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/litgpt_config_hub.py
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HUB = ROOT / "tests/review/corpus/files/Lightning-AI+litgpt/config_hub/finetune"
GB_PER_GIB = 2**30 / 1e9
# litgpt's pyproject.toml at every commit that wrote the table's rows (5895df10 2024-04-26, e5493986 2024-07-22,
# 00af8b0d 2024-09-27): "bitsandbytes==0.42.0", the version finetune/lora.py warns it is the only one supported. Its
# MatMul4Bit keeps each 4-bit linear's input (planner knob bitsandbytes_version; vramfit/planner/knobs.py).
TABLE_BITSANDBYTES = "0.42.0"


def rows() -> list[tuple[str, int, str]]:
    """(config as the table names it, GPUs of the machine, peak memory as published) per table row."""
    out = []
    for line in (HUB / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 9 and cells[0].endswith(".yaml") and "xA10G" in cells[5]:
            out.append((cells[0], int(cells[5].split("x")[0]), cells[8]))
    return out


def config(named: str) -> Path | None:
    """The config a row names; the table's spelling differs from the folder's in case, and once in the folder: the row
    "gemma2b/qlora.yaml" (Gemma 2 2B's section, 13.52 GB) came with gemma2-2b/qlora.yaml in the commit that added both
    (2b195c7f, "Add Gemma 2 2B"), not with gemma-2b/qlora.yaml (Gemma 1, its own row above)."""
    folder, name = named.split("/")
    folder = {"gemma2b": "gemma2-2b"}.get(folder, folder)
    for candidate in HUB.iterdir():
        if candidate.is_dir() and candidate.name.lower().replace("-", "") == folder.lower().replace("-", "") and (candidate / name).is_file():
            return candidate / name
    return None


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vramfit.review.reviewer import review

    caught = ooms = fitting = errors = warnings = unplanned = 0
    misses: list[float] = []
    by_method: dict[str, list[float]] = {}
    below: list[str] = []
    for named, gpus, peak in rows():
        path = config(named)
        if path is None:
            print(f"{named:32s} {gpus}xA10G  not in the commit's config_hub")
            continue
        result = review([str(path)], gpu="a10g", gpus=gpus, bitsandbytes_version=TABLE_BITSANDBYTES)
        plan = result.plan
        predicted = plan.measure("allocated") * GB_PER_GIB if plan is not None else None  # the table: max_memory_allocated() / 1e9
        bad = [f"{f.severity}: {f.key}" for f in result.findings if f.severity in ("error", "warning")]
        shown = f"{predicted:6.2f} GB" if predicted is not None else "     - "
        print(f"{named:32s} {gpus}xA10G  published {peak:9s} predicted {shown}  exit {result.exit_code}  {'; '.join(bad)}")
        if result.exit_code == 3:
            unplanned += 1
            continue
        if peak == "OOM":
            ooms += 1
            caught += any(f.severity == "error" and f.key == "--gpu" and "exceeds" in f.what for f in result.findings)
            continue
        floor = sum(plan.breakdown.get(k, 0.0) for k in ("weights", "gradients", "optimizer_states")) * GB_PER_GIB
        if float(peak.split()[0]) < floor:  # less than the states the config's run must hold: not a run of it on this machine
            below.append(f"{named} {gpus}xA10G: published {peak} < {floor:.2f} GB of weights, gradients and optimizer states")
            continue
        fitting += 1
        errors += any(f.severity == "error" for f in result.findings)
        warnings += any(f.severity == "warning" for f in result.findings)
        misses.append(predicted / float(peak.split()[0]) - 1)
        by_method.setdefault(path.stem, []).append(misses[-1])
    print()
    print(f"rows reviewed: {ooms + fitting + len(below)} (exit 3, model config not in vramfit's table: {unplanned})")
    print(f"OOM rows caught (error, --gpu exceeds): {caught} of {ooms}")
    print(f"rows whose published peak is below what the config's run must hold (not compared): {len(below)}")
    for line in below:
        print(f"  {line}")
    print(f"rows that ran: {fitting}; with an error: {errors}; with a warning: {warnings}")
    for label, values in [("the rows that ran", misses)] + [(f"{m} rows ({len(v)})", v) for m, v in sorted(by_method.items())]:
        if values:
            absolute = sorted(abs(m) for m in values)
            p90 = absolute[min(len(absolute) - 1, int(0.9 * len(absolute)))]
            print(
                f"predicted vs published peak on {label}: median |error| {statistics.median(absolute):.1%}, p90 {p90:.1%}, "
                f"range {min(values):+.1%} .. {max(values):+.1%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
