"""From the events in a log to one diagnosis: the root failure, its phase and its cause.

Root cause rules: a rank killed for host RAM beats everything (the CUDA message a sibling prints is
a symptom: pinned host buffers fail as CUDA errors, and the other ranks die with it); then the first
failure in the log; NCCL timeouts and aborts count only when nothing else failed, as they are usually
the other ranks waiting on the one that died.
"""

from __future__ import annotations

from vramfit.doctor import patterns as P
from vramfit.doctor.diagnosis import Diagnosis
from vramfit.doctor.phase import CONTEXT, phase_of
from vramfit.doctor.scan import Event, Scan
from vramfit.doctor.units import gib

PRIMARY = ("cuda_oom", "shm_exhausted", "collective_mismatch", "batch_mismatch", "config_mismatch", "grpo_divisibility", "checkpointing_error")
CONFIG_KINDS = ("batch_mismatch", "config_mismatch", "grpo_divisibility", "checkpointing_error")
EVIDENCE_CHARS = 400


def oom_numbers(event: Event) -> str:
    """'tried to allocate 3.90 GiB; 3.20 GiB free of 39.59 GiB; 28.77 GiB allocated, ...' as printed."""
    raw, f = event.raw, event.figures
    parts = []
    if "requested" in raw:
        parts.append(f"tried to allocate {raw['requested']}")
    if "free" in raw:
        parts.append(f"{raw['free']} free" + (f" of {raw['total']}" if "total" in raw else ""))
    held = []
    if "allocated" in raw:
        held.append(f"{raw['allocated']} allocated")
    if "reserved_unallocated_gib" in f:
        held.append(f"{raw.get('reserved_unallocated', gib(f['reserved_unallocated_gib']))} reserved but unallocated")
    if held:
        parts.append(", ".join(held))
    return "; ".join(parts) or "no figures printed"


def fragmented(f: dict) -> bool:
    """Reserved-but-unallocated memory could have held the request, and is a real share of the GPU."""
    spare, total = f.get("reserved_unallocated_gib"), f.get("total_gib")
    if spare is None or not total:
        return False
    requested = f.get("requested_gib", 0)
    if "free_gib" in f and spare + f["free_gib"] < requested:  # even one contiguous block could not serve it
        return False
    return spare > 0.05 * total or (spare >= requested and spare >= 0.02 * total)


def _root(scan: Scan, checkpointing: bool) -> Event | None:
    events = scan.events
    if events.get("host_oom"):
        return events["host_oom"][0]
    primaries = [e for kind in PRIMARY for e in events.get(kind, ()) if kind != "checkpointing_error" or checkpointing]
    if primaries:
        return min(primaries, key=lambda e: e.line)
    if events.get("nccl_timeout"):
        return events["nccl_timeout"][0]
    if scan.silent_kills and not scan.exceptions and not scan.tracebacks:
        return scan.silent_kills[0]  # ranks torn down, and none of them printed a Python error
    return scan.exceptions[0] if scan.exceptions else None


def _same(scan: Scan, root: Event) -> list[Event]:
    """The events of the root's kind (the root first among them)."""
    if root.kind == "other_error":
        return scan.exceptions
    if root.extra.get("silent"):
        return scan.silent_kills
    return scan.events.get(root.kind) or [root]


def _ranks(scan: Scan, root: Event) -> list[int]:
    ranks = {e.rank for e in _same(scan, root) if e.rank is not None}
    if not ranks and root.kind == "host_oom":
        ranks = {rank for rank, code in scan.failures if code == -9}
    if not ranks and scan.root_cause_rank is not None:
        ranks = {scan.root_cause_rank}
    return sorted(ranks)[:64]


def _evidence(scan: Scan, root: Event) -> list[dict]:
    """The root line first, then a few lines of the same failure and one of each other kind."""
    same = [e for e in _same(scan, root) if e is not root][:3]
    others = [kind_events[0] for kind, kind_events in scan.events.items() if kind != root.kind][:3]
    chosen = [root, *sorted([*same, *others], key=lambda e: e.line)]
    return [{"line": e.line, "text": e.text[:EVIDENCE_CHARS]} for e in chosen]


