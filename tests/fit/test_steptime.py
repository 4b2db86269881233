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
