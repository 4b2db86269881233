"""Wall time of the everyday `vramfit` commands: the median of several runs of each, as a user types them.

    .venv/bin/python benchmarks/cli_speed.py [--runs 5] [--recipe vlm-r1-h20]

Each command runs in a fresh interpreter (that is what a user waits for). The first run of each
fills the user cache (library field tables) and is left out of the median: the targets are for a
warm cache. Targets (issue 19): --help and list <= 0.3 s, show and plan <= 1 s, validate <= 4 s.

The machine's 1-minute load average is printed before and after each command's runs: on a shared
machine the medians are only comparable at a similar load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VRAMFIT = [sys.executable, "-m", "vramfit.cli"]


def commands(recipe: str) -> list[tuple[str, list[str], float]]:
    return [
        ("vramfit --help", ["--help"], 0.3),
        ("vramfit list", ["list"], 0.3),
        (f"vramfit show {recipe}", ["show", recipe], 1.0),
        (f"vramfit show {recipe} per_device_train_batch_size=2", ["show", recipe, "per_device_train_batch_size=2"], 1.0),
        (f"vramfit plan {recipe}", ["plan", recipe], 1.0),
        (f"vramfit validate {recipe}", ["validate", recipe], 4.0),
    ]


# As a user's Python runs: bytecode cached in __pycache__ (gitignored). With PYTHONDONTWRITEBYTECODE set (as in
# some sandboxes) every vramfit module would be compiled on every run, about 10% of a warm `plan`.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([*VRAMFIT, *argv], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--recipe", default="vlm-r1-h20")
    options = parser.parse_args()
    print(f"cores {os.cpu_count()}; load = 1-minute load average before -> after each command's runs")
    print(f"{'command':<62} {'median s':>9} {'min s':>7} {'target':>7}  exit  {'load':>11}")
    for label, argv, target in commands(options.recipe):
        timed(argv)  # warm-up: page cache and the user cache
        load_before = os.getloadavg()[0]
        times, codes = [], set()
        for _ in range(options.runs):
            seconds, code = timed(argv)
            times.append(seconds)
            codes.add(code)
        median = statistics.median(times)
        mark = "ok" if median <= target else "SLOW"
        load = f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}"
        print(f"{label:<62} {median:>9.2f} {min(times):>7.2f} {target:>6.1f}s  {','.join(map(str, sorted(codes)))} {mark:<4} {load:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
