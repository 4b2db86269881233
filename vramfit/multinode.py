"""Several nodes: where this launcher sits, and the checks made before any multi-node launch.

The engines do the orchestration (torchrun's c10d rendezvous, the DeepSpeed launcher's hostfile,
accelerate's machine ranks, Slurm's srun); this module only decides the values they are given
and refuses inconsistent ones with exit 2 before anything starts.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

from vramfit.launch import Topology, free_port
from vramfit.problems import Problems


def read_hostfile(path: Path, problems: Problems) -> list[tuple[str, int]]:
    """DeepSpeed hostfile lines: `hostname slots=N` (comments and blank lines allowed)."""
    hosts: list[tuple[str, int]] = []
    from vramfit import inputs
    from vramfit.problems import ConfigError

    try:
        lines = inputs.read_text(path, "text").splitlines()  # a regular file, bounded, UTF-8 (a FIFO would never end)
    except ConfigError as error:
        problems.extend(error.problems)
        return hosts
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        slots = [p for p in parts[1:] if p.startswith("slots=")]
        if len(parts) != 2 or not slots or not slots[0][6:].isdigit():
            problems.add(str(path), f"line {number}", f"'{line}' is not `hostname slots=N`", "write one host per line: `node1 slots=8`.")
            continue
        if any(h == parts[0] for h, _ in hosts):
            problems.add(str(path), f"line {number}", f"host '{parts[0]}' is listed twice", "list each host once.")
        hosts.append((parts[0], int(slots[0][6:])))
    return hosts


def port_is_free(port: int, host: str = "0.0.0.0") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def topology(
    recipe,
    file: str,
    *,
    node_rank: int | None,
    master_addr: str | None,
    master_port: int | None,
    hostfile: str | None,
    no_ssh: bool,
    join_timeout_s: int,
    run_id: str,
) -> tuple[Topology, Problems]:
    """The launcher's place in the job, from flags, then Slurm's environment, then the recipe."""
    problems = Problems()
    hw = recipe.hardware
    env = os.environ
    if node_rank is None and "SLURM_NODEID" in env and hw.nodes > 1:
        node_rank = int(env["SLURM_NODEID"])
    if "SLURM_NNODES" in env and hw.nodes > 1 and int(env["SLURM_NNODES"]) != hw.nodes:
        problems.add(
            file,
            "hardware.nodes",
            f"Slurm allocated {env['SLURM_NNODES']} nodes, the recipe needs {hw.nodes}",
            f"submit with #SBATCH --nodes={hw.nodes}, or override hardware.nodes={env['SLURM_NNODES']} with a matching batch.",
        )
    topo = Topology(
        hw.nodes,
        hw.gpus_per_node,
        node_rank=node_rank or 0,
        master_addr=master_addr or "127.0.0.1",
        master_port=master_port or (29500 if hw.nodes > 1 else free_port()),
        run_id=run_id,
        hostfile=hostfile or "",
        join_timeout_s=join_timeout_s,
        no_ssh=no_ssh,
    )
    if hw.nodes == 1:
        return topo, problems
    if recipe.launcher == "deepspeed" and not no_ssh:
        if not hostfile:
            problems.add(
                file,
                "launcher",
                f"the DeepSpeed launcher needs a hostfile for {hw.nodes} nodes",
                f"pass --hostfile FILE with {hw.nodes} lines `host slots={hw.gpus_per_node}` (run on the first node only), or --no-ssh on every node with --node-rank.",
            )
    elif node_rank is None or master_addr is None:
        problems.add(
            file,
            "hardware.nodes",
            f"{hw.nodes} nodes: each node's launcher needs --node-rank and --master-addr",
            "run `vramfit run RECIPE --node-rank R --master-addr HOST` on every node, or submit `vramfit slurm RECIPE`.",
        )
    if node_rank is not None and not 0 <= node_rank < hw.nodes:
        problems.add(file, "hardware.nodes", f"--node-rank {node_rank} is outside 0..{hw.nodes - 1}", f"use a rank below {hw.nodes}.")
    if hostfile:
        hosts = read_hostfile(Path(hostfile), problems)
        if hosts and len(hosts) != hw.nodes:
            problems.add(
                hostfile,
                "",
                f"{len(hosts)} hosts, the recipe has hardware.nodes {hw.nodes}",
                f"list exactly {hw.nodes} hosts, or override hardware.nodes={len(hosts)} (and the batch to match).",
            )
        for host, slots in hosts:
            if slots != hw.gpus_per_node:
                problems.add(
                    hostfile,
                    host,
                    f"slots={slots}, the recipe has hardware.gpus_per_node {hw.gpus_per_node} "
                    f"(world size would be {sum(s for _, s in hosts)} instead of {recipe.world_size})",
                    f"set slots={hw.gpus_per_node} for {host}.",
                )
    if topo.node_rank == 0 and master_port and not port_is_free(master_port):
        problems.add(file, "--master-port", f"port {master_port} is already in use on this node", "pick a free port (e.g. --master-port 29600).")
    return topo, problems


def fingerprint(run_dir: Path) -> str:
    """A hash of the code and resolved config a rank is about to run; every rank must agree."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    for name in ("recipe.json", "deepspeed.json"):
        digest.update((run_dir / name).read_bytes())
    return digest.hexdigest()[:16]


def assert_same_everywhere(run_dir: Path) -> None:
    """Called by every rank after the process group starts: refuse to train on mixed code/configs."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    mine = fingerprint(run_dir)
    everyone: list[str] = [""] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if len(set(everyone)) > 1:
        groups = {h: [r for r, x in enumerate(everyone) if x == h] for h in set(everyone)}
        raise SystemExit(
            f"vramfit: ranks run different code or configs: {groups}. Fix: check out the same commit and run the same vramfit command on every node."
        )
