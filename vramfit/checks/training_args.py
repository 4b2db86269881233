"""Training arguments, checked by the Hugging Face / TRL config classes themselves.

Keys must be fields of `transformers.TrainingArguments` (full, lora, qlora) or `trl.GRPOConfig`
(grpo). The values are then handed to the real class, built with the recipe's world size, so its
own `__post_init__` rules apply (TRL's generation-batch divisibility among them).
"""

from __future__ import annotations

import functools
import math
import typing
from typing import Any

from vramfit.libraries import config_class  # one source: also the runner's, the planner's and the reviewer's
from vramfit.problems import Problems, did_you_mean

# Set by the runner itself; a recipe that sets them would fight the run directory and the JSON.
RUNNER_OWNED = {"deepspeed": "the recipe's top-level `deepspeed:` key", "local_rank": "the launcher"}


@functools.lru_cache(maxsize=None)
def _fields(method: str | None) -> dict[str, Any]:
    import dataclasses

    cls = config_class(method)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # a forward reference the library never resolves: fall back to raw types
        hints = {}
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(cls) if f.init}


def fields_for(method: str | None) -> list[str]:
    from vramfit.libraries import argument_names

    return argument_names(method)


def _admits(annotation: Any, kinds: tuple[type, ...]) -> bool:
    args = typing.get_args(annotation)
    if args:
        return any(_admits(a, kinds) for a in args)
    return isinstance(annotation, type) and issubclass(annotation, kinds)


def build(method: str, training: dict[str, Any], world_size: int, output_dir: str):
    """The real TrainingArguments / GRPOConfig for `training`, as seen by `world_size` ranks.

    bf16/fp16 are built off here: the libraries refuse them on a CPU-only host, and the precision
    is checked against the recipe's GPU separately (checks.recipe_rules).
    """
    cls = config_class(method)
    pinned = type(f"Planned{cls.__name__}", (cls,), {"world_size": property(lambda self: world_size)})
    values = {**training, "output_dir": training.get("output_dir", output_dir)}
    import torch

    if not torch.cuda.is_available():
        values.update(bf16=False, fp16=False)
        values.pop("tf32", None)  # needs an Ampere GPU to build
        values.pop("bf16_full_eval", None)
        values.pop("fp16_full_eval", None)
    values.pop("deepspeed", None)
    return pinned(**values)


def check(recipe, file: str) -> tuple[Problems, Any]:
    """Problems with `training:` and, when the keys are sound, the built config object."""
    problems = Problems()
    fields = _fields(recipe.method if recipe.method == "grpo" else None)
    cls_name = config_class(recipe.method).__name__
    for key, value in recipe.training.items():
        where = f"training.{key}"
        if key in RUNNER_OWNED:
            problems.add(file, where, f"is set by {RUNNER_OWNED[key]}, not in training", f"remove training.{key}.")
            continue
        if key not in fields:
            problems.add(
                file,
                where,
                f"'{key}' is not a {cls_name} argument.{did_you_mean(key, fields)}",
                f"use the {cls_name} name (see `python -c 'from {'trl' if cls_name == 'GRPOConfig' else 'transformers'} import {cls_name}; help({cls_name})'`).",
            )
            continue
        ann = fields[key]
        if isinstance(value, str) and value != "auto" and _admits(ann, (int, float)) and not _admits(ann, (str,)):
            number = _number(value, integer=not _admits(ann, (float,)))
            if number is not None and not math.isfinite(number):  # "1e400", "inf", "nan": float() reads them
                problems.add(
                    file,
                    where,
                    f"{value!r} is not a finite number (it reads as {number}: a literal too large for a float, inf or nan)",
                    f"write a finite number for {key}.",
                )
                continue
            if number is not None:  # a quoted number, as hardware: accepts it (and YAML reads 2e-5 as text)
                recipe.training[key] = value = number
            else:
                default = _library_default(recipe.method, key)
                example = f"e.g. {key}: {default} (the {cls_name} default)" if default is not None else f"e.g. {key}: 1"
                problems.add(file, where, f"{value!r} is a string where a number belongs", f"write a number, {example}.")
                continue
        if isinstance(value, bool) and _admits(ann, (int, float)) and not _admits(ann, (bool,)):
            problems.add(file, where, f"{value!r} is a boolean where a number belongs", f"write a number for {key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0 and key in _NON_NEGATIVE:
            problems.add(file, where, f"must not be negative (got {value})", f"set {key} to a positive value.")
        else:
            wrong = _type_error(recipe.method, key, ann, value)
            if wrong:
                problems.add(file, where, f"{value!r} does not fit the type {_type_name(ann)} ({wrong})", f"give {key} a value of type {_type_name(ann)}.")
    if problems:
        return problems, None
    try:
        args = build(recipe.method, recipe.training, recipe.world_size, str(recipe.folder / "_validate"))
    except (
        ValueError,
        TypeError,
        AssertionError,
        ArithmeticError,
        OSError,
    ) as exc:  # num_generations=0: TRL divides by it; OSError: a fsdp_config path it opens
        message = " ".join(str(exc).split())
        if isinstance(exc, ArithmeticError):
            zero = [k for k, v in recipe.training.items() if v == 0 and not isinstance(v, bool)]
            message = f"{exc.__class__.__name__}: {exc}" + (f" ({', '.join(zero)} = 0)" if zero else "")
        key = next((k for k in recipe.training if k in message), "")
        problems.add(
            file,
            f"training.{key}" if key else "training",
            f"{cls_name} refuses these arguments on {recipe.world_size} ranks: {message}",
            "change the value the message names.",
        )
        return problems, None
    return problems, args


@functools.lru_cache(maxsize=None)
def _adapter(method: str | None, key: str):
    from pydantic import TypeAdapter

    try:
        return TypeAdapter(_fields(method if method == "grpo" else None)[key])
    except Exception:  # an annotation pydantic cannot express: the class itself will judge the value
        return None


def _type_error(method: str | None, key: str, annotation: Any, value: Any) -> str:
    """Why `value` does not fit the field's annotation ('' when it does), judged by pydantic."""
    from pydantic import ValidationError

    adapter = _adapter(method, key)
    if adapter is None:
        return ""
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        return exc.errors()[0]["msg"]
    return ""


def _number(text: str, integer: bool) -> int | float | None:
    """'2e-5' -> 2e-05, ' 4 ' -> 4, '"8"' -> 8; None when the text is not a number (or not a whole one for an int)."""
    text = text.strip().strip("'\"").strip()
    try:
        number = float(text)
    except ValueError:
        return None
    if integer:
        return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else None
    return int(text) if text.lstrip("+-").isdigit() else number


def _library_default(method: str | None, key: str):
    from vramfit.libraries import argument_default

    default = argument_default(method, key)
    return default if isinstance(default, (int, float)) and not isinstance(default, bool) else None


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


_NON_NEGATIVE = {
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "warmup_steps",
    "eval_steps",
    "save_steps",
    "logging_steps",
    "num_generations",
    "max_completion_length",
    "max_prompt_length",
    "weight_decay",
    "max_grad_norm",
    "eval_accumulation_steps",
    "dataloader_num_workers",
    # not save_total_limit: transformers' rotate_checkpoints keeps every checkpoint when it is None or <= 0
    # (trainer_utils.py `if save_total_limit is None or save_total_limit <= 0: return`); ms-swift's examples pass -1
}
