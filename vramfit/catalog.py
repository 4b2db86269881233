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
    from vramfit import inputs

    try:
        ds = inputs.load_json(recipe.path(recipe.deepspeed), "deepspeed")
    except ConfigError:
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
    """Copy a recipe folder under a new name: all of it or nothing (a temporary sibling, then one rename)."""
    import os
    import tempfile

    source = find_recipe(target)
    problems = Problems()
    if len(new_name) > 100 or not recipe_mod.NAME_RE.match(new_name):
        problems.add(repr(new_name)[1:-1], "name", f"{new_name!r} does not follow <model>[-<method>]-[<N>x]<gpu>[-<variant>]",
                     "use lower-case letters, digits, '.' and '-', e.g. vlm-r1-4xa100-40g.")
        raise ConfigError(problems)
    dest = recipes_dir() / new_name
    if dest.exists() or dest.is_symlink():
        problems.add(str(dest), "", "already exists; nothing was copied", "pick a new name or remove that folder yourself.")
    try:
        is_file = source.is_file()
    except OSError:
        is_file = False
    if not is_file:
        problems.add(str(source), "", "no such recipe", "see `vramfit list`.")
    if problems:
        raise ConfigError(problems)
    old = recipe_mod.load(source).name
    tmp = Path(tempfile.mkdtemp(prefix=f".{new_name}.", suffix=".tmp", dir=recipes_dir()))
    try:
        staged = tmp / new_name
        shutil.copytree(source.parent, staged, ignore=shutil.ignore_patterns("measured.json"), symlinks=True)
        for file in staged.iterdir():
            if file.suffix in (".yaml", ".sh", ".md") and file.is_file() and not file.is_symlink():
                file.write_text(re.sub(rf"\b{re.escape(old)}\b", new_name, file.read_text(encoding="utf-8")), encoding="utf-8")
        os.rename(staged, dest)  # atomic; fails (nothing copied) if dest appeared meanwhile
    except OSError as exc:
        problems.add(str(dest), "", f"could not be copied ({exc.__class__.__name__}: {exc.strerror or exc}); nothing was left behind",
                     "check free space and permissions of recipes/.")
        raise ConfigError(problems) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
