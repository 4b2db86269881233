"""The closed catalogue of GPUs a recipe may name.

`memory_gib` is the total capacity as PyTorch reports it (`torch.cuda.mem_get_info()[1]`, the
"total capacity" of an OOM message), which is a little below the marketing figure: an "A100 40GB"
reports 39.59 GiB (ShareGPT4V OOM, InternLM-XComposer#118), an "A100 80GB" 79.15 GiB (MiniCPM-V#338).
Where no OOM message was at hand the figure is the NVML total less the same ~0.5% driver share.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    name: str
    label: str
    memory_gib: float
    bf16: bool
    # CUDA context + cuBLAS/NCCL workspaces outside the caching allocator, measured as
    # nvidia-smi minus max_memory_reserved on an idle trained process; grows with the SM count.
    context_gib: float


CATALOGUE: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU("t4", "NVIDIA T4 16GB", 14.58, False, 0.4),
        GPU("v100-32g", "NVIDIA V100 32GB", 31.74, False, 0.5),
        GPU("a10g", "NVIDIA A10G 24GB", 22.06, True, 0.5),
        GPU("rtx4090", "NVIDIA GeForce RTX 4090 24GB", 23.64, True, 0.5),
        GPU("l40s", "NVIDIA L40S 48GB", 44.39, True, 0.6),
        GPU("a100-40g", "NVIDIA A100-SXM4-40GB", 39.59, True, 0.6),
        GPU("a100-80g", "NVIDIA A100-SXM4-80GB", 79.15, True, 0.6),
        GPU("h100", "NVIDIA H100 80GB HBM3", 79.19, True, 0.7),
        GPU("h20", "NVIDIA H20 96GB", 94.99, True, 0.7),
        GPU("h200", "NVIDIA H200 141GB", 139.72, True, 0.8),
    )
}


def gpu(name: str) -> GPU:
    return CATALOGUE[name]
