"""`vramfit doctor LOG [--recipe RECIPE] [--json]`: the command-line face of the doctor.

`run` takes an optional `plan_fixes(recipe, [overrides, ...]) -> [(overrides, peak_gib, fits), ...]`
from the memory planner; with it and --recipe, each override fix is priced and the first that fits
(the fixes are already cheapest first) is marked to apply first.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Optional

from vramfit.doctor import diagnose, render
from vramfit.doctor.diagnosis import Diagnosis

PlanFixes = Callable[[str, list], list]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", metavar="LOG", help="training log to read (all ranks, stderr included); - for stdin")
    parser.add_argument("--recipe", help="recipe the run used: price each fix with the memory planner")
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")


def _plan(diagnosis: Diagnosis, recipe: str, plan_fixes: PlanFixes) -> None:
    """Annotate override fixes with the planner's peak and verdict; mark the first that fits."""
    priced = [fix for fix in diagnosis.fixes if "overrides" in fix]
    if not priced:
        return
    results = plan_fixes(recipe, [fix["overrides"] for fix in priced])
    for fix, (overrides, peak, fits) in zip(priced, results):
        if peak is None:  # the fix does not apply to this recipe
            fix["fits"] = False
            continue
        if overrides != fix["overrides"]:  # rebased on the recipe's own batch numbers
            shown = " ".join(f"{k}={v}" for k, v in overrides.items())
            fix["why"] += f"; on {recipe} (its own per-device batch and accumulation) that is {shown}"
            fix["overrides"] = dict(overrides)
        fix["predicted_peak_gib"], fix["fits"] = round(float(peak), 2), bool(fits)
    first = next((fix for fix in priced if fix.get("fits")), None)
    if first is not None:
        first["apply_first"] = True


def run(args: argparse.Namespace, plan_fixes: Optional[PlanFixes] = None) -> int:
    if args.log == "-":
        diagnosis = diagnose(sys.stdin.buffer)
    else:
        path = Path(args.log)
        from vramfit.problems import Problem, report  # the one problem format of every command

        if path.is_dir():
            return report([Problem(str(path), "", "is a directory, not a log", f"pass a log file, e.g. {path / 'train.log'}.")], args.json)
        try:
            diagnosis = diagnose(path)
        except FileNotFoundError:
            return report([Problem(str(path), "", "no such file", "pass the path of the training log.")], args.json)
        except OSError as error:
            return report([Problem(str(path), "", f"cannot be read ({error.strerror or error})", "check the path and its permissions.")], args.json)
    try:
        if args.recipe and plan_fixes is not None:
            _plan(diagnosis, args.recipe, plan_fixes)
    finally:  # a recipe the planner rejects still gets the diagnosis printed; the error goes to the caller
        print(diagnosis.to_json() if args.json else render(diagnosis))
    return 0
