"""The CPU-host shims (vramfit/train/cpu_shims.py): each still needed, and each still working.

A failure of a "needed" test means an upgrade fixed the library: delete that shim. A failure of a
"works" test means an upgrade broke the shim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from vramfit.train import cpu_shims

from train_support import REPO

needs_cpu_host = pytest.mark.skipif(torch.cuda.is_available(), reason="the accelerate shims are inactive where CUDA is available")

# One launched rank (as torchrun / the DeepSpeed launcher start it) building the Trainer's arguments
# with a DeepSpeed JSON, with or without the shims; prints what accelerate decided.
RANK = textwrap.dedent("""
    import json, os, sys
    if sys.argv[1] == "shim":
        from vramfit.train import cpu_shims
        cpu_shims.install()
    import torch
    from transformers import TrainingArguments
    ds = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "zero_optimization": {"stage": 2}}
    args = TrainingArguments(output_dir=sys.argv[2], deepspeed=ds, report_to="none")
    state = args.distributed_state
    print(json.dumps({"type": str(state.distributed_type), "backend": state.backend, "device": str(args.device),
                      "threads": torch.get_num_threads(), "world": args.world_size}))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
""")


def _ranks(shim: bool, folder, script: str = RANK) -> list[dict]:
    """Two ranks on this host, started as the DeepSpeed launcher starts them (it sets LOCAL_SIZE)."""
    from vramfit.launch import free_port

    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    environ.update(WORLD_SIZE="2", LOCAL_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    # Files, not pipes: rank 1's unread pipe could fill while we wait on rank 0, which waits on rank 1.
    out = [Path(folder) / f"rank{r}.out" for r in range(2)]
    err = [Path(folder) / f"rank{r}.err" for r in range(2)]
    procs = []
    for r in range(2):
        with open(out[r], "w") as o, open(err[r], "w") as e:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", script, "shim" if shim else "plain", str(folder)],
                    cwd=REPO,
                    env={**environ, "RANK": str(r), "LOCAL_RANK": str(r)},
                    stdout=o,
                    stderr=e,
                )
            )
    for r, proc in enumerate(procs):
        assert proc.wait(timeout=300) == 0, err[r].read_text()[-3000:]
    return [json.loads(o.read_text().strip().splitlines()[-1]) for o in out]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return _ranks(False, tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def shimmed(tmp_path_factory):
    return _ranks(True, tmp_path_factory.mktemp("shimmed"))


SHARE = max(1, len(os.sched_getaffinity(0)) // 2)  # this host's usable CPUs for each of 2 ranks


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
@needs_cpu_host
def test_accelerate_backend_shim_is_needed(plain):
    assert all(r["world"] == 1 for r in plain), "accelerate now sees every rank of a DeepSpeed launch on CPU: drop the shim"


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
@needs_cpu_host
def test_accelerate_backend_shim_works(shimmed):
    for rank in shimmed:
        assert rank["world"] == 2 and rank["type"] == "DistributedType.DEEPSPEED" and rank["backend"] == "gloo"
        assert rank["device"].startswith("cpu")


@needs_cpu_host
def test_thread_shim_is_needed(plain):
    assert all(r["threads"] > SHARE for r in plain), "accelerate now shares the CPUs among DeepSpeed ranks: drop the shim"


@needs_cpu_host
def test_thread_shim_works(shimmed):
    assert all(r["threads"] == SHARE for r in shimmed)


def _qwen_parts():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from vramfit.train import smoke

    tokenizer = smoke.build_tokenizer("qwen2_5_vl", smoke.corpus())
    return Qwen2VLImageProcessorPil(), tokenizer


@pytest.mark.skipif(not cpu_shims.torchvision_absent(), reason="torchvision is installed: the library's processor works")
def test_qwen_processor_shim_is_needed():
    from transformers import Qwen2_5_VLProcessor

    image_processor, tokenizer = _qwen_parts()
    with pytest.raises(Exception):  # noqa: B017  (whatever the library raises: it must fail without the shim)
        Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template)


@pytest.mark.skipif(not cpu_shims.torchvision_absent(), reason="torchvision is installed: the shim is inactive")
def test_qwen_processor_shim_works(tmp_path):
    from PIL import Image

    image_processor, tokenizer = _qwen_parts()
    cls = cpu_shims.processor_class("qwen2_5_vl")
    cls(image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "processor_config.json").read_text())["processor_class"] == "Qwen2_5_VLProcessor"
    processor = cls.from_pretrained(tmp_path)
    messages = [{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (56, 56))}, {"type": "text", "text": "the red square"}]}]
    out = processor.apply_chat_template([messages], add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt")
    assert out["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert (out["input_ids"] == processor.image_token_id).sum() == 4


# Two ranks through DeepSpeed's own init on CPU: its shared-memory all-reduce, then what it left in /dev/shm.
SHM_RANK = textwrap.dedent("""
    import json, os, sys
    if sys.argv[1] == "shim":
        from vramfit.train import cpu_shims
        cpu_shims.install()
    import deepspeed, torch
    import deepspeed.comm as dist
    from vramfit.train.cpu_shims import shm_segment
    deepspeed.init_distributed(dist_backend="gloo")
    rank = dist.get_rank()
    uses_shm = deepspeed.comm.comm.cdb.shm_comm_op is not None
    t = torch.full((8,), float(rank + 1))
    dist.inference_all_reduce(t)
    dist.barrier()
    segments = [shm_segment(r) for r in range(2)]
    print(json.dumps({"uses_shm": uses_shm, "sum": t.tolist(), "segments": segments}))
    torch.distributed.destroy_process_group()
""")


def _left_behind(ranks: list[dict]) -> list[str]:
    segments = ranks[0]["segments"]
    left = [s for s in segments if os.path.exists(s)]
    for s in left:  # a test leaves nothing behind either
        os.unlink(s)
    return left


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
@needs_cpu_host
def test_shm_segment_shim_is_needed(tmp_path):
    ranks = _ranks(False, tmp_path, SHM_RANK)
    assert all(r["uses_shm"] for r in ranks), "DeepSpeed no longer uses its shared-memory all-reduce on CPU"
    assert _left_behind(ranks), "DeepSpeed now removes its /dev/shm segments itself: drop the shim"


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
@needs_cpu_host
def test_shm_segment_shim_works(tmp_path):
    ranks = _ranks(True, tmp_path, SHM_RANK)
    assert all(r["uses_shm"] and r["sum"] == [3.0] * 8 for r in ranks), ranks
    assert _left_behind(ranks) == []
