"""Memory planner: per-GPU peak and host RAM before launch, explained, with the smallest fix.

`plan_recipe(recipe)` plans a loaded recipe (and searches fixes when it does not fit);
`plan(setup)` plans a `Setup` (from a recipe, a calibration scenario, or `--model-config` args).
The memory model and the source of every constant: docs/planner.md.
"""

from vramfit.planner.plan import Plan, plan, plan_args, plan_recipe
from vramfit.planner.setup import Setup

__all__ = ["Plan", "Setup", "plan", "plan_args", "plan_recipe"]
