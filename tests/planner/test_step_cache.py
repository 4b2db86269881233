"""Blocks the caching allocator still holds from the train phase at DeepSpeed's optimizer step
(vramfit/planner/plan.py `cached_train_blocks`, module docstring "cached train-phase blocks").

The allocator reuses a cached block only for a request no larger than it, and returns cached blocks to the
device only when cudaMalloc fails (c10/cuda/CUDACachingAllocator.cpp `DeviceCachingAllocator::malloc`).
DeepSpeed's ZeRO step allocates its fp32 gradient partition as one flat tensor: when that tensor is larger
than every tensor of the forward / backward, it takes a new segment and the train phase's cached blocks stay
reserved beside it - in what memory_reserved() / nvidia-smi show, not in the peak the run needs."""

from __future__ import annotations

import pytest

from vramfit.planner import plan
from vramfit.planner.plan import RESIDENT, train_block
from vramfit.planner.setup import Setup

from planner_support import REPO

LLAMA = REPO / "model_configs" / "llama-3.2-3b.json"
GIB = 2**30
BASE = ["bf16=true", "attn_implementation=sdpa", "gradient_checkpointing=true", "per_device_train_batch_size=1"]


def _plan(seq: int, deepspeed: str | None, gpus: int = 2, *items: str):
    return plan(Setup.from_args(LLAMA, "a100-80g", gpus, 1, deepspeed, [*BASE, f"seq_len={seq}", *items]))


def _train_transient(p) -> float:
    """GiB the train phase allocates beside the resident states (ZeRO-3's gathered parameters included), with
    its allocator reserve."""
    parts = p.phase_breakdowns["train"]
    return sum(v for k, v in parts.items() if k not in (*RESIDENT, "cuda_context"))


@pytest.mark.parametrize("deepspeed", ["zero2", "zero3"])
def test_a_step_partition_larger_than_every_train_tensor_keeps_the_train_cache_reserved(deepspeed):
    # Llama-3.2-3B full fine-tuning on 2 GPUs: a 1.6 G-element fp32 partition (6 GiB) against 256 tokens' tensors
    p = _plan(256, deepspeed)
    step = p.phase_breakdowns["optimizer_step"]
    cached = p.measures["optimizer_step"]["cached_blocks"]
    assert cached > 0.5
    # the 16-bit flat copy of the partition fits in no cached block here either: the whole train cache is carried,
    # with ZeRO-2's reduce buckets, released at the end of backward
    freed = p.phase_breakdowns["train"]["zero_buffers"] if deepspeed == "zero2" else 0.0
    assert cached == pytest.approx(_train_transient(p) + freed, rel=0.02)
    # shown in the reserved / device readings of the step, not in the peak the run needs
    assert p.measures["optimizer_step"]["reserved"] == pytest.approx(sum(v for k, v in step.items() if k != "cuda_context") + cached)
    assert p.phases["optimizer_step"] == pytest.approx(sum(step.values()))
    assert "cached_blocks" not in step


def test_a_step_partition_that_fits_in_a_cached_block_adds_nothing():
    # 8 GPUs, 8k tokens: the fp32 logits (8192 x 128256 x 4 B = 3.9 GiB) outgrow the 1.5 GiB fp32 partition
    p = _plan(8192, "zero2", 8)
    setup = p.setup
    from vramfit.planner import params, states

    arch = params.summary(setup.model_config)
    st = states.gpu_states(setup, params.count(arch, setup), arch)
    assert 0 < st.step_block < train_block(setup, arch, setup.seq_len)
    assert "cached_blocks" not in p.measures["optimizer_step"]


@pytest.mark.parametrize("deepspeed", [None, "zero2_offload_optimizer", "zero3_offload_optimizer"])
def test_no_flat_fp32_partition_on_the_gpu_no_carried_cache(deepspeed):
    # DDP's torch AdamW and the CPU-offloaded DeepSpeed step allocate no flat fp32 partition on the GPU
    p = _plan(256, deepspeed)
    assert all("cached_blocks" not in m for m in p.measures.values())


def test_the_verdict_and_the_peak_ignore_the_cache():
    with_cache = _plan(256, "zero2")
    assert with_cache.measures["optimizer_step"]["device"] > with_cache.phases["optimizer_step"]
    assert with_cache.per_gpu_peak_gib == pytest.approx(max(with_cache.phases.values()))


def test_no_cache_is_counted_where_it_would_not_fit_beside_the_step():
    # on one 24 GB card the step alone is past the usable memory: cudaMalloc fails first and the allocator
    # frees its cached blocks (`release_cached_blocks`) - the reading holds none of them
    small = plan(Setup.from_args(LLAMA, "rtx4090", 1, 1, "zero2", [*BASE, "seq_len=256"]))
    assert small.phases["optimizer_step"] > small.usable_gib
    assert "cached_blocks" not in small.measures["optimizer_step"]
    assert small.measures["optimizer_step"]["device"] == pytest.approx(small.phases["optimizer_step"])


@pytest.mark.parametrize("deepspeed", ["zero2", "zero3"])
def test_zero2_reduce_buckets_live_through_backward_only(deepspeed):
    """deepspeed/runtime/zero/stage_1_and_2.py: `setup_buckets` allocates the reduce buckets as a backward starts and
    `independent_gradient_partition_epilogue` releases them (`_release_ipg_buffers`) before the step; ZeRO-3 keeps its
    persistent small parameters for the whole run."""
    p = _plan(1024, deepspeed, 8)
    train, step = p.phase_breakdowns["train"], p.phase_breakdowns["optimizer_step"]
    assert train["zero_buffers"] > 0.01
    assert ("zero_buffers" in step) == (deepspeed == "zero3")
