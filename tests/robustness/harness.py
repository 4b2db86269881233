"""Helpers for the robustness tests: a sandboxed copy of the tree per case, and a runner that calls vramfit.cli.main in-process.

Each case asserts: the exit code is the expected one (and in the documented set), no traceback,
under its time limit (SIGALRM, so a blocking read is interrupted too), and no file outside the
paths the case allows was created, changed or removed."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREE = ("recipes", "deepspeed_configs", "model_configs", "launch")
DOCUMENTED = {0, 1, 2, 3, 70}
TIME_LIMIT_S = int(os.environ.get("VRAMFIT_CASE_LIMIT_S", "30"))  # lower it to survey an older tree quickly


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so the CLI's own handler does not swallow it."""


@contextmanager
def deadline(seconds: int):
    def fire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            out[os.path.relpath(path, root)] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return out


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float
    changed: list[str]


def invoke(tree: Path, argv: list[str], allowed: tuple[str, ...] = (), limit: int = TIME_LIMIT_S, stdin: bytes | None = None) -> Result:
    from vramfit.cli import main

    before = snapshot(tree)
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    start = time.monotonic()
    try:
        with deadline(limit), redirect_stdout(out), redirect_stderr(err):
            code = main(argv)
    finally:
        sys.stdin = saved_stdin
    seconds = time.monotonic() - start
    after = snapshot(tree)
    changed = sorted(
        k for k in set(before) | set(after) if before.get(k) != after.get(k) and not any(k == a or k.startswith(a.rstrip("/") + "/") for a in allowed)
    )
    return Result(code, out.getvalue(), err.getvalue(), seconds, changed)
