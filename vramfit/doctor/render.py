"""The human report: a one-line verdict, then what ran out, where, why, and the fixes in order."""

from __future__ import annotations

import json

from vramfit.doctor.diagnosis import Diagnosis
from vramfit.doctor.units import gib

VERDICT = {
    "cuda_oom": "CUDA out of memory",
    "host_oom": "host RAM ran out: a rank was killed",
    "shm_exhausted": "shared memory (/dev/shm) ran out",
    "other_error": "the run failed, and not for memory",
    "nccl_timeout": "collective (NCCL / gloo) timed out or aborted",
    "collective_mismatch": "the ranks ran different collectives",
    "batch_mismatch": "DeepSpeed batch sizes do not multiply out",
    "config_mismatch": "DeepSpeed config disagrees with TrainingArguments",
    "grpo_divisibility": "GRPO batch does not divide into num_generations groups",
    "checkpointing_error": "gradient checkpointing failed under ZeRO-3 / reentrant autograd",
}
WHAT = {  # (label, what)
    "cuda_oom": ("What ran out", "GPU memory"),
    "host_oom": ("What ran out", "host RAM (the kernel killed a rank; no Python error is printed for that)"),
    "shm_exhausted": ("What ran out", "/dev/shm, the shared memory DataLoader workers and NCCL use (not GPU memory)"),
    "other_error": ("What failed", "a Python exception that is not about memory"),
    "nccl_timeout": ("What failed", "a collective operation between ranks"),
    "collective_mismatch": ("What failed", "collectives between ranks: their order or sizes differ"),
    "batch_mismatch": ("What failed", "DeepSpeed's batch check, before training"),
    "config_mismatch": ("What failed", "the DeepSpeed / TrainingArguments consistency check, before training"),
    "grpo_divisibility": ("What failed", "TRL's GRPO batch check, before training"),
    "checkpointing_error": ("What failed", "recomputing a checkpointed layer in backward"),
}
CAUSE = {
    "true_capacity": "true capacity",
    "fragmentation": "fragmentation",
    "evaluation_spike": "evaluation spike",
    "generation_rollout": "generation rollout",
    "host_ram": "host RAM",
    "configuration_error": "configuration error",
    "communication": "communication",
    "shared_memory": "shared memory",
    "not_memory": "not memory",
}
LOOKED_FOR = [
    "CUDA out of memory in every PyTorch format, CUDA error: out of memory, CUBLAS_STATUS_ALLOC_FAILED",
    "host RAM kills: exitcode -9 / Signal 9 (SIGKILL), 'Killed', DeepSpeed 'return code = -9', kernel and Slurm OOM-killer lines",
    "/dev/shm exhaustion: DataLoader bus errors, NCCL 'failed to extend /dev/shm'",
    "Python exceptions that are not about memory (reported as such)",
    "NCCL watchdog timeouts and aborted communicators",
    "collective mismatches between ranks (gloo's size check, TORCH_DISTRIBUTED_DEBUG=DETAIL reports)",
    "DeepSpeed's train_batch_size assertion and the DeepSpeed-vs-TrainingArguments mismatch error",
    "TRL's num_generations divisibility errors",
    "ZeRO-3 + reentrant gradient checkpointing errors",
]


PLATFORMS = {"rocm": "HIP (AMD GPU) out of memory", "npu": "NPU (Ascend) out of memory", "xpu": "XPU (Intel GPU) out of memory"}
FORMS = {"overrides": "", "env": "export ", "deepspeed": "in the DeepSpeed JSON set ", "launch": "launch with "}


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else str(v)


def edit(fix: dict) -> str:
    """The fix as the user would type it: 'per_device_train_batch_size=1 gradient_accumulation_steps=8'."""
    form = next(form for form in FORMS if form in fix)
    return FORMS[form] + " ".join(f"{k}={_value(v)}" for k, v in fix[form].items())


def _other(d: Diagnosis) -> str:
    return d.evidence[0]["text"][:160] if d.evidence else d.why[:160]


