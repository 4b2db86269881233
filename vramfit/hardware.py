"""The closed catalogue of GPUs a recipe may name, with what the planner and `vramfit fit` read off a card.

`memory_gib` is the total capacity as PyTorch reports it (`torch.cuda.mem_get_info()[1]`, the
"total capacity" of an OOM message), which is a little below the marketing figure: an "A100 40GB"
reports 39.59 GiB (ShareGPT4V OOM, InternLM-XComposer#118), an "A100 80GB" 79.15 GiB (MiniCPM-V#338).
Where no OOM message was at hand the figure is the NVML total less the same ~0.5% driver share.

Speed figures (read by `vramfit.fit.steptime`; the efficiencies applied to them are stated there):
- `peak_tflops`: dense (no 2:4 sparsity) tensor-core TFLOP/s in bf16 with fp32 accumulation, or fp16
  on cards without bf16 (T4, V100), from the vendor datasheet / architecture whitepaper named in `source`.
- `memory_gbs`: HBM / GDDR bandwidth, GB/s (10^9 B/s), same source.
- `link_gbs`: GPU-to-GPU bandwidth inside a node, GB/s per direction: NVLink total / 2 on SXM boards;
  PCIe (Gen3 x16: 16, Gen4 x16: 32, Gen5 x16: 64 GB/s per direction) on cards that ship without an
  NVLink switch (a 2-card NVLink bridge on RTX 3090 / A6000 does not connect 8 cards).
- `pcie_gbs`: host <-> GPU bandwidth per direction (the card's PCIe generation, x16), for offload.
- `network_gbs`: between nodes, per GPU, GB/s: the reference system's NICs divided by its GPUs
  (DGX H100/H200/B200: 8 x 400 Gb/s ConnectX-7 = 50 GB/s per GPU; DGX A100: 8 x 200 Gb/s HDR = 25 GB/s;
  PCIe-card servers: one 100 Gb/s NIC per node is typical = 12.5 GB/s per node, shared by its GPUs:
  written here per GPU for an 8-card node, 1.6 GB/s, and stated as an assumption in `source`).
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
    peak_tflops: float = 0.0
    memory_gbs: float = 0.0
    link_gbs: float = 0.0
    link: str = ""
    pcie_gbs: float = 32.0
    network_gbs: float = 1.6
    source: str = ""


PCIE_SERVER = "network: one 100 Gb/s NIC per 8-card PCIe server assumed (1.6 GB/s per GPU)"

CATALOGUE: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU(
            "t4",
            "NVIDIA T4 16GB",
            14.58,
            False,
            0.4,
            65,
            320,
            16,
            "PCIe Gen3",
            16,
            1.6,
            f"NVIDIA T4 datasheet: 65 TFLOPS fp16 tensor (mixed precision), 320 GB/s GDDR6, PCIe Gen3 x16; {PCIE_SERVER}",
        ),
        GPU(
            "v100-16g",
            "NVIDIA V100 SXM2 16GB",
            15.77,
            False,
            0.5,
            125,
            900,
            150,
            "NVLink 2 (300 GB/s total)",
            16,
            12.5,
            "NVIDIA V100 datasheet (SXM2): 125 TFLOPS fp16 tensor, 900 GB/s HBM2, NVLink 300 GB/s, PCIe Gen3; "
            "memory: 'Tesla V100-SXM2-16GB ... 15.77 GiB total capacity' in PyTorch OOM messages; "
            "network: DGX-1V 4 x 100 Gb/s EDR for 8 GPUs = 6.25 GB/s per GPU, written as 12.5 for the usual 2 x 8 layouts",
        ),
        GPU(
            "v100-32g",
            "NVIDIA V100 32GB",
            31.74,
            False,
            0.5,
            125,
            900,
            150,
            "NVLink 2 (300 GB/s total)",
            16,
            12.5,
            "NVIDIA V100 datasheet (SXM2): 125 TFLOPS fp16 tensor, 900 GB/s HBM2, NVLink 300 GB/s, PCIe Gen3",
        ),
        GPU(
            "a10g",
            "NVIDIA A10G 24GB",
            22.06,
            True,
            0.5,
            125,
            600,
            32,
            "PCIe Gen4",
            32,
            1.6,
            "AWS publishes no tensor figure for the A10G; the NVIDIA A10 datasheet values are used "
            f"(125 TFLOPS bf16 dense, 600 GB/s GDDR6, PCIe Gen4 x16); {PCIE_SERVER}",
        ),
        GPU(
            "a10",
            "NVIDIA A10 24GB",
            22.06,
            True,
            0.5,
            125,
            600,
            32,
            "PCIe Gen4",
            32,
            1.6,
            "NVIDIA A10 datasheet: 125 TFLOPS bf16 tensor dense (250 sparse), 600 GB/s GDDR6, PCIe Gen4 x16; "
            f"memory as the A10G (same 24 GB GDDR6 board); {PCIE_SERVER}",
        ),
        GPU(
            "l4",
            "NVIDIA L4 24GB",
            22.38,
            True,
            0.4,
            121,
            300,
            32,
            "PCIe Gen4",
            32,
            1.6,
            f"NVIDIA L4 datasheet: 242 TFLOPS bf16 with sparsity = 121 dense, 300 GB/s GDDR6, PCIe Gen4 x16; memory: NVML 23,034 MiB less 0.5%; {PCIE_SERVER}",
        ),
        GPU(
            "rtx3090",
            "NVIDIA GeForce RTX 3090 24GB",
            23.69,
            True,
            0.5,
            71,
            936,
            32,
            "PCIe Gen4",
            32,
            1.6,
            "NVIDIA Ampere GA102 whitepaper: RTX 3090 71 TFLOPS fp16/bf16 tensor with fp32 accumulate (142 with fp16 "
            "accumulate), 936 GB/s GDDR6X; PCIe Gen4 x16; memory: '23.69 GiB total capacity' in PyTorch OOM "
            f"messages; {PCIE_SERVER}",
        ),
        GPU(
            "rtx4090",
            "NVIDIA GeForce RTX 4090 24GB",
            23.64,
            True,
            0.5,
            165.2,
            1008,
            32,
            "PCIe Gen4",
            32,
            1.6,
            "NVIDIA Ada Lovelace architecture whitepaper: RTX 4090 165.2 TFLOPS fp16/bf16 tensor with fp32 accumulate "
            f"(dense), 1,008 GB/s GDDR6X, PCIe Gen4 x16, no NVLink; {PCIE_SERVER}",
        ),
        GPU(
            "rtxa6000",
            "NVIDIA RTX A6000 48GB",
            47.54,
            True,
            0.5,
            154.8,
            768,
            32,
            "PCIe Gen4",
            32,
            1.6,
            "NVIDIA RTX A6000 datasheet: 309.7 TFLOPS tensor with sparsity = 154.8 dense, 768 GB/s GDDR6, PCIe Gen4 "
            "x16 (NVLink bridge pairs 2 cards only); memory: '47.54 GiB total capacity' in PyTorch OOM messages; "
            f"{PCIE_SERVER}",
        ),
        GPU(
            "l40s",
            "NVIDIA L40S 48GB",
            44.39,
            True,
            0.6,
            362.05 / 2,
            864,
            32,
            "PCIe Gen4",
            32,
            1.6,
            f"NVIDIA L40S datasheet: 362.05 TFLOPS bf16 with sparsity = 181 dense, 864 GB/s GDDR6, PCIe Gen4 x16; {PCIE_SERVER}",
        ),
        GPU(
            "l20",
            "NVIDIA L20 48GB",
            44.53,
            True,
            0.6,
            362.05 / 2 * 92 / 142,
            864,
            32,
            "PCIe Gen4",
            32,
            1.6,
            "NVIDIA L20 (China export Ada AD102 data-centre card, 48 GB GDDR6): memory: '44.53 GiB' total capacity in a "
            "PyTorch OOM message on an 'NVIDIA L20 (48GB)' (bytedance/HLLM#3); 92 SMs at the L40S's 2,520 MHz boost, "
            "864 GB/s GDDR6 on a 384-bit bus, PCIe Gen4 x16, no NVLink (technical.city/en/video/L20, topcpu.net's "
            "A40 vs L20 page); bf16 dense tensor rate taken as the L40S's per SM (181 TFLOPS over 142 SMs) times 92 = "
            f"117 TFLOPS, derived, not from an NVIDIA datasheet; {PCIE_SERVER}",
        ),
        GPU(
            "a100-40g",
            "NVIDIA A100-SXM4-40GB",
            39.59,
            True,
            0.6,
            312,
            1555,
            300,
            "NVLink 3 (600 GB/s total)",
            32,
            25,
            "NVIDIA A100 datasheet (SXM4 40GB): 312 TFLOPS bf16 dense, 1,555 GB/s HBM2, NVLink 600 GB/s, PCIe Gen4; "
            "DGX A100: 8 x 200 Gb/s HDR InfiniBand for 8 GPUs",
        ),
        GPU(
            "a100-80g",
            "NVIDIA A100-SXM4-80GB",
            79.15,
            True,
            0.6,
            312,
            2039,
            300,
            "NVLink 3 (600 GB/s total)",
            32,
            25,
            "NVIDIA A100 datasheet (SXM4 80GB): 312 TFLOPS bf16 dense, 2,039 GB/s HBM2e, NVLink 600 GB/s, PCIe Gen4; "
            "DGX A100: 8 x 200 Gb/s HDR InfiniBand for 8 GPUs",
        ),
        GPU(
            "a800",
            "NVIDIA A800-SXM4-80GB",
            79.33,
            True,
            0.6,
            312,
            2039,
            200,
            "NVLink 3, export-limited (400 GB/s total)",
            32,
            25,
            "NVIDIA A800 (China export variant of the A100 SXM4 80GB): the A100 80GB's 312 TFLOPS bf16 dense and "
            "2,039 GB/s HBM2e, NVLink cut from 600 to 400 GB/s total; memory: 'total capacty of 79.33 GiB' in a PyTorch "
            "OOM message on an A800-80G (hahnyuan/PB-LLM#3); network as DGX A100 (8 x 200 Gb/s HDR for 8 GPUs)",
        ),
        GPU(
            "h100",
            "NVIDIA H100 80GB HBM3",
            79.19,
            True,
            0.7,
            989,
            3350,
            450,
            "NVLink 4 (900 GB/s total)",
            64,
            50,
            "NVIDIA H100 datasheet (SXM5): 1,979 TFLOPS bf16 with sparsity = 989 dense, 3.35 TB/s HBM3, NVLink "
            "900 GB/s, PCIe Gen5; DGX H100: 8 x 400 Gb/s ConnectX-7 for 8 GPUs",
        ),
        GPU(
            "h800",
            "NVIDIA H800 80GB HBM3",
            79.19,
            True,
            0.7,
            989,
            3350,
            200,
            "NVLink 4, export-limited (400 GB/s total)",
            64,
            50,
            "NVIDIA H800 SXM5 (China export variant of the H100): same 989 TFLOPS bf16 dense and 3.35 TB/s HBM3 as "
            "the H100 SXM5, NVLink cut to 400 GB/s total (DeepSeek-V3 technical report, section 3.1: 'NVLink ... "
            "160 GB/s' achieved, 400 GB/s nominal); memory as the H100 80GB; 8 x 400 Gb/s InfiniBand per node",
        ),
        GPU(
            "h20",
            "NVIDIA H20 96GB",
            94.99,
            True,
            0.7,
            148,
            4000,
            450,
            "NVLink 4 (900 GB/s total)",
            64,
            50,
            "NVIDIA H20 product brief: 148 TFLOPS bf16 dense, 4.0 TB/s HBM3, NVLink 900 GB/s, PCIe Gen5",
        ),
        GPU(
            "h200",
            "NVIDIA H200 141GB",
            139.72,
            True,
            0.8,
            989,
            4800,
            450,
            "NVLink 4 (900 GB/s total)",
            64,
            50,
            "NVIDIA H200 datasheet (SXM): 1,979 TFLOPS bf16 with sparsity = 989 dense, 4.8 TB/s HBM3e, NVLink "
            "900 GB/s, PCIe Gen5; DGX H200: 8 x 400 Gb/s ConnectX-7",
        ),
        GPU(
            "b200",
            "NVIDIA B200 180GB",
            178.3,
            True,
            0.9,
            2250,
            8000,
            900,
            "NVLink 5 (1.8 TB/s total)",
            64,
            50,
            "NVIDIA DGX B200 datasheet: 72 PFLOPS fp8 training for 8 GPUs = 4.5 PFLOPS fp8 dense per GPU, so 2.25 "
            "PFLOPS bf16 dense; 1,440 GB HBM3e for 8 GPUs (180 GB each; NVML total less 0.5% = 178.3 GiB, assumed), "
            "64 TB/s HBM3e for 8 GPUs = 8 TB/s each; NVLink 5 1.8 TB/s; PCIe Gen5 hosts (Gen6-capable GPU); "
            "8 x 400 Gb/s ConnectX-7; context 0.9 GiB extrapolated from the SM count (not measured)",
        ),
    )
}


def gpu(name: str) -> GPU:
    return CATALOGUE[name]
