"""`vramfit list`, `show` and `cp`: the recipe index, read from the tree (no torch import).

`list` reads the recipe files as plain YAML (no schema, no rich): it answers in well under 0.3 s.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from vramfit.paths import all_recipe_files, find_recipe, recipes_dir, repo_root
from vramfit.problems import ConfigError, Problems

COLUMNS = ("recipe", "model", "method", "hardware", "GPUs", "ZeRO", "launcher")


def _section(doc, key: str) -> dict:
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


def _zero_of(ds_path: Path) -> str:
    from vramfit import inputs

    try:
        ds = inputs.load_json(ds_path, "deepspeed")
    except ConfigError:
        return "?"
    zero = _section(ds, "zero_optimization")
    offload = [part for part in ("optimizer", "param") if _section(zero, f"offload_{part}").get("device", "none") != "none"]
    return f"{zero.get('stage', 0)}" + (f" + offload {'/'.join(offload)}" if offload else "")


def zero_label(recipe) -> str:
    return _zero_of(recipe.path(recipe.deepspeed))


def _read(path: Path) -> dict:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return doc if isinstance(doc, dict) else {}


def rows() -> list[tuple[str, ...]]:
    """One row per recipe in the tree, read as plain YAML (`vramfit validate` judges the files)."""
    out = []
    for path in all_recipe_files():
        doc = _read(path)
        hw, model = _section(doc, "hardware"), _section(doc, "model")
        nodes, per_node = hw.get("nodes", 1), hw.get("gpus_per_node", "?")
        gpus = f"{nodes} x {per_node}" if nodes != 1 else f"{per_node}"
        ds = _zero_of((repo_root(path.parent) / str(doc.get("deepspeed", ""))).resolve()) if doc.get("deepspeed") else "?"
        out.append(
            (
                str(doc.get("name", path.parent.name)),
                str(model.get("id", "?")),
                str(doc.get("method", "?")),
                str(hw.get("gpu", "?")),
                gpus,
                ds,
                str(doc.get("launcher", "?")),
            )
        )
    return out


def markdown_table() -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows():
        lines.append("| " + " | ".join([f"[`{row[0]}`](recipes/{row[0]}/)", f"`{row[1]}`", *row[2:]]) + " |")
    return "\n".join(lines)


def print_table() -> None:
    table = [COLUMNS, *rows()]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def derived(r) -> list[tuple[str, str, str]]:
    """(name, value, how) for every number that follows from the recipe; library defaults read from the installed classes."""
    from vramfit.checks.recipe_rules import micro_and_accumulation
    from vramfit.libraries import argument_default, config_class_name, grpo_generation_batch, grpo_steps_per_generation

    t = r.training
    micro, accum = micro_and_accumulation(r)
    cls = config_class_name(r.method)

    def given(key: str) -> str:
        return "recipe" if key in t else f"{cls} default"

    rows = [
        ("ranks", str(r.world_size), f"{r.hardware.gpus_per_node} GPUs/node x {r.hardware.nodes} nodes"),
        ("micro-batch", str(micro), f"per_device_train_batch_size ({given('per_device_train_batch_size')})"),
        ("accumulation", str(accum), f"gradient_accumulation_steps ({given('gradient_accumulation_steps')})"),
    ]
    numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (micro, accum))
    if numbers:
        total = micro * accum * r.world_size
        verdict = "ok" if total == r.global_batch_size else f"BROKEN: recipe says global_batch_size {r.global_batch_size}"
        rows.append(("global batch", str(total), f"{micro} micro x {accum} accumulation x {r.world_size} ranks; {verdict}"))
        rows.append(("tokens/step", f"{total * r.data.max_length:,}", f"at most: global batch x data.max_length {r.data.max_length}"))
    if r.method == "grpo" and numbers:
        g = t.get("num_generations") or argument_default("grpo", "num_generations")
        steps = t.get("steps_per_generation")
        gen = grpo_generation_batch(micro, r.world_size, accum, steps, t.get("generation_batch_size"))
        how = (
            "generation_batch_size (recipe)"
            if t.get("generation_batch_size")
            else f"{micro} micro x {r.world_size} ranks x {grpo_steps_per_generation(accum, steps)} steps_per_generation"
        )
        rows.append(
            (
                "generation batch",
                str(gen),
                how
                + f"; num_generations {g} ({given('num_generations')})"
                + ("" if isinstance(g, int) and g and gen % g == 0 else f"; BROKEN: not divisible by {g}"),
            )
        )
        if isinstance(g, int) and g and gen % g == 0:
            rows.append(("prompts/generation", str(gen // g), f"generation batch / num_generations {g}"))
    rows.append(("learning rate", str(t.get("learning_rate", argument_default(r.method, "learning_rate"))), given("learning_rate")))
    precision = "bf16" if t.get("bf16") else "fp16" if t.get("fp16") else ("fp32" if "bf16" in t or "fp16" in t else "library default")
    rows.append(("precision", precision, "training.bf16 / training.fp16"))
    rows.append(("DeepSpeed", f"ZeRO {zero_label(r)}", r.deepspeed))
    rows.append(("launcher", r.launcher, f"{r.hardware.nodes} node(s) x {r.hardware.gpus_per_node} processes"))
    return rows


def show(target: str, overrides: list[str], as_json: bool = False) -> int:
    """The recipe as it will run (overrides applied), every derived number, the batch equation; 2 when it breaks."""
    from vramfit import recipe as recipe_mod
    from vramfit.checks.recipe_rules import batch_arithmetic, grpo_fix
    from vramfit.problems import EXIT_BAD_INPUT, EXIT_OK, as_dicts, report

    path = find_recipe(target)
    r = recipe_mod.load(path, overrides)
    file = _display(path)
    problems = Problems()
    batch_arithmetic(r, file, problems)
    rows = derived(r)
    if any(name == "generation batch" and "BROKEN" in how for name, _value, how in rows):
        problems.add(file, "training.num_generations", "TRL refuses a generation batch not divisible by num_generations", grpo_fix(r))
    if as_json:
        code = EXIT_BAD_INPUT if problems else EXIT_OK
        print(
            json.dumps(
                {
                    "exit_code": code,
                    "recipe": r.resolved_dict(),
                    "overrides": list(overrides),
                    "derived": [{"name": n, "value": v, "how": h} for n, v, h in rows],
                    "problems": as_dicts(problems),  # the shape every command's --json gives its problems
                },
                indent=2,
            )
        )
        return code
    if overrides:
        import yaml

        print(f"# {file} with {' '.join(overrides)} applied (resolved; comments are in the file)")
        print(yaml.safe_dump(r.resolved_dict(), sort_keys=False, width=120).rstrip())
    else:
        print(path.read_text().rstrip())
    print("\n# derived")
    for name, value, how in rows:
        print(f"{name:<19}= {value:<12} # {how}")
    if problems:
        return report(problems)
    return EXIT_OK


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def copy(target: str, new_name: str) -> Path:
    """Copy a recipe folder under a new name: all of it or nothing (a temporary sibling, then one rename)."""
    import os
    import tempfile

    from vramfit import recipe as recipe_mod

    source = find_recipe(target)
    problems = Problems()
    if len(new_name) > 100 or not recipe_mod.NAME_RE.match(new_name):
        problems.add(
            repr(new_name)[1:-1],
            "name",
            f"{new_name!r} does not follow <model>[-<method>]-[<N>x]<gpu>[-<variant>]",
            "use lower-case letters, digits, '.' and '-', e.g. vlm-r1-4xa100-40g.",
        )
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
        problems.add(
            str(dest),
            "",
            f"could not be copied ({exc.__class__.__name__}: {exc.strerror or exc}); nothing was left behind",
            "check free space and permissions of recipes/.",
        )
        raise ConfigError(problems) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
