"""The contract every command keeps: documented exit codes, an internal error is one line (the traceback
only with -v or VRAMFIT_DEBUG=1), a reader that goes away (`| head -1`, a closed stdout) ends nothing
badly, and where a run writes (its own folders only; resume trusts no marker blindly; cp is atomic)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness import REPO

from vramfit import outputs
from vramfit.cli import build_parser, main
from vramfit.problems import EXIT_BAD_INPUT, EXIT_INTERNAL

VRAMFIT = [sys.executable, "-m", "vramfit.cli"]
COMMANDS = sorted(build_parser()._subparsers._group_actions[0].choices)


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_states_the_exit_codes(command, capsys):
    code = main([command, "--help"] if command else ["--help"])
    out = capsys.readouterr().out
    assert code == 0
    assert "exit codes:" in out and "70" in out and "2   bad input" in out, out[-600:]


def test_readme_states_the_exit_codes():
    readme = (REPO / "README.md").read_text()
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 70 |"):
        assert code in readme, code


def _boom(*_args, **_kwargs):
    raise KeyError("a bug")


def test_internal_error_is_one_line_with_a_hint(monkeypatch, capsys, sandbox):
    import vramfit.recipe_index

    monkeypatch.setattr(vramfit.recipe_index, "rows", _boom)
    code = main(["list"])
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL
    assert len(err.strip().splitlines()) == 1 and "internal error: KeyError" in err and "report it" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("how", ["-v", "VRAMFIT_DEBUG"])
def test_internal_error_traceback_on_request(how, monkeypatch, capsys, sandbox):
    import vramfit.recipe_index

    monkeypatch.setattr(vramfit.recipe_index, "rows", _boom)
    if how == "VRAMFIT_DEBUG":
        monkeypatch.setenv("VRAMFIT_DEBUG", "1")
    code = main(["-v", "list"] if how == "-v" else ["list"])
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL and "Traceback (most recent call last)" in err and "internal error: KeyError" in err


def _closed_reader(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Start the command with its stdout a pipe whose reader is already gone (`| head -0`)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([*VRAMFIT, *argv], stdout=write, stderr=subprocess.PIPE, cwd=cwd, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    finally:
        os.close(write)
    return proc


@pytest.mark.parametrize("argv", [["--help"], ["list"], ["doctor", "crash.log"]], ids=lambda a: " ".join(a))
def test_reader_gone(argv, sandbox):
    (sandbox / "crash.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n" * 50)
    proc = _closed_reader(argv, sandbox)
    err = proc.stderr.decode()
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == 0, (proc.returncode, err)


def test_head_one(sandbox):
    """`vramfit list | head -1`: exit status of vramfit 0, nothing on stderr."""
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {shlex_join(VRAMFIT)} list | head -1"], cwd=sandbox, capture_output=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.count(b"\n") == 1 and b"Traceback" not in proc.stderr, proc.stderr


def test_stdout_closed(sandbox):
    proc = subprocess.run(["bash", "-c", f"{shlex_join(VRAMFIT)} doctor crash.log >&-"], cwd=sandbox, capture_output=True, timeout=120)
    assert b"Traceback" not in proc.stderr and b"Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 2)


def shlex_join(argv):
    import shlex

    return shlex.join(argv)


# ------------------------------------------------------------------ where a run writes


def test_dry_run_twice_then_a_user_edit_refuses(sandbox, capsys):
    argv = ["run", "vlm-r1-h20", "--dry-run", "--run-dir", "runs/twice"]
    assert main(argv) == 0 and main(argv) == 0, "the runner's own files may be replaced"
    (sandbox / "runs/twice/env.json").write_text('{"MINE": "1"}\n')
    capsys.readouterr()
    assert main(argv) == EXIT_BAD_INPUT
    assert "env.json (changed since vramfit wrote it)" in capsys.readouterr().err
    assert (sandbox / "runs/twice/env.json").read_text() == '{"MINE": "1"}\n'


def test_output_dir_with_users_files_is_refused(tmp_path):
    from vramfit.recipe import load

    recipe = load(REPO / "recipes" / "vlm-r1-h20" / "recipe.yaml")
    out = tmp_path / "run" / "output"
    out.mkdir(parents=True)
    (out / "config.json").write_text('{"mine": true}')
    _, problems, _ = outputs.guard(recipe, tmp_path / "run", resume=False, overwrite=False, world_size=6, file="r")
    assert problems and "holds files vramfit did not write (config.json)" in str(problems.items[0])
    _, problems, note = outputs.guard(recipe, tmp_path / "run", resume=False, overwrite=True, world_size=6, file="r")
    assert not problems and "moved to" in note
    kept = next((tmp_path / "run").glob("output.replaced-*"))
    assert json.loads((kept / "config.json").read_text()) == {"mine": True}
    assert outputs.foreign_entries(out) == []


def _checkpoint(out: Path, step: int, marker: str | None, weights: bytes = b"weights") -> Path:
    ckpt = out / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(weights)
    if marker is not None:
        (ckpt / outputs.MARKER).write_text(marker)
    return ckpt


@pytest.mark.parametrize(
    "later",
    [
        "not json",
        "",
        '{"step": "ten", "world_size": 6}',
        '{"step": 30}',
        '{"step": 30, "world_size": 0}',
        "[1, 2]",
        '{"step": 30, "world_size": true}',
        '{"step": 30, "world_size": 6, "world_size": 6}',
        "\xff",
        "EMPTY-WEIGHTS",
    ],
)
def test_resume_skips_what_it_cannot_trust(later, tmp_path):
    from vramfit.recipe import load

    recipe = load(REPO / "recipes" / "vlm-r1-h20" / "recipe.yaml")
    out = tmp_path / "run" / "output"
    good = _checkpoint(out, 10, json.dumps({"step": 10, "world_size": 6}))
    if later == "EMPTY-WEIGHTS":
        _checkpoint(out, 30, json.dumps({"step": 30, "world_size": 6}), weights=b"")
    else:
        _checkpoint(out, 30, later)
    extra, problems, note = outputs.guard(recipe, tmp_path / "run", resume=True, overwrite=False, world_size=6, file="r")
    assert not problems and extra == [f"resume_from_checkpoint={good}"]
    assert "skipped the later checkpoint-30" in note, note


def test_cp_failure_leaves_nothing(sandbox, monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copytree", fail)
    code = main(["cp", "vlm-r1-h20", "vlm-r1-copy-h20"])
    assert code == EXIT_BAD_INPUT and "nothing was left behind" in capsys.readouterr().err
    assert sorted(p.name for p in (sandbox / "recipes").iterdir()) == sorted(p.name for p in (REPO / "recipes").iterdir())


def test_cp_partial_copy_leaves_nothing(sandbox, monkeypatch, capsys):
    real = shutil.copytree

    def half(src, dst, **kwargs):
        real(src, dst, **kwargs)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(shutil, "copytree", half)
    assert main(["cp", "vlm-r1-h20", "vlm-r1-copy-h20"]) == EXIT_BAD_INPUT
    assert not (sandbox / "recipes" / "vlm-r1-copy-h20").exists()
    assert not [p for p in (sandbox / "recipes").iterdir() if p.name.startswith(".")]


def test_inputs_refuse_fast(tmp_path):
    """The input layer's refusals, timed as a user would feel them (a 1 KB alias bomb in well under a second)."""
    import time

    from vramfit import inputs
    from vramfit.problems import ConfigError

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")))
    assert bomb.stat().st_size < 1200
    start = time.monotonic()
    with pytest.raises(ConfigError, match="expands to more than"):
        inputs.load_yaml(bomb, "recipe")
    assert time.monotonic() - start < 1.0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="named pipe"):
        inputs.read_text(fifo)
    long_line = tmp_path / "long.log"
    long_line.write_bytes(b"x" * (3 * inputs.MAX_LINE) + b"\nnext\n")
    with open(long_line, "rb") as stream:
        lines = list(inputs.bounded_lines(stream))
    assert [len(line) for line in lines] == [inputs.MAX_LINE + 1, 5]
