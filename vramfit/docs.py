"""Generated parts of the docs: the README recipe table and each recipe README's memory block.

python -m vramfit.docs          # rewrite them from the tree and the planner
python -m vramfit.docs --check  # exit 1 if any is stale (a test runs this)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from vramfit.paths import all_recipe_files, repo_root

TABLE = ("<!-- recipes:start -->", "<!-- recipes:end -->")
PLAN = ("<!-- plan:start -->", "<!-- plan:end -->")


def _replace(text: str, markers: tuple[str, str], body: str) -> str:
    start, end = markers
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    return pattern.sub(lambda _: f"{start}\n{body}\n{end}", text)


def plan_block(recipe) -> str:
    from vramfit.planner import plan_recipe

    plan = plan_recipe(recipe)
    hw = recipe.hardware
    lines = [
        f"Predicted by `vramfit plan {recipe.name}` (regenerate with `python -m vramfit.docs`):",
        "",
        f"- per GPU: **{plan.per_gpu_peak_gib:.1f} GiB** peak of {plan.gpu_memory_gib:.1f} GiB on a {hw.gpu} ({'fits' if plan.fits else 'DOES NOT FIT'})",
        f"- host RAM per node: **{plan.host_ram_gib:.0f} GiB** of {hw.host_ram_gib:.0f} GiB ({'fits' if plan.host_ram_fits else 'DOES NOT FIT'})",
        "",
        "| phase | GiB per GPU |",
        "|---|---|",
        *[f"| {phase} | {gib:.1f} |" for phase, gib in plan.phases.items()],
        "",
        "| component (peak phase) | GiB per GPU |",
        "|---|---|",
        *[f"| {name} | {gib:.2f} |" for name, gib in plan.breakdown.items()],
    ]
    measured = recipe.folder / "measured.json"
    if measured.is_file():
        data = json.loads(measured.read_text())
        lines += [
            "",
            f"Measured on {data.get('gpu', '?')} ({data.get('date', '?')}), {data.get('scope', 'one GPU')}: "
            f"{data.get('peak_allocated_gib', '?')} GiB allocated, {data.get('peak_reserved_gib', '?')} GiB reserved "
            "(benchmarks/gpu_memory.py; all cases in measured.json).",
        ]
    return "\n".join(lines)


def generated() -> dict[Path, str]:
    """Every generated file, with its up-to-date content."""
    from vramfit import recipe_index
    from vramfit.recipe import load

    root = repo_root()
    out = {}
    readme = root / "README.md"
    out[readme] = _replace(readme.read_text(), TABLE, recipe_index.markdown_table())
    for path in all_recipe_files():
        doc = path.parent / "README.md"
        if doc.is_file() and PLAN[0] in doc.read_text():
            out[doc] = _replace(doc.read_text(), PLAN, plan_block(load(path)))
    return out


def main(argv: list[str]) -> int:
    stale = []
    for path, content in generated().items():
        if path.read_text() != content:
            stale.append(path)
            if "--check" not in argv:
                path.write_text(content)
    if "--check" in argv and stale:
        print("stale generated docs (run `python -m vramfit.docs`): " + ", ".join(str(p) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
