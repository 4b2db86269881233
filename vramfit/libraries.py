"""Keep the training libraries' import-time chatter out of the runner's output.

DeepSpeed's logger writes to whatever `sys.stdout` was when it was first imported; `vramfit
slurm > job.sbatch` must never find a log line in its script. Imported once, here, with stdout
pointing at stderr, and only at warning level and above; bitsandbytes' CPU-kernel notice and
transformers' renamed-argument notice say nothing a recipe author can act on.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings

_DONE = False


def quiet() -> None:
    global _DONE
    if _DONE:
        return
    _DONE = True
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=r"`gradient_checkpointing\w*` is deprecated", category=FutureWarning)
    import torch

    previous = os.environ.get("DS_ACCELERATOR")
    if not torch.cuda.is_available():  # what DeepSpeed would pick anyway, without its warning about it
        os.environ["DS_ACCELERATOR"] = "cpu"
    try:
        with contextlib.redirect_stdout(sys.stderr):
            import deepspeed  # noqa: F401
    finally:
        if previous is None:
            os.environ.pop("DS_ACCELERATOR", None)
        else:
            os.environ["DS_ACCELERATOR"] = previous

    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
