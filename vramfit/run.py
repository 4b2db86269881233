"""`vramfit run`: validate, write the run directory, launch, and diagnose a failure."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

from vramfit import launch, libraries, multinode, outputs
from vramfit.checks.deepspeed_json import section
from vramfit.problems import EXIT_FAILED, EXIT_OK, ConfigError, Problem, Problems
from vramfit.supervise import STOP_GRACE_S, Launch, stream  # noqa: F401 (STOP_GRACE_S: part of run's interface)
from vramfit.validate import Validated, validate

RUN_FILES = ("recipe.json", "deepspeed.json", "launch.json", "env.json", "versions.json")


def default_run_dir(name: str, smoke: bool) -> Path:
    return Path("runs") / (f"{name}-smoke" if smoke else name)


def launch_env(validated: Validated) -> dict[str, str]:
    """Only what the recipe adds to the inherited environment (printed, saved, applied)."""
    recipe = validated.recipe
    env = dict(recipe.env)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if recipe.launcher in ("torchrun", "accelerate") and recipe.hardware.gpus_per_node > 1 and "OMP_NUM_THREADS" not in os.environ and not libraries.verbose():
        # What torchrun sets for each rank anyway (torch/distributed/run.py; `accelerate launch` runs it for
        # several processes), here so that it skips its 4-line banner saying so; under `vramfit -v` it says so.
        env.setdefault("OMP_NUM_THREADS", "1")
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
        "launch.json": {
            "argv": argv,
            "launcher": recipe.launcher,
            "nodes": topology.nodes,
            "gpus_per_node": topology.gpus_per_node,
            "node_rank": topology.node_rank,
        },
        "env.json": launch_env(validated),
        "versions.json": versions(),
    }
    for name, content in files.items():
        _write(run_dir / name, json.dumps(content, indent=2) + "\n")
    side = launch.side_files(recipe.launcher, topology, run_dir.resolve())
    for name, text in side.items():
        _write(run_dir / name, text)
    outputs.own(run_dir, written=[*files, *side], grown=["train.log", "output", "smoke", "hostfile", "smoke_model.json"])
    if run_dir.parent.name and run_dir.name.startswith("node"):
        outputs.own(run_dir.parent, grown=[run_dir.name])
    return argv


def _write(path: Path, text: str) -> None:
    """Write through a temporary sibling and a rename: a reader sees the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def claim_run_dir(rdir: Path, file: str, *, overwrite: bool, dry_run: bool, nodes: int = 1) -> None:
    """Refuse a run directory holding anything the runner did not write (ConfigError, exit 2)."""
    problems, note = outputs.claim(rdir, overwrite=overwrite, file=file, dry_run=dry_run)
    if not problems and rdir.is_dir():
        for node in (rdir / f"node{k}" for k in range(nodes if nodes > 1 else 0)):
            if node.is_dir():
                sub, _ = outputs.claim(node, overwrite=False, file=file, dry_run=True)
                problems.extend(sub)
    if problems:
        raise ConfigError(problems)
    if note:
        print(f"vramfit: {note}")


def print_dry_run(validated: Validated, argv: list[str], run_dir: Path) -> None:
    print(f"# vramfit dry run: {validated.recipe.name} ({validated.recipe.world_size} ranks)")
    print("\n## command (argv)")
    print(json.dumps(argv))
    print("\n## the same, quoted for a shell")
    print(shlex.join(argv))
    print("\n## environment (added to the inherited one)")
    for k, v in launch_env(validated).items():
        print(f"export {k}={shlex.quote(v)}")
    print('\n## resolved DeepSpeed JSON ("auto" filled as the transformers integration does)')
    print(json.dumps(validated.deepspeed, indent=2))
    print(f"\n# written to {run_dir}/ ({', '.join(RUN_FILES)})")


def gpus_present() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def diagnose(log_path: Path, recipe_name: str) -> None:
    try:
        from vramfit.doctor import diagnose as doctor_diagnose, render
    except ImportError:
        return
    diagnosis = doctor_diagnose(log_path)
    print("\n" + "=" * 80 + f"\nvramfit doctor on {log_path}:\n" + render(diagnosis), file=sys.stderr)


