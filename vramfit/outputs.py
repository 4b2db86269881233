"""A run's outputs: never overwritten by accident, resumed only from a complete checkpoint.

The Trainer writes `checkpoint-<step>/` folders. A rank killed while writing leaves a folder that
looks like a checkpoint and is not one, so the training entrypoint writes `COMPLETE` (JSON: step,
world size) into a checkpoint only after every rank has finished saving it (vramfit.train), and
resume looks for that marker alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

from vramfit.problems import ConfigError, Problems

MARKER = "COMPLETE"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def output_dir(recipe, run_dir: Path) -> Path:
    explicit = recipe.training.get("output_dir")
    return Path(explicit) if explicit else run_dir / "output"


def checkpoints(out: Path) -> list[Path]:
    found = [p for p in out.glob("checkpoint-*") if p.is_dir() and _CHECKPOINT.match(p.name)]
    return sorted(found, key=lambda p: int(_CHECKPOINT.match(p.name).group(1)))


def complete(checkpoint: Path) -> dict | None:
    """The checkpoint's COMPLETE marker, or None when it is missing or malformed (never trusted blindly)."""
    from vramfit import inputs

    try:
        data = inputs.load_json(checkpoint / MARKER, "marker")
    except ConfigError:
        return None
    if not isinstance(data, dict):
        return None
    step, world = data.get("step"), data.get("world_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (step, world)) or world < 1:
        return None
    return data


def skipped(out: Path) -> list[str]:
    """Checkpoints resume passes over, each with why (for the user to see)."""
    reasons = []
    for c in checkpoints(out):
        if not (c / MARKER).exists():
            reasons.append(f"{c.name}: no {MARKER} marker (a save that did not finish)")
        elif complete(c) is None:
            reasons.append(f"{c.name}: its {MARKER} marker is malformed")
        elif not loadable(c):
            reasons.append(f"{c.name}: marked complete, but a state file in it is empty or unreadable")
    return reasons


def loadable(checkpoint: Path) -> bool:
    """Cheap structural check that the files a resume loads are there and not truncated to nothing."""
    try:
        entries = list(checkpoint.iterdir())
    except OSError:
        return False
    for entry in entries:
        try:
            if entry.is_file() and entry.suffix in (".safetensors", ".bin", ".pt", ".pth") and entry.stat().st_size == 0:
                return False
            if entry.is_file() and entry.name == "trainer_state.json":
                from vramfit import inputs

                inputs.load_json(entry, "model-config")
        except (OSError, ConfigError):
            return False
    return True


def last_complete(out: Path) -> Path | None:
    done = [c for c in checkpoints(out) if complete(c) is not None and loadable(c)]
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
            problems.add(
                str(out), "--resume", f"no complete checkpoint to resume from{partial}", "start without --resume (add --overwrite to set old files aside)."
            )
            return [], problems, ""
        saved = complete(last)
        passed = [r for r in skipped(out) if int(_CHECKPOINT.match(r.split(":")[0]).group(1)) > int(_CHECKPOINT.match(last.name).group(1))]
        if saved.get("world_size") != world_size:
            problems.add(
                str(last),
                "hardware",
                f"saved by {saved.get('world_size')} ranks, this run has {world_size}; ZeRO optimizer partitions do not load on a different number of ranks",
                f"resume on {saved.get('world_size')} ranks, or convert with DeepSpeed's ds_to_universal.py and start from the universal checkpoint.",
            )
            return [], problems, ""
        note = f"resuming from {last} (step {saved.get('step')})"
        if passed:
            note += "; skipped the later " + "; ".join(passed)
        return [f"resume_from_checkpoint={last}"], problems, note
    foreign = foreign_entries(out) if out.is_dir() and not existing else []
    if foreign and not overwrite:
        problems.add(
            str(out),
            "training.output_dir",
            f"holds files vramfit did not write ({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); the Trainer's save would overwrite them",
            "use another output_dir (or --run-dir), or pass --overwrite to move the folder aside (nothing is deleted).",
        )
        return [], problems, ""
    if foreign:
        kept = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        out.rename(kept)
        own(out, trainer=True)
        return [], problems, f"--overwrite: the previous output folder was moved to {kept} (nothing deleted)"
    if existing:
        if not overwrite:
            problems.add(
                str(out),
                "training.output_dir",
                f"holds another run's checkpoints ({', '.join(c.name for c in existing[-3:])})",
                "pass --resume to continue it, --overwrite to set it aside and start fresh, or use another --run-dir.",
            )
            return [], problems, ""
        kept = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        out.rename(kept)
        own(out, trainer=True)
        return [], problems, f"--overwrite: the previous output was moved to {kept} (nothing deleted)"
    own(out, trainer=True)
    return [], problems, ""


# ---------------------------------------------------------------- what the runner owns

MANIFEST = ".vramfit-owned.json"  # in every folder the runner writes: the names it wrote, with their hashes


def _digest(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read(64 * 1024 * 1024)).hexdigest()
    except OSError:
        return None


def _manifest(folder: Path) -> dict:
    from vramfit import inputs

    try:
        data = inputs.load_json(folder / MANIFEST, "marker", limit=4 * 1024 * 1024)
    except ConfigError:
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("files"), dict) and isinstance(data.get("grown", []), list) else {}


