"""The transformers / TRL version a repository pins (requirements*.txt, setup.py, pyproject.toml beside
the launch script or in the folders above it), so a flag is judged under the version the script was
written for: a flag that version accepts and the installed one dropped is a note, not a fault."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PIN_FILES = ("requirements.txt", "setup.py", "pyproject.toml")
_PIN = re.compile(r"""["'\s^,]{pkg}(?:\[[\w,]+\])?\s*(==|>=|~=|<=)\s*([0-9][\w.]*)(?:\s*,\s*(<=|<)\s*([0-9][\w.]*))?""")


@dataclass
class Pin:
    package: str
    op: str
    version: str
    file: str  # where it was read, or "--transformers-version"
    upper: tuple[str, str] | None = None  # an upper bound beside a lower one (">=4.31,<4.36": ("<", "4.36"))

    @property
    def major(self) -> int:
        try:
            return int(self.version.split(".")[0])
        except ValueError:
            return 0

    def __str__(self) -> str:
        bound = f",{self.upper[0]}{self.upper[1]}" if self.upper else ""
        return f"{self.package}{self.op}{self.version}{bound}" + ("" if self.file.startswith("--") else f" ({self.file})")


def find_pin(script: Path, package: str = "transformers", levels: int = 5) -> Pin | None:
    pattern = re.compile(_PIN.pattern.format(pkg=re.escape(package)), re.IGNORECASE)
    folder = script.resolve().parent
    for _ in range(levels):
        names = (
            sorted(p.name for p in folder.glob("requirements*.txt"))
            + [n for n in PIN_FILES if n != "requirements.txt"]
            + sorted(f"requirements/{p.name}" for p in folder.glob("requirements/*.txt"))
        )
        for name in names:
            path = folder / name
            if not path.is_file():
                continue
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            found = pattern.search("\n" + text)
            if found:
                upper = (found.group(3), found.group(4)) if found.group(3) and found.group(1) in (">=", "~=") else None
                return Pin(package, found.group(1), found.group(2), str(path.name if folder == script.resolve().parent else path), upper)
        if folder.parent == folder:
            break
        folder = folder.parent
    return None
