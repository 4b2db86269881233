"""`vramfit review` on launch configs as their projects publish them, against the peak memory the same project
publishes beside them: a held-out benchmark scored from sources the planner was not built beside.

Corpus: benchmarks/example_peaks/<owner>+<repo>/**/<config or script, byte for byte>, each with a sidecar
`<file>.peak.json` (or `<file>.<label>.peak.json` when one file has several published figures) naming the
repository, the path, the commit whose README (or comment) states the figure, the line quoted exactly, the figure
and unit as published, `gib_per_gpu`, `gpus`, `metric` (allocated / reserved / nvidia-smi, or "unstated"), the
card when the source names one (`card`), or only its memory (`card_memory`, e.g. "48GB"), and notes. Figures
that could not be tied to exactly one published file are listed in each source's SKIPPED.md.

Each case is reviewed in-process as `vramfit review FILE --gpu CARD --gpus N` would (offline: HF_HUB_OFFLINE=1,
as benchmarks/review_corpus.py does), from the source's folder, so relative paths resolve as they do from the
repository's root, under the library versions the source pinned at that commit (the sidecar's `pins`, read from its
requirements.txt / pyproject.toml: `vramfit review --transformers-version` and its siblings). The card is the named
one, else the catalogue card of the stated memory, else an 80 GB card (h100), said so. The plan's figure for the row's metric is `Plan.measure` (the mapping benchmarks/planner_accuracy.py
uses: allocated -> allocated peak, nvidia-smi -> device total, reserved and unstated -> allocated + allocator reserve).

Per case: status (planned / incomplete and why / stopped before planning, with the first error / error: a traceback), planned vs published GiB per GPU, signed relative error,
and the verdict. A case whose source says it ran on its card (a named card or a stated card memory, or a figure
within the assumed card) and that the review calls "does not fit" is a false error. Totals: cases, planned,
incomplete, median / p90 |error| of the planned ones, false errors, and the models with no config offline.

    .venv/bin/python benchmarks/example_peaks.py              # every case
    .venv/bin/python benchmarks/example_peaks.py -k gpt-oss   # cases whose path contains 'gpt-oss'
    .venv/bin/python benchmarks/example_peaks.py -v           # and each case's errors and warnings
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import time
import traceback
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # reviewed as on a machine without the Hub: reproducible
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.planner_accuracy import summarise  # noqa: E402

CORPUS = REPO / "benchmarks" / "example_peaks"
GIB = 2**30
# a card stated only by its memory ("1x48GB"): the catalogue card of that nominal memory
BY_MEMORY = {"16GB": "v100-16g", "24GB": "rtx4090", "32GB": "v100-32g", "40GB": "a100-40g", "48GB": "rtxa6000", "80GB": "h100", "96GB": "h20", "141GB": "h200"}
PINNED = ("transformers", "torch", "bitsandbytes", "trl", "accelerate")  # the sidecar's `pins`: passed as review(<name>_version=...)
ASSUMED = "h100"  # no card stated: an 80 GB card, said so
AX = "axolotl-ai-cloud+axolotl/"
_CODE_LLAMA = (
    "the README sentence is a copy of llama-2/README.md's (dc71d8872: 'fits on any 24GB VRAM GPU and will take up about "
    "17 GB of VRAM during training if using qlora and 20 GB if using lora'), whose configs set sequence_len 4096; this "
    "folder's 7b configs set sequence_len 100000 with sample_packing (bins of 100,000 tokens, micro_batch_size 2): the "
    "checkpointed layer inputs alone are 32 x 200,000 x 4096 x 2 B = 49 GiB. The figure was not measured with this config"
)
_FSDP2_OFFLOAD = (
    "not investigated: planned under the pinned accelerate (1.10.0.dev0, before huggingface/accelerate#3762: FSDP2 "
    "reduce-scatters every micro-batch, knobs.FSDP2_NO_SYNC_SINCE) with FSDP2 CPU offload, 9.7 GiB against 21 GiB "
    "reserved published; before that reading the plan held the unsharded gradients (+132%, a false error)"
)
_NVFP4 = (
    "a pre-quantized NVFP4 checkpoint (nvidia/...-NVFP4) planned with the bf16 model's config from vramfit's table: the "
    "checkpoint's own config.json (its quantization_config) is not in the table offline, so the weights are planned at "
    "16 bits (model-table work, left to the models branch)"
)
WHY_OFF: dict[str, str] = {  # case id -> why it stays more than 25% off after its inputs were read from the source
    AX + "code-llama/7b/lora.yml": _CODE_LLAMA,
    AX + "code-llama/7b/qlora.yml": _CODE_LLAMA,
    AX + "gpt-oss/gpt-oss-20b-fft-fsdp2-offload.yaml": _FSDP2_OFFLOAD,
    AX + "qwen3@c4a5d315a/30b-a3b-nvfp4-lora.yaml": _NVFP4,
    AX + "qwen3@f6d43791d/30b-a3b-nvfp4-lora.yaml": _NVFP4,
    AX + "qwen3-next@c4a5d315a/qwen3-next-80b-a3b-nvfp4-lora.yaml": _NVFP4,
    AX + "qwen3-next@f6d43791d/qwen3-next-80b-a3b-nvfp4-lora.yaml": _NVFP4,
    AX + "qwen3.5/27b-qlora.yaml": (
        "not explained: 16.9 GiB of 4-bit weights, 7.2 GiB of traced activations (Gated DeltaNet traced at 2,048 tokens) "
        "against ~47 GiB published ('QLoRA, ~47 GiB VRAM with sample packing', c11938233); not investigated further"
    ),
    AX + "llama-3/lora-8b.yml": (
        "not investigated: 'Single GPU @ 11GB VRAM' is a round figure; the config (at 15f7910d3) trains "
        "NousResearch/Llama-2-7b-hf in 8 bits at 2 x 4096 packed tokens"
    ),
}
MS = "modelscope+ms-swift/examples/train/"
WHY_OFF.update(
    {
        AX + "gpt-oss/gpt-oss-120b-fft-fsdp2-offload.yaml": (
            "FSDP2's communication buffers, not planned: with offload_params the GPU holds the gathered units, the root "
            "unit (embeddings + lm_head, 2.4 GiB, never resharded) and activations; the plan counts two gathered units "
            "(2 x 5.98 GiB: a decoder layer is 3.2B parameters, 128 experts) where torch's FSDP2 also holds, in a unit's "
            "post-backward, its unsharded bf16 gradients and the reduce-scatter input they are copied into, together "
            "(torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce: 'Only after the copy-in finishes can "
            "we free the gradients'), and each all-gather's flat output before its copy-out into the unsharded parameters; "
            "that output is allocated on FSDP2's all-gather copy-in stream (foreach_all_gather), whose freed blocks the "
            "caching allocator keeps apart from the default stream's, and the reduce-scatter input is used on the "
            "reduce-scatter stream, which delays its block's reuse, so `device_mem_reserved` (the README's reading) holds "
            "more: 2 to 4 units (12-24 GiB) beyond the plan's. Not modelled this session: it changes every FSDP full-shard plan "
            "and needs GPU measurements (none lent). Also: the config's `dp_shard_size: 16  # requires 2x8xH100 nodes` "
            "contradicts the README's 8x80GB; planned over the README's 8 ranks (the states are offloaded, so the count "
            "moves only the root's 1/dp shard)"
        ),
        MS + "full/dft.sh": (
            "the figure is the card: '# 4*80G' (written G) equals the 80 GB card's size, a machine rather than a peak "
            "(sidecar notes). Checked in ms-swift at 3602360a and at ce426e1f8 (the commit that added this script): "
            "--enable_dft_loss pops the labels, so the model returns its 16-bit logits, and swift/trainers/utils.py "
            "per_token_loss_func runs F.cross_entropy(logits.float(), reduction='none') and multiplies it by exp(-loss) "
            "taken under no_grad (one value per token): the same full-vocabulary tensors as the model's own loss, which "
            "the plan holds (27.8 GiB of logits and loss at 8 x 2,048 tokens x 151,936). PR #5355's first draft took "
            "softmax(logits) for the token probabilities (one more fp32 tokens x vocab tensor, 9.3 GiB), but the merged "
            "commit that added this script already used exp(-loss)"
        ),
    }
)
# cases the review stops before planning, and why that is right
STOPPED_RIGHTLY = {
    AX + "qwen3.5/27b-fft.yaml": (
        "the published regexes (model\\.language_model\\..*) match nothing under axolotl's LayerNamePattern, which "
        "escapes every '.' again; axolotl fixed the example in 7daf7d96f, 'fix: regex for unfrozen language tower (#3586)'"
    ),
}


def cases(pattern: str = "", root: Path = CORPUS) -> list[tuple[str, Path, dict]]:
    """(case id, the published file, its sidecar) for every *.peak.json under `root`."""
    out = []
    for side in sorted(root.glob("*/**/*.peak.json")):
        meta = json.loads(side.read_text())
        case_id = str(side.relative_to(root)).removesuffix(".peak.json")
        if pattern and pattern not in case_id:
            continue
        out.append((case_id, published_file(side, meta), meta))
    return out


def published_file(side: Path, meta: dict) -> Path:
    """The sidecar's `file`, else its own name less `.peak.json` (less a `.<label>` too when that names no file)."""
    if meta.get("file"):
        return side.parent / meta["file"]
    stem = side.name.removesuffix(".peak.json")
    target = side.parent / stem
    return target if target.exists() else side.parent / stem.rsplit(".", 1)[0]


