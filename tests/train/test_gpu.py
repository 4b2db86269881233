"""Liger kernels, bitsandbytes' 8-bit AdamW and QLoRA for real: they need Triton / CUDA.

Run with `make test-gpu`. On a CPU-only host these are skipped; their wiring is checked on CPU in
test_model.py (the patched modules, the optimizer class) and QLoRA runs on CPU in test_smoke.py.
"""

from __future__ import annotations

import pytest
import torch

from train_support import QLORA, check_run, launch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)")]
LLAMA = "axolotl-llama-3b-8xa100-80g"  # bf16, ZeRO-3, use_liger_kernel: true


def _on_gpus() -> list[str]:
    """The smoke's 2 ranks where 2 GPUs exist, else 1 rank on the one GPU (NCCL needs a GPU per rank)."""
    ranks = min(2, torch.cuda.device_count())
    return [f"hardware.gpus_per_node={ranks}", f"global_batch_size={2 * ranks}"]


def test_liger_and_8bit_adamw(tmp_path):
    run = launch(LLAMA, tmp_path / "run", [*_on_gpus(), "optim=adamw_bnb_8bit"], cpu=False)
    check_run(run)
    assert "vramfit: Liger kernels applied to the llama model" in run.result.stdout


def test_qlora(tmp_path):
    run = launch(LLAMA, tmp_path / "run", [*_on_gpus(), *QLORA], cpu=False)
    check_run(run)
