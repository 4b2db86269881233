"""Launch commands rendered from the templates under `launch/`, as argv lists (never shell strings)."""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vramfit import libraries
from vramfit.paths import repo_root


@dataclass
class Topology:
    """Where this launcher process sits. Single node unless nodes > 1."""

    nodes: int
    gpus_per_node: int
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    run_id: str = "vramfit"
    hostfile: str = ""
    join_timeout_s: int = 600
    no_ssh: bool = False

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def template(launcher: str) -> dict[str, Any]:
    from vramfit import inputs

    return inputs.load_yaml(repo_root() / "launch" / f"{launcher}.yaml", "launch-template")


def _values(topology: Topology, run_dir: Path) -> dict[str, Any]:
    return {
        "bin": str(Path(sys.executable).parent),
        "run_dir": str(run_dir),
        "nodes": topology.nodes,
        "gpus_per_node": topology.gpus_per_node,
        "world_size": topology.world_size,
        "node_rank": topology.node_rank,
        "master_addr": topology.master_addr,
        "master_port": topology.master_port,
        "run_id": topology.run_id,
        "hostfile": topology.hostfile,
        "join_timeout_s": topology.join_timeout_s,
        # the DeepSpeed launcher's own INFO lines (its default level) only under `vramfit -v`; on one node its
        # one warning is "Unable to find hostfile, will proceed with ... local resources only", which is the plan
        "ds_log_level": "info" if libraries.verbose() else ("error" if topology.nodes == 1 else "warning"),
    }


def _fill(item: Any, values: dict[str, Any]) -> Any:
    if isinstance(item, dict):
        return {k: _fill(v, values) for k, v in item.items()}
    if isinstance(item, str):
        filled = item.format(**values)
        whole = item.strip("{}")
        if item == "{" + whole + "}" and isinstance(values.get(whole), int):
            return values[whole]  # keep numbers numbers in rendered config files
        return filled
    return item


def argv(launcher: str, topology: Topology, run_dir: Path) -> list[str]:
    tmpl = template(launcher)
    mode = "single_node" if topology.nodes == 1 else ("multi_node_no_ssh" if topology.no_ssh and "multi_node_no_ssh" in tmpl else "multi_node")
    values = _values(topology, run_dir)
    return [str(_fill(item, values)) for item in tmpl[mode]]


def side_files(launcher: str, topology: Topology, run_dir: Path) -> dict[str, str]:
    """Config files a launcher reads (accelerate's YAML), keyed by file name in the run directory."""
    tmpl = template(launcher)
    if "config" not in tmpl:
        return {}
    config = _fill(tmpl["config"], _values(topology, run_dir))
    return {f"{launcher}.yaml": yaml.safe_dump(config, sort_keys=False)}
