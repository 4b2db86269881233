"""Process supervision for `vramfit run`: each launcher in its own process group, its output teed to its
log, a signal passed on as SIGTERM and, past a grace period or on a second signal, SIGKILL to every process
under it (torchrun starts each rank in a session of its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Launch:
    argv: list[str]
    log: Path
    prefix: str = ""


STOP_GRACE_S = 60.0  # torchrun gives its workers 30 s after SIGTERM; past this a launcher is stuck


def stream(launches: list[Launch], env: dict[str, str], stop_grace_s: float = STOP_GRACE_S) -> int:
    """Run each launcher in its own process group, tee its output to its log, stop all on a signal.

    A signal (Ctrl-C, SIGTERM from the scheduler) is passed on as SIGTERM, so the launchers stop
    their ranks and flush what they can. A launcher still running `stop_grace_s` later, or a second
    signal, gets SIGKILL together with every process under it: torchrun starts each rank in a
    session of its own, out of reach of the launcher's process group.

    Returns the first non-zero exit code (the node that failed first), 0 when all succeed, or
    128 + signal when stopped.
    """
    procs = [subprocess.Popen(l.argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True) for l in launches]
    received: list[int] = []
    stop_at: float | None = None  # when the launchers were first told to stop
    under: dict[int, dict] = {p.pid: {} for p in procs}  # psutil processes seen under each launcher
    lock = threading.Lock()

    def stop_all(signum, _frame=None):
        nonlocal stop_at
        received.append(signum)
        stop_at = stop_at or time.monotonic()
        for proc in procs:
            _stop_tree(proc, under[proc.pid], signal.SIGTERM if len(received) == 1 else signal.SIGKILL)

    def pump(proc, launch_):
        with open(launch_.log, "ab") as log:
            for line in iter(proc.stdout.readline, b""):
                log.write(line)
                with lock:
                    try:
                        sys.stdout.buffer.write(launch_.prefix.encode() + line)
                        sys.stdout.flush()
                    except (OSError, ValueError, AttributeError):
                        pass  # the terminal or pipe went away: the log still gets every line

    previous = {s: signal.signal(s, stop_all) for s in (signal.SIGINT, signal.SIGTERM)}
    threads = [threading.Thread(target=pump, args=(p, l), daemon=True) for p, l in zip(procs, launches)]
    try:
        for t in threads:
            t.start()
        codes: list[int | None] = [None] * len(procs)
        first_failure = 0
        killed = False
        watched = 0.0
        while None in codes:
            if time.monotonic() - watched > 2.0:
                watched = time.monotonic()
                for proc in procs:
                    _watch(proc, under[proc.pid])
            for i, proc in enumerate(procs):
                if codes[i] is None and proc.poll() is not None:
                    codes[i] = proc.returncode
                    if proc.returncode != 0 and not first_failure:
                        first_failure = proc.returncode
                        if len(procs) > 1:  # one node failed: do not leave the others waiting on it
                            stop_at = stop_at or time.monotonic()
                            for other in procs:
                                _signal_group(other, signal.SIGTERM)
            if stop_at and not killed and time.monotonic() - stop_at > stop_grace_s:
                killed = True
                print(f"vramfit: a launcher did not stop within {stop_grace_s:.0f} s of SIGTERM; killing it and its ranks.", file=sys.stderr, flush=True)
                for i, proc in enumerate(procs):
                    if codes[i] is None:
                        _stop_tree(proc, under[proc.pid], signal.SIGKILL)
            time.sleep(0.1)
        for proc in procs:
            _reap_group(proc, under[proc.pid])
        for t in threads:
            t.join(timeout=5)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        return 128 + received[0]
    return first_failure


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _watch(proc: subprocess.Popen, seen: dict) -> None:
    """Remember every process under a launcher, so ranks it leaves behind can still be found."""
    import psutil

    try:
        for child in psutil.Process(proc.pid).children(recursive=True):
            seen.setdefault(child.pid, child)
    except psutil.Error:
        pass


def _stop_tree(proc: subprocess.Popen, seen: dict, sig: int) -> None:
    """Signal a launcher's group; with SIGKILL also every process seen under it (ranks in their own sessions)."""
    import psutil

    _watch(proc, seen)
    _signal_group(proc, sig)
    if sig == signal.SIGKILL:
        for child in seen.values():
            try:
                child.kill()  # psutil checks the process is the one seen, not a reused pid
            except psutil.Error:
                pass


def _reap_group(proc: subprocess.Popen, seen: dict, grace_s: float = 20.0) -> None:
    """Ranks that outlive their launcher are orphans: give them a grace period, then kill them."""
    deadline = time.time() + grace_s
    while time.time() < deadline:
        if not _alive_group(proc) and not any(_alive(child) for child in seen.values()):
            return
        time.sleep(0.2)
    _stop_tree(proc, seen, signal.SIGKILL)


def _alive_group(proc: subprocess.Popen) -> bool:
    try:
        os.killpg(proc.pid, 0)
        return True
    except ProcessLookupError:
        return False


def _alive(child) -> bool:
    import psutil

    try:
        return child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
