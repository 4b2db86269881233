"""PEFT's per-adapter input casts (training.py `lora_input_copy_bytes`, activations.py LoRA branches).

PEFT keeps adapters in fp32 on a 16-bit base (get_peft_model's autocast_adapter_dtype=True) and each
adapted linear casts its input to them (tuners/lora/layer.py Linear.forward `_cast_input_dtype`), so two
adapted linears reading one input keep two copies of it - 16-bit under autocast (autocast's cast of the
fp32 copy), fp32 without. torchtune / litgpt adapters in the model's dtype share the input."""

from __future__ import annotations

import importlib

import pytest

from vramfit.planner.setup import Setup

from planner_support import REPO

planner = importlib.import_module("vramfit.planner.plan")
LLAMA = REPO / "model_configs" / "llama-3.2-3b.json"  # 28 layers, hidden 3072
GIB = 2**30
TOKENS, LAYERS, HIDDEN, R = 2 * 1024, 28, 3072, 16


def _activations(targets: str, *items: str) -> float:
    base = ["method=lora", f"lora_r={R}", "lora_dropout=0", f"lora_target_modules={targets}", "per_device_train_batch_size=2"]
    s = Setup.from_args(LLAMA, "a100-80g", 1, 1, None, base + ["seq_len=1024", "gradient_checkpointing=false", *items])
    return planner.plan(s).phase_breakdowns["train"]["activations"] * GIB


@pytest.mark.parametrize(
    "items, copy_bytes, rank_bytes, weight_copy",
    [
        (("bf16=true",), 2, 2, 2),  # AMP: autocast's 16-bit cast of each adapter's fp32 copy (+ its cached weight casts)
        (("dtype=bfloat16", "autocast_adapter_dtype=true"), 4, 4, 0),  # pure bf16 base, PEFT's fp32 adapters: the fp32 cast
        (("dtype=bfloat16",), 0, 2, 0),  # adapters in the model's dtype (torchtune, litgpt): q, k and v read the same input
    ],
)
def test_each_adapted_linear_keeps_its_own_cast_of_the_input(items, copy_bytes, rank_bytes, weight_copy):
    one = _activations("q_proj,k_proj", *items)
    two = _activations("q_proj,k_proj,v_proj", *items)
    # v_proj's adapter adds its own copy of the attention input (if the adapters cast it) and its rank-r output;
    # under autocast also the cached 16-bit casts of its fp32 A / B (training.autocast_weight_copies)
    v_lora = LAYERS * R * (HIDDEN + 1024)  # v_proj: 3072 -> 1024 (8 KV heads x 128)
    expected = TOKENS * LAYERS * (copy_bytes * HIDDEN + rank_bytes * R) + weight_copy * v_lora
    assert two - one == pytest.approx(expected, rel=1e-6)


def test_deepspeed_casts_the_adapters_first_so_the_input_is_shared():
    one = _activations("q_proj,k_proj", "bf16=true", "deepspeed=zero2")
    two = _activations("q_proj,k_proj,v_proj", "bf16=true", "deepspeed=zero2")
    assert two - one == pytest.approx(TOKENS * LAYERS * 2 * R, rel=1e-6)


def test_fp32_adapters_on_a_bf16_base_have_fp32_states():
    items = ["dtype=bfloat16", "method=lora", f"lora_r={R}", "lora_target_modules=q_proj,v_proj", "optim=adamw_torch_fused"]
    bf16 = planner.plan(Setup.from_args(LLAMA, "a100-80g", 1, 1, None, items))
    fp32 = planner.plan(Setup.from_args(LLAMA, "a100-80g", 1, 1, None, [*items, "autocast_adapter_dtype=true"]))
    lora = LAYERS * R * (HIDDEN + HIDDEN + HIDDEN + 1024)  # q: 3072 -> 3072, v: 3072 -> 1024 (8 KV heads x 128)
    parts = ("weights", "gradients", "optimizer_states")
    added = [(fp32.phase_breakdowns["optimizer_step"][k] - bf16.phase_breakdowns["optimizer_step"][k]) * GIB for k in parts]
    assert added == pytest.approx([lora * 2, lora * 2, lora * 4], rel=1e-6)  # 2 -> 4 B weights and gradients, 4 -> 8 B moments


