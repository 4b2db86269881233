"""Wall time to plan every recipe in the tree in one process (target: <= 5 s on a 2-core machine).

Prints the time for a cold start (parameter-count cache empty: every model is built on the meta
device with transformers) and for a warm start (counts read from the cache), each in a fresh
process, plus the per-recipe verdicts of the warm run.

Usage: python benchmarks/planner_speed.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import time
t0 = time.perf_counter()
from vramfit.paths import all_recipe_files
from vramfit.planner import plan_recipe
from vramfit.recipe import load
for path in all_recipe_files():
    p = plan_recipe(load(path))
    print(f"  {path.parent.name:<34} {p.per_gpu_peak_gib:6.1f} of {p.gpu_memory_gib:5.1f} GiB per GPU "
          f"({'fits' if p.fits else 'DOES NOT FIT'}), host {p.host_ram_gib:6.1f} GiB ({'fits' if p.host_ram_fits else 'DOES NOT FIT'})")
print(f"TOTAL {time.perf_counter() - t0:.2f}")
"""


def timed(cache: str) -> tuple[float, float, str]:
    env = {**os.environ, "VRAMFIT_CACHE_DIR": cache, "PYTHONWARNINGS": "ignore"}
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - started
    inner = float(next(line for line in out.splitlines() if line.startswith("TOTAL")).split()[1])
    return wall, inner, "\n".join(line for line in out.splitlines() if not line.startswith("TOTAL"))


def main() -> int:
    with tempfile.TemporaryDirectory() as cache:
        cold_wall, cold_inner, _ = timed(cache)
        warm_wall, warm_inner, table = timed(cache)
    recipes = len(list((REPO / "recipes").glob("*/recipe.yaml")))
    print(f"planned {recipes} recipes in one process")
    print(table)
    print(f"cold cache: {cold_inner:.2f} s planning ({cold_wall:.2f} s with interpreter start)")
    print(f"warm cache: {warm_inner:.2f} s planning ({warm_wall:.2f} s with interpreter start)")
    print("target: <= 5 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
