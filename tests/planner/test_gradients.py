"""When the gradients coexist with the activations (vramfit/planner/states.py `gradients_in_forward`).

The Trainer frees every gradient after the optimizer step (`model.zero_grad()`), so with no gradient
accumulation the forward runs with none and the backward trades saved activations for gradients: the
train phase holds the larger of the two. Gradient accumulation, ZeRO-3's flat buffer and DDP's buckets
keep gradients across the forward. Measured on an H100: benchmarks/gpu_memory.py --compare."""

from __future__ import annotations

import pytest

from vramfit.planner import plan
from vramfit.planner.setup import Setup

from planner_support import REPO

LLAMA = REPO / "model_configs" / "llama-3.2-3b.json"
GIB = 2**30
BASE = ["seq_len=4096", "bf16=true", "attn_implementation=sdpa"]


def _plan(*items, gpus=1, deepspeed=None):
    return plan(Setup.from_args(LLAMA, "h100", gpus, 1, deepspeed, [*BASE, *items]))


def _train(p) -> dict[str, float]:
    return p.phase_breakdowns["train"]


def _activations(p) -> float:
    resident = ("weights", "gradients", "optimizer_states", "paged_optimizer_states", "zero_buffers", "reference_model", "vllm", "gathered_params")
    return sum(v for k, v in _train(p).items() if k not in (*resident, "allocator_reserve", "cuda_context"))


def test_without_accumulation_the_train_peak_holds_activations_or_gradients_not_both():
    p = _plan("per_device_train_batch_size=1", "gradient_checkpointing=false")
    grads = p.phase_breakdowns["optimizer_step"]["gradients"]  # every gradient, at the step
    acts = _activations(p)
    assert acts > grads > 5.5  # 3.2 B bf16 gradients (6 GiB) under 4k tokens of activations
    assert _train(p).get("gradients", 0.0) == 0.0
    assert p.measures["train"]["allocated"] == pytest.approx(
        p.measures["optimizer_step"]["allocated"] - grads + acts - p.phase_breakdowns["optimizer_step"].get("optimizer_step", 0.0), rel=0.02
    )


def test_gradients_above_the_activations_show_as_the_excess():
    p = _plan("per_device_train_batch_size=1", "seq_len=256", "gradient_checkpointing=true")
    grads = p.phase_breakdowns["optimizer_step"]["gradients"]
    acts = _activations(p)
    assert grads > acts
    assert _train(p)["gradients"] == pytest.approx(grads - acts, rel=1e-6)


def test_gradient_accumulation_keeps_every_gradient_through_the_forward():
    one = _plan("per_device_train_batch_size=1", "gradient_checkpointing=false")
    two = _plan("per_device_train_batch_size=1", "gradient_checkpointing=false", "gradient_accumulation_steps=2")
    grads = two.phase_breakdowns["optimizer_step"]["gradients"]
    assert _train(two)["gradients"] == pytest.approx(grads)
    assert two.measures["train"]["allocated"] - one.measures["train"]["allocated"] == pytest.approx(grads, rel=0.01)


def test_zero3_keeps_its_flat_gradient_buffer():
    p = _plan("per_device_train_batch_size=1", gpus=8, deepspeed=str(REPO / "deepspeed_configs" / "zero3.json"))
    assert _train(p)["gradients"] == pytest.approx(p.phase_breakdowns["optimizer_step"]["gradients"])
