"""A run's outputs: never overwritten by accident, resumed only from a complete checkpoint.

The Trainer writes `checkpoint-<step>/` folders. A rank killed while writing leaves a folder that
looks like a checkpoint and is not one, so the training entrypoint writes `COMPLETE` (JSON: step,
world size) into a checkpoint only after every rank has finished saving it (vramfit.train), and
resume looks for that marker alone.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from vramfit.problems import Problems

MARKER = "COMPLETE"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def output_dir(recipe, run_dir: Path) -> Path:
    explicit = recipe.training.get("output_dir")
    return Path(explicit) if explicit else run_dir / "output"


def checkpoints(out: Path) -> list[Path]:
    found = [p for p in out.glob("checkpoint-*") if p.is_dir() and _CHECKPOINT.match(p.name)]
    return sorted(found, key=lambda p: int(_CHECKPOINT.match(p.name).group(1)))


def complete(checkpoint: Path) -> dict | None:
    try:
        return json.loads((checkpoint / MARKER).read_text())
    except (OSError, ValueError):
        return None


def last_complete(out: Path) -> Path | None:
    done = [c for c in checkpoints(out) if complete(c) is not None]
    return done[-1] if done else None


def mark_complete(checkpoint: Path, step: int, world_size: int) -> None:
    """Write the marker atomically: a reader sees all of it or none of it."""
    tmp = checkpoint / f".{MARKER}.tmp"
    tmp.write_text(json.dumps({"step": step, "world_size": world_size, "time": time.time()}))
    tmp.replace(checkpoint / MARKER)


def guard(recipe, run_dir: Path, *, resume: bool, overwrite: bool, world_size: int, file: str) -> tuple[list[str], Problems, str]:
    """Decide what to do with an existing output directory.

    Returns the overrides to apply (resume_from_checkpoint=...), problems (refusals), and a note
    for the user (what was kept where).
    """
    problems = Problems()
    out = output_dir(recipe, run_dir)
    existing = checkpoints(out) if out.is_dir() else []
    if resume and overwrite:
        problems.add(file, "--resume", "--resume and --overwrite contradict each other", "pass one of them.")
        return [], problems, ""
    if resume:
        last = last_complete(out) if out.is_dir() else None
        if last is None:
            partial = f" ({len(existing)} incomplete: {', '.join(c.name for c in existing)})" if existing else ""
            problems.add(str(out), "--resume", f"no complete checkpoint to resume from{partial}",
                         "start without --resume (add --overwrite to set old files aside).")
            return [], problems, ""
        saved = complete(last)
        if saved.get("world_size") != world_size:
            problems.add(str(last), "hardware", f"saved by {saved.get('world_size')} ranks, this run has {world_size}; "
                         "ZeRO optimizer partitions do not load on a different number of ranks",
                         f"resume on {saved.get('world_size')} ranks, or convert with DeepSpeed's ds_to_universal.py and start from the universal checkpoint.")
            return [], problems, ""
        return [f"resume_from_checkpoint={last}"], problems, f"resuming from {last} (step {saved.get('step')})"
    if existing:
        if not overwrite:
            problems.add(str(out), "training.output_dir",
                         f"holds another run's checkpoints ({', '.join(c.name for c in existing[-3:])})",
                         "pass --resume to continue it, --overwrite to set it aside and start fresh, or use another --run-dir.")
            return [], problems, ""
        kept = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        out.rename(kept)
        return [], problems, f"--overwrite: the previous output was moved to {kept} (nothing deleted)"
    return [], problems, ""


def host_ram_available_gib() -> float | None:
    """MemAvailable of this node, in GiB (Linux)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None
