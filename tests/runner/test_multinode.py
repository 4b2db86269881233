"""Several nodes: preflight refusals, the rendered sbatch script, and a real two-node smoke run
over loopback (two launcher processes, one rank each), including a node that never arrives and a
node that dies."""

from __future__ import annotations

import io
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import psutil
import pytest

from vramfit.cli import main

REPO = Path(__file__).resolve().parents[2]
VRAMFIT = [sys.executable, "-m", "vramfit.cli"]
MULTI = "sharegpt4v-7b-16xa100-80g"  # the 2-node recipe (torchrun, c10d rendezvous)


def refused(capsys, *argv) -> str:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "nothing was launched or written" in err
    return err


def test_two_nodes_need_rank_and_master(tree, capsys):
    err = refused(capsys, "run", MULTI, "--force", "--run-dir", str(tree / "r"))
    assert "hardware.nodes: 2 nodes: each node's launcher needs --node-rank and --master-addr" in err
    assert not (tree / "r").exists()


def test_node_rank_out_of_range(tree, capsys):
    err = refused(capsys, "run", MULTI, "--force", "--node-rank", "2", "--master-addr", "10.0.0.1")
    assert "--node-rank 2 is outside 0..1" in err


def refused_hostfile(tree, capsys, text: str) -> str:
    """The 8-GPU recipe on 2 nodes with this hostfile: refused, and the error text."""
    hostfile = tree / "hostfile"
    hostfile.write_text(text)
    return refused(capsys, "run", "sharegpt4v-7b-8xa100-40g", "hardware.nodes=2", "gradient_accumulation_steps=2", "--force", "--hostfile", str(hostfile))


def test_hostfile_slots_and_hosts_checked(tree, capsys):
    err = refused_hostfile(tree, capsys, "node1 slots=8\nnode2 slots=4\nnode3 slots=8\n")
    assert "3 hosts, the recipe has hardware.nodes 2" in err
    assert "node2: slots=4, the recipe has hardware.gpus_per_node 8 (world size would be 20 instead of 16)" in err


def test_hostfile_syntax(tree, capsys):
    err = refused_hostfile(tree, capsys, "node1 gpus=8\nnode1 slots=8\n")
    assert "line 1: 'node1 gpus=8' is not `hostname slots=N`" in err


def test_master_port_in_use(tree, capsys):
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        err = refused(capsys, "run", MULTI, "--force", "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", str(port))
    assert f"port {port} is already in use" in err


def test_world_size_follows_the_batch_equation(tree, capsys):
    err = refused(capsys, "run", MULTI, "hardware.nodes=3", "--force", "--node-rank", "0", "--master-addr", "127.0.0.1")
    assert "8 x 1 x 24 = 192 != global_batch_size 128" in err


def test_slurm_nodes_must_match(tree, capsys, monkeypatch):
    monkeypatch.setenv("SLURM_NNODES", "4")
    monkeypatch.setenv("SLURM_NODEID", "0")
    err = refused(capsys, "run", MULTI, "--force", "--master-addr", "127.0.0.1")
    assert "Slurm allocated 4 nodes, the recipe needs 2" in err


def test_dry_run_of_node_one_renders_rendezvous(tree, capsys):
    assert main(["run", MULTI, "--dry-run", "--node-rank", "1", "--master-addr", "10.1.2.3", "--master-port", "29511", "--run-dir", str(tree / "r")]) == 0
    launch = json.loads((tree / "r" / "node1" / "launch.json").read_text())
    argv = launch["argv"]
    assert "--nnodes=2" in argv and "--node-rank=1" in argv and "--rdzv-backend=c10d" in argv
    assert "--rdzv-endpoint=10.1.2.3:29511" in argv