def _facts(d: Diagnosis) -> str:
    f = d.figures
    if d.kind == "cuda_oom":
        parts = [f"tried to allocate {gib(f['requested_gib'])}" if "requested_gib" in f else "no figures printed"]
        if "free_gib" in f:
            parts.append(f"{gib(f['free_gib'])} free" + (f" of {gib(f['total_gib'])}" if "total_gib" in f else ""))
        if "reserved_unallocated_gib" in f:
            parts.append(f"{gib(f['reserved_unallocated_gib'])} reserved but unallocated")
        return "; ".join(parts)
    if d.kind in ("other_error", "shm_exhausted"):
        return _other(d)
    if d.kind == "host_oom":
        held = f", the killed process held {gib(f['killed_rss_gib'])}" if "killed_rss_gib" in f else ""
        return f"SIGKILL{held}"
    numbers = {k: v for k, v in f.items() if k != "step"}
    if numbers:
        return ", ".join(f"{k}={v}" for k, v in numbers.items())
    return d.evidence[0]["text"][:100] if d.evidence else d.why[:100]


def _where(d: Diagnosis) -> str:
    parts = [d.phase.replace("_", " ") if d.phase != "unknown" else "an unknown phase"]
    if d.ranks:
        parts.append(f"rank{'s' if len(d.ranks) > 1 else ''} {', '.join(map(str, d.ranks))}")
    if "gpu" in d.figures:
        parts.append(f"GPU {d.figures['gpu']}")
    if "step" in d.figures:
        parts.append(f"step {d.figures['step']}")
    return ", ".join(parts)


def _nothing(d: Diagnosis) -> str:
    lines = [
        f"{d.source}: nothing recognised ({d.lines_read} lines read). Fix: pass the whole log of every rank, stderr included (2>&1), from launch to exit.",
        "",
        "Looked for:",
    ]
    lines += [f"  - {item}" for item in LOOKED_FOR]
    lines += [f"Note: {note}" for note in d.notes]
    return "\n".join(lines)


def render(d: Diagnosis) -> str:
    if d.kind == "unknown":
        return _nothing(d)
    first = next((fix for fix in d.fixes if fix.get("apply_first")), d.fixes[0] if d.fixes else None)
    said = VERDICT[d.kind]
    if d.kind == "cuda_oom" and d.figures.get("platform") in PLATFORMS:
        said = PLATFORMS[d.figures["platform"]]
    verdict = f"{d.source}: {said} in {_where(d)} ({_facts(d)})."
    if first:
        verdict += f" Fix: {edit(first)}."
    elif d.kind == "other_error":
        verdict += " No memory setting fixes this: fix the error the traceback names."
    else:
        verdict += " No setting fixes this; see the cause."
    label, what = WHAT[d.kind]
    if d.cause == "host_ram" and d.kind == "cuda_oom":
        what = "host RAM (pinned memory; reported as a CUDA error)"
    lines = [verdict, "", f"  {label + ':':<13} {what}", f"  Where:        {_where(d)}", f"  Cause:        {CAUSE[d.cause]}: {d.why}", ""]
    if d.fixes:
        lines.append("Fixes, cheapest first:")
        for number, fix in enumerate(d.fixes, 1):
            planned = ""
            if "predicted_peak_gib" in fix:
                verdict_word = "fits" if fix["fits"] else "does not fit"
                planned = f"   [planner: peak {fix['predicted_peak_gib']:.1f} GiB, {verdict_word}]"
            elif "fits" in fix:
                planned = "   [planner: does not apply to this recipe]"
            lines.append(f"  {number}. {edit(fix)}{planned}")
            lines.append(f"     why: {fix['why']}")
        if any("fits" in fix for fix in d.fixes):
            chosen = next((n for n, fix in enumerate(d.fixes, 1) if fix.get("apply_first")), None)
            lines.append(
                f"Apply first: fix {chosen}, the cheapest the planner says fits."
                if chosen
                else "None of the planned fixes fits on its own: combine them, or use more GPUs."
            )
        lines.append("")
    if d.notes:
        lines.append("Notes:")
        lines += [f"  - {note}" for note in d.notes]
        lines.append("")
    lines.append("Evidence:")
    lines += [f"  line {item['line']}: {item['text']}" for item in d.evidence]
    return "\n".join(lines)