def card_of(meta: dict) -> tuple[str, str]:
    """(catalogue card, how it was chosen)."""
    from vramfit.hardware import CATALOGUE

    named = (meta.get("card") or "").lower().replace("nvidia", "").replace(" ", "").replace("-", "")
    for key in CATALOGUE:
        if named and named == key.replace("-", ""):
            return key, f"{meta['card']} (named)"
    memory = (meta.get("card_memory") or "").upper().replace(" ", "")
    if memory in BY_MEMORY:
        named_as = f"{meta['card']}, not in the catalogue: its " if named else ""
        return BY_MEMORY[memory], f"{named_as}{memory} card stated, planned on {BY_MEMORY[memory]}"
    return ASSUMED, f"no card stated{' (' + meta['card'] + ' not in the catalogue)' if named else ''}: an 80 GB card assumed ({ASSUMED})"


def published_gib(meta: dict) -> float:
    if meta.get("gib_per_gpu") is not None:
        return float(meta["gib_per_gpu"])
    return float(meta["figure"]) * (1e9 / GIB if meta.get("unit", "GiB").upper() == "GB" else 1.0)


def ran_on_card(meta: dict, card: str, figure: float) -> bool:
    """The source says the run ran on this card: a named card or stated memory, or a figure within the assumed card."""
    from vramfit.hardware import CATALOGUE

    return card != ASSUMED or meta.get("card_memory") or figure <= CATALOGUE[card].memory_gib