def run(
    target: str,
    overrides: list[str],
    dry_run: bool = False,
    smoke: bool = False,
    run_dir: str | None = None,
    force: bool = False,
    nodes: int | None = None,
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    hostfile: str | None = None,
    no_ssh: bool = False,
    join_timeout_s: int = 600,
    resume: bool = False,
    overwrite: bool = False,
) -> int:
    if smoke:
        return run_smoke(target, overrides, run_dir, nodes=nodes or 1, join_timeout_s=join_timeout_s, dry_run=dry_run, resume=resume, overwrite=overwrite)
    if nodes is not None:
        raise ConfigError(
            Problems(
                [
                    Problem(
                        "command line",
                        "--nodes",
                        "--nodes emulates nodes for the smoke variant only",
                        "set hardware.nodes in the recipe (or hardware.nodes=N) for a real run.",
                    )
                ]
            )
        )
    validated = validate(target, overrides, plan=True, force=force)
    recipe = validated.recipe
    rdir = Path(run_dir) if run_dir else default_run_dir(recipe.name, False)
    topo, problems = multinode.topology(
        recipe,
        str(recipe.source),
        node_rank=node_rank,
        master_addr=master_addr,
        master_port=master_port,
        hostfile=hostfile,
        no_ssh=no_ssh,
        join_timeout_s=join_timeout_s,
        run_id=recipe.name,
    )
    node_dir = _node_dir(rdir, topo)
    if dry_run:
        claim_run_dir(rdir, str(recipe.source), overwrite=overwrite, dry_run=True, nodes=topo.nodes)
        argv = write_run_dir(validated, node_dir, topo)
        print_dry_run(validated, argv, node_dir)
        for p in problems.items:
            print(f"# note for the real launch: {p}")
        return EXIT_OK
    have = gpus_present()
    if have < recipe.hardware.gpus_per_node:
        problems.add(
            str(recipe.source),
            "hardware.gpus_per_node",
            f"this machine has {have} GPUs, the recipe needs {recipe.hardware.gpus_per_node} x {recipe.hardware.gpu} per node",
            f"print what would run with `vramfit run {recipe.name} --dry-run`, or train the tiny smoke variant with `vramfit run {recipe.name} --smoke`.",
        )
    problems.extend(host_ram_preflight(validated, force))
    if problems:
        raise ConfigError(problems)
    claim_run_dir(rdir, str(recipe.source), overwrite=overwrite and not resume, dry_run=False, nodes=topo.nodes)
    validated = _guard_outputs(validated, target, overrides, rdir, resume, overwrite)
    argv = write_run_dir(validated, node_dir, topo)
    return _execute([Launch(argv, node_dir / "train.log")], launch_env(validated), recipe.name)


def _guard_outputs(validated: Validated, target, overrides: list[str], rdir: Path, resume: bool, overwrite: bool) -> Validated:
    """Refuse to mix with another run's checkpoints; on --resume, point the Trainer at the last complete one."""
    recipe = validated.recipe
    extra, problems, note = outputs.guard(recipe, rdir, resume=resume, overwrite=overwrite, world_size=recipe.world_size, file=str(recipe.source))
    if problems:
        raise ConfigError(problems)
    if note:
        print(f"vramfit: {note}")
    return validate(target, [*overrides, *extra], plan=False) if extra else validated


def host_ram_preflight(validated: Validated, force: bool) -> Problems:
    """With offload, the planner's host-RAM need against what this node has free right now."""
    problems = Problems()
    zero = section(validated.deepspeed, "zero_optimization")
    offloads = any(section(zero, k).get("device", "none") != "none" for k in ("offload_optimizer", "offload_param"))
    available = outputs.host_ram_available_gib()
    if not offloads or validated.plan is None or available is None or force:
        return problems
    need = validated.plan.host_ram_gib
    if need > available:
        problems.add(
            str(validated.recipe.source),
            "hardware.host_ram_gib",
            f"offload needs about {need:.0f} GiB of host RAM on this node, {available:.0f} GiB is available now "
            f"(/proc/meminfo MemAvailable); ranks would be killed by the kernel, often reported as a CUDA error",
            "free host memory, use a node with more RAM, offload less (deepspeed=deepspeed_configs/zero3_offload_optimizer.json), or pass --force.",
        )
    return problems


def _node_dir(rdir: Path, topo: launch.Topology) -> Path:
    """One folder of launch files per node (a shared filesystem holds them all); outputs are shared."""
    return rdir if topo.nodes == 1 else rdir / f"node{topo.node_rank}"


