"""The recipe's DeepSpeed JSON: read it, fill "auto" as transformers does, check it with DeepSpeed.

Nothing here re-implements DeepSpeed's parsing. "auto" is filled by transformers'
`HfTrainerDeepSpeedConfig` (the same object the Trainer uses) with the recipe's real world size,
and the result is handed to `deepspeed.runtime.config.DeepSpeedConfig`, which validates the nested
blocks. Two things DeepSpeed cannot see from one process are checked here: the world size (it
reads it from torch.distributed, so it would assert 24 != 4 * 1 * 1 for a 6-rank recipe), and
top-level keys it silently ignores (found by recording which keys its parser actually reads).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from vramfit.problems import Problems, did_you_mean

CONFIG_DIR = "deepspeed_configs"


def read(path: Path, problems: Problems, file_label: str, key: str = "deepspeed") -> dict[str, Any] | None:
    from vramfit import inputs
    from vramfit.problems import ConfigError

    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError:
        exists, is_dir = True, False  # too long, a loop: the input layer names it
    if not exists:
        problems.add(file_label, key, f"DeepSpeed JSON '{path}' does not exist", f"point it at a file under {CONFIG_DIR}/ (ls {CONFIG_DIR}).")
        return None
    if is_dir:
        problems.add(file_label, key, f"'{path}' is a directory, not a DeepSpeed JSON", f"name a .json file under {CONFIG_DIR}/.")
        return None
    try:
        data = inputs.load_json(path, "deepspeed")
    except ConfigError as error:
        problems.extend(error.problems)
        return None
    if not isinstance(data, dict):
        problems.add(str(path), "", f"must be a JSON object, got {type(data).__name__}", "start from a file in deepspeed_configs/.")
        return None
    return data


def launch_time_problems(raw: dict[str, Any], label: str, problems: Problems) -> None:
    """Settings DeepSpeed's config parser accepts but its engine refuses at launch, after the job waited in a queue."""
    zero = section(raw, "zero_optimization")
    for key in ("offload_optimizer", "offload_param"):
        block = section(zero, key)
        if str(block.get("device", "none")).lower() == "nvme" and not block.get("nvme_path"):
            problems.add(
                label,
                f"zero_optimization.{key}.nvme_path",
                "NVMe offload needs the folder to swap to; DeepSpeed fails at launch without it",
                f'add "nvme_path": "/local_nvme" to {key}, or use "device": "cpu".',
            )
    optimizer = raw.get("optimizer")
    if isinstance(optimizer, dict) and "type" in optimizer:
        name = optimizer["type"]
        if not isinstance(name, str) or not _supported_optimizer(name):
            from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

            problems.add(
                label,
                "optimizer.type",
                f"{name!r} is not an optimizer DeepSpeed knows (its own names, or a torch.optim class)."
                + (did_you_mean(str(name).lower(), DEEPSPEED_OPTIMIZERS) if isinstance(name, str) else ""),
                f"use one of {', '.join(DEEPSPEED_OPTIMIZERS)}, or remove the optimizer block to use the Trainer's.",
            )


def _supported_optimizer(name: str) -> bool:
    """DeepSpeedEngine._is_supported_optimizer, on the name as DeepSpeedConfig normalizes it."""
    import torch
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    return name.lower() in DEEPSPEED_OPTIMIZERS or isinstance(getattr(torch.optim, name, None), type)


