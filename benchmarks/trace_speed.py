"""Wall time of `vramfit plan RECIPE --trace` for every recipe, cold and warm (issue 13: a cold trace of
any recipe <= 30 s on this 2-core machine, warm <= 0.5 s).

Each recipe gets an empty cache folder of its own ($VRAMFIT_CACHE_DIR): the cold run builds every fact
the plan needs (library facts, parameter counts, the trace at two or more depths) and the warm run, the
same command again in a fresh process, reads them back. The times are of the whole command as a user
runs it (a fresh Python process, imports included). The last column is the plan's own line saying which
terms were traced and which were modelled.

Usage: python benchmarks/trace_speed.py [RECIPE ...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLD_TARGET_S, WARM_TARGET_S = 30.0, 0.5
WARM_RUNS = 3  # the warm figure is the fastest of these: the least disturbed by other work on the machine


def timed(recipe: str, cache: str) -> tuple[float, int, str]:
    env = {**os.environ, "VRAMFIT_CACHE_DIR": cache, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "vramfit.cli", "plan", recipe, "--trace"], cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    said = next((line for line in done.stdout.splitlines() if line.startswith("note: trace")), "note: trace: (no line)")
    return wall, done.returncode, said


def main(argv: list[str]) -> int:
    recipes = argv or sorted(p.name for p in (REPO / "recipes").iterdir() if (p / "recipe.yaml").exists())
    print(f"{'recipe':<34} {'cold s':>7} {'warm s':>7}  exit  what the plan says of the trace")
    worst_cold = worst_warm = 0.0
    for recipe in recipes:
        with tempfile.TemporaryDirectory(prefix="vramfit-trace-speed-") as cache:
            cold, rc, said = timed(recipe, cache)
            warm_runs = [timed(recipe, cache) for _ in range(WARM_RUNS)]
            warm, rc_warm = min(w for w, _, _ in warm_runs), max(r for _, r, _ in warm_runs)
        worst_cold, worst_warm = max(worst_cold, cold), max(worst_warm, warm)
        print(f"{recipe:<34} {cold:7.2f} {warm:7.2f}  {rc}/{rc_warm}   {said[len('note: trace: ') :][:100]}")
    print()
    print(f"slowest cold {worst_cold:.2f} s (target <= {COLD_TARGET_S:g} s): {'met' if worst_cold <= COLD_TARGET_S else 'MISSED'}")
    print(f"slowest warm {worst_warm:.2f} s (target <= {WARM_TARGET_S:g} s): {'met' if worst_warm <= WARM_TARGET_S else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
