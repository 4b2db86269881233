"""How often `vramfit doctor` gets kind, phase and first fix right on crash logs pasted in public issue threads.

    python benchmarks/doctor_corpus.py [-v] [--corpus tests/doctor/world]

Each `NAME.log` in the corpus is kept as published; `NAME.source.json` names the thread and says what it
concluded: the kind (cuda_oom, host_oom, shm_exhausted, nccl_timeout, other_error, unknown), the phase, and
the first fixes that fit (any one of them counts; null: no fix is due, as for a crash that is not about
memory; "host_ram_knob": any of the host-RAM knobs). Prints the three accuracies, the rows where all three
are right, and the crashes of the doctor itself (a traceback counts as wrong on every axis).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vramfit.doctor import diagnose  # noqa: E402

FORMS = ("overrides", "env", "deepspeed", "launch")
HOST_RAM_KNOBS = {
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "low_cpu_mem_usage",
    "zero3_init",
    "nproc_per_node",
    "zero_optimization.offload_param.pin_memory",
    "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_param.device",
    "zero_optimization.offload_optimizer.device",
    "deepspeed",
    "save_only_model",
    "--mem",
    "--shm-size",
}


def first_fix_keys(diagnosis) -> set[str] | None:
    if not diagnosis.fixes:
        return None
    first = next((fix for fix in diagnosis.fixes if fix.get("apply_first")), diagnosis.fixes[0])
    return {key for form in FORMS for key in first.get(form, {})}


def fix_right(expected, got: set[str] | None) -> bool:
    if expected is None:
        return got is None
    if got is None:
        return False
    wanted = set(expected)
    if "host_ram_knob" in wanted:
        wanted |= HOST_RAM_KNOBS

    def strip(keys):  # a launcher flag and its config name are one knob
        return {key.lstrip("-") for key in keys}

    return bool(strip(wanted) & strip(got))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(REPO / "tests" / "doctor" / "world"))
    parser.add_argument("-v", "--verbose", action="store_true", help="print every row that is not all right")
    args = parser.parse_args()
    rows = sorted(Path(args.corpus).glob("*.log"))
    counts = {"kind": 0, "phase": 0, "first_fix": 0, "all": 0}
    heldout = [0, 0]  # logs collected after the doctor was tuned on the rest: all three right, total
    rounds: dict[str, list[int]] = {}  # the same, per collection round named in the sidecar ("round 3", ...)
    crashes = []
    for log in rows:
        side = json.loads(log.with_name(log.stem + ".source.json").read_text())
        want = side["expected"]
        try:
            d = diagnose(log)
        except Exception:  # the doctor must never crash; count it and show where
            crashes.append((log.name, traceback.format_exc(limit=3)))
            continue
        got_fix = first_fix_keys(d)
        right = {"kind": d.kind == want["kind"], "phase": d.phase == want["phase"], "first_fix": fix_right(want["first_fix"], got_fix)}
        for axis, ok in right.items():
            counts[axis] += ok
        counts["all"] += all(right.values())
        if side.get("heldout"):
            heldout[0] += all(right.values())
            heldout[1] += 1
            named = re.search(r"\bround \d+", side["heldout"])
            tally = rounds.setdefault(named.group(0) if named else "rounds 1-2", [0, 0])
            tally[0] += all(right.values())
            tally[1] += 1
        if args.verbose and not all(right.values()):
            print(
                f"{log.stem}: kind {d.kind} (want {want['kind']}), phase {d.phase} (want {want['phase']}), "
                f"first fix {sorted(got_fix) if got_fix else None} (want {want['first_fix']})"
            )
    n = len(rows)
    print(f"world corpus: {n} logs from public issue threads ({args.corpus})")
    for axis in ("kind", "phase", "first_fix", "all"):
        label = "all three" if axis == "all" else axis
        print(f"  {label:<10} {counts[axis]:>3}/{n}  {100 * counts[axis] / max(n, 1):5.1f}%")
    print(f"  tracebacks {len(crashes):>3}")
    if heldout[1]:
        print(f"  held-out subset (collected after the changes; see its sidecars): all three {heldout[0]}/{heldout[1]}")
        for name, (good, total) in sorted(rounds.items()):
            print(f"    {name}: all three {good}/{total} now (first contact: see each sidecar's heldout note)")
    for name, text in crashes:
        print(f"--- {name}\n{text}")
    project()
    return 0


def project() -> None:
    """The project-written logs (tests/doctor/logs): kept as regression tests, not the measure."""
    logs = REPO / "tests" / "doctor" / "logs"
    expected = json.loads((REPO / "tests" / "doctor" / "expected.json").read_text())
    right = sum((d.kind, d.phase, d.cause) == (want["kind"], want["phase"], want["cause"]) for name, want in expected.items() for d in [diagnose(logs / name)])
    print(f"project-written logs (tests/doctor/logs, regression only): {right}/{len(expected)} kind+phase+cause as expected")


if __name__ == "__main__":
    sys.exit(main())