def review_case(path: Path, meta: dict, card: str):
    """(review or None, traceback text, seconds), reviewed from the source's folder (owner+repo)."""
    from vramfit.review.reviewer import review

    source_root = next(p for p in path.parents if p.parent == CORPUS)
    start = time.perf_counter()
    here = os.getcwd()
    try:
        os.chdir(source_root)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            pins = {f"{k}_version": v for k, v in (meta.get("pins") or {}).items() if k in PINNED}
            result = review([str(path.relative_to(source_root))], gpu=card, gpus=int(meta.get("processes") or meta.get("gpus") or 1), **pins)
        return result, "", time.perf_counter() - start
    except Exception:  # a traceback a user would see: counted, never hidden
        return None, traceback.format_exc(), time.perf_counter() - start
    finally:
        os.chdir(here)


MISSING = re.compile(r"no config\.json found for '([^']+)'")


def why_incomplete(result) -> tuple[str, str | None]:
    """(what the review says it could not compute, the model it found no config for)."""
    for f in result.findings:
        text = str(f)
        found = MISSING.search(text)
        if found:
            return f"no config for {found.group(1)}", found.group(1)
    for f in result.findings:
        if "not planned" in str(f) or "not computed" in str(f) or "could not" in str(f):
            return str(f).split(": ", 1)[-1][:160], None
    return "exit 3 with no finding naming what is missing", None


