"""`vramfit list`, `show` and `cp`: the recipe index, read from the tree (no torch import)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from vramfit import recipe as recipe_mod
from vramfit.checks.deepspeed_json import section
from vramfit.checks.recipe_rules import micro_and_accumulation
from vramfit.paths import all_recipe_files, find_recipe, recipes_dir
from vramfit.problems import ConfigError, Problems

COLUMNS = ("recipe", "model", "method", "hardware", "GPUs", "ZeRO", "launcher")


def zero_label(recipe) -> str:
    try:
        ds = json.loads(recipe.path(recipe.deepspeed).read_text())
    except (OSError, json.JSONDecodeError):
        return "?"
    zero = section(ds, "zero_optimization")
    offload = [part for part in ("optimizer", "param") if section(zero, f"offload_{part}").get("device", "none") != "none"]
    return f"{zero.get('stage', 0)}" + (f" + offload {'/'.join(offload)}" if offload else "")


def rows() -> list[tuple[str, ...]]:
    out = []
    for path in all_recipe_files():
        r = recipe_mod.load(path)
        gpus = f"{r.hardware.nodes} x {r.hardware.gpus_per_node}" if r.hardware.nodes > 1 else f"{r.hardware.gpus_per_node}"
        out.append((r.name, r.model.id, r.method, r.hardware.gpu, gpus, zero_label(r), r.launcher))
    return out


def markdown_table() -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows():
        lines.append("| " + " | ".join([f"[`{row[0]}`](recipes/{row[0]}/)", f"`{row[1]}`", *row[2:]]) + " |")
    return "\n".join(lines)


def print_table() -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*COLUMNS, box=None, header_style="bold")
    for row in rows():
        table.add_row(*row)
    Console(width=160).print(table)


def show(target: str, overrides: list[str]) -> None:
    path = find_recipe(target)
    r = recipe_mod.load(path, overrides)
    print(path.read_text() if not overrides else "")
    micro, accum = micro_and_accumulation(r)
    print("# derived")
    print(f"ranks            = {r.hardware.gpus_per_node} GPUs/node x {r.hardware.nodes} nodes = {r.world_size}")
    print(f"global batch     = {micro} micro x {accum} accumulation x {r.world_size} ranks = {micro * accum * r.world_size}"
          f" (recipe: {r.global_batch_size})")
    print(f"DeepSpeed        = {r.deepspeed} (ZeRO {zero_label(r)})")
    if overrides:
        print("overrides        = " + " ".join(overrides))


def copy(target: str, new_name: str) -> Path:
    source = find_recipe(target)
    problems = Problems()
    if not recipe_mod.NAME_RE.match(new_name):
        problems.add(new_name, "name", f"'{new_name}' does not follow <model>[-<method>]-[<N>x]<gpu>[-<variant>]",
                     "use e.g. vlm-r1-4xa100-40g.")
    dest = recipes_dir() / new_name
    if dest.exists():
        problems.add(str(dest), "", "already exists; nothing was copied", "pick a new name or remove that folder yourself.")
    if not source.is_file():
        problems.add(str(source), "", "no such recipe", "see `vramfit list`.")
    if problems:
        raise ConfigError(problems)
    old = recipe_mod.load(source).name
    shutil.copytree(source.parent, dest, ignore=shutil.ignore_patterns("measured.json"))
    for file in dest.iterdir():
        if file.suffix in (".yaml", ".sh", ".md") and file.is_file():
            file.write_text(re.sub(rf"\b{re.escape(old)}\b", new_name, file.read_text()))
    return dest
