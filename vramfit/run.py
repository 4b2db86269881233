"""`vramfit run`: validate, write the run directory, launch, and diagnose a failure."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from vramfit import launch, libraries, multinode, outputs
from vramfit.checks.deepspeed_json import section
from vramfit.problems import EXIT_FAILED, EXIT_OK, ConfigError, Problem, Problems
from vramfit.validate import Validated, validate

RUN_FILES = ("recipe.json", "deepspeed.json", "launch.json", "env.json", "versions.json")


def default_run_dir(name: str, smoke: bool) -> Path:
    return Path("runs") / (f"{name}-smoke" if smoke else name)


def launch_env(validated: Validated) -> dict[str, str]:
    """Only what the recipe adds to the inherited environment (printed, saved, applied)."""
    recipe = validated.recipe
    env = dict(recipe.env)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if (recipe.launcher == "torchrun" and recipe.hardware.gpus_per_node > 1 and "OMP_NUM_THREADS" not in os.environ
            and not libraries.verbose()):
        # What torchrun sets for each rank anyway (torch/distributed/run.py), here so that it skips its
        # 4-line banner saying so; under `vramfit -v` torchrun sets it and says so.
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
        "launch.json": {"argv": argv, "launcher": recipe.launcher, "nodes": topology.nodes,
                        "gpus_per_node": topology.gpus_per_node, "node_rank": topology.node_rank},
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
    print("\n## resolved DeepSpeed JSON (\"auto\" filled as the transformers integration does)")
    print(json.dumps(validated.deepspeed, indent=2))
    print(f"\n# written to {run_dir}/ ({', '.join(RUN_FILES)})")


def gpus_present() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


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
    procs = [subprocess.Popen(l.argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True) for l in launches]
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
                print(f"vramfit: a launcher did not stop within {stop_grace_s:.0f} s of SIGTERM; killing it and its ranks.",
                      file=sys.stderr, flush=True)
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


def diagnose(log_path: Path, recipe_name: str) -> None:
    try:
        from vramfit.doctor import diagnose as doctor_diagnose, render
    except ImportError:
        return
    diagnosis = doctor_diagnose(log_path)
    print("\n" + "=" * 80 + f"\nvramfit doctor on {log_path}:\n" + render(diagnosis), file=sys.stderr)


def run(target: str, overrides: list[str], dry_run: bool = False, smoke: bool = False, run_dir: str | None = None,
        force: bool = False, nodes: int | None = None, node_rank: int | None = None, master_addr: str | None = None,
        master_port: int | None = None, hostfile: str | None = None, no_ssh: bool = False, join_timeout_s: int = 600,
        resume: bool = False, overwrite: bool = False) -> int:
    if smoke:
        return run_smoke(target, overrides, run_dir, nodes=nodes or 1, join_timeout_s=join_timeout_s, dry_run=dry_run,
                         resume=resume, overwrite=overwrite)
    if nodes is not None:
        raise ConfigError(Problems([Problem("command line", "--nodes", "--nodes emulates nodes for the smoke variant only",
                                            "set hardware.nodes in the recipe (or hardware.nodes=N) for a real run.")]))
    validated = validate(target, overrides, plan=True, force=force)
    recipe = validated.recipe
    rdir = Path(run_dir) if run_dir else default_run_dir(recipe.name, False)
    topo, problems = multinode.topology(recipe, str(recipe.source), node_rank=node_rank, master_addr=master_addr,
                                        master_port=master_port, hostfile=hostfile, no_ssh=no_ssh,
                                        join_timeout_s=join_timeout_s, run_id=recipe.name)
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
        problems.add(str(recipe.source), "hardware.gpus_per_node",
                     f"this machine has {have} GPUs, the recipe needs {recipe.hardware.gpus_per_node} x {recipe.hardware.gpu} per node",
                     f"print what would run with `vramfit run {recipe.name} --dry-run`, or train the tiny smoke variant with `vramfit run {recipe.name} --smoke`.")
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
    extra, problems, note = outputs.guard(recipe, rdir, resume=resume, overwrite=overwrite,
                                          world_size=recipe.world_size, file=str(recipe.source))
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
        problems.add(str(validated.recipe.source), "hardware.host_ram_gib",
                     f"offload needs about {need:.0f} GiB of host RAM on this node, {available:.0f} GiB is available now "
                     f"(/proc/meminfo MemAvailable); ranks would be killed by the kernel, often reported as a CUDA error",
                     "free host memory, use a node with more RAM, offload less (deepspeed=deepspeed_configs/zero3_offload_optimizer.json), or pass --force.")
    return problems


def _node_dir(rdir: Path, topo: launch.Topology) -> Path:
    """One folder of launch files per node (a shared filesystem holds them all); outputs are shared."""
    return rdir if topo.nodes == 1 else rdir / f"node{topo.node_rank}"


def _execute(launches: list[Launch], env: dict[str, str], name: str) -> int:
    for l in launches:
        print(f"vramfit: launching {l.prefix}{shlex.join(l.argv)}\nvramfit: log {l.log}", flush=True)
    started = time.monotonic()
    code = stream(launches, env)
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


def run_smoke(target: str, overrides: list[str], run_dir: str | None, nodes: int = 1, join_timeout_s: int = 120,
              dry_run: bool = False, resume: bool = False, overwrite: bool = False) -> int:
    """The tiny variant of a recipe, through its real launcher and DeepSpeed JSON, on 2 ranks.

    nodes=2 emulates two nodes on this machine: two launcher processes (node ranks 0 and 1, one
    rank each) that rendezvous over loopback, as they would across hosts.
    """
    from vramfit.train import smoke

    base = validate(target, overrides, plan=False).recipe  # the user's input is checked before anything is written
    if nodes not in (1, 2):
        raise ConfigError(Problems([Problem("command line", "--nodes", f"the smoke variant runs on 1 or 2 nodes (got {nodes})", "use NODES=2 or leave it out.")]))
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
        topo = launch.Topology(nodes, recipe.hardware.gpus_per_node, node_rank=node_rank, master_port=port,
                               run_id=f"{recipe.name}-smoke", hostfile=hostfile, join_timeout_s=join_timeout_s, no_ssh=True)
        node_dir = _node_dir(rdir, topo)
        argv = write_run_dir(validated, node_dir, topo)
        launches.append(Launch(argv, node_dir / "train.log", f"[node{node_rank}] " if nodes > 1 else ""))
        if dry_run:
            print_dry_run(validated, argv, node_dir)
    if dry_run:
        return EXIT_OK
    return _execute(launches, env, recipe.name)
