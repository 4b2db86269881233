"""`vramfit validate`: every check on a recipe, collected, reported once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramfit import recipe as recipe_mod
from vramfit.checks import deepspeed_json, recipe_rules, training_args
from vramfit.paths import find_recipe
from vramfit.problems import ConfigError, Problem, Problems


@dataclass
class Validated:
    recipe: recipe_mod.Recipe
    args: Any  # the built TrainingArguments / GRPOConfig
    deepspeed: dict[str, Any]  # resolved: "auto" filled
    plan: Any = None
    warnings: list[Problem] = field(default_factory=list)
    arguments: dict[str, Any] | None = None  # the built arguments as values (kept in the validate cache)

    @property
    def resolved(self):
        """What the libraries resolved, for the planner (planner/from_validation.py); None when not built."""
        if self.arguments is None:
            return None
        from vramfit.planner.from_validation import Resolved

        return Resolved(self.arguments, self.deepspeed, self.recipe.deepspeed, dict(self.recipe.training))


def validate(target: str | Path, overrides=(), plan: bool = True, force: bool = False, cache: bool = False) -> Validated:
    """Raise ConfigError listing every problem; return the validated recipe otherwise.

    cache=True (`vramfit validate`, `plan`): the verdict of the library-built checks (TrainingArguments /
    GRPOConfig, DeepSpeed's parser) is kept in the user cache with what they resolved (the arguments as
    values, the DeepSpeed JSON with "auto" filled), keyed by everything they read and the installed
    library versions; the result then has no built `args` (a launch never uses the cache). Either way
    `result.resolved` feeds the planner (planner/from_validation.py).
    """
    path = find_recipe(str(target))
    recipe = recipe_mod.load(path, list(overrides))
    file = str(recipe.source.relative_to(Path.cwd())) if recipe.source.is_relative_to(Path.cwd()) else str(recipe.source)
    problems = Problems()
    raw_ds = deepspeed_json.read(recipe.path(recipe.deepspeed), Problems(), file)
    problems.extend(recipe_rules.check(recipe, file, raw_ds))
    problems.extend(recipe_rules.shared_paths(recipe_mod.read_yaml(recipe.source)[0] or {}, file))
    ta_problems, ds_problems, args, resolved, arguments = _library_checks(recipe, file, cache)  # first: reads quoted numbers as numbers
    recipe_rules.batch_arithmetic(recipe, file, problems)
    if recipe.method == "grpo" and any("num_generations" in p.what for p in ta_problems.items):
        ta_problems = Problems(
            [
                Problem(p.file, "training.num_generations", p.what, recipe_rules.grpo_fix(recipe)) if "num_generations" in p.what else p
                for p in ta_problems.items
            ]
        )
    problems.extend(ta_problems)
    problems.extend(ds_problems)
    if problems:
        raise ConfigError(problems)
    result = Validated(recipe, args, resolved, warnings=problems.warnings, arguments=arguments)
    if plan:
        from vramfit.planner import plan_recipe

        result.plan = plan_recipe(recipe, resolved=result.resolved)  # fed the libraries' values, not re-derived
        if not force:
            refusal = fit_problems(result.plan, file, recipe)
            if refusal:
                raise ConfigError(refusal)
    return result


def _library_checks(recipe, file: str, cache: bool):
    """(training-argument problems, DeepSpeed problems, built args, resolved DeepSpeed JSON, the built
    args as JSON-safe values for the planner)."""

    def run():
        ta, args = training_args.check(recipe, file)
        ds, resolved = deepspeed_json.check(recipe, args, file)
        arguments = None
        if args is not None:
            from vramfit.planner.from_validation import arguments_dict

            arguments = arguments_dict(args)
        return ta, ds, args, resolved, arguments

    if not cache:
        return run()
    import hashlib
    import json
    import os

    from vramfit import inputs, libraries

    # The key is made of the files' text read through the input layer (regular files only, size-capped):
    # a file the input layer refuses is never read here; the checks then run uncached and report it.
    try:
        deepspeed_text = inputs.read_text(recipe.path(recipe.deepspeed), "deepspeed")
        config_text = inputs.read_text(recipe.path(recipe.model.config), "model-config")
    except ConfigError:
        return run()

    material = {
        "recipe": recipe.resolved_dict(),
        "source": str(recipe.source),
        "file": file,
        "deepspeed": deepspeed_text,
        "model_config": config_text,
        "gpu": [os.path.exists("/dev/nvidiactl"), os.environ.get("CUDA_VISIBLE_DEVICES")],
        "kept": 2,  # what a cache entry holds: 2 = the verdict, the resolved JSON and the resolved arguments
    }
    key = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:24]

    def compute():
        ta, ds, _args, resolved, arguments = run()
        return {
            "ta": [vars(p) for p in ta.items],
            "ds": [vars(p) for p in ds.items],
            "training": recipe.training,
            "resolved": resolved,
            "arguments": arguments,
        }

    value = libraries.cached(f"validation-{key}", compute)
    recipe.training = value["training"]
    return (
        Problems([Problem(**p) for p in value["ta"]]),
        Problems([Problem(**p) for p in value["ds"]]),
        None,
        value["resolved"],
        value.get("arguments"),
    )


def fit_problems(plan, file: str, recipe) -> Problems:
    """The planner's verdict as problems: a recipe predicted not to fit is refused (unless --force)."""
    problems = Problems()
    first = next(iter(plan.fixes), None)
    fix = (
        (
            "apply "
            + " ".join(f"{k}={v}" for k, v in first["overrides"].items())
            + f" (predicted {first['per_gpu_peak_gib']:.1f} GiB); see `vramfit plan` for all fixes, or pass --force."
        )
        if first
        else "see `vramfit plan`, or pass --force."
    )
    if not plan.fits:
        problems.add(
            file,
            "hardware.gpu",
            f"predicted peak {plan.per_gpu_peak_gib:.1f} GiB per GPU exceeds the {plan.gpu_memory_gib:.1f} GiB of a {recipe.hardware.gpu}",
            fix,
        )
    if not plan.host_ram_fits:
        problems.add(
            file, "hardware.host_ram_gib", f"predicted host RAM {plan.host_ram_gib:.0f} GiB per node exceeds {plan.host_ram_available_gib:.0f} GiB", fix
        )
    return problems