def foreign_entries(folder: Path) -> list[str]:
    """Entries of a folder the runner did not write (or the user changed since): what must not be overwritten."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    owned = _manifest(folder)
    if owned.get("trainer") is True:
        return []  # an output folder vramfit created for the Trainer: everything in it is the run's
    files, grown = owned.get("files", {}), set(owned.get("grown", []))
    out = []
    for name in names:
        if name == MANIFEST or name in grown:
            continue
        if name not in files:
            out.append(name)
        elif files[name] is not None and files[name] != _digest(folder / name):
            out.append(f"{name} (changed since vramfit wrote it)")
    return out


def own(folder: Path, written: list[str] = (), grown: list[str] = (), trainer: bool = False) -> None:
    """Record files the runner wrote (hashed) and folders or logs it keeps writing to (not hashed)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = _manifest(folder) or {"files": {}, "grown": []}
    if trainer:
        data["trainer"] = True
    for name in written:
        data["files"][name] = _digest(folder / name)
    data["grown"] = sorted(set(data.get("grown", [])) | set(grown))
    tmp = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(folder / MANIFEST)


def claim(folder: Path, *, overwrite: bool, file: str, flag: str = "--run-dir", dry_run: bool = False) -> tuple[Problems, str]:
    """May the runner write into `folder`? Refused: a file, the filesystem root, home, the working
    directory or one above it, and a folder holding anything the runner did not write (unless
    --overwrite, which moves the folder aside, nothing deleted; never on a dry run)."""
    problems = Problems()
    try:
        resolved = folder.resolve()
        cwd = Path.cwd().resolve()
        exists, is_dir = folder.exists(), folder.is_dir()
    except (OSError, RuntimeError) as exc:
        problems.add(
            "command line", flag, f"'{str(folder)[:200]}' cannot be used ({exc.__class__.__name__}: {str(exc)[:120]})", "pass a short path to a new folder."
        )
        return problems, ""
    if len(str(resolved)) > 3000:
        problems.add("command line", flag, f"the path is too long ({len(str(resolved))} characters)", "pass a shorter path.")
        return problems, ""
    if resolved == Path(resolved.anchor) or resolved == Path.home().resolve() or resolved in (cwd, *cwd.parents):
        problems.add(
            "command line",
            flag,
            f"'{folder}' is {'the filesystem root' if resolved == Path(resolved.anchor) else 'your home or working directory (or one above it)'}; "
            "a run writes its files into a folder of its own",
            "pass a new folder, e.g. --run-dir runs/my-run.",
        )
        return problems, ""
    if exists and not is_dir:
        problems.add("command line", flag, f"'{folder}' is an existing file, not a folder", "pass a folder path (it is created if missing).")
        return problems, ""
    for parent in resolved.parents:
        if parent.exists() and not parent.is_dir():
            problems.add("command line", flag, f"'{parent}' is a file, so '{folder}' cannot be a folder", "pass a folder path.")
            return problems, ""
    if not exists:
        return problems, ""
    foreign = foreign_entries(folder)
    if not foreign:
        return problems, ""
    if overwrite and not dry_run:
        kept = folder.with_name(f"{folder.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        folder.rename(kept)
        return problems, f"--overwrite: the previous {folder} was moved to {kept} (nothing deleted)"
    problems.add(
        str(folder),
        flag,
        f"holds files vramfit did not write ({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); nothing was written over them",
        "pass a new folder with --run-dir" + ("" if dry_run else ", or --overwrite to move this one aside (nothing is deleted)") + ".",
    )
    return problems, ""


def host_ram_available_gib() -> float | None:
    """MemAvailable of this node, in GiB (Linux)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None
