"""Divisors of batch sizes, for the fixes that keep a global batch (checks, planner, doctor).

No imports: the doctor uses it and stays light."""

from __future__ import annotations


def divisors(n: int, up_to: int | None = None) -> list[int]:
    """The divisors of n (those <= up_to), ascending, in O(sqrt n) steps and never more than 10**6:
    a fuzzed global_batch_size=10**12 took minutes through a loop over every integer. For n above
    10**12 the divisors between 10**6 and n / 10**6 are skipped; no real batch is that large."""
    limit = n if up_to is None else min(n, up_to)
    found = set()
    d = 1
    while d * d <= n and d <= 10**6:
        if n % d == 0:
            found.update(x for x in (d, n // d) if x <= limit)
        d += 1
    return sorted(found)
