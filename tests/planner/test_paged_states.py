"""bitsandbytes paged optimizer states (states.py `paged_share`, plan.py `measures`).

bitsandbytes optim/optimizer.py `get_state_buffer` pages a state only when its parameter has at least
1e5 elements; a paged state is cudaMallocManaged memory (functional.py `get_paged`) that PyTorch's
caching allocator never sees. So the allocated / reserved figures a run logs leave the paged states
out, and nvidia-smi (the plan's device figure) holds them. torchtune's llama2/7B_full_low_memory
(PagedAdamW, optimizer-in-backward) published 14.97 GB of peak memory where the paged fp32 states
alone are 50 GiB."""

from __future__ import annotations

import importlib

import pytest

from vramfit.planner import params
from vramfit.planner.setup import Setup

from planner_support import REPO

planner = importlib.import_module("vramfit.planner.plan")
LLAMA2 = REPO / "model_configs" / "hub" / "llama-2-7b.json"
COMMON = ["dtype=bfloat16", "per_device_train_batch_size=2", "seq_len=512", "gradient_checkpointing=true"]


def _plan(*items):
    return planner.plan(Setup.from_args(LLAMA2, "rtx4090", 1, 1, None, COMMON + list(items)))


def test_paged_full_states_stay_out_of_the_allocator_figures():
    paged = _plan("method=full", "optim=paged_adamw_32bit")
    plain = _plan("method=full", "optim=adamw_torch_fused")
    states = paged.phase_breakdowns["train"]["paged_optimizer_states"]
    assert states > 45  # 6.7 B parameters x 8 B of fp32 moments
    for phase in ("train", "optimizer_step"):
        m = paged.measures[phase]
        assert m["device"] - m["reserved"] >= states - 1e-6  # nvidia-smi holds them, the allocator does not
    # what the allocator sees is the same run without the moments at all
    assert paged.measure("allocated") < plain.measure("allocated") - 10
    assert any("max_memory_allocated / max_memory_reserved leave them out" in n for n in paged.notes)


def test_low_rank_lora_states_are_below_the_paging_size_and_stay_in_the_allocator():
    # r 8 on Llama-2-7B q_proj / v_proj: every A / B is 8 x 4096 = 32,768 elements (< 1e5)
    small = _plan("method=lora", "lora_r=8", "lora_target_modules=q_proj,v_proj", "optim=paged_adamw_32bit")
    assert small.phase_breakdowns["train"].get("paged_optimizer_states", 0.0) == 0.0
    assert small.phase_breakdowns["train"]["optimizer_states"] > 0
    # r 32: 32 x 4096 = 131,072 elements, paged
    big = _plan("method=lora", "lora_r=32", "lora_target_modules=q_proj,v_proj", "optim=paged_adamw_32bit")
    assert big.phase_breakdowns["train"]["paged_optimizer_states"] > 0
    assert big.phase_breakdowns["train"].get("optimizer_states", 0.0) == 0.0


def test_small_lora_count_follows_the_tensor_sizes():
    s = Setup.from_args(LLAMA2, "rtx4090", 1, 1, None, COMMON + ["method=lora", "lora_r=16", "lora_target_modules=q_proj,down_proj"])
    arch = params.summary(s.model_config)
    c = params.count(arch, planner.lora_targets(s, arch))
    # q_proj: A 16 x 4096 and B 4096 x 16 (65,536 each, small); down_proj: A 16 x 11008 (176,128, paged), B 4096 x 16 (small)
    layers = 32
    assert c.lora == layers * 16 * (4096 + 4096 + 11008 + 4096)
    assert c.lora_small == pytest.approx(layers * 16 * (4096 + 4096 + 4096))
