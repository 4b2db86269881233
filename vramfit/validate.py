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


def validate(target: str | Path, overrides=(), plan: bool = True, force: bool = False) -> Validated:
    """Raise ConfigError listing every problem; return the validated recipe otherwise."""
    path = find_recipe(str(target))
    recipe = recipe_mod.load(path, list(overrides))
    file = str(recipe.source.relative_to(Path.cwd())) if recipe.source.is_relative_to(Path.cwd()) else str(recipe.source)
    problems = Problems()
    raw_ds = deepspeed_json.read(recipe.path(recipe.deepspeed), Problems(), file)
    problems.extend(recipe_rules.check(recipe, file, raw_ds))
    problems.extend(recipe_rules.shared_paths(recipe_mod.read_yaml(recipe.source)[0] or {}, file))
    ta_problems, args = training_args.check(recipe, file)  # first: it reads quoted numbers as numbers
    recipe_rules.batch_arithmetic(recipe, file, problems)
    if recipe.method == "grpo" and any("num_generations" in p.what for p in ta_problems.items):
        ta_problems = Problems([Problem(p.file, "training.num_generations", p.what, recipe_rules.grpo_fix(recipe))
                                if "num_generations" in p.what else p for p in ta_problems.items])
    problems.extend(ta_problems)
    ds_problems, resolved = deepspeed_json.check(recipe, args, file)
    problems.extend(ds_problems)
    if problems:
        raise ConfigError(problems)
    result = Validated(recipe, args, resolved, warnings=problems.warnings)
    if plan:
        from vramfit.planner import plan_recipe

        result.plan = plan_recipe(recipe)
        if not force:
            refusal = fit_problems(result.plan, file, recipe)
            if refusal:
                raise ConfigError(refusal)
    return result


def fit_problems(plan, file: str, recipe) -> Problems:
    """The planner's verdict as problems: a recipe predicted not to fit is refused (unless --force)."""
    problems = Problems()
    first = next(iter(plan.fixes), None)
    fix = ("apply " + " ".join(f"{k}={v}" for k, v in first["overrides"].items())
           + f" (predicted {first['per_gpu_peak_gib']:.1f} GiB); see `vramfit plan` for all fixes, or pass --force.") if first else "see `vramfit plan`, or pass --force."
    if not plan.fits:
        problems.add(file, "hardware.gpu", f"predicted peak {plan.per_gpu_peak_gib:.1f} GiB per GPU exceeds the "
                     f"{plan.gpu_memory_gib:.1f} GiB of a {recipe.hardware.gpu}", fix)
    if not plan.host_ram_fits:
        problems.add(file, "hardware.host_ram_gib", f"predicted host RAM {plan.host_ram_gib:.0f} GiB per node exceeds "
                     f"{plan.host_ram_available_gib:.0f} GiB", fix)
    return problems
