"""The step-time model moves the way its equations say (vramfit/fit/steptime.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramfit.fit import steptime
from vramfit.fit.search import preset_zero
from vramfit.planner import params
from vramfit.planner.setup import Setup

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base():
    s = Setup.from_args(REPO / "model_configs" / "llama-3.2-3b.json", "a100-80g", 8, overrides=["seq_len=4096", "bf16=true"])
    return s.replace(micro_batch=2, gradient_accumulation_steps=2)


def time_of(setup):
    arch = params.summary(setup.model_config)
    return steptime.estimate(setup, arch, params.count(arch, setup))


def with_zero(setup, name):
    return setup.replace(zero=preset_zero(name, 3072), engine="deepspeed")


def test_analytic_flops_are_six_n_t_plus_attention(base):
    arch = params.summary(base.model_config)
    f = steptime.analytic_flops(base, arch, params.count(arch, base))
    t = base.micro_batch * base.seq_len
    six_nt = 6 * (arch.groups["llm"] + arch.vocab * arch.text.hidden) * t
    assert 1.0 < f.total / six_nt < 1.5  # attention at 4k adds the rest
    assert f.recompute == 0


def test_checkpointing_costs_a_forward(base):
    plain, ckpt = time_of(base), time_of(base.replace(gradient_checkpointing=True))
    assert ckpt.flops_per_micro > plain.flops_per_micro
    assert 1.2 < ckpt.seconds / plain.seconds < 1.45


def test_zero3_moves_more_bytes_than_zero2_and_offload_adds_cpu_adam(base):
    z2, z3 = time_of(with_zero(base, "zero2")), time_of(with_zero(base, "zero3"))
    assert z3.comm_bytes > z2.comm_bytes > 0
    # Over a slow network (PCIe cards, 2 nodes) the gathers no longer hide behind compute.
    slow = base.replace(gpu="l4", nodes=2)
    z2n, z3n = time_of(with_zero(slow, "zero2")), time_of(with_zero(slow, "zero3"))
    assert z3n.parts.get("communication", 0) > z2n.parts.get("communication", 0) > 0
    assert z3n.seconds > z2n.seconds
    off = time_of(with_zero(base, "zero3_offload_optimizer"))
    assert off.parts["cpu_adam"] > 0 and off.parts["offload_pcie"] > 0 and off.seconds > z3.seconds


def test_liger_and_eager_attention_move_the_memory_traffic(base):
    assert time_of(base.replace(liger=True)).seconds < time_of(base).seconds
    assert time_of(base.replace(attention="eager")).seconds > time_of(base).seconds


def test_grpo_generation_is_bandwidth_bound_and_ds3_gather_matters(base):
    g = base.replace(method="grpo", seq_len=512, max_completion_length=1024, num_generations=8, beta=0.0)
    g3 = with_zero(g, "zero3")
    gathered, per_token = time_of(g3), time_of(g3.replace(ds3_gather_for_generation=False))
    assert gathered.parts["generation"] > 0
    assert per_token.parts["generation"] > 3 * gathered.parts["generation"]


def test_fsdp_full_shard_moves_what_zero3_moves(base):
    """FSDP full shard: r 2 N gathered per forward / backward (+ recompute) and r 2 T reduce-scattered per micro-batch."""
    arch = params.summary(base.model_config)
    counts = params.count(arch, base)
    fsdp = base.replace(engine="fsdp", fsdp_sharding="full_shard", fsdp_version=2, zero=preset_zero("none", 3072))
    z3 = with_zero(base, "zero3")
    r = 7 / 8
    expected = (r * 2 * counts.total * 2 + r * 2 * counts.trainable) * base.gradient_accumulation_steps
    assert time_of(fsdp).comm_bytes == pytest.approx(expected)
    assert time_of(fsdp).comm_bytes == pytest.approx(time_of(z3).comm_bytes)
    ckpt = time_of(fsdp.replace(gradient_checkpointing=True)).comm_bytes
    assert ckpt == pytest.approx(expected + r * 2 * counts.total * base.gradient_accumulation_steps)
    grad_op = time_of(fsdp.replace(fsdp_sharding="shard_grad_op")).comm_bytes
    assert grad_op < time_of(fsdp).comm_bytes


def test_fsdp_offload_pays_pcie_and_the_host_step(base):
    fsdp = base.replace(engine="fsdp", fsdp_sharding="full_shard", fsdp_version=2, zero=preset_zero("none", 3072))
    off = time_of(fsdp.replace(fsdp_offload=True))
    assert off.parts["offload_pcie"] > 0 and off.parts["cpu_adam"] > 0 and "optimizer_step" not in off.parts
    assert off.seconds > time_of(fsdp).seconds


def test_vllm_generation_is_bandwidth_bound_and_the_share_caps_the_batch():
    s = Setup.from_args(
        REPO / "model_configs" / "qwen3-8b.json", "h100", 8, overrides=["method=grpo", "bf16=true", "use_vllm=true", "max_completion_length=2048"]
    )
    s = s.replace(micro_batch=8, gradient_accumulation_steps=8, steps_per_generation=8)
    small, large = time_of(s.replace(vllm_gpu_memory_utilization=0.2)), time_of(s.replace(vllm_gpu_memory_utilization=0.7))
    assert small.parts["generation"] > large.parts["generation"] > 0  # fewer sequences decode at once in a small share
    sleep = time_of(s.replace(vllm_gpu_memory_utilization=0.7, vllm_sleep=True))
    assert sleep.parts["generation"] > large.parts["generation"]  # the wake-up copy
