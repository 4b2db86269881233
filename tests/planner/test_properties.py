"""Monotonicity: more micro-batch or sequence never needs less memory; checkpointing, Liger and
optimizer offload never need more GPU memory."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from vramfit.planner import Setup, plan

from planner_support import REPO

LLAMA = REPO / "model_configs" / "llama-3.2-3b.json"
QWEN_VL = REPO / "model_configs" / "qwen2.5-vl-3b-instruct.json"
CONFIGS = st.sampled_from([(LLAMA, "full"), (LLAMA, "lora"), (QWEN_VL, "full"), (QWEN_VL, "grpo")])
ZERO = st.sampled_from(["zero2", "zero3", "zero3_offload_optimizer", None])


def peak(config, method, deepspeed, **values) -> float:
    overrides = [f"method={method}", "bf16=true", *(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items())]
    return plan(Setup.from_args(config, "a100-80g", 8, 1, deepspeed, overrides)).per_gpu_peak_gib


common = dict(
    model=CONFIGS,
    deepspeed=ZERO,
    batch=st.integers(1, 8),
    seq=st.integers(64, 4096),
    checkpointing=st.booleans(),
    liger=st.booleans(),
    attention=st.sampled_from(["flash_attention_2", "sdpa", "eager"]),
)


@settings(max_examples=40, deadline=None)
@given(**common, more=st.integers(1, 4))
def test_more_micro_batch_never_less(model, deepspeed, batch, seq, checkpointing, liger, attention, more):
    config, method = model
    kw = dict(seq_len=seq, gradient_checkpointing=checkpointing, use_liger_kernel=liger, attn_implementation=attention)
    assert (
        peak(config, method, deepspeed, per_device_train_batch_size=batch + more, **kw)
        >= peak(config, method, deepspeed, per_device_train_batch_size=batch, **kw) - 1e-9
    )


@settings(max_examples=40, deadline=None)
@given(**common, more=st.integers(1, 2048))
def test_longer_sequence_never_less(model, deepspeed, batch, seq, checkpointing, liger, attention, more):
    config, method = model
    kw = dict(per_device_train_batch_size=batch, gradient_checkpointing=checkpointing, use_liger_kernel=liger, attn_implementation=attention)
    assert peak(config, method, deepspeed, seq_len=seq + more, **kw) >= peak(config, method, deepspeed, seq_len=seq, **kw) - 1e-9


@settings(max_examples=40, deadline=None)
@given(**common)
def test_checkpointing_liger_and_offload_never_more(model, deepspeed, batch, seq, checkpointing, liger, attention):
    config, method = model
    kw = dict(per_device_train_batch_size=batch, seq_len=seq, attn_implementation=attention)
    base = peak(config, method, deepspeed, gradient_checkpointing=checkpointing, use_liger_kernel=liger, **kw)
    if config != QWEN_VL:
        # not for a frozen vision tower: transformers' gradient_checkpointing_enable hooks its patch
        # embedding to require grad (enable_input_require_grads), so checkpointing makes the tower keep
        # its block inputs (training.vision_training; tests/planner/test_trace_sweep.py)
        assert peak(config, method, deepspeed, gradient_checkpointing=True, use_liger_kernel=liger, **kw) <= base + 1e-9
    assert peak(config, method, deepspeed, gradient_checkpointing=checkpointing, use_liger_kernel=True, **kw) <= base + 1e-9
    if deepspeed in ("zero2", "zero3"):
        offload = f"{deepspeed}_offload_optimizer"
        assert peak(config, method, offload, gradient_checkpointing=checkpointing, use_liger_kernel=liger, **kw) <= base + 1e-9


@settings(max_examples=20, deadline=None)
@given(pixels=st.integers(200_000, 4_000_000), more=st.integers(1, 8_000_000))
def test_more_pixels_never_less(pixels, more):
    kw = dict(per_device_train_batch_size=2, gradient_checkpointing=True)
    assert peak(QWEN_VL, "grpo", "zero3", max_pixels=pixels + more, **kw) >= peak(QWEN_VL, "grpo", "zero3", max_pixels=pixels, **kw) - 1e-9
