"""One thing the review found, in the project's message format, and the order findings are shown in."""

from __future__ import annotations

from dataclasses import asdict, dataclass

SEVERITIES = ("error", "warning", "info")  # error: the run would fail or OOM


@dataclass
class Finding:
    severity: str
    file: str
    key: str  # as the user wrote it: --per_device_train_batch_size, micro_batch_size, zero_optimization.stage
    what: str
    fix: str = ""
    source: str = "validation"  # validation | planner | recipe-diff
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        head = f"{where}: {self.key}: " if self.key else f"{where}: "
        what = self.what if self.what.endswith((".", "?")) else self.what + "."
        return head + what + (f" Fix: {self.fix}" if self.fix else "")

    def to_dict(self) -> dict:
        return asdict(self)


def ordered(findings: list[Finding]) -> list[Finding]:
    """By severity, in the order found within one severity, without repeats."""
    seen, unique = set(), []
    for f in findings:
        if (f.severity, f.file, f.key, f.what) not in seen:
            seen.add((f.severity, f.file, f.key, f.what))
            unique.append(f)
    return sorted(unique, key=lambda f: SEVERITIES.index(f.severity))
