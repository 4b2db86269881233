"""Keep the training libraries' chatter that a user cannot act on out of the console.

One list of what is filtered (NOISE, LOGGERS), applied where it arises: in the CLI process by
`quiet()` and in every training rank by `quiet_rank()`. `vramfit -v` (VRAMFIT_VERBOSE=1, inherited
by the ranks) shows everything. The run's train.log gets what the console gets.

Nothing is imported just to silence it: DeepSpeed's import is quieted when something imports it
(an import hook), because its logger writes to whatever `sys.stdout` was at that moment and
`vramfit slurm > job.sbatch` must never find a log line in its script.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import sys
import warnings

VERBOSE_ENV = "VRAMFIT_VERBOSE"

# (category, message regex, why a user cannot act on it). Matched at the start of the message.
NOISE: list[tuple[type[Warning], str, str]] = [
    (FutureWarning, r"`torch\.distributed\.(reduce_scatter_tensor|all_gather_into_tensor|_reduce_scatter_base|_all_gather_base)` is deprecated",
     "DeepSpeed 0.19's ZeRO calls the deprecated collective on every step (~600 lines a smoke run)"),
    (FutureWarning, r"`(is_)?gradient_checkpointing\w*` is deprecated",
     "transformers 5 renamed the arguments; recipes keep the names TRL and the published scripts use"),
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found",
     "the CPU smoke run; on a GPU host pin_memory applies"),
    (UserWarning, r"None of the inputs have requires_grad=True",
     "gradient checkpointing with a frozen vision tower: expected"),
]
# logger name -> level below which its records are dropped
LOGGERS = {
    "bitsandbytes": logging.ERROR,  # "Failed to load CPU gemm_4bit_forward from kernels-community"
    "DeepSpeed": logging.WARNING,  # INFO lines per step; its warnings stay
    "torch.distributed.elastic.multiprocessing.redirects": logging.ERROR,  # "NOTE: Redirects are currently not supported"
}

_DONE: set[str] = set()


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def set_verbose(on: bool) -> None:
    """`-v`: every warning, log line and progress bar, in this process and the ranks it launches."""
    if on:
        os.environ[VERBOSE_ENV] = "1"
    else:
        os.environ.pop(VERBOSE_ENV, None)


def filter_warnings() -> None:
    for category, message, _why in NOISE:
        warnings.filterwarnings("ignore", message=message, category=category)


def quiet() -> None:
    """The CLI process: filters, logger levels, no progress bars, DeepSpeed's import quieted."""
    if "cli" in _DONE:
        return
    _DONE.add("cli")
    sys.meta_path.insert(0, _QuietDeepSpeedImport())  # even with -v: stdout belongs to the command's output
    if verbose():
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read by huggingface_hub and transformers at import
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    filter_warnings()
    for name, level in LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def quiet_rank() -> None:
    """A training rank: the same filters; the DeepSpeed accelerator named so it does not warn about picking the CPU."""
    if "rank" in _DONE:
        return
    _DONE.add("rank")
    quiet()
    if verbose():
        return
    if "DS_ACCELERATOR" not in os.environ:
        import torch  # a rank imports it anyway

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"


@contextlib.contextmanager
def drop_stdout_lines(pattern: str):
    """Inside the block, whole stdout lines matching `pattern` (a library's print()) are dropped; -v keeps them."""
    if verbose():
        yield
        return
    import re

    wanted = re.compile(pattern)
    real = sys.stdout

    class _Filter:
        def __init__(self):
            self.pending = ""

        def write(self, text: str) -> int:
            self.pending += text
            *lines, self.pending = self.pending.split("\n")
            for line in lines:
                if not wanted.search(line):
                    real.write(line + "\n")
            return len(text)

        def flush(self) -> None:
            real.flush()

        def __getattr__(self, name):
            return getattr(real, name)

    stream = _Filter()
    try:
        with contextlib.redirect_stdout(stream):
            yield
    finally:
        if stream.pending and not wanted.search(stream.pending):
            real.write(stream.pending)


def _after_deepspeed_import() -> None:
    if not verbose():
        logging.getLogger("DeepSpeed").setLevel(LOGGERS["DeepSpeed"] if "rank" in _DONE else logging.ERROR)


class _QuietDeepSpeedImport(importlib.abc.MetaPathFinder):
    """Runs `import deepspeed` with stdout pointed at stderr, then sets its logger's level."""

    def find_spec(self, name, path=None, target=None):
        if name != "deepspeed":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_resource_reader, is_package, ...: the real loader's
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        previous = os.environ.get("DS_ACCELERATOR")
        if previous is None and not verbose():
            import torch

            if not torch.cuda.is_available():  # what DeepSpeed picks anyway, without its warning about it
                os.environ["DS_ACCELERATOR"] = "cpu"
        try:
            with contextlib.redirect_stdout(sys.stderr):
                self.loader.exec_module(module)
        finally:
            if previous is None and "rank" not in _DONE:
                os.environ.pop("DS_ACCELERATOR", None)
        _after_deepspeed_import()