def _execute(launches: list[Launch], env: dict[str, str], name: str) -> int:
    for l in launches:
        print(f"vramfit: launching {l.prefix}{shlex.join(l.argv)}\nvramfit: log {l.log}", flush=True)
    started = time.monotonic()
    code = stream(launches, {**libraries.launcher_env(), **env})  # quiet launchers; the recipe's env wins
    from vramfit.train import summary  # the run summary: steps, loss, tokens/s, peak memory, checkpoint, next command

    if code == 0:
        summary.report(launches[0].log.parent, launches[0].log, code, time.monotonic() - started)
        return EXIT_OK
    if code >= 128:
        print(f"vramfit: stopped by signal {code - 128}; every rank was stopped.", file=sys.stderr)
        summary.report(launches[0].log.parent, launches[0].log, code, time.monotonic() - started)
        return code
    print(f"vramfit: the run failed (launcher exit code {code}).", file=sys.stderr)
    for l in launches:
        diagnose(l.log, name)
    summary.report(launches[0].log.parent, launches[0].log, code, time.monotonic() - started)
    return EXIT_FAILED


def run_smoke(
    target: str,
    overrides: list[str],
    run_dir: str | None,
    nodes: int = 1,
    join_timeout_s: int = 120,
    dry_run: bool = False,
    resume: bool = False,
    overwrite: bool = False,
) -> int:
    """The tiny variant of a recipe, through its real launcher and DeepSpeed JSON, on 2 ranks.

    nodes=2 emulates two nodes on this machine: two launcher processes (node ranks 0 and 1, one
    rank each) that rendezvous over loopback, as they would across hosts.
    """
    from vramfit.train import smoke

    base = validate(target, overrides, plan=False).recipe  # the user's input is checked before anything is written
    if nodes not in (1, 2):
        raise ConfigError(
            Problems([Problem("command line", "--nodes", f"the smoke variant runs on 1 or 2 nodes (got {nodes})", "use NODES=2 or leave it out.")])
        )
    rdir = Path(run_dir) if run_dir else default_run_dir(base.name, True)
    claim_run_dir(rdir, str(base.source), overwrite=overwrite and not resume, dry_run=dry_run, nodes=nodes)
    rdir = rdir.resolve()
    rdir.mkdir(parents=True, exist_ok=True)
    outputs.own(rdir, grown=["smoke", "smoke_model.json", "output", "hostfile", "node0", "node1"])
    cpu = gpus_present() < 2
    smoke_overrides = smoke.prepare(base, rdir, cpu=cpu)
    topology = ["hardware.nodes=2", "hardware.gpus_per_node=1", f"output_dir={rdir / 'output'}"] if nodes == 2 else []
    final = [*smoke_overrides, *overrides, *topology]  # the user's settings win over the smoke's defaults
    validated = validate(base.source, final, plan=False)
    recipe = validated.recipe
    if not dry_run:
        # The default smoke folder is scratch: an earlier smoke output is set aside (moved, not deleted).
        overwrite = overwrite or (run_dir is None and not resume)
        validated = _guard_outputs(validated, base.source, final, rdir, resume, overwrite)
    env = launch_env(validated)
    if cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # one GPU cannot host two ranks: run both on the CPU
    port = launch.free_port()
    launches = []
    hostfile = ""
    if nodes == 2 and recipe.launcher == "deepspeed":
        hostfile = str(rdir / "hostfile")
        Path(hostfile).write_text("127.0.0.1 slots=1\nlocalhost slots=1\n")
    for node_rank in range(nodes):
        topo = launch.Topology(
            nodes,
            recipe.hardware.gpus_per_node,
            node_rank=node_rank,
            master_port=port,
            run_id=f"{recipe.name}-smoke",
            hostfile=hostfile,
            join_timeout_s=join_timeout_s,
            no_ssh=True,
        )
        node_dir = _node_dir(rdir, topo)
        argv = write_run_dir(validated, node_dir, topo)
        launches.append(Launch(argv, node_dir / "train.log", f"[node{node_rank}] " if nodes > 1 else ""))
        if dry_run:
            print_dry_run(validated, argv, node_dir)
    if dry_run:
        return EXIT_OK
    return _execute(launches, env, recipe.name)