def cli(*argv: str) -> tuple[int, str, str]:
    """vramfit.cli.main in-process (the `tree` fixture is the working directory): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def sbatch(tree, *extra) -> str:
    code, out, err = cli("slurm", MULTI, *extra)
    assert code == 0, err
    return out


def test_sbatch_script_for_two_nodes(tree):
    text = sbatch(tree, "--time", "08:00:00", "--partition", "gpu")
    path = tree / "job.sbatch"
    path.write_text(text)
    directives = [l for l in text.splitlines() if l.startswith("#SBATCH")]
    options = dict(l[len("#SBATCH ") :].partition("=")[::2] for l in directives)
    assert options["--nodes"] == "2" and options["--gpus-per-node"] == "8" and options["--time"] == "08:00:00"
    assert options["--partition"] == "gpu"
    assert not any("$" in l for l in directives), "sbatch does not expand variables in #SBATCH lines"
    assert "set -euo pipefail" in text and "srun" in text and "scontrol show hostnames" in text
    assert "NCCL_SOCKET_IFNAME" in text  # network settings documented
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck); bash -n passed")
    check = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


def test_sbatch_refuses_bad_slurm_values(tree):
    code, out, err = cli("slurm", MULTI, "--time", "8 hours; rm -rf /")
    assert code == 2 and "is not a Slurm time" in err and out == ""


def test_sbatch_for_deepspeed_launcher_writes_hostfile(tree):
    assert "hostfile" not in sbatch(tree)  # the torchrun recipe rendezvouses without one
    code, text, err = cli("slurm", "sharegpt4v-7b-8xa100-40g", "hardware.nodes=2", "gradient_accumulation_steps=2", "--force")
    assert code == 0, err
    assert 'slots=8/" > "$run_dir/hostfile"' in text and "--no-ssh" in text


# --- real launches: two launcher processes on loopback, one rank each ---------------------------


def _smoke(tree, run_dir, *extra, recipe=MULTI, timeout=600):
    return subprocess.run(
        [*VRAMFIT, "run", recipe, "--smoke", "--nodes", "2", "--run-dir", str(run_dir), *extra], capture_output=True, text=True, cwd=tree, timeout=timeout
    )


def _losses(log: Path) -> list[float]:
    return [float(x) for x in re.findall(r"'loss': '?([0-9.]+)", log.read_text())]


# One recipe per engine: torchrun (c10d rendezvous), the DeepSpeed launcher in its per-node mode
# (hostfile + --no_ssh + --node_rank), accelerate with a two-machine config.
NODE_FLAG = {"sharegpt4v-7b-16xa100-80g": "--node-rank={}", "sharegpt4v-7b-8xa100-40g": "--node_rank={}", "axolotl-llama-3b-8xa100-80g": "--machine_rank={}"}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(NODE_FLAG), ids=["accelerate", "torchrun", "deepspeed"])
def test_two_node_smoke_run_agrees_on_the_loss(tree, recipe):
    run_dir = tree / "runs" / "two-nodes"
    result = _smoke(tree, run_dir, recipe=recipe)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for rank in (0, 1):
        launch = json.loads((run_dir / f"node{rank}" / "launch.json").read_text())
        assert NODE_FLAG[recipe].format(rank) in launch["argv"] and launch["nodes"] == 2
    metrics = [json.loads(l) for l in (run_dir / "output" / "metrics.jsonl").read_text().splitlines() if l.strip()]
    losses = [m["loss"] for m in metrics if "loss" in m]
    assert losses and all(l == l for l in losses)
    # Each node logs the same reduced loss: the data-parallel mean that both ranks computed.
    node_losses = [_losses(run_dir / f"node{r}" / "train.log") for r in (0, 1)]
    if node_losses[1]:
        assert node_losses[0] == node_losses[1]


@pytest.mark.slow
def test_a_node_that_never_arrives_fails_in_bounded_time(tree):
    run_dir = tree / "runs" / "alone"
    assert cli("run", MULTI, "--smoke", "--nodes", "2", "--dry-run", "--join-timeout", "15", "--run-dir", str(run_dir))[0] == 0
    argv = json.loads((run_dir / "node0" / "launch.json").read_text())["argv"]
    start = time.time()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=tree)
    elapsed = time.time() - start
    assert result.returncode != 0
    assert elapsed < 180, f"took {elapsed:.0f}s"
    assert re.search(r"Rendezvous|rendezvous|timed out|TimeoutError", result.stdout + result.stderr)


def _two_nodes_training(tree, name: str, *overrides: str) -> tuple[Path, list[subprocess.Popen]]:
    """Both nodes of the two-node smoke run started by hand (as on two hosts), once node 0 has logged a loss."""
    run_dir = tree / "runs" / name
    assert cli("run", MULTI, "--smoke", "--nodes", "2", "--dry-run", "max_steps=400", *overrides, "--run-dir", str(run_dir))[0] == 0
    procs = []
    for rank in (0, 1):
        argv = json.loads((run_dir / f"node{rank}" / "launch.json").read_text())["argv"]
        with open(run_dir / f"node{rank}" / "train.log", "wb") as log:
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=tree, start_new_session=True))
    deadline = time.time() + 300
    while time.time() < deadline and "loss" not in (run_dir / "node0" / "train.log").read_text():
        if procs[0].poll() is not None:
            for p in procs:
                kill_node(p)
            pytest.fail((run_dir / "node0" / "train.log").read_text()[-3000:])
        time.sleep(1)
    return run_dir, procs


# ddp_timeout bounds how long a rank waits in a collective for a peer that stopped answering: gloo
# often notices a dead peer's closed socket at once, but not always (a send already handed to the
# kernel waits for its timeout), so the bound a user can count on is this one. A hung rank is
# stopped, not its launcher: a stopped launcher may be the one hosting the rendezvous store (on
# loopback either node can be), and torch elastic's store timeouts are its own.
@pytest.mark.slow
@pytest.mark.parametrize("how", ["dies", "hangs"])
def test_a_node_that_dies_or_hangs_fails_the_other_within_ddp_timeout(tree, how):
    run_dir, procs = _two_nodes_training(tree, how, "ddp_timeout=45")
    node1 = [psutil.Process(procs[1].pid), *psutil.Process(procs[1].pid).children(recursive=True)]
    try:
        if how == "dies":
            kill_node(procs[1])
        else:  # node 1's rank stopped, its sockets open (a hung kernel, a stuck filesystem): only the timeout can tell
            for proc in node1[1:]:
                proc.suspend()
        start = time.time()
        code = procs[0].wait(timeout=240)
        elapsed = time.time() - start
        assert code != 0
        assert elapsed < 45 + 60, f"node 0 took {elapsed:.0f} s to fail with ddp_timeout=45"
        if how == "hangs":  # gloo words the same timeout two ways, by which side of the pair notices first
            log = (run_dir / "node0" / "train.log").read_text()
            assert re.search(r"Timed out waiting 45000ms|Application timeout caused pair closure", log), log[-2000:]
    finally:
        for proc in node1:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            kill_node(p)


def kill_node(launcher: subprocess.Popen) -> None:
    """What a node's death does: every process of it gone at once. torchrun starts each worker in a
    session of its own (torch/distributed/elastic/.../subprocess_handler.py: start_new_session=True),
    so killing the launcher's process group alone would leave the worker training."""
    try:
        tree = [psutil.Process(launcher.pid), *psutil.Process(launcher.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in tree:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    launcher.wait(timeout=30)


def test_fingerprint_covers_code_and_resolved_config(tmp_path):
    from vramfit.multinode import fingerprint

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "recipe.json").write_text('{"name": "x"}')
        (tmp_path / name / "deepspeed.json").write_text('{"zero_optimization": {"stage": 3}}')
    assert fingerprint(tmp_path / "a") == fingerprint(tmp_path / "b")
    (tmp_path / "b" / "deepspeed.json").write_text('{"zero_optimization": {"stage": 2}}')
    assert fingerprint(tmp_path / "a") != fingerprint(tmp_path / "b")
