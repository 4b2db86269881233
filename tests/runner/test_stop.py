"""Stopping a run is bounded: a launcher that hangs on SIGTERM, and ranks in sessions of their own,
are killed after the grace period or at a second signal. Uses stand-in launchers (plain Python) so
the timing is the runner's, not a training run's."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from vramfit.supervise import Launch, stream

# A launcher that ignores SIGTERM and starts one "rank" in a session of its own (as torchrun does)
# that ignores it too; the rank writes its pid once it is ready.
STUCK = r"""
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
rank = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.replace(sys.argv[1] + '.tmp', sys.argv[1]); "
        "time.sleep(600)")
subprocess.Popen([sys.executable, "-c", rank, sys.argv[1]], start_new_session=True)
print("launcher up", flush=True)
time.sleep(600)
"""


def _wait_file(path: Path, timeout: float = 60.0) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists():
            return int(path.read_text())
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def _signal_self_when_ready(pid_file: Path, times: int, gap_s: float = 0.5) -> None:
    def send():
        _wait_file(pid_file)
        time.sleep(1.0)  # let the runner record the rank (it looks every 2 s)
        for _ in range(times):
            time.sleep(gap_s + 1.5)
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send, daemon=True).start()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def stuck(tmp_path):
    pid_file = tmp_path / "rank.pid"
    launch = Launch([sys.executable, "-c", STUCK, str(pid_file)], tmp_path / "train.log")
    yield launch, pid_file
    for proc in psutil.process_iter(["cmdline"]):  # never leave the stand-ins behind, whatever the test did
        if str(pid_file) in " ".join(proc.info["cmdline"] or []):
            try:
                proc.kill()
            except psutil.Error:
                pass


def _stop(stuck, signals: int, grace_s: float) -> float:
    """Run the stuck launcher, signal this process `signals` times; the run's wall time, once checked."""
    launch, pid_file = stuck
    _signal_self_when_ready(pid_file, times=signals)
    start = time.monotonic()
    assert stream([launch], {}, stop_grace_s=grace_s) == 128 + signal.SIGTERM
    elapsed = time.monotonic() - start
    assert _gone(_wait_file(pid_file)), "the rank in its own session outlived the run"
    assert "launcher up" in launch.log.read_text()
    return elapsed


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
@pytest.mark.timeout(120)
def test_a_launcher_that_ignores_sigterm_is_killed_after_the_grace_period(stuck, capfd):
    elapsed = _stop(stuck, signals=1, grace_s=3.0)
    assert elapsed < 30, f"stopping took {elapsed:.1f} s with a 3 s grace period"
    assert "did not stop within 3 s of SIGTERM" in capfd.readouterr().err


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
@pytest.mark.timeout(120)
def test_a_second_signal_kills_at_once(stuck, capfd):
    elapsed = _stop(stuck, signals=2, grace_s=300.0)
    assert elapsed < 60, f"a second signal should not wait out the 300 s grace period ({elapsed:.1f} s)"
    assert "did not stop within" not in capfd.readouterr().err
