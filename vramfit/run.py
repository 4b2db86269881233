"""`vramfit run`: validate, write the run directory, launch, and diagnose a failure."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from vramfit import launch
from vramfit.problems import EXIT_FAILED, EXIT_OK, ConfigError, Problems
from vramfit.validate import Validated, validate

RUN_FILES = ("recipe.json", "deepspeed.json", "launch.json", "env.json", "versions.json")


def default_run_dir(name: str, smoke: bool) -> Path:
    return Path("runs") / (f"{name}-smoke" if smoke else name)


def launch_env(validated: Validated) -> dict[str, str]:
    """Only what the recipe adds to the inherited environment (printed, saved, applied)."""
    env = dict(validated.recipe.env)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for name in ("torch", "deepspeed", "transformers", "accelerate", "trl", "peft", "liger-kernel", "bitsandbytes", "vramfit"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def write_run_dir(validated: Validated, run_dir: Path, topology: launch.Topology) -> list[str]:
    recipe = validated.recipe
    run_dir.mkdir(parents=True, exist_ok=True)
    argv = launch.argv(recipe.launcher, topology, run_dir.resolve())
    files = {
        "recipe.json": recipe.resolved_dict(),
        "deepspeed.json": validated.deepspeed,
        "launch.json": {"argv": argv, "launcher": recipe.launcher, "nodes": topology.nodes,
                        "gpus_per_node": topology.gpus_per_node, "node_rank": topology.node_rank},
        "env.json": launch_env(validated),
        "versions.json": versions(),
    }
    for name, content in files.items():
        (run_dir / name).write_text(json.dumps(content, indent=2) + "\n")
    for name, text in launch.side_files(recipe.launcher, topology, run_dir.resolve()).items():
        (run_dir / name).write_text(text)
    return argv


def print_dry_run(validated: Validated, argv: list[str], run_dir: Path) -> None:
    print(f"# vramfit dry run: {validated.recipe.name} ({validated.recipe.world_size} ranks)")
    print("\n## command (argv)")
    print(json.dumps(argv))
    print("\n## the same, quoted for a shell")
    print(shlex.join(argv))
    print("\n## environment (added to the inherited one)")
    for k, v in launch_env(validated).items():
        print(f"{k}={shlex.quote(v)}")
    print("\n## resolved DeepSpeed JSON (\"auto\" filled as the transformers integration does)")
    print(json.dumps(validated.deepspeed, indent=2))
    print(f"\n# written to {run_dir}/ ({', '.join(RUN_FILES)})")


def gpus_present() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def stream(argv: list[str], env: dict[str, str], log_path: Path) -> int:
    """Run the launcher in its own process group, tee its output to the log, stop it on a signal."""
    proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    received: list[int] = []

    def forward(signum, _frame):
        received.append(signum)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with open(log_path, "ab") as log:
            for line in iter(proc.stdout.readline, b""):
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
                log.write(line)
        code = _wait_group(proc)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        return 128 + received[0]
    return code


def _wait_group(proc: subprocess.Popen, grace_s: float = 20.0) -> int:
    code = proc.wait()
    deadline = time.time() + grace_s
    while time.time() < deadline:  # ranks that outlive the launcher are orphans: stop them
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return code


def diagnose(log_path: Path, recipe_name: str) -> None:
    try:
        from vramfit.doctor import diagnose as doctor_diagnose, render
    except ImportError:
        return
    diagnosis = doctor_diagnose(log_path)
    print("\n" + "=" * 80 + f"\nvramfit doctor on {log_path}:\n" + render(diagnosis), file=sys.stderr)


def run(target: str, overrides: list[str], dry_run: bool = False, smoke: bool = False, run_dir: str | None = None,
        force: bool = False) -> int:
    if smoke:
        return run_smoke(target, overrides, run_dir)
    validated = validate(target, overrides, plan=True, force=force)
    recipe = validated.recipe
    rdir = Path(run_dir) if run_dir else default_run_dir(recipe.name, False)
    topology = launch.Topology(recipe.hardware.nodes, recipe.hardware.gpus_per_node, master_port=launch.free_port())
    if dry_run:
        argv = write_run_dir(validated, rdir, topology)
        print_dry_run(validated, argv, rdir)
        return EXIT_OK
    have = gpus_present()
    if have < recipe.hardware.gpus_per_node:
        problems = Problems()
        problems.add(str(recipe.source), "hardware.gpus_per_node",
                     f"this machine has {have} GPUs, the recipe needs {recipe.hardware.gpus_per_node} x {recipe.hardware.gpu} per node",
                     f"print what would run with `vramfit run {recipe.name} --dry-run`, or train the tiny smoke variant with `vramfit run {recipe.name} --smoke`.")
        raise ConfigError(problems)
    argv = write_run_dir(validated, rdir, topology)
    return _execute(argv, launch_env(validated), rdir, recipe.name)


def _execute(argv: list[str], env: dict[str, str], rdir: Path, name: str) -> int:
    log_path = rdir / "train.log"
    print(f"vramfit: launching {shlex.join(argv)}\nvramfit: log {log_path}", flush=True)
    code = stream(argv, env, log_path)
    if code == 0:
        return EXIT_OK
    if code >= 128:
        print(f"vramfit: stopped by signal {code - 128}; every rank was stopped.", file=sys.stderr)
        return code
    print(f"vramfit: the run failed (launcher exit code {code}).", file=sys.stderr)
    diagnose(log_path, name)
    return EXIT_FAILED


def run_smoke(target: str, overrides: list[str], run_dir: str | None) -> int:
    """The tiny variant of a recipe, through its real launcher and DeepSpeed JSON, on 2 ranks."""
    from vramfit import smoke

    base = validate(target, overrides, plan=False).recipe  # the user's input is checked before anything is written
    rdir = (Path(run_dir) if run_dir else default_run_dir(base.name, True)).resolve()
    rdir.mkdir(parents=True, exist_ok=True)
    cpu = gpus_present() < 2
    smoke_overrides = smoke.prepare(base, rdir, cpu=cpu)
    validated = validate(base.source, [*overrides, *smoke_overrides], plan=False)
    topology = launch.Topology(1, validated.recipe.hardware.gpus_per_node, master_port=launch.free_port())
    argv = write_run_dir(validated, rdir, topology)
    return _execute(argv, launch_env(validated), rdir, validated.recipe.name)