def section(node: Any, *path: str) -> dict[str, Any]:
    """A nested block of a JSON that may be malformed: {} unless every level is an object."""
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _walk(node: Any, prefix: str = ""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, node


def _hidden_size(config: dict[str, Any]) -> int | None:
    text = config.get("text_config") or {}
    return config.get("hidden_size") or text.get("hidden_size") or config.get("d_model")


class _ModelStub:
    """What `trainer_config_finalize` reads from a model: its config's hidden size."""

    def __init__(self, hidden_size: int | None):
        self.config = type("Cfg", (), {"hidden_size": hidden_size})() if hidden_size else object()


class _AsOnTheGPU:
    """The built arguments, but with the recipe's own precision flags.

    The arguments are built with bf16/fp16 off on a CPU-only host (the libraries refuse them
    there); the JSON must still be filled as it will be on the recipe's GPUs.
    """

    PRECISION = ("bf16", "fp16", "bf16_full_eval", "fp16_full_eval")

    def __init__(self, args, training: dict[str, Any]):
        self._args, self._training = args, training

    def __getattr__(self, name):
        if name in self.PRECISION:
            return bool(self._training.get(name, False))
        return getattr(self._args, name)


def fill_auto(raw: dict[str, Any], args, hidden_size: int | None, num_training_steps: int = 1000):
    """Fill "auto" exactly as the Trainer does; returns (filled dict, mismatch lines)."""
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    hf = HfTrainerDeepSpeedConfig(copy.deepcopy(raw))
    hf.trainer_config_process(args)
    mismatches = list(hf.mismatches)
    hf.mismatches = []
    try:
        hf.trainer_config_finalize(args, _ModelStub(hidden_size), num_training_steps)
    except ValueError:
        pass
    mismatches += hf.mismatches
    return hf.config, mismatches


def ignored_top_level_keys(config: dict[str, Any]) -> tuple[list[str], Exception | None]:
    """Top-level keys DeepSpeed's own parser never reads, and its error if it rejects the config."""
    from deepspeed.runtime.config import DeepSpeedConfig

    seen: set[str] = set()

    class Recording(dict):
        def get(self, key, *default):
            seen.add(key)
            return super().get(key, *default)

        def __getitem__(self, key):
            seen.add(key)
            return super().__getitem__(key)

        def __contains__(self, key):
            seen.add(key)
            return super().__contains__(key)

    # DeepSpeed takes its world size from torch.distributed (1 here); the real batch equation
    # is checked in recipe_rules with the recipe's world size.
    probe = copy.deepcopy(config)
    micro, accum = probe.get("train_micro_batch_size_per_gpu"), probe.get("gradient_accumulation_steps")
    if isinstance(micro, int) and isinstance(accum, int):
        probe["train_batch_size"] = micro * accum
    error = None
    try:
        DeepSpeedConfig(Recording(probe))
    except Exception as exc:  # DeepSpeed raises pydantic, assertion, type and value errors
        error = exc
    return sorted(k for k in config if k not in seen), error


def check(recipe, args, file: str) -> tuple[Problems, dict[str, Any] | None]:
    """Every problem with the recipe's DeepSpeed JSON, and the resolved JSON when it has none."""
    problems = Problems()
    path = recipe.path(recipe.deepspeed)
    if not recipe.deepspeed.startswith(f"{CONFIG_DIR}/"):
        problems.add(
            file, "deepspeed", f"'{recipe.deepspeed}' is outside {CONFIG_DIR}/", f"use a shared JSON under {CONFIG_DIR}/ so reviews see one set of presets."
        )
    raw = read(path, problems, file)
    if raw is None:
        return problems, None
    label = f"{CONFIG_DIR}/{path.name}"
    for key, value in _walk(raw):
        if isinstance(value, str) and value != "auto":
            try:
                float(value)
            except ValueError:
                continue
            problems.add(label, key, f"{value!r} is a string where a number belongs", f'write {value} without quotes, or "auto".')
    for key in _OBJECT_SECTIONS:
        if key in raw and not isinstance(raw[key], dict):
            problems.add(
                label,
                key,
                f"must be a JSON object, got {type(raw[key]).__name__} {json.dumps(raw[key])[:60]}",
                f'write "{key}": {{...}} as in the files under {CONFIG_DIR}/.',
            )
    for key in ("offload_optimizer", "offload_param"):
        value = section(raw, "zero_optimization").get(key)
        if value is not None and not isinstance(value, dict):
            problems.add(
                label, f"zero_optimization.{key}", f"must be a JSON object, got {json.dumps(value)[:60]}", f'write "{key}": {{"device": "cpu"}} or remove it.'
            )
    launch_time_problems(raw, label, problems)
    if problems:
        return problems, None
    if args is None:
        return problems, None
    from vramfit import inputs
    from vramfit.problems import ConfigError

    try:
        hidden = _hidden_size(inputs.load_json(recipe.path(recipe.model.config), "model-config"))
    except (ConfigError, AttributeError, TypeError):
        return problems, None  # the unreadable model config is reported by recipe_rules
    try:
        filled, mismatches = fill_auto(raw, _AsOnTheGPU(args, recipe.training), hidden)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        problems.add(
            label,
            "",
            f'transformers cannot fill its "auto" values ({exc.__class__.__name__}: {exc})',
            f"compare the structure with the files under {CONFIG_DIR}/.",
        )
        return problems, None
    for line in mismatches:
        # "- ds train_micro_batch_size_per_gpu=4 vs hf per_device_train_batch_size=2"
        body = line.lstrip("- ")
        ds_part, _, hf_part = body.partition(" vs hf ")
        ds_key = ds_part.removeprefix("ds ").split("=")[0]
        problems.add(
            label,
            ds_key,
            f"contradicts the training arguments ({ds_part.removeprefix('ds ')} vs {hf_part})",
            f'set "{ds_key}": "auto" in {label} (the Trainer fills it), or change the training argument.',
        )
    for key, value in _walk(filled):
        if value == "auto":
            problems.add(
                label,
                key,
                'is "auto" but nothing fills it (transformers fills only batch, clipping, precision, optimizer/scheduler params and the hidden-size buckets)',
                f"write an explicit value for {key}.",
            )
    zero = section(filled, "zero_optimization")
    stage = zero.get("stage", 0)
    offload_param = section(zero, "offload_param").get("device", "none")
    if offload_param not in (None, "none") and stage != 3:
        problems.add(
            label,
            "zero_optimization.offload_param",
            f"parameter offload needs ZeRO stage 3 (stage is {stage})",
            "set zero_optimization.stage to 3, or remove offload_param (optimizer offload alone is valid from stage 1).",
        )
    if section(filled, "fp16").get("enabled") is True and section(filled, "bf16").get("enabled") is True:
        problems.add(label, "fp16.enabled", "fp16 and bf16 are both enabled", 'keep one; set both to "auto" and choose in training (bf16: true or fp16: true).')
    ignored, error = ignored_top_level_keys(filled)
    if error is None:  # a parser that stopped early has not read the keys after the bad one
        for key in ignored:
            problems.add(
                label,
                key,
                f"DeepSpeed silently ignores the top-level key '{key}'.{did_you_mean(key, _DEEPSPEED_SECTIONS)}",
                "rename it to the DeepSpeed key or remove it.",
            )
    elif not problems:
        message = " ".join(str(error).split())[:600]
        problems.add(label, "", f"DeepSpeed rejects the resolved config ({error.__class__.__name__}: {message})", "correct the key DeepSpeed names.")
    return problems, (filled if not problems else None)


# Blocks that DeepSpeed and transformers read as objects.
_OBJECT_SECTIONS = (
    "zero_optimization",
    "optimizer",
    "scheduler",
    "fp16",
    "bf16",
    "activation_checkpointing",
    "flops_profiler",
    "checkpoint",
    "aio",
    "data_types",
    "comms_logger",
    "tensorboard",
    "wandb",
    "csv_monitor",
)

# Section names DeepSpeed reads, for "did you mean" only; the ignored-key verdict comes from its parser.
_DEEPSPEED_SECTIONS = (
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "zero_optimization",
    "optimizer",
    "scheduler",
    "fp16",
    "bf16",
    "activation_checkpointing",
    "steps_per_print",
    "wall_clock_breakdown",
    "communication_data_type",
    "zero_allow_untested_optimizer",
    "flops_profiler",
    "tensorboard",
    "wandb",
    "csv_monitor",
    "comms_logger",
    "checkpoint",
    "aio",
    "data_types",
    "prescale_gradients",
    "gradient_predivide_factor",
    "memory_breakdown",
)


def resolve(recipe) -> dict[str, Any]:
    """The resolved JSON for a recipe that validates (raises ConfigError otherwise)."""
    from vramfit.checks import training_args
    from vramfit.problems import ConfigError

    problems, args = training_args.check(recipe, str(recipe.source))
    if problems:
        raise ConfigError(problems)
    ds_problems, filled = check(recipe, args, str(recipe.source))
    if ds_problems:
        raise ConfigError(ds_problems)
    return filled