def score(case_id: str, path: Path, meta: dict) -> dict:
    card, chosen = card_of(meta)
    figure = published_gib(meta)
    result, tb, seconds = review_case(path, meta, card)
    row = dict(id=case_id, card=card, chosen=chosen, published=figure, seconds=seconds, metric=meta.get("metric", "unstated"))
    if result is None:
        return {**row, "status": "error", "why": tb.strip().splitlines()[-1], "traceback": tb}
    row["exit"] = result.exit_code
    row["findings"] = [f for f in result.findings if f.severity in ("error", "warning")]
    if result.plan is None and result.exit_code == 3:
        why, model = why_incomplete(result)
        return {**row, "status": "incomplete", "why": why, "missing_model": model}
    if result.plan is None:  # stopped before planning (exit 1 / 2): the first error says why
        first = next((str(f) for f in result.findings if f.severity == "error"), "no error finding")
        return {**row, "status": "stopped", "why": f"exit {result.exit_code}: {first[:200]}"}
    planned = result.plan.measure(row["metric"])
    fits = result.plan.fits and result.exit_code != 1
    row.update(status="planned", planned=planned, error=(planned - figure) / figure, fits=fits, worst_case=result.length_worst_case)
    row["false_error"] = not fits and bool(ran_on_card(meta, card, figure))
    if result.exit_code == 3:
        row["why"] = why_incomplete(result)[0]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default="", help="only cases whose id contains this")
    parser.add_argument("-v", action="store_true", help="print each case's errors and warnings")
    args = parser.parse_args(argv)
    print(f"{'case':<64} {'card':<9} {'metric':<9} {'published':>9} {'planned':>8} {'error':>7}  verdict / status")
    rows = []
    chosen = cases(args.k)
    for case_id, _, meta in chosen:  # a sidecar's own why_off (modelscope+ms-swift writes its notes there)
        if meta.get("why_off"):
            WHY_OFF.setdefault(case_id, meta["why_off"])
    for case in chosen:
        r = score(*case)
        rows.append(r)
        head = f"{r['id'][:64]:<64} {r['card']:<9} {r['metric']:<9} {r['published']:>9.2f}"
        if r["status"] == "planned":
            verdict = "fits" if r["fits"] else "DOES NOT FIT" + (" (FALSE ERROR: the source ran it)" if r["false_error"] else "")
            worst = "; WORST CASE (a length the files do not bound)" if r["worst_case"] else ""
            print(f"{head} {r['planned']:>8.2f} {r['error']:>+7.1%}  {verdict}{worst}" + (f"; exit 3: {r['why']}" if r.get("why") else ""))
        else:
            print(f"{head} {'-':>8} {'-':>7}  {r['status'].upper()}: {r['why']}")
            if r["id"] in STOPPED_RIGHTLY:
                print(f"    RIGHTLY: {STOPPED_RIGHTLY[r['id']]}")
        if r["chosen"].startswith("no card") or args.v:
            print(f"    card: {r['chosen']}")
        if args.v:
            if r["status"] == "error":
                print(r["traceback"])
            for f in r.get("findings", []):
                print(f"    {f.severity.upper()}: {str(f)[:300]}")
        if r["status"] == "planned" and abs(r["error"]) > 0.25 and r["id"] in WHY_OFF:
            print(f"    WHY OFF: {WHY_OFF[r['id']]}")
        sys.stdout.flush()
    planned = [r for r in rows if r["status"] == "planned"]
    print()
    print(
        f"cases: {len(rows)}; planned: {len(planned)}; incomplete: {sum(r['status'] == 'incomplete' for r in rows)}; "
        f"stopped before planning (exit 1/2): {sum(r['status'] == 'stopped' for r in rows)}; "
        f"errors (tracebacks): {sum(r['status'] == 'error' for r in rows)}"
    )
    if planned:
        med, p90 = summarise([abs(r["error"]) for r in planned])
        print(f"planned: median |error| {med:.1%}, p90 |error| {p90:.1%} ({len(planned)} cases)")
        # a length the files do not bound (padded to the longest sample, or padding-free, of data whose lengths are not
        # known) is planned at the cap, a worst case the published run's data need not reach: scored apart
        for label, group in (
            ("at a length the files bound", [r for r in planned if not r["worst_case"]]),
            ("at a worst-case length (the data's lengths unknown)", [r for r in planned if r["worst_case"]]),
        ):
            if group:
                gmed, gp90 = summarise([abs(r["error"]) for r in group])
                print(f"  planned {label}: median |error| {gmed:.1%}, p90 |error| {gp90:.1%} ({len(group)} cases)")
        for source in sorted({r["id"].split("/", 1)[0] for r in planned}):
            group = [r for r in planned if r["id"].startswith(source + "/") and not r["worst_case"]]
            if group:
                gmed, gp90 = summarise([abs(r["error"]) for r in group])
                print(f"  {source}, at a length the files bound: median |error| {gmed:.1%}, p90 |error| {gp90:.1%} ({len(group)} cases)")
        off = [r for r in planned if abs(r["error"]) > 0.25]
        print(f"planned cases off by more than 25%: {len(off)} ({sum(not WHY_OFF.get(r['id'], 'not ').startswith('not ') for r in off)} explained in WHY_OFF)")
    print(f"false errors (a run the source says ran, called 'does not fit' on its card): {sum(r.get('false_error', False) for r in rows)}")
    hard = sum(r.get("false_error", False) and r.get("exit") == 1 for r in rows)
    print(f"  of them an error finding (exit 1), not a warning that the plan is a worst case or an upper bound: {hard}")
    missing = sorted({r["missing_model"] for r in rows if r.get("missing_model")})
    print(f"models with no config offline ({len(missing)}): {', '.join(missing) or 'none'}")
    print(f"reviewed in {sum(r['seconds'] for r in rows):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