def _notes(scan: Scan, root: Event, ranks: list[int]) -> list[str]:
    notes = []
    who = f"rank {ranks[0]}" if ranks else "the failing rank"
    for kind, events in scan.events.items():
        if kind == root.kind or not events:
            continue
        first = events[0]
        where = f"line {first.line}" + (f", rank {first.rank}" if first.rank is not None else "")
        if root.kind == "host_oom" and kind == "cuda_oom":
            notes.append(
                f"The CUDA out-of-memory message ({where}) is a symptom: a rank was SIGKILLed for host RAM, and pinned host allocations fail as CUDA errors."
            )
        elif kind == "nccl_timeout":
            notes.append(f"{len(events)} NCCL timeout/abort line(s) from {where} on are the other ranks waiting on {who}, which had already failed.")
        else:
            notes.append(f"Also seen: {kind} ({where}): later or secondary to the root failure.")
    cascade = sorted({rank for rank, code in scan.failures if code != -9} - set(ranks))
    if cascade:
        notes.append(f"torchrun's ChildFailedError lists ranks {cascade} with other exit codes: the cascade after the first failure.")
    return notes


def _eval_step(phase: str, step: int | None, settings: dict) -> bool:
    """An OOM at a step that is a multiple of eval_steps, with training steps fine before it."""
    every = settings.get("eval_steps")
    return phase in ("unknown", "forward") and bool(step) and bool(every) and step % every == 0 and settings.get("eval_strategy", "steps") != "no"


def _pinned(event: Event) -> bool:
    return "requested" not in event.raw and (bool(P.PINNED.search(event.text)) or any(P.PINNED.search(func) for _, func in event.frames))


def _configuration(root: Event) -> str:
    f, text = root.figures, root.text[:200]
    if root.kind == "batch_mismatch":
        run = f["micro_batch_per_gpu"] * f["gradient_accumulation_steps"] * f["world_size"]
        return (
            f"DeepSpeed requires train_batch_size = micro batch x accumulation x world size: "
            f"{f['train_batch_size']} != {f['micro_batch_per_gpu']} x {f['gradient_accumulation_steps']} x "
            f"{f['world_size']} = {run}"
        )
    if root.kind == "config_mismatch":
        items = "; ".join(f"ds {k}={v} vs hf {hk}={hv}" for k, v, hk, hv in root.extra.get("items", []))
        return f"explicit values in the DeepSpeed JSON disagree with TrainingArguments ({items or text})"
    if root.kind == "grpo_divisibility":
        return f"GRPO scores completions in groups of num_generations, so the batch must divide into them: {text}"
    return (
        f"reentrant gradient checkpointing re-runs the forward during backward without ZeRO-3's parameter gathering (or with inputs that need no grad): {text}"
    )


