"""How long `vramfit fit` takes, and what it says about every recipe in the tree.

    .venv/bin/python benchmarks/fit_speed.py            # every recipe, warm (second run) and cold seconds
    .venv/bin/python benchmarks/fit_speed.py --compare  # plus: the recipe's own configuration vs fit's winner

Cold = the first search in this process (model summaries may come from the on-disk cache of
`vramfit.planner.params`); warm = the same search again. Target: warm <= 10 s per search on the
project's 2-core machine. --compare plans and times the recipe exactly as written (its own knobs) with
the same step-time model, so "predicted faster" is the model's word, not a measurement.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def fit_recipe(path: Path):
    from vramfit.fit.cli import build
    from vramfit.fit.search import search

    args = argparse.Namespace(
        items=[str(path)],
        model_config=None,
        gpu=None,
        gpus=None,
        nodes=None,
        method=None,
        seq_len=None,
        global_batch_size=None,
        host_ram_gib=None,
        write=None,
        data_format=None,
    )
    request = build(args)
    return request, search(request.base, request.global_batch, request.pins, request.base_knobs, request.label)


def own_time(request):
    from vramfit.fit import steptime
    from vramfit.planner import params
    from vramfit.planner.plan import plan

    s = request.base
    arch = params.summary(s.model_config)
    return plan(s), steptime.estimate(s, arch, params.count(arch, s))


def main(argv: list[str]) -> int:
    from vramfit import libraries
    from vramfit.paths import all_recipe_files

    libraries.quiet()
    compare = "--compare" in argv
    worst = 0.0
    print(
        f"{'recipe':<34} {'cold s':>7} {'warm s':>7} {'searched':>8} {'fit':>5}"
        + ("   recipe s/step -> fit s/step  winner (diff from the recipe)" if compare else "")
    )
    for path in all_recipe_files():
        t0 = time.perf_counter()
        fit_recipe(path)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        request, result = fit_recipe(path)
        warm = time.perf_counter() - t0
        worst = max(worst, warm)
        line = f"{path.parent.name:<34} {cold:>7.2f} {warm:>7.2f} {len(result.candidates):>8} {len(result.ranked):>5}"
        if compare:
            from vramfit.fit.search import _short

            p, t = own_time(request)
            win = result.winner
            if win is None:
                line += f"   {t.seconds:.2f} -> nothing fits"
            else:
                mark = "" if p.ok else " (recipe predicted NOT to fit)"
                line += (
                    f"   {t.seconds:>6.2f} -> {win.time.seconds:>6.2f} ({(win.time.seconds / t.seconds - 1) * 100:+.0f}%)  "
                    f"{_short(result.diff(win)) or '(the recipe itself)'}{mark}"
                )
        print(line, flush=True)
    print(f"slowest warm search: {worst:.2f} s (target <= 10 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
