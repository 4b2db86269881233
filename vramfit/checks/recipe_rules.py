"""Rules across a recipe's fields: batch arithmetic, precision vs GPU, paths, method vs model."""

from __future__ import annotations

import os
import re
from typing import Any

from vramfit.checks.deepspeed_json import section
from vramfit.divisors import divisors
from vramfit.hardware import CATALOGUE
from vramfit.libraries import argument_default, grpo_generation_batch, grpo_steps_per_generation
from vramfit.problems import RECIPE_TREE, Problem, Problems
from vramfit.recipe import NAME_RE

_PERSONAL = re.compile(r"^(/|~|[A-Za-z]:\\)|/home/|/Users/|/root/|\\Users\\")


def micro_and_accumulation(recipe) -> tuple[int, int]:
    """The micro-batch and accumulation a run gets: the recipe's, else the installed TrainingArguments defaults."""
    t = recipe.training
    return tuple(t[k] if k in t else argument_default(recipe.method, k) for k in ("per_device_train_batch_size", "gradient_accumulation_steps"))


def batch_arithmetic(recipe, file: str, problems: Problems) -> None:
    micro, accum = micro_and_accumulation(recipe)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (micro, accum)):
        return  # reported by the training-argument check
    ranks, gbs = recipe.world_size, recipe.global_batch_size
    if micro * accum * ranks == gbs:
        return
    equation = (
        f"per_device_train_batch_size x gradient_accumulation_steps x ranks = {micro} x {accum} x {ranks} "
        f"= {micro * accum * ranks} != global_batch_size {gbs}; ranks = {recipe.hardware.gpus_per_node} GPUs x {recipe.hardware.nodes} nodes"
    )
    if gbs % (micro * ranks) == 0:
        fix = f"set gradient_accumulation_steps: {gbs // (micro * ranks)} (keeps micro-batch {micro})."
    else:
        options = [m for m in divisors(gbs, up_to=max(micro, 1) * 4) if gbs % (m * ranks) == 0]
        fix = (
            f"set per_device_train_batch_size: {options[-1]} and gradient_accumulation_steps: {gbs // (options[-1] * ranks)}."
            if options
            else f"global_batch_size {gbs} is not a multiple of {ranks} ranks; choose a multiple of {ranks}."
        )
    problems.add(file, "global_batch_size", equation, fix)


def grpo_fix(recipe) -> str:
    """The smallest change that makes TRL's generation batch divisible by num_generations."""
    t = recipe.training
    micro, accum = micro_and_accumulation(recipe)
    steps = grpo_steps_per_generation(accum, t.get("steps_per_generation"))
    g = t.get("num_generations") or argument_default("grpo", "num_generations")
    ranks = recipe.world_size
    gen_batch = grpo_generation_batch(micro, ranks, accum, t.get("steps_per_generation"), t.get("generation_batch_size"))
    counts = (micro, steps, g, gen_batch)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in counts):
        return (
            f"num_generations, per_device_train_batch_size and the accumulation steps must be whole numbers >= 1 "
            f"(num_generations {g!r}, micro-batch {micro!r}, steps {steps!r}); set num_generations to at least 2."
        )
    valid = [d for d in divisors(gen_batch, up_to=1024) if d >= 2]
    parts = [
        f"generation batch = per_device_train_batch_size x ranks x steps_per_generation = {micro} x {ranks} x {steps} = {gen_batch}, "
        f"not divisible by num_generations {g}; valid num_generations: {valid}"
    ]
    for k in range(steps + 1, steps + 65):
        if (micro * ranks * k) % g == 0:
            parts.append(f"or gradient_accumulation_steps: {k} (with global_batch_size {micro * ranks * k})")
            break
    best = max((d for d in valid if d <= g), default=None)
    head = f"set num_generations: {best}" if best else "change per_device_train_batch_size"
    return f"{parts[0]}. Smallest fix: {head}, " + "; ".join(parts[1:]) + "."


