"""What FSDP keeps as gradients through gradient accumulation, read off the installed torch (CPU, 2 gloo ranks).

The planner's `states.fsdp_accumulated_gradients` and `fsdp_unit_frozen` model two torch FSDP1 facts:
under `no_sync()` (every accumulation micro-batch but the last, as transformers' Trainer and Lightning
Fabric run it) each unit keeps its gradient unsharded, and with `use_orig_params=True` a unit that
flattens frozen weights with trainable LoRA matrices computes a gradient for the whole unit. This script
wraps a two-block model (per block: a frozen 64 x 64 weight, LoRA A 2 x 64 and B 64 x 2) in FSDP1 full
shard over two CPU ranks, runs one micro-batch under `no_sync()` and one that syncs, and prints each
block unit's parameter count beside its gradient's element count after each.

Expected (what the planner plans): 4352 / 4352 after the no_sync micro-batch (the whole unit, the frozen
4096 included), 4352 / 2176 after the syncing one (this rank's shard). Takes a few seconds.

Usage: python benchmarks/fsdp_no_sync_gradients.py
"""

from __future__ import annotations

import os
import socket
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

WIDTH, RANK_R = 64, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Linear(WIDTH, WIDTH, bias=False)
        self.lora_a = nn.Linear(WIDTH, RANK_R, bias=False)
        self.lora_b = nn.Linear(RANK_R, WIDTH, bias=False)

    def forward(self, x):
        return self.base(x) + self.lora_b(self.lora_a(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(WIDTH, WIDTH, bias=False)
        self.h = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        x = self.embed(x)
        for block in self.h:
            x = block(x)
        return x.sum()


def _rank(rank: int, port: int) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    warnings.simplefilter("ignore")  # FSDP1 deprecation
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = Model()
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name
    fsdp = FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        use_orig_params=True,
        device_id=torch.device("cpu"),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
    )

    def show(when: str) -> None:
        units = [m for m in fsdp.modules() if isinstance(m, FSDP) and isinstance(m._fsdp_wrapped_module, Block)]
        if rank == 0:
            for i, unit in enumerate(units):
                flat = unit._handle.flat_param
                grad = 0 if flat.grad is None else flat.grad.numel()
                print(f"{when:<34} block {i}: unit {flat._unpadded_unsharded_size.numel():>5} parameters, gradient {grad:>5} elements")

    with fsdp.no_sync():
        fsdp(torch.randn(3, WIDTH)).backward()
    show("after a micro-batch under no_sync")
    fsdp(torch.randn(3, WIDTH)).backward()
    show("after the micro-batch that syncs")
    dist.destroy_process_group()


def main() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"torch {torch.__version__}, FSDP1 full shard over 2 CPU ranks, use_orig_params=True, frozen base + LoRA per block unit")
    mp.spawn(_rank, args=(port,), nprocs=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
