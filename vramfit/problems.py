"""Collected configuration problems: gather them all, then fail once with exit code 2.

Every message follows one format so a reader can act on it without reading code:
    <file>: <dotted.key>: <what is wrong> (<the numbers>). Fix: <concrete edit>.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

# Exit codes, the same for every command (each --help and the README state them):
#   0 ok / fits, 1 does not fit or the run failed, 2 bad input (nothing launched or written),
#   3 incomplete (an answer was given but part of it could not be computed, e.g. an unknown model
#   in a review), 70 internal error (a bug in vramfit: one line and a bug-report hint, no traceback;
#   70 is EX_SOFTWARE in sysexits.h).
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INCOMPLETE, EXIT_INTERNAL = 0, 1, 2, 3, 70
RECIPE_TREE = "recipe-tree"  # rules that keep recipes/ tidy: naming, no personal paths in shared files


@dataclass(frozen=True)
class Problem:
    file: str
    key: str
    what: str
    fix: str
    severity: str = "error"  # "error" blocks a launch, "warning" does not
    rule: str = ""  # a family of checks a caller may leave out (RECIPE_TREE: the shared recipe tree's own)

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}: " if self.key else f"{self.file}: "
        tail = f" Fix: {self.fix}" if self.fix else ""
        what = self.what if self.what.endswith((".", "?")) else self.what + "."
        return f"{where}{what}{tail}"


@dataclass
class Problems:
    items: list[Problem] = field(default_factory=list)

    def add(self, file: str, key: str, what: str, fix: str = "", severity: str = "error", rule: str = "") -> None:
        p = Problem(str(file), key, what, fix, severity, rule)
        if p not in self.items:
            self.items.append(p)

    def extend(self, other: "Problems | list[Problem]") -> None:
        for p in other.items if isinstance(other, Problems) else other:
            if p not in self.items:
                self.items.append(p)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.items if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.items if p.severity != "error"]

    def __bool__(self) -> bool:
        return bool(self.errors)


class ConfigError(Exception):
    """Raised with every problem found; the CLI prints them all and exits 2."""

    def __init__(self, problems: Problems | list[Problem]):
        self.problems = problems if isinstance(problems, Problems) else Problems(list(problems))
        super().__init__("\n".join(str(p) for p in self.problems.items))


def did_you_mean(word: str, choices) -> str:
    """' Did you mean 'x'?' naming every equally close choice, in the order the choices come."""
    if len(word) > 100:  # difflib is quadratic: a 100 KB key would take minutes, and no name is that long
        return ""
    choices = list(dict.fromkeys(choices))
    scores = {c: difflib.SequenceMatcher(None, word, c).ratio() for c in choices}
    best = max(scores.values(), default=0)
    if best < 0.6:
        return ""
    close = [c for c in choices if scores[c] >= best - 0.02][:3]
    return " Did you mean " + " or ".join(f"'{c}'" for c in close) + "?"


def as_dicts(problems: "Problems | list[Problem]") -> list[dict]:
    items = problems.items if isinstance(problems, Problems) else list(problems)
    return [{"severity": p.severity, "file": p.file, "key": p.key, "what": p.what, "fix": p.fix, "text": str(p)} for p in items]


def render(problems: "Problems | list[Problem]", launched: bool = False) -> str:
    """The one text form every command prints its problems in (stderr)."""
    items = problems.items if isinstance(problems, Problems) else list(problems)
    errors = sum(p.severity == "error" for p in items)
    n = len(items)
    tail = "" if launched else ("; nothing was launched or written" if errors else "")
    lines = [f"vramfit: {n} problem{'s' if n != 1 else ''}{tail}."]
    lines += [f"  {'error' if p.severity == 'error' else 'warning'}: {p}" for p in items]
    return "\n".join(lines)


def report(problems: "ConfigError | Problems | list[Problem]", as_json: bool = False, code: int = EXIT_BAD_INPUT) -> int:
    """Print problems the one way (text on stderr; with --json one JSON object on stdout) and return the exit code."""
    import json
    import sys

    if isinstance(problems, ConfigError):
        problems = problems.problems
    if as_json:
        print(json.dumps({"exit_code": code, "problems": as_dicts(problems)}, indent=2))
    else:
        print(render(problems), file=sys.stderr)
    return code