def _cause(root: Event, figures: dict, phase: str, settings: dict, by_step: bool) -> tuple[str, str]:
    """(cause, why) for the root event."""
    f, kind = figures, root.kind
    if kind == "other_error":
        why = f"'{root.text[:160]}' is not a memory failure: no memory setting fixes it"
        if root.extra.get("exception") == "NCCL error":
            return "not_memory", why + (
                "; NCCL failed in a system call or its own setup (sockets, ports, network interface), not a rank "
                "keeping the others waiting: NCCL_DEBUG=INFO names the call that failed"
            )
        if root.extra.get("exception") == "device-side assertion":
            return "not_memory", why + (
                "; a CUDA kernel's assertion: an index outside its tensor (token ids beyond the embedding table "
                "after adding tokens without resizing it, labels outside the classes); CUDA_LAUNCH_BLOCKING=1 names the op"
            )
        return "not_memory", why + "; the traceback above it says which code raised it"
    if kind == "shm_exhausted":
        return "shared_memory", (
            f"'{root.text[:110]}': /dev/shm ran out. DataLoader workers hand every batch to the "
            "rank through shared memory (and NCCL keeps intra-node buffers there); containers "
            "default to 64 MB of it. This is not host RAM in general, and not GPU memory"
        )
    if kind == "host_oom" and root.extra.get("silent"):
        return "host_ram", (
            f"'{root.text[:90]}': the launcher tore the ranks down, and no rank printed a Python "
            "error: a process that dies without a traceback was killed by a signal, most often "
            "SIGKILL from the kernel's OOM killer for host RAM" + ("; it died while loading" if phase == "model_load" else "")
        )
    if kind == "host_oom":
        offload = [w for w in ("param", "optimizer") if settings.get(f"offload_{w}") in ("cpu", "nvme")]
        pinned = any(settings.get(f"offload_{w}_pin_memory") for w in offload)
        how = next((description for regex, description in P.KILL_SOURCES if regex.search(root.text)), "the process was killed (SIGKILL)")
        why = how if how.startswith("Ray") else f"{how}: SIGKILL is how the kernel's OOM killer reclaims host RAM"
        if "killed_rss_gib" in f:
            why += f"; the killed process held {gib(f['killed_rss_gib'])} resident"
        if phase == "model_load":
            why += "; while loading, every rank of the node holds its own CPU copy of the checkpoint at once"
        if offload:
            why += f"; ZeRO-3 offloads {' and '.join(offload)} to host RAM" + (" in pinned (unswappable) memory" if pinned else "")
        return "host_ram", why + "; or give the node more host RAM (DocOwl#88 was fixed by moving to 128 GB)"
    if kind == "collective_mismatch":
        return "communication", (
            f"the ranks called different collectives ('{root.text[:110]}'): every rank "
            "must run the same collectives in the same order, and under ZeRO-3 each module's "
            "parameters are all-gathered when it runs, so a rank whose batch skips a module "
            "(a text-only batch skipping a VLM's vision tower) or takes another data-dependent "
            "branch falls out of step; vramfit's trainer runs the vision tower on a zero image "
            "for text-only llava batches (vramfit/train/modality.py)"
        )
    if kind == "nccl_timeout":
        if "timeout_ms" in f:
            ran = f" ran {f['ran_for_ms']} ms" if "ran_for_ms" in f else ""
            why = (
                f"{root.extra['op']} (SeqNum={root.extra['seq']}){ran} against Timeout(ms)={f['timeout_ms']}: "
                "one rank stopped joining collectives and the others waited for it"
            )
        else:
            why = f"the collective layer failed ({root.text[:120]})"
        return "communication", why
    if kind in CONFIG_KINDS:
        return "configuration_error", _configuration(root)
    numbers = oom_numbers(root)
    if _pinned(root):
        return "host_ram", (f"'{root.text[:80]}' raised while pinning host memory: pinned host RAM ran out, not GPU memory")
    if phase == "evaluation":
        at = f" at step {root.step}" if root.step else ""
        every = f" (eval_steps={settings['eval_steps']})" if by_step else ""
        return "evaluation_spike", (
            f"out of memory in evaluation{at}{every} while training steps ran ({numbers}): "
            "evaluation keeps logits/predictions on the GPU on top of the training state"
        )
    if root.extra.get("vllm"):
        if not P.VLLM_KV.search(root.text):
            return "generation_rollout", (
                f"'{root.text[:120]}': an allocation inside vLLM's rollout engine failed with the GPU full; vLLM "
                "reserves gpu_memory_utilization x the GPU for itself, beside whatever else (the trainer) holds it"
            )
        return "generation_rollout", (
            f"'{root.text[:120]}': vLLM sizes its KV cache from gpu_memory_utilization x "
            "the GPU, minus the weights and its activation peak; nothing was left for it"
        )
    if phase == "generation":
        generations = settings.get("num_generations")
        return "generation_rollout", (
            f"out of memory while generating completions ({numbers})"
            + (f": every prompt is rolled out num_generations={generations} times" if generations else "")
        )
    if fragmented(f):
        return "fragmentation", (
            f"{gib(f['reserved_unallocated_gib'])} was reserved by PyTorch but unallocated "
            f"against a {gib(f.get('requested_gib', 0))} request ({numbers}): the memory "
            "existed but in pieces too small for one block"
        )
    where = phase.replace("_", " ") if phase != "unknown" else "step"
    return "true_capacity", f"the {where} needs more than the GPU had ({numbers})"


def _message_version(root: Event) -> tuple[str, str] | None:
    """Which PyTorch printed the OOM message, and what its figures mean in that version."""
    text, f = root.text, root.figures
    if "reserved" not in text and "cached" not in text:
        return None
    if "cached)" in text:
        return "1.0-1.3", (
            "torch 1.0-1.3 message: 'cached' is the allocator's cache minus what is allocated, i.e. "
            "already the reserved-but-unallocated memory; it is not subtracted again"
        )
    if "reserved in total by PyTorch" in text:
        spare = f.get("reserved_unallocated_gib")
        shown = f" = {gib(spare)}" if spare is not None else " (not computable from this paste)"
        return "1.4-2.0", (
            f"torch 1.4-2.0 message: 'reserved in total by PyTorch' includes what is allocated; reserved but unallocated = reserved - allocated{shown}"
        )
    version = "2.5+" if "private pools" in text else "2.1+"
    return version, (
        f"torch {version} message: 'allocated by PyTorch' is live tensors, 'reserved by PyTorch but "
        "unallocated' is cached blocks; 'this process has ... in use' adds the CUDA context and "
        "non-PyTorch allocations (NCCL buffers, cuBLAS workspaces)"
    )


