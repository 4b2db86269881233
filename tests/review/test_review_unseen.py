"""Idioms met on first contact with repositories the review had never seen (benchmarks/upstream_sweep_s10.md):
each reads as the upstream code runs it. In process; the sweep's figures come from that file's command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit.review.reviewer import review

from review_support import find

# yangjianxin1/Firefly train_args/*.json (e22b406e), cut to what matters here: a TrainingArguments JSON of transformers 4
FIREFLY = {
    "output_dir": "output/firefly",
    "model_name_or_path": "Qwen/Qwen2.5-0.5B",
    "train_file": "./data/pretrain",
    "task_type": "sft",
    "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 16,
    "max_seq_length": 1024,
    "gradient_checkpointing": True,
    "optim": "adamw_hf",
    "bf16": True,
}


@pytest.mark.parametrize("pin", ["transformers==4.34\n", None])
def test_optim_adamw_hf_is_transformers_4s_adamw_not_bad_input(tmp_path: Path, pin: str | None):
    """`optim: adamw_hf` (transformers' own AdamW, removed for torch.optim.AdamW: huggingface/transformers#36177) was
    refused by the installed TrainingArguments (exit 1, "refuses these arguments"); it is reviewed as adamw_torch (the
    same two fp32 moments) and said as info, naming the pin where the repository has one."""
    if pin:
        (tmp_path / "requirements.txt").write_text(pin)
    path = tmp_path / "train_args.json"
    path.write_text(json.dumps(FIREFLY, indent=4))
    result = review([str(path)], gpu="a100-80g", gpus=1)
    assert result.exit_code == 0, [str(f) for f in result.findings if f.severity == "error"]
    said = find(result, key="optim", text="reviewed as adamw_torch")
    assert len(said) == 1 and said[0].severity == "info"  # nothing pinned: transformers 4 dates the value too
    assert ("pins transformers==4.34" in said[0].what) == bool(pin)
