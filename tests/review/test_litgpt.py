"""`vramfit review` on LitGPT fine-tuning configs (vramfit/review/litgpt.py): LitGPT's own published configs as the
run its scripts make of them, and configs LitGPT would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramfit.review.reviewer import review

from review_support import edited_copy, find

HUB = Path(__file__).resolve().parent / "corpus/files/Lightning-AI+litgpt/config_hub/finetune/llama-2-7b"


def variant(folder: Path, name: str, edits: dict[str, str], source: str = "lora.yaml") -> Path:
    """LitGPT's published llama-2-7b config with some lines replaced (`key:` as written at the start of a line)."""
    return edited_copy(HUB / source, edits, folder / name)


def test_full_finetuning_of_llama_2_7b_on_four_a10g_is_the_oom_litgpt_s_table_records():
    """config_hub/finetune/README.md: llama-2-7b/full.yaml on 4 x A10G is OOM. FSDP full shard with activation
    checkpointing, pure bf16, 4 micro-batches per step: the first three under no_sync hold the unsharded gradients."""
    result = review([str(HUB / "full.yaml")], gpu="a10g", gpus=4)
    assert result.exit_code == 1
    # one micro-batch per step keeps only the gradient shards: the fix, in LitGPT's key (no gradient_accumulation_steps key)
    assert find(result, key="--gpu", severity="error", text="exceeds") and find(result, key="--gpu", text="Fix: train.global_batch_size: 16 (")
    s = result.plan.setup
    assert (s.method, s.engine, s.fsdp_version, s.gradient_checkpointing, s.precision) == ("full", "fsdp", 1, True, "bf16-true")
    assert (s.micro_batch, s.gradient_accumulation_steps, s.seq_len, s.optimizer) == (4, 4, 512, "adamw_torch")
    assert find(result, key="devices", text="no_backward_sync")


def test_lora_and_qlora_configs_map_onto_the_planner_knobs():
    lora = review([str(HUB / "lora.yaml")], gpu="a10g", gpus=1)
    assert lora.exit_code == 0
    s = lora.plan.setup
    assert (s.method, s.lora_r, s.lora_dropout, sorted(s.lora_targets)) == ("lora", 32, 0.05, ["q_proj", "v_proj"])
    assert (s.engine, s.gradient_checkpointing, s.precision, s.loss_kernel) == ("ddp", False, "bf16-true", "chunked")
    assert (s.micro_batch, s.gradient_accumulation_steps, s.quantization) == (2, 4, None)
    qlora = review([str(HUB / "qlora.yaml")], gpu="a10g", gpus=1)
    assert qlora.exit_code == 0
    s = qlora.plan.setup
    assert (s.method, s.quantization, s.quant_double, s.optimizer) == ("qlora", "nf4", False, "paged_adamw_32bit")
    assert "read as: qlora of meta-llama/Llama-2-7b-hf" in qlora.summary[0]


def test_devices_is_how_many_gpus_litgpt_uses_whatever_the_node_has(tmp_path):
    """config_hub/finetune/README.md runs llama-2-7b/lora.yaml (devices: 1) on a 4 x A10G machine at the 1 x A10G peak."""
    result = review([str(HUB / "lora.yaml")], gpu="a10g", gpus=4)
    assert result.plan.setup.gpus_per_node == 1 and result.plan.setup.engine == "ddp"
    assert find(result, key="devices", text="3 of the node's 4 GPUs")
    fewer = review([str(HUB / "full.yaml")], gpu="a100-80g", gpus=2)
    assert fewer.exit_code == 1 and find(fewer, key="devices", severity="error", text="refuses to start")


def test_lora_on_several_gpus_is_fsdp2_with_checkpointing_and_defaults_are_said(tmp_path):
    path = variant(tmp_path, "lora.yaml", {"devices": "2", "lora_mlp": "true", "micro_batch_size": "1"})
    text = path.read_text().replace("  global_batch_size: 8\n", "")  # LitGPT's default: 16
    path.write_text(text)
    result = review([str(path)], gpu="a100-80g")
    s = result.plan.setup
    assert (s.gpus_per_node, s.engine, s.fsdp_version, s.gradient_checkpointing) == (2, "fsdp", 2, True)
    assert s.gradient_accumulation_steps == 8  # 16 // 2 ranks // micro-batch 1
    assert {"gate_proj", "up_proj", "down_proj"} <= set(s.lora_targets)
    assert find(result, text="train.global_batch_size 16")  # the default taken, said