def _stalled(scan: Scan, ranks: list[int], figures: dict) -> str:
    """Which rank the others were waiting on: the one whose collective count lags, else the one that is silent."""
    seqs: dict[int, int] = {}
    for event in scan.events.get("nccl_timeout", ()):
        if event.rank is not None and "seq" in event.extra:
            seqs[event.rank] = min(seqs.get(event.rank, event.extra["seq"]), event.extra["seq"])
    if len(set(seqs.values())) > 1:
        behind = min(seqs, key=seqs.get)
        ahead = max(seqs, key=seqs.get)
        figures["stalled_rank"] = behind
        return (
            f"; rank {behind} is waiting at SeqNum={seqs[behind]} while rank {ahead} is at {seqs[ahead]}: "
            f"rank {behind} fell {seqs[ahead] - seqs[behind]} collectives behind"
        )
    if len(ranks) > 1:
        world = scan.settings.world_size() or max(max(ranks), scan.max_rank or 0) + 1
        silent = sorted(set(range(world)) - set(ranks))
        if len(silent) == 1:
            figures["stalled_rank"] = silent[0]
            return f"; rank {silent[0]} reported no timeout: the others were waiting on it"
    return ""


def classify(scan: Scan, source: str) -> tuple[Diagnosis, Event | None]:
    settings = scan.settings.values
    diagnosis = Diagnosis(source=source, settings=dict(settings), lines_read=scan.lines)
    if scan.nul_bytes:
        diagnosis.notes.append(f"The input has {scan.nul_bytes} NUL bytes: it does not look like a text log.")
    checkpointing = scan.checkpointing_context or settings.get("gradient_checkpointing") is True or settings.get("zero_stage") == 3
    root = _root(scan, checkpointing)
    if root is None:
        return diagnosis, None
    phase = root.phase
    if phase == "unknown" and not root.frames and scan.dangling and root.kind in ("cuda_oom", "other_error"):
        # the error was named first, then a traceback the paste ends inside (DataParallel's "Caught X in
        # replica 1 ... Original Traceback", a message quoted before the frames)
        phase = phase_of(scan.dangling)
    if root.kind == "host_oom" and phase == "unknown":
        # a sibling's traceback can say the run was loading, saving, evaluating or generating
        framed = sorted((e for events in scan.events.values() for e in events if e.frames), key=lambda e: e.line)
        phase = next((p for p in (phase_of(e.frames) for e in framed) if p in CONTEXT), "unknown")
        if phase == "unknown" and scan.report_phase not in (None, "training"):
            phase = scan.report_phase
    by_step = root.kind == "cuda_oom" and _eval_step(phase, root.step, settings)
    if by_step:
        phase = "evaluation"
    figures = dict(root.figures)
    if root.kind == "host_oom":  # the kernel's report of the same kill says how much it held
        held = [e.figures["killed_rss_gib"] for e in scan.events.get("host_oom", ()) if "killed_rss_gib" in e.figures]
        if held:
            figures["killed_rss_gib"] = max(held)
    if root.step is not None:
        figures["step"] = root.step
    cause, why = _cause(root, figures, phase, settings, by_step)
    ranks = _ranks(scan, root)
    if root.kind == "nccl_timeout":
        why += _stalled(scan, ranks, figures)
    diagnosis.kind, diagnosis.phase, diagnosis.cause, diagnosis.why = root.kind, phase, cause, why
    diagnosis.figures, diagnosis.ranks = figures, ranks
    diagnosis.evidence = _evidence(scan, root)
    diagnosis.notes += _notes(scan, root, ranks)
    if root.extra.get("platform"):
        diagnosis.figures["platform"] = root.extra["platform"]
    if root.kind == "host_oom" and any("slurmstepd" in e.text or "srun:" in e.text for e in scan.events.get("host_oom", ())):
        root.extra["slurm"] = True  # a cgroup limit of the job, not the node's RAM
    version = _message_version(root) if root.kind == "cuda_oom" else None
    if version:
        diagnosis.figures["torch_message"] = version[0]
        diagnosis.notes.append(version[1] + ".")
    others = [(pid, size) for pid, size in root.extra.get("other_processes", ())]
    if others:
        listed = ", ".join(f"process {pid}: {gib(size)}" for pid, size in others[:8])
        diagnosis.notes.append(f"Other processes hold {gib(sum(size for _, size in others))} of this GPU ({listed}).")
    if root.extra.get("bogus_figures"):
        diagnosis.notes.append(
            "Some figures in the message are impossible (more memory in use than the GPU has: "
            "NVML under WSL or a container reports nonsense); they were left out."
        )
    return diagnosis, root
