"""`vramfit doctor LOG [--recipe RECIPE] [--json]`: the command-line face of the doctor.

`run` takes an optional `plan_fixes(recipe, [overrides, ...]) -> [(overrides, peak_gib, fits), ...]`
from the memory planner; with it and --recipe, each override fix is priced and the first that fits
(the fixes are already cheapest first) is marked to apply first.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, Optional

from vramfit.doctor import diagnose, render
from vramfit.doctor.diagnosis import Diagnosis
from vramfit.problems import ConfigError

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


def _host_plan(diagnosis: Diagnosis, recipe: str) -> None:
    """A host-RAM kill with --recipe: the planner's host-RAM figure for the recipe against the node's, and
    for each override fix, what it does to that figure."""
    try:
        from vramfit.paths import find_recipe
        from vramfit.planner.plan import plan_recipe
        from vramfit.problems import ConfigError
        from vramfit.recipe import load

        path = find_recipe(recipe)
        base = plan_recipe(load(path), fixes=False)
    except Exception as error:  # the recipe is the caller's input: say why it could not be priced, no traceback
        diagnosis.notes.append(f"{recipe}: the planner could not price host RAM ({str(error)[:160]}).")
        return
    node = base.host_ram_available_gib
    diagnosis.figures["planned_host_ram_gib"] = round(base.host_ram_gib, 2)
    against = f" against the node's {node:.0f} GiB" if node else " (the recipe does not give the node's host RAM)"
    diagnosis.notes.append(
        f"The planner puts {recipe} at {base.host_ram_gib:.1f} GiB of host RAM per node{against}"
        + (": it does not fit." if node and not base.host_ram_fits else ".")
    )
    for fix in diagnosis.fixes:
        if "overrides" not in fix:
            continue
        items = [f"{k}={'true' if v is True else 'false' if v is False else v}" for k, v in fix["overrides"].items()]
        try:
            planned = plan_recipe(load(path, items), fixes=False)
        except ConfigError:
            continue
        fix["predicted_host_ram_gib"] = round(planned.host_ram_gib, 2)
        fix["host_ram_fits"] = bool(planned.host_ram_fits)
        fix["why"] += f"; planner: host RAM {base.host_ram_gib:.1f} -> {planned.host_ram_gib:.1f} GiB per node"
    if node:  # for a host-RAM kill, the fix to apply first is the first that fits the node's RAM (and the GPU)
        for fix in diagnosis.fixes:
            fix.pop("apply_first", None)
        first = next((fix for fix in diagnosis.fixes if fix.get("host_ram_fits") and fix.get("fits", True)), None)
        if first is not None:
            first["apply_first"] = True


def _print(text: str) -> None:
    """Print the report; a reader that closed the pipe early (| head -1) has what it wanted."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's own flush at exit must not fail either


def run(args: argparse.Namespace, plan_fixes: Optional[PlanFixes] = None) -> int:
    if args.log == "-":
        diagnosis = diagnose(sys.stdin.buffer)
    else:
        path = Path(args.log)
        from vramfit.problems import Problem, report  # the one problem format of every command

        if os.path.isdir(path):  # os.path: False, not OSError, for a path too long (the input layer names it)
            return report([Problem(str(path), "", "is a directory, not a log", f"pass a log file, e.g. {path / 'train.log'}.")], args.json)
        try:
            diagnosis = diagnose(path)
        except ConfigError as error:  # the input layer: a FIFO, /dev/zero, a loop, a missing file, a path too long
            return report(error, args.json)
        except FileNotFoundError:
            return report([Problem(str(path), "", "no such file", "pass the path of the training log.")], args.json)
        except OSError as error:
            return report([Problem(str(path), "", f"cannot be read ({error.strerror or error})", "check the path and its permissions.")], args.json)
    try:
        if args.recipe and plan_fixes is not None:
            _plan(diagnosis, args.recipe, plan_fixes)
            if diagnosis.kind == "host_oom":
                _host_plan(diagnosis, args.recipe)
    finally:  # a recipe the planner rejects still gets the diagnosis printed; the error goes to the caller
        _print(diagnosis.to_json() if args.json else render(diagnosis))
    return 0
