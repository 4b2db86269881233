"""Shared by the review tests: the seed setups as their users ran them, and a finding filter."""

from __future__ import annotations

from pathlib import Path

SEEDS = Path(__file__).resolve().parent / "seeds"
# seed -> (PATHs, the hardware it ran on)
SEED_RUNS = {
    "sharegpt4v": ([SEEDS / "sharegpt4v/scripts/sharegpt4v/slurm_finetune_7b.sh"], {"gpu": "a100-40g", "gpus": 8, "nodes": 1}),
    "tinychart": ([SEEDS / "tinychart/scripts/train.sh"], {"gpu": "a100-80g", "gpus": 8, "host_ram_gib": 64}),
    "minicpmv": ([SEEDS / "minicpmv/finetune/finetune_lora.sh"], {"gpu": "a100-80g"}),
    "vlm-r1": ([SEEDS / "vlm-r1/src/open-r1-multimodal/run_scripts/run_grpo_rec.sh"], {"gpu": "h20"}),
    "axolotl": ([SEEDS / "axolotl/llama-3b-fft.yml"], {"gpu": "a100-80g", "gpus": 8}),
}


def find(result, *, source: str | None = None, key: str | None = None, text: str = "", severity: str | None = None) -> list:
    """The findings matching every given field (`text` is searched in what and fix)."""
    return [
        f
        for f in result.findings
        if (source is None or f.source == source)
        and (key is None or f.key == key)
        and (severity is None or f.severity == severity)
        and text in f"{f.what} Fix: {f.fix}"
    ]


def edited_copy(source: Path, edits: dict[str, str], path: Path) -> Path:
    """A published YAML written to `path` with the first line writing each `key:` (at any indent) replaced."""
    lines = source.read_text().splitlines()
    for key, value in edits.items():
        hits = [n for n, line in enumerate(lines) if line.lstrip().startswith(f"{key}:")]
        assert hits, key
        indent = lines[hits[0]][: len(lines[hits[0]]) - len(lines[hits[0]].lstrip())]
        lines[hits[0]] = f"{indent}{key}: {value}"
    path.write_text("\n".join(lines) + "\n")
    return path
