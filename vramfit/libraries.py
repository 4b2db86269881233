"""Keep the training libraries' chatter that a user cannot act on out of the console.

One list of what is filtered (NOISE, LOGGERS, LOG_NOISE), applied where it arises: in the CLI process by
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
    (
        FutureWarning,
        r"`torch\.distributed\.(reduce_scatter_tensor|all_gather_into_tensor|_reduce_scatter_base|_all_gather_base)` is deprecated",
        "DeepSpeed 0.19's ZeRO calls the deprecated collective on every step (~600 lines a smoke run)",
    ),
    (
        FutureWarning,
        r"`(is_)?gradient_checkpointing\w*` is deprecated",
        "transformers 5 renamed the arguments; recipes keep the names TRL and the published scripts use",
    ),
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found", "the CPU smoke run; on a GPU host pin_memory applies"),
    (UserWarning, r"None of the inputs have requires_grad=True", "gradient checkpointing with a frozen vision tower: expected"),
]
# logger name -> level below which its records are dropped
LOGGERS = {
    "bitsandbytes": logging.ERROR,  # "Failed to load CPU gemm_4bit_forward from kernels-community"
    "DeepSpeed": logging.WARNING,  # INFO lines per step; its warnings stay
    "torch.distributed.elastic.multiprocessing.redirects": logging.ERROR,  # "NOTE: Redirects are currently not supported"
}

# (logger name, message regex, why a user cannot act on it): records dropped from that logger only.
LOG_NOISE: list[tuple[str, str, str]] = [
    (
        "transformers.utils.generic",
        r"`use_cache=True` is incompatible with gradient checkpointing",
        "the model turns its generation cache off while training with checkpointing, as it should (once per rank)",
    ),
]

_DONE: set[str] = set()


class _DropMessages(logging.Filter):
    def __init__(self, patterns: list[str]):
        super().__init__()
        import re

        self.patterns = [re.compile(p) for p in patterns]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(p.match(message) for p in self.patterns)


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
    for name in dict.fromkeys(name for name, _message, _why in LOG_NOISE):
        logging.getLogger(name).addFilter(_DropMessages([m for n, m, _why in LOG_NOISE if n == name]))
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


def launcher_env() -> dict[str, str]:
    """Environment for a launched job's processes (the launcher - torchrun, accelerate, deepspeed - and every
    rank), applied, not printed or saved: on a host without a GPU, the accelerator DeepSpeed picks anyway,
    named so that each process that imports DeepSpeed does not warn "Setting accelerator to CPU". None under -v."""
    if verbose() or "DS_ACCELERATOR" in os.environ:
        return {}
    import torch  # the runner has imported it (validation)

    return {} if torch.cuda.is_available() else {"DS_ACCELERATOR": "cpu"}


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
    # DeepSpeed's logger writes to stdout (deepspeed/utils/logging.py: StreamHandler(stream=sys.stdout)), and
    # it warns lazily ("Setting accelerator to CPU" at the first get_accelerator()): stdout belongs to the
    # command's output (--json), so its records go to stderr, even with -v.
    for handler in logging.getLogger("DeepSpeed").handlers:
        if type(handler) is logging.StreamHandler and handler.stream is not sys.stderr:
            handler.setStream(sys.stderr)
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


# ---------------------------------------------------------------------------------------------
# Facts read from the installed libraries, cached in the user's cache folder keyed by their versions.

FACT_LIBRARIES = ("transformers", "trl", "accelerate", "deepspeed", "torch", "peft")


def installed_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in FACT_LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def cache_dir() -> "os.PathLike[str]":
    """$VRAMFIT_CACHE_DIR, else $XDG_CACHE_HOME/vramfit, else ~/.cache/vramfit (never the repository)."""
    from pathlib import Path

    explicit = os.environ.get("VRAMFIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vramfit"


def cached(kind: str, compute):
    """compute() once per set of installed library versions; the JSON result kept in cache_dir().

    A cache that cannot be read or written (read-only home, a corrupt file) is recomputed, never an error.
    """
    import hashlib
    import json

    key = hashlib.sha256(json.dumps([kind, installed_versions()], sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / f"{kind}-{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    value = compute()
    store_json(path, value)
    return value


def store_json(path, data) -> None:
    """`data` as JSON at `path` in the cache, written whole or not at all (a temporary file replaced: a reader in
    another process never sees half a file); an unwritable cache or data that is not JSON is answered, not kept."""
    import json

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        pass


def config_class(method: str | None):
    """The argument dataclass a recipe's `training:` fills: trl.GRPOConfig for grpo, else TrainingArguments."""
    if method == "grpo":
        from trl import GRPOConfig

        return GRPOConfig
    from transformers import TrainingArguments

    return TrainingArguments


def config_class_name(method: str | None) -> str:
    """The class's name without importing it."""
    return "GRPOConfig" if method == "grpo" else "TrainingArguments"


def _plain(value):
    """A default as JSON: enums by value, containers kept, anything else by its repr (never a real argument default)."""
    import enum

    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def _read_arguments(method: str | None) -> dict:
    import dataclasses

    out = {}
    for f in dataclasses.fields(config_class(method)):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = _plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = _plain(f.default_factory())
        else:
            default = None
        out[f.name] = default
    return out


def argument_defaults(method: str | None) -> dict:
    """{field: default} of TrainingArguments (method != grpo) or GRPOConfig, read from the installed dataclass."""
    kind = "grpo" if method == "grpo" else "hf"
    return cached(f"arguments-{kind}", lambda: _read_arguments(kind if kind == "grpo" else None))


def argument_names(method: str | None) -> list[str]:
    return list(argument_defaults(method))


def argument_default(method: str | None, name: str):
    """One default of TrainingArguments / GRPOConfig as installed (e.g. per_device_train_batch_size -> 8)."""
    return argument_defaults(method).get(name)


def grpo_steps_per_generation(
    gradient_accumulation_steps: int, steps_per_generation: int | None = None, generation_batch_size: int | None = None, global_micro_batch: int | None = None
) -> int:
    """Micro-batches one GRPO generation round serves (trl 1.16 grpo_config.py __post_init__: steps_per_generation
    defaults to gradient_accumulation_steps; with generation_batch_size set instead, it is generation_batch_size /
    (per_device_train_batch_size x num_processes), the `global_micro_batch`)."""
    if steps_per_generation:
        return steps_per_generation
    if generation_batch_size and global_micro_batch:
        return int(generation_batch_size) // int(global_micro_batch)
    return gradient_accumulation_steps


def grpo_generation_batch(
    per_device: int, processes: int, gradient_accumulation_steps: int, steps_per_generation: int | None = None, generation_batch_size: int | None = None
) -> int:
    """Completions TRL's GRPOTrainer generates per generation round, over all processes (trl 1.16 grpo_config.py
    __post_init__: steps_per_generation defaults to gradient_accumulation_steps and
    generation_batch_size = per_device_train_batch_size x num_processes x steps_per_generation; it must be
    divisible by num_generations). One rank generates generation_batch_size / processes of them."""
    if generation_batch_size:
        return int(generation_batch_size)
    return per_device * processes * grpo_steps_per_generation(gradient_accumulation_steps, steps_per_generation)
