"""`vramfit slurm RECIPE [key=value ...] > job.sbatch`: an sbatch script from the validated recipe."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from vramfit.paths import repo_root
from vramfit.problems import ConfigError, Problems
from vramfit.recipe import NAME_RE
from vramfit.validate import validate

_TIME = re.compile(r"\A(\d+-)?\d{1,3}(:\d{2}){0,2}\Z")  # \A...\Z: "$" would accept a trailing newline
_SLURM_NAME = re.compile(r"\A[A-Za-z0-9_.,+-]+\Z")


def render(
    target: str,
    overrides: list[str],
    *,
    time: str = "24:00:00",
    partition: str | None = None,
    account: str | None = None,
    master_port: int = 29500,
    join_timeout_s: int = 900,
    force: bool = False,
) -> str:
    validated = validate(target, overrides, plan=True, force=force)
    recipe = validated.recipe
    problems = Problems()
    if not _TIME.match(time):
        problems.add("command line", "--time", f"'{time}' is not a Slurm time", "use HH:MM:SS or D-HH:MM:SS.")
    for flag, value in (("--partition", partition), ("--account", account)):
        if value is not None and not _SLURM_NAME.match(value):
            problems.add("command line", flag, f"'{value}' is not a plain Slurm name", "use letters, digits, '-', '_', '.'.")
    if not NAME_RE.match(recipe.name):  # the name reaches #SBATCH lines and comments unquoted
        problems.add(
            str(recipe.source),
            "name",
            f"{recipe.name!r} does not follow <model>[-<method>]-[<N>x]<gpu>[-<variant>]",
            "use lower-case letters, digits, '.' and '-' only, e.g. vlm-r1-4xa100-40g.",
        )
    if problems:
        raise ConfigError(problems)
    hw = recipe.hardware
    extra = [f"#SBATCH --partition={partition}"] if partition else []
    extra += [f"#SBATCH --account={account}"] if account else []
    run_dir = f"runs/{recipe.name}"
    hostfile_lines, launcher_flags = "", ""
    if recipe.launcher == "deepspeed" and hw.nodes > 1:
        hostfile_lines = (
            'scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/$/ slots='
            + str(hw.gpus_per_node)
            + '/" > "$run_dir/hostfile"   # DeepSpeed per-node mode reads the world from it\n'
        )
        launcher_flags = ' --hostfile "$run_dir/hostfile" --no-ssh'
    values = {
        "NAME": recipe.name,
        "NODES": str(hw.nodes),
        "GPUS_PER_NODE": str(hw.gpus_per_node),
        "CPUS_PER_TASK": str(max(8, 8 * hw.gpus_per_node)),
        "MEM_GIB": str(int(hw.host_ram_gib * 0.95)),
        "TIME": time,
        "REPO": shlex.quote(str(repo_root(recipe.folder))),
        "EXTRA_SBATCH": "\n".join(extra),
        "VRAMFIT": shlex.quote(str(Path(sys.executable).parent / "vramfit")),
        "RUN_DIR": shlex.quote(run_dir),
        "MASTER_PORT": str(int(master_port)),
        "RECIPE": shlex.quote(recipe.name),
        "OVERRIDES": "".join(shlex.quote(o) + " " for o in overrides),
        "JOIN_TIMEOUT": str(int(join_timeout_s)),
        "HOSTFILE_LINES": hostfile_lines,
        "LAUNCHER_FLAGS": launcher_flags,
    }
    from vramfit import inputs

    text = inputs.read_text(repo_root() / "launch" / "slurm.sbatch", "launch-template")
    text = re.sub(r"@([A-Z_]+)@", lambda m: values[m.group(1)], text)
    return re.sub(r"\n{3,}", "\n\n", text)
