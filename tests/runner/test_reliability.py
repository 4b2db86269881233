"""The runner never makes a failure worse: literal arguments (no shell injection), outputs protected,
host RAM checked before offload, signals stop every rank, and a killed run resumes exactly."""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vramfit import outputs
from vramfit.cli import main

REPO = Path(__file__).resolve().parents[2]
VRAMFIT = [sys.executable, "-m", "vramfit.cli"]
NASTY = "x; touch CANARY1 && touch CANARY2 $(touch CANARY3) `touch CANARY4` 'q\" \n touch CANARY5"


def no_canary(root: Path) -> None:
    assert not list(root.rglob("CANARY*")), "a shell ran part of a value"


def test_values_reach_the_run_as_literals(tree, capsys):
    run_dir = tree / "r"
    assert main(["run", "vlm-r1-h20", f"run_name={NASTY}", f"env.NOTE={NASTY}", "--dry-run", "--run-dir", str(run_dir)]) == 0
    recipe = json.loads((run_dir / "recipe.json").read_text())
    assert recipe["training"]["run_name"] == NASTY and recipe["env"]["NOTE"] == NASTY
    launch = json.loads((run_dir / "launch.json").read_text())
    assert all(isinstance(a, str) for a in launch["argv"])
    no_canary(tree)


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
def test_launch_sh_passes_arguments_through_literally(tree):
    (tree / "Makefile").write_text("venv:\n\t@true\n")  # the copied tree uses this checkout's environment
    (tree / ".venv" / "bin").mkdir(parents=True)
    (tree / ".venv" / "bin" / "vramfit").symlink_to(Path(sys.executable).parent / "vramfit")
    result = subprocess.run(
        [str(tree / "recipes" / "vlm-r1-h20" / "launch.sh"), "--dry-run", "--run-dir", str(tree / "r"), f"run_name={NASTY}"],
        capture_output=True,
        text=True,
        cwd=tree,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((tree / "r" / "recipe.json").read_text())["training"]["run_name"] == NASTY
    no_canary(tree)


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
def test_rendered_sbatch_runs_values_literally(tree, capsys):
    assert main(["slurm", "sharegpt4v-7b-16xa100-80g", f"run_name={NASTY}"]) == 0
    script = capsys.readouterr().out
    bin_dir = tree / "stubs"
    bin_dir.mkdir()
    record = tree / "srun-argv.json"
    # srun: run the command once as node 0 after recording what it received; scontrol: one host.
    (bin_dir / "srun").write_text(f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
while args and args[0].startswith("--"):
    args = args[1:]
json.dump(args, open({str(record)!r}, "w"))
os.environ["SLURM_NODEID"] = "0"
os.execvp(args[0], args)
""")
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 127.0.0.1\n")
    for f in bin_dir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    job = tree / "job.sbatch"
    job.write_text(script.replace(f"--chdir={REPO}", f"--chdir={tree}"))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node[1-2]"}
    result = subprocess.run(["bash", str(job)], capture_output=True, text=True, cwd=tree, env=env, timeout=300)
    argv = json.loads(record.read_text())
    assert f"run_name={NASTY}" in argv  # one argument, byte for byte
    # The job reached the real runner, which refused (no GPUs here) after validating the literal value.
    assert "this machine has 0 GPUs" in result.stderr
    no_canary(tree)


def test_run_directory_keeps_everything_used(tree):
    assert main(["run", "vlm-r1-h20", "--dry-run", "--run-dir", str(tree / "r")]) == 0
    for name in ("recipe.json", "deepspeed.json", "launch.json", "env.json", "versions.json"):
        assert (tree / "r" / name).is_file()
    versions = json.loads((tree / "r" / "versions.json").read_text())
    assert versions["torch"].startswith("2.13.0") and versions["deepspeed"] == "0.19.8"
    assert json.loads((tree / "r" / "env.json").read_text())["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def _fake_checkpoint(out: Path, step: int, world: int | None) -> Path:
    ckpt = out / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"weights")
    if world is not None:
        outputs.mark_complete(ckpt, step, world)
    return ckpt


def test_output_guard(tmp_path):
    from vramfit.recipe import load

    recipe = load(REPO / "recipes" / "vlm-r1-h20" / "recipe.yaml")
    run_dir = tmp_path / "run"
    out = run_dir / "output"
    _fake_checkpoint(out, 10, 6)
    half = _fake_checkpoint(out, 20, None)  # killed while saving: no marker
    _, problems, _ = outputs.guard(recipe, run_dir, resume=False, overwrite=False, world_size=6, file="r")
    assert problems and "holds another run's checkpoints" in str(problems.items[0])
    extra, problems, note = outputs.guard(recipe, run_dir, resume=True, overwrite=False, world_size=6, file="r")
    assert not problems and extra == [f"resume_from_checkpoint={out / 'checkpoint-10'}"], "the half-written checkpoint-20 is skipped"
    _, problems, _ = outputs.guard(recipe, run_dir, resume=True, overwrite=False, world_size=4, file="r")
    assert "saved by 6 ranks, this run has 4" in str(problems.items[0])
    _, problems, note = outputs.guard(recipe, run_dir, resume=False, overwrite=True, world_size=6, file="r")
    assert not problems and "moved to" in note and not (out / "checkpoint-10").exists()
    assert outputs.foreign_entries(out) == [], "the fresh output folder is the run's own (the Trainer writes into it)"
    kept = next(run_dir.glob("output.replaced-*"))
    assert (kept / "checkpoint-10" / "model.safetensors").read_bytes() == b"weights" and (kept / half.name).is_dir()


def test_host_ram_preflight_refuses_offload(tree, capsys, monkeypatch):
    monkeypatch.setattr(outputs, "host_ram_available_gib", lambda: 20.0)
    code = main(["run", "tinychart-3b-8xa100-80g-offload", "--run-dir", str(tree / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "hardware.host_ram_gib: offload needs about" in err and "20 GiB is available now" in err
    assert not (tree / "r").exists()


def test_real_run_without_gpus_points_at_dry_run_and_smoke(tree, capsys):
    code = main(["run", "vlm-r1-h20", "--run-dir", str(tree / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "this machine has 0 GPUs, the recipe needs 6 x h20" in err
    assert "vramfit run vlm-r1-h20 --dry-run" in err and "vramfit run vlm-r1-h20 --smoke" in err
    assert not (tree / "r").exists()


# --- real smoke runs ------------------------------------------------------------------------------

SMOKE = "axolotl-llama-3b-8xa100-80g"


def _metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "output" / "metrics.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def _losses_by_step(run_dir: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in _metrics(run_dir) if "loss" in m}


def _start(tree, run_dir, *extra):
    """Output goes to a file: a pipe nobody reads fills at 64 KiB and blocks the launcher mid-shutdown."""
    console = open(tree / f"{run_dir.name}.console", "wb")
    proc = subprocess.Popen(
        [*VRAMFIT, "run", SMOKE, "--smoke", "--run-dir", str(run_dir), *extra], cwd=tree, stdout=console, stderr=subprocess.STDOUT, start_new_session=True
    )
    console.close()
    return proc


def _console(tree, run_dir) -> str:
    return (tree / f"{run_dir.name}.console").read_text(errors="replace")[-3000:]


def _children_of(run_dir: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(run_dir) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def _wait_for(predicate, timeout, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            return predicate()
        time.sleep(0.5)
    return False


@pytest.mark.slow
def test_sigterm_stops_every_rank(tree):
    run_dir = tree / "runs" / "term"
    proc = _start(tree, run_dir, "max_steps=500")
    assert _wait_for(lambda: len(_losses_by_step(run_dir)) >= 1, 300, proc), _console(tree, run_dir)
    os.kill(proc.pid, signal.SIGTERM)
    code = proc.wait(timeout=120)
    assert code == 128 + signal.SIGTERM
    assert _wait_for(lambda: not _children_of(run_dir), 30), f"orphans: {_children_of(run_dir)}"


RESUME_STEPS = ["max_steps=8", "save_steps=3", "save_total_limit=10", "logging_steps=1", "seed=7"]


@pytest.fixture(scope="module")
def uninterrupted_losses(tmp_path_factory) -> dict[int, float]:
    """The losses of the same 8-step run left alone: one run serves both kill modes (it reads nothing they write)."""
    import shutil

    own = tmp_path_factory.mktemp("uninterrupted")
    for name in ("recipes", "deepspeed_configs", "model_configs", "launch"):  # the `tree` fixture's copy
        shutil.copytree(REPO / name, own / name)
    full = own / "runs" / "full"
    result = subprocess.run([*VRAMFIT, "run", SMOKE, "--smoke", "--run-dir", str(full), *RESUME_STEPS], cwd=own, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    reference = _losses_by_step(full)
    assert sorted(reference) == list(range(1, 9))
    return reference


@pytest.mark.slow
@pytest.mark.parametrize("kill", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_killed_run_resumes_with_the_same_losses(tree, kill, uninterrupted_losses, capsys):
    steps = RESUME_STEPS
    reference = uninterrupted_losses

    cut = tree / "runs" / "cut"
    proc = _start(tree, cut, *steps)
    # Kill once checkpoint-3 is complete and training went on past it.
    assert _wait_for(lambda: outputs.complete(cut / "output" / "checkpoint-3") is not None and max(_losses_by_step(cut) or [0]) >= 4, 300, proc), _console(
        tree, cut
    )
    os.killpg(proc.pid, kill)
    proc.wait(timeout=120)
    assert _wait_for(lambda: not _children_of(cut), 30)
    # In-process: the refusal happens before anything is launched (the CLI's exit-code contract is tested as a subprocess in tests/robustness).
    assert main(["run", SMOKE, "--smoke", "--run-dir", str(cut), *steps]) == 2, "a second run must not reuse the folder silently"
    resumed = subprocess.run([*VRAMFIT, "run", SMOKE, "--smoke", "--resume", "--run-dir", str(cut), *steps], cwd=tree, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    last = outputs.last_complete(cut / "output")
    assert last.name == "checkpoint-8"
    after = {s: l for s, l in _losses_by_step(cut).items()}
    for step in range(4, 9):  # steps after the last complete checkpoint ran twice: the resumed values count
        assert math.isclose(after[step], reference[step], rel_tol=1e-4, abs_tol=1e-5), (step, after[step], reference[step])


def test_a_failed_run_is_diagnosed_under_the_failure(tmp_path, capfd):
    from vramfit.run import EXIT_FAILED, Launch, _execute

    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.25 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.22 GiB memory in use. "
        "Of the allocated memory 70.11 GiB is allocated by PyTorch, and 6.55 GiB is reserved by PyTorch but unallocated."
    )
    launcher = [sys.executable, "-c", f"import sys; print({oom!r}); sys.exit(1)"]
    code = _execute([Launch(launcher, tmp_path / "train.log")], {}, "vlm-r1-h20")
    err = capfd.readouterr().err
    assert code == EXIT_FAILED
    assert "the run failed (launcher exit code 1)" in err and "vramfit doctor on" in err
    assert "fragmentation" in err.lower() or "expandable_segments" in err
    assert "CUDA out of memory" in (tmp_path / "train.log").read_text()
