"""vramfit's shipped model table and config resolution (vramfit/models.py): each table config builds on the
meta device with the parameter count its model card publishes; a model is found by Hub id, by a local
folder, never through the network in tests (HF_HUB_OFFLINE, set in tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit import models
from vramfit.planner.params import summary

HUB = sorted((Path(models.__file__).resolve().parent.parent / "model_configs" / "hub").glob("*.json"))


@pytest.mark.parametrize("path", HUB, ids=[p.stem for p in HUB])
def test_table_config_builds_with_the_published_parameter_count(path):
    data = json.loads(path.read_text())
    assert data["_source"].startswith("https://") and data["_model"]
    total = summary(path).total  # built on the meta device (vramfit.planner.params), tied weights once
    assert abs(total / data["_published_params"] - 1) <= 0.03, (total, data["_published_params"], data["_published_params_source"])


@pytest.mark.parametrize(
    "model_id, file",
    [
        ("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama-3-8b.json"),
        ("lmsys/vicuna-13b-v1.5", "vicuna-13b-v1.5.json"),
        ("/data/ckpt/Llama-2-7b-hf", "llama-2-7b.json"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b-instruct.json"),
    ],
)
def test_model_found_in_the_table_by_its_id(model_id, file):
    found = models.resolve(model_id)
    assert found.path is not None and found.path.name == file and "vramfit's table" in found.how


def test_local_folder_then_nothing_without_the_hub(tmp_path):
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert models.resolve(str(tmp_path / "my-model")).how.startswith("local folder")
    missing = models.resolve("my-org/secret-model")
    assert missing.path is None and "not the Hub (HF_HUB_OFFLINE)" in missing.looked


def test_a_model_the_planner_cannot_summarise_leaves_the_review_incomplete_not_crashed(tmp_path):
    from vramfit.review.reviewer import review

    path = tmp_path / "run.sh"
    path.write_text("torchrun --nproc_per_node 2 train.py --model_name_or_path openai-community/gpt2 --model_max_length 512\n")
    result = review([str(path)], gpu="a100-80g")
    assert result.exit_code in (0, 3) and not [f for f in result.findings if f.severity == "error"]
    if result.exit_code == 3:  # on this branch: params.py's GPT-2 summary fails, said as "memory not planned"
        assert any(f.what.startswith("memory not planned: the planner cannot summarise GPT2LMHeadModel") for f in result.findings)
