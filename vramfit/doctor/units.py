"""Sizes as PyTorch prints them, and as the doctor prints them back."""

from __future__ import annotations

import re

SIZE = r"(\d+(?:\.\d+)?\s*(?:bytes|B|KiB|MiB|GiB|TiB))"  # a regex group: "320.00 MiB", "0 bytes"
UNITS_PER_GIB = {"bytes": 2**30, "B": 2**30, "KiB": 2**20, "MiB": 1024, "GiB": 1, "TiB": 1 / 1024}


def to_gib(size: str) -> float:
    """'320.00 MiB' -> 0.3125."""
    number, unit = re.match(r"([\d.]+)\s*(\w+)", size).groups()
    return round(float(number) / UNITS_PER_GIB[unit], 6)


def gib(value: float) -> str:
    """0.6678 -> '683.81 MiB', 3.9 -> '3.90 GiB'."""
    return f"{value * 1024:.2f} MiB" if abs(value) < 1 else f"{value:.2f} GiB"