def _strings(node: Any, prefix: str = ""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{prefix}[{i}]")
    elif isinstance(node, str):
        yield prefix, node


def check(recipe, file: str, raw_ds: dict[str, Any] | None) -> Problems:
    problems = Problems()
    folder_name = recipe.folder.name
    if not NAME_RE.match(recipe.name):
        problems.add(
            file,
            "name",
            f"'{recipe.name}' does not follow <model>[-<method>]-[<N>x]<gpu>[-<variant>] with a GPU from {sorted(CATALOGUE)}",
            "rename it, e.g. llama-3b-lora-8xa100-80g.",
            rule=RECIPE_TREE,
        )
    if folder_name != recipe.name and recipe.folder.parent.name == "recipes":
        problems.add(file, "name", f"'{recipe.name}' differs from its folder '{folder_name}'", f"set name: {folder_name}.", rule=RECIPE_TREE)
    if recipe.hardware.gpu not in recipe.name:
        problems.add(
            file, "hardware.gpu", f"'{recipe.hardware.gpu}' does not match the hardware in the name '{recipe.name}'", "make the name and hardware.gpu agree."
        )

    # Model and method.
    config_path = recipe.path(recipe.model.config)
    if not os.path.lexists(config_path) or os.path.isdir(config_path):
        problems.add(
            file,
            "model.config",
            f"'{recipe.model.config}' does not exist as a file{' (it is a folder)' if os.path.isdir(config_path) else ''}",
            "point it at a config.json copy under model_configs/.",
        )
    else:
        from vramfit import inputs
        from vramfit.problems import ConfigError

        try:
            config = inputs.load_json(config_path, "model-config")
            if not isinstance(config, dict):
                problems.add(recipe.model.config, "", f"must be a JSON object, got {type(config).__name__}", "restore the file from model_configs/.")
                config = {}
            archs = config.get("architectures") or []
            if archs and isinstance(archs, list) and recipe.model.architecture not in archs:
                problems.add(
                    file, "model.architecture", f"'{recipe.model.architecture}' but {recipe.model.config} says {archs}", f"set model.architecture: {archs[0]}."
                )
        except ConfigError as error:
            problems.extend(Problems([Problem(p.file, p.key, p.what, p.fix) for p in error.problems.items]))
    m = recipe.method
    if m in ("lora", "qlora") and recipe.model.lora is None:
        problems.add(file, "model.lora", f"method {m} needs a model.lora block", "add model.lora with r, alpha, target_modules.")
    if m == "full" and recipe.model.lora is not None:
        problems.add(file, "model.lora", "method full trains every weight, but a LoRA block is set", "set method: lora, or remove model.lora.")
    if m == "qlora" and recipe.model.quantization is None:
        problems.add(file, "model.quantization", "method qlora needs a model.quantization block", "add model.quantization (bits: 4, quant_type: nf4).")
    if m != "qlora" and recipe.model.quantization is not None:
        problems.add(file, "model.quantization", f"quantized base weights with method {m}", "set method: qlora, or remove model.quantization.")
    if m == "grpo" and recipe.data.format not in ("rec_jsonl", "chat_jsonl"):
        problems.add(
            file,
            "data.format",
            f"GRPO trains on prompts with a reward; format {recipe.data.format} has none",
            "use data.format: rec_jsonl (image REC task) or chat_jsonl (text: the last assistant turn is the reference answer).",
        )
    if m != "grpo" and recipe.data.format == "rec_jsonl":
        problems.add(file, "data.format", "rec_jsonl is the GRPO REC task", "use method: grpo, or a supervised format.")

    # Precision against the GPU.
    gpu = CATALOGUE[recipe.hardware.gpu]
    t = recipe.training
    ds_bf16 = section(raw_ds, "bf16").get("enabled") is True
    if (t.get("bf16") is True or ds_bf16) and not gpu.bf16:
        problems.add(file, "training.bf16", f"bf16 on {gpu.label}, which has no bf16 support", "set bf16: false and fp16: true (or pick a GPU with bf16).")
    if t.get("bf16") is True and t.get("fp16") is True:
        problems.add(file, "training.fp16", "fp16 and bf16 are both true", "keep one of them.")

    # ZeRO-3 with 4-bit weights.
    stage = section(raw_ds, "zero_optimization").get("stage")
    q = recipe.model.quantization
    if q is not None and stage == 3:
        compute = q.compute_dtype
        if q.quant_storage == "uint8" or q.quant_storage != compute:
            problems.add(
                file,
                "model.quantization.quant_storage",
                f"ZeRO-3 cannot shard {q.bits}-bit weights stored as {q.quant_storage} (compute dtype {compute}): every rank keeps the whole model",
                f"set model.quantization.quant_storage: {compute}.",
            )

    # Gradient checkpointing under ZeRO-3: either kind is valid. Reentrant checkpointing re-runs each module's forward,
    # whose ZeRO-3 hooks gather the parameters again (it was transformers 4's default, `{"use_reentrant": True}`, in
    # every Trainer + ZeRO-3 run); the failure the issue trackers document is the other kind with frozen parameters
    # (non-reentrant's recompute check sees them partitioned: transformers#47254, trl#2514, fixed in DeepSpeed#8148),
    # and reentrant is its workaround (transformers#34928). No rule here.

    return problems


def shared_paths(raw: dict[str, Any], file: str) -> Problems:
    """Paths written in a recipe file must be relative: recipes are shared and copied.

    Checked on the file as written; a path given on the command line is the user's own machine's.
    """
    problems = Problems()
    for key, value in _strings(raw):
        if key in ("summary", "model.stand_in") or key.startswith("env."):
            continue
        if ("/" in value or "\\" in value or value.startswith("~")) and _PERSONAL.search(value):
            problems.add(
                file,
                key,
                f"'{value}' is an absolute or personal path",
                "use a path relative to the repository (data/..., runs/...); give machine-specific paths on the command line.",
                rule=RECIPE_TREE,
            )
    return problems
