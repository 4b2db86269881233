"""Every workaround the training stack needs on a host without a GPU, in one place.

Nothing here is active on a GPU host that has torchvision: `install()` patches accelerate only when
CUDA is absent, and `processor_class()` returns the library's own class whenever torchvision is
importable. tests/train/test_cpu_shims.py fails when an upgrade makes a shim unnecessary (the
library handles the case itself) or broken (the shim no longer gets past the failure).

1. accelerate gives a DeepSpeed launch no backend without CUDA. Launched with LOCAL_RANK set but
   `cpu=False` (the Trainer's call when `deepspeed=` is set), `PartialState._prepare_backend` finds
   no GPU backend and returns "no distribution": the Trainer then sees world size 1, fills the
   DeepSpeed JSON's "auto" batch size for one rank, and DeepSpeed asserts
   `train_batch_size ... 4 != 2 * 2 * 2`. The shim makes that case a gloo CPU process group, which
   accelerate then hands to DeepSpeed (its CPU accelerator speaks gloo).
2. Qwen2.5-VL's processor cannot be built without torchvision: its video processor has no
   PIL fallback, and `Qwen2_5_VLProcessor(...)` / `.from_pretrained` fail type-checking or loading
   it ("VIDEO_PROCESSOR_MAPPING has no attribute _extra_content", "Can't load video processor").
   There is no CPU build of torchvision (installing it replaces torch with a CUDA build), so CPU
   hosts use a subclass without the video processor; images go through the PIL image processor.
3. CPU threads per rank. torchrun sets OMP_NUM_THREADS=1 for its ranks; the DeepSpeed launcher
   leaves it unset, and accelerate then gives each rank the host's physical cores divided by
   LOCAL_WORLD_SIZE, which that launcher does not set (it sets LOCAL_SIZE): every rank takes every
   core. Two ranks on 2 CPUs ran 2 threads each and spun against each other in gloo: training steps
   5x slower. The shim shares the CPUs this process may run on among the node's ranks.
4. DeepSpeed's CPU shared-memory all-reduce never removes its segments. When every rank is on one
   host, each creates /dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank> (66 MB) and
   no code path unlinks it (`shared_close` in ops/csrc/cpu/comm/shm.cpp is never called): every
   2-rank smoke run left 132 MB of host RAM behind until reboot (224 files, 15 GB of a 24 GB
   machine, after a day of test runs; sglang's Xeon CI filled /dev/shm with them and later jobs died
   with SIGBUS, sgl-project/sglang#38638). The shim unlinks this rank's segment once every rank has
   mapped every other's (a barrier after DeepSpeed's init); the mappings stay valid, so the
   all-reduce keeps working and a killed run leaves nothing behind.
"""

from __future__ import annotations

import functools
import os

import torch


def cuda_absent() -> bool:
    return not torch.cuda.is_available()


def torchvision_absent() -> bool:
    from transformers.utils import is_torchvision_available

    return not is_torchvision_available()


def threads_per_rank() -> int:
    """The CPUs this process may use, shared among this node's ranks (torchrun: LOCAL_WORLD_SIZE, DeepSpeed: LOCAL_SIZE)."""
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("LOCAL_SIZE") or 1)
    return max(1, len(os.sched_getaffinity(0)) // local_ranks)


def install() -> bool:
    """Patch accelerate for a multi-process DeepSpeed run on CPU; True when the patches are active."""
    if not cuda_absent():
        return False
    if "OMP_NUM_THREADS" not in os.environ and "LOCAL_RANK" in os.environ:
        # Set, accelerate leaves the thread count alone.
        os.environ["OMP_NUM_THREADS"] = str(threads_per_rank())
        torch.set_num_threads(threads_per_rank())
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    original = PartialState._prepare_backend
    if getattr(original, "_vramfit_shim", False):
        return True

    @functools.wraps(original)
    def prepare_backend(self, cpu: bool = False, sagemaker_dp=False, backend: str | None = None):
        chosen, distributed_type = original(self, cpu, sagemaker_dp, backend)
        launched = int(os.environ.get("LOCAL_RANK", -1)) != -1
        if distributed_type == DistributedType.NO and launched and cuda_absent():
            return "gloo", DistributedType.MULTI_CPU
        return chosen, distributed_type

    prepare_backend._vramfit_shim = True
    PartialState._prepare_backend = prepare_backend
    _unlink_shm_segments_after_init()
    return True


def shm_segment(rank: int) -> str:
    """The path DeepSpeed's CPU all-reduce gives this rank's segment (names built as in shm.cpp)."""
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    return f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_{addr}_{port}_{rank}"


def _unlink_shm_segments_after_init() -> None:
    try:
        from deepspeed.comm.torch import TorchBackend
    except ImportError:
        return
    original = TorchBackend.__init__
    if getattr(original, "_vramfit_shim", False):
        return

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        # shm.cpp creates segments only when LOCAL_SIZE equals the world size: the same answer on every
        # rank, so every rank takes the barrier or none does.
        world = torch.distributed.get_world_size()
        if self.shm_comm_op is None or int(os.environ.get("LOCAL_SIZE") or 0) != world:
            return
        torch.distributed.barrier()  # every rank has now mapped every segment
        try:
            os.unlink(shm_segment(torch.distributed.get_rank()))
        except FileNotFoundError:
            pass

    init._vramfit_shim = True
    TorchBackend.__init__ = init


@functools.cache
def _qwen2_5_vl_without_video():
    from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor

    class Qwen2_5_VLProcessorWithoutVideo(Qwen2_5_VLProcessor):
        """Qwen2.5-VL's processor with only its image processor and tokenizer.

        `ProcessorMixin` takes its sub-processors from the `__init__` signature, so leaving
        `video_processor` out of it makes construction, `save_pretrained` and `from_pretrained`
        skip the video processor.
        """

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(image_processor=image_processor, tokenizer=tokenizer, video_processor=None, chat_template=chat_template, **kwargs)

    # Saved files name the library class, so a host with torchvision loads them with AutoProcessor.
    Qwen2_5_VLProcessorWithoutVideo.__name__ = Qwen2_5_VLProcessor.__name__
    return Qwen2_5_VLProcessorWithoutVideo


def processor_class(model_type: str):
    """The class that loads a VLM's processor here: the shim where one is needed, else AutoProcessor."""
    if model_type == "qwen2_5_vl" and torchvision_absent():
        return _qwen2_5_vl_without_video()
    from transformers import AutoProcessor

    return AutoProcessor