@pytest.mark.parametrize(
    "edits, key, fix",
    [
        ({"precision": "bf16-ture"}, "precision", "precision: bf16-true"),
        ({"quantize": "nf4"}, "quantize", "quantize: bnb.nf4"),
        ({"micro_batch_size": "two"}, "train.micro_batch_size", "train.micro_batch_size: 1"),
        ({"global_batch_size": "2", "devices": "4"}, "train.global_batch_size", "train.global_batch_size: 8"),
        ({"train": "5"}, "train", "train:"),
        ({"lora_dropout": "abc"}, "lora_dropout", "lora_dropout: 0.05"),
        ({"checkpoint_dir": ""}, "checkpoint_dir", "checkpoint_dir: checkpoints/"),
    ],
)
def test_a_config_litgpt_would_refuse_is_bad_input(tmp_path, capsys, edits, key, fix):
    from vramfit.cli import main

    path = variant(tmp_path, "lora.yaml", edits)
    if "train" in edits:  # the section's keys no longer belong to it
        path.write_text("\n".join(line for line in path.read_text().splitlines() if not line.startswith("  ")) + "\n")
    code = main(["review", str(path), "--gpu", "a10g"])
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert code == 2, out
    assert f"lora.yaml: {key}: " in out and "Fix: " in out and fix in out.split("Fix: ", 1)[1] and "Traceback" not in out


def test_unknown_keys_warn_refused_keys_are_errors_and_an_unknown_model_is_incomplete(tmp_path):
    path = variant(tmp_path, "lora.yaml", {"max_norm": "1.0", "checkpoint_dir": "checkpoints/nobody/NoSuchModel-7b"}, source="lora.yaml")
    text = path.read_text().replace("lora_r: 32", "lora_rank: 8", 1)
    path.write_text(text)
    result = review([str(path)], gpu="a10g", gpus=1)
    assert find(result, key="lora_rank", severity="warning", text="lora_r")  # did you mean
    assert find(result, key="train.max_norm", severity="error", text="validate_args")
    assert result.exit_code == 1  # the refused key fails the run; the memory is not planned (no config)
    assert find(result, key="checkpoint_dir", text="memory not planned")
    clean = variant(tmp_path, "clean.yaml", {"checkpoint_dir": "checkpoints/nobody/NoSuchModel-7b"})
    assert review([str(clean)], gpu="a10g", gpus=1).exit_code == 3
    # finetune_adapter takes the keys finetune_lora takes but the lora_* ones: its method is not planned, said
    adapter = tmp_path / "adapter.yaml"
    adapter.write_text("\n".join(line for line in clean.read_text().splitlines() if not line.startswith("lora_")) + "\n")
    result = review([str(adapter)], gpu="a10g", gpus=1)
    assert result.exit_code == 3 and find(result, text="finetune_adapter") and not find(result, severity="warning")


def test_a_litgpt_pretraining_config_is_said_not_reviewed(tmp_path):
    """config_hub/pretrain/tinyllama.yaml's keys (litgpt/pretrain.py setup()): not a fine-tuning config."""
    path = tmp_path / "tinyllama.yaml"
    path.write_text(
        "model_name: tiny-llama-1.1b\nmodel_config:\nout_dir: out/pretrain/tiny-llama\nprecision: bf16-mixed\ninitial_checkpoint_dir:\n"
        "data: TinyLlama\ntrain:\n  global_batch_size: 512\n  micro_batch_size: 4\n  max_seq_length: 2048\ndevices: auto\ntokenizer_dir: checkpoints/TinyLlama\n"
    )
    result = review([str(path)], gpu="a100-80g", gpus=8)
    assert result.exit_code == 3 and find(result, key="model_name", text="LitGPT pretraining config")
    assert not find(result, severity="warning") and not find(result, severity="error")


def test_the_model_is_planned_as_litgpt_s_gpt_builds_it():
    """litgpt/model.py has no dropout module and runs F.gelu(approximate="tanh") for Phi-2 (transformers: resid_pdrop
    0.1, the Python gelu_new); its lm_head is never tied (convert_hf_checkpoint copies Gemma's embedding into it); its
    fit() holds the last step's logits into the next forward."""
    root = HUB.parent
    phi = review([str(root / "phi-2/lora.yaml")], gpu="a10g", gpus=1)
    assert find(phi, key="checkpoint_dir", text="resid_pdrop 0.1 -> 0; hidden_act gelu_new -> gelu_pytorch_tanh")
    assert phi.plan.setup.keeps_previous_output
    gemma = review([str(root / "gemma-2b/lora.yaml")], gpu="a10g", gpus=1)
    assert find(gemma, key="checkpoint_dir", text="its own lm_head, a copy of the tied embedding")
    # google/gemma-2b: 2,506,172,416 parameters with the embedding tied, plus LitGPT's lm_head (256000 x 2048)
    assert gemma.plan.parameters["total"] == 2_506_172_416 + 256_000 * 2048
    llama = review([str(HUB / "lora.yaml")], gpu="a10g", gpus=1)  # untied, no dropout, SiLU: the Hub config as read
    assert not find(llama, key="checkpoint_dir", text="planned as LitGPT's GPT builds the model")