def test_peft_keeps_one_cast_per_adapted_linear_on_the_pinned_stack():
    """The library behaviour the term models, on CPU: two PEFT-adapted linears on one bf16 input."""
    import torch
    from peft import LoraConfig, get_peft_model

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = torch.nn.Linear(64, 64, bias=False)
            self.v_proj = torch.nn.Linear(64, 64, bias=False)

        def forward(self, x):
            return self.q_proj(x) + self.v_proj(x)

    for autocast, dtype in ((False, torch.float32), (True, torch.bfloat16)):
        model = get_peft_model(Block().to(torch.bfloat16), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
        assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}  # autocast_adapter_dtype=True
        x = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)
        saved: list = []

        def pack(t, saved=saved):
            saved.append(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                model(x)
        inputs = [t for t in saved if t.shape == (8, 64)]
        assert len(inputs) == 2 and all(t.dtype == dtype for t in inputs)
        assert all(t.data_ptr() != x.data_ptr() for t in inputs)  # copies, not the input itself


def test_the_trace_runs_peft_with_fp32_adapters_and_agrees_per_layer(tmp_path, items=("bf16=true",)):
    """The fake-tensor trace builds PEFT's adapters in fp32 where PEFT does (trace.py `_apply_training`), so its
    kept bytes per layer (traced at 2, 3 and 4 of 6 layers) hold each adapter's input cast; the analytic layer
    agrees within 1% (AMP; a bf16 base with autocast_adapter_dtype=true builds the same fp32 adapters: 5,304,336 B
    traced vs 5,300,224 analytic per layer, checked by hand)."""
    import json

    from transformers import LlamaConfig

    from vramfit.planner import params, trace, training
    from vramfit.planner.activations import layer_bytes

    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, vocab_size=512)
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(cfg.to_dict(), default=str))
    lora = ["method=lora", "lora_r=8", "lora_dropout=0", "lora_target_modules=q_proj,k_proj,v_proj", "per_device_train_batch_size=2"]
    s = Setup.from_args(path, "a100-80g", 1, 1, None, [*lora, "seq_len=256", "gradient_checkpointing=false", *items])
    arch = params.summary(s.model_config)
    s = planner.lora_targets(s, arch)
    per_token, per_sample = layer_bytes(arch.stacks["text"], training.text_mode(s, arch, params.count(arch, s), "text"), 256)
    traced = trace.trace_step(s, cache=False).per_layer["text"]
    assert traced == pytest.approx(per_token * 2 * 256 + per_sample * 2, rel=0.01)


def test_the_trace_and_the_analytic_layer_agree_when_the_adapters_share_their_input(tmp_path):
    """Adapters in the model's dtype, no dropout, q / k / v only: the layer keeps the attention norm's output (read by
    the adapters) but not the MLP norm's (its projections are frozen and unadapted)."""
    import json

    from transformers import LlamaConfig

    from vramfit.planner import params, trace, training
    from vramfit.planner.activations import layer_bytes

    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, vocab_size=512)
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(cfg.to_dict(), default=str))
    lora = ["method=lora", "lora_r=8", "lora_dropout=0", "lora_target_modules=q_proj,k_proj,v_proj", "per_device_train_batch_size=2"]
    s = Setup.from_args(path, "a100-80g", 1, 1, None, [*lora, "seq_len=256", "gradient_checkpointing=false", "dtype=bfloat16"])
    arch = params.summary(s.model_config)
    s = planner.lora_targets(s, arch)
    per_token, per_sample = layer_bytes(arch.stacks["text"], training.text_mode(s, arch, params.count(arch, s), "text"), 256)
    assert trace.trace_step(s, cache=False).per_layer["text"] == pytest.approx(per_token * 2 * 256 + per_sample * 2, rel=0.01)
