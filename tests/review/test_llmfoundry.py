"""`vramfit review` on llm-foundry (Composer) training YAMLs (vramfit/review/llmfoundry.py): llm-foundry's published
MPT-7B fine-tuning YAML as the run train.py makes of it, and YAMLs llm-foundry or Composer would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramfit.review.reviewer import review

from review_support import edited_copy, find

DOLLY = Path(__file__).resolve().parent / "corpus/files/mosaicml+llm-foundry/scripts/train/yamls/mpt/finetune/7b_dolly_sft.yaml"


def variant(folder: Path, edits: dict[str, str], name: str = "7b_dolly_sft.yaml") -> Path:
    """The published YAML with the first line writing each `key:` replaced."""
    return edited_copy(DOLLY, edits, folder / name)


def test_the_published_mpt_7b_dolly_yaml_is_planned_as_llm_foundry_runs_it():
    """Inline MPT-7B (d_model 4096 x 32 layers, vocab 50368, triton attention), FSDP FULL_SHARD with activation
    checkpointing, amp_bf16 (fp32 master weights), decoupled_adamw, 64 samples over 8 GPUs at micro-batch 8: no
    accumulation. It fits on 8 x A100-80G (the maintainers' word in llm-foundry#54), with no warning."""
    result = review([str(DOLLY)], gpu="a100-80g", gpus=8)
    assert result.exit_code == 0 and not find(result, severity="warning") and not find(result, severity="error")
    s = result.plan.setup
    assert (s.method, s.engine, s.gradient_checkpointing, s.precision, s.optimizer) == (
        "full",
        "fsdp",
        True,
        "bf16",
        "adamw_torch",
    )  # bf16: fp32 weights under autocast
    assert (s.micro_batch, s.gradient_accumulation_steps, s.seq_len, s.attention) == (8, 1, 2048, "flash")
    assert 6.6e9 < result.plan.parameters["total"] < 6.7e9  # MPT-7B: 6.65 B without its learned position embedding
    assert find(result, key="model.name", text="MptConfig") and find(result, text="composer scripts/train/train.py")
    # 8 x 40 GB: the plan fits too, as llm-foundry's benchmark table at this commit (micro-batch 12 at 2048 on 8 x
    # a100_40gb, scripts/train/benchmarking/README.md) says; the OOM of llm-foundry#54 is not the step's memory
    on_40g = review([str(DOLLY)], gpu="a100-40g", gpus=8)
    assert on_40g.exit_code == 0 and 30 < on_40g.plan.per_gpu_peak_gib < 37.6


def test_the_accumulation_follows_the_gpus_and_composer_syncs_each_micro_batch_under_fsdp():
    """64 samples over 4 GPUs: 16 per GPU, 2 micro-batches of 8. Composer's ddp_sync_context skips no_sync unless the
    model is DDP: FSDP reduce-scatters every micro-batch. Twice the shards of 8 GPUs: over 40 GB."""
    result = review([str(DOLLY)], gpu="a100-40g", gpus=4)
    s = result.plan.setup
    assert (s.micro_batch, s.gradient_accumulation_steps, s.fsdp_sync_each_batch) == (8, 2, True)
    assert result.exit_code == 1 and find(result, key="--gpu", severity="error", text="exceeds")


def test_a_micro_batch_over_40_gb_is_an_error_with_a_fix_in_the_yaml_s_own_keys(tmp_path):
    path = variant(tmp_path, {"max_seq_len": "8192"})
    result = review([str(path)], gpu="a100-40g", gpus=8)
    assert result.exit_code == 1
    [error] = find(result, key="--gpu", severity="error", text="exceeds")
    assert "Fix: device_train_microbatch_size: " in f"{error.what} Fix: {error.fix}"  # the global batch stays
    assert result.plan.setup.seq_len == 8192  # ${max_seq_len} resolved in the model and the loader


@pytest.mark.parametrize(
    "edits, key, fix",
    [
        ({"precision": "amp_bf17"}, "precision", "precision: amp_bf16"),
        ({"sharding_strategy": "FULL_SHARDS"}, "fsdp_config.sharding_strategy", "sharding_strategy: FULL_SHARD"),
        ({"device_train_microbatch_size": "0"}, "device_train_microbatch_size", "device_train_microbatch_size: 4"),
        ({"name": "decoupled_adam"}, "optimizer.name", "optimizer.name: decoupled_adamw"),
        ({"global_train_batch_size": "60"}, "global_train_batch_size", "global_train_batch_size: 56"),
        ({"n_heads": "30"}, "model.n_heads", "n_heads that divides d_model"),
    ],
)
def test_a_yaml_llm_foundry_would_refuse_is_bad_input(tmp_path, capsys, edits, key, fix):
    from vramfit.cli import main

    if "name" in edits:  # optimizer's name:, not model's
        text = DOLLY.read_text().replace("name: decoupled_adamw", f"name: {edits['name']}")
        path = tmp_path / "7b_dolly_sft.yaml"
        path.write_text(text)
    else:
        path = variant(tmp_path, edits)
    code = main(["review", str(path), "--gpu", "a100-80g", "--gpus", "8"])
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert code == 2, out
    assert f"7b_dolly_sft.yaml: {key}: " in out and fix in out.split("Fix: ", 1)[1] and "Traceback" not in out
