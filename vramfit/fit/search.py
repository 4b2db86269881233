"""The search: every combination of the knobs the planner models, each planned and timed, ranked.

Knobs (recipe spelling; a pinned knob is never changed):
- `deepspeed`: no ZeRO (DDP, or one GPU), ZeRO-1, and the five shared presets under deepspeed_configs/
  (ZeRO-2 / ZeRO-3, optimizer offload, optimizer + parameter offload). Only the presets are writable
  as a recipe (recipes point at the shared presets); no ZeRO and ZeRO-1 are planned and timed for the
  comparison and marked not writable.
- `per_device_train_batch_size` x `gradient_accumulation_steps`: every split of the per-rank share of
  the global batch (global / ranks), so the global batch is kept exactly.
- `gradient_checkpointing`, `use_liger_kernel` (where Liger patches the model type),
  `attn_implementation` (flash_attention_2 on bf16 cards, sdpa, eager),
- `optim`: the base optimizer, bitsandbytes 8-bit AdamW and its paged variant (without ZeRO or
  with ZeRO-2 without offload: bitsandbytes keeps its own states, DeepSpeed's offload needs its CPU Adam);
- GRPO: `steps_per_generation` (the generation batch = micro x steps_per_generation per rank), each
  value for which TRL's rule holds (generation batch x ranks divisible by num_generations).

Not searched because the planner does not model them yet (issue 13): FSDP, pure bf16, the vLLM share.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramfit.divisors import divisors

PRESETS = ("zero2", "zero2_offload_optimizer", "zero3", "zero3_offload_optimizer", "zero3_offload_optimizer_params")
UNWRITABLE = ("none", "zero1")
EIGHT_BIT = ("adamw_8bit", "paged_adamw_8bit")
ATTN_LABEL = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}
KNOBS = ("deepspeed", "per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
         "use_liger_kernel", "attn_implementation", "optim", "steps_per_generation")
FAMILIES = {  # family -> the knob whose value names it
    "ZeRO / offload": "deepspeed", "micro-batch": "per_device_train_batch_size",
    "checkpointing": "gradient_checkpointing", "Liger": "use_liger_kernel",
    "attention": "attn_implementation", "optimizer": "optim", "generation batch": "steps_per_generation",
}
MAX_MICRO = 64
TIE = 0.01  # predicted step times within 1% rank as equal
THIN = 0.05  # among ties, a margin under 5% of the card (on top of the planner's 5% headroom) ranks last
# Among ties, the simpler engine first: fewer moving parts (sharded weights, host offload) to debug.
COMPLEXITY = {"none": 0, "zero1": 0, "zero2": 0, "zero3": 1, "zero2_offload_optimizer": 2, "zero3_offload_optimizer": 2,
              "zero3_offload_optimizer_params": 3}


@dataclass
class Candidate:
    knobs: dict[str, Any]
    setup: Any
    plan: Any
    time: Any

    @property
    def fits(self) -> bool:
        return self.plan.ok

    @property
    def margin_gib(self) -> float:
        return self.plan.usable_gib - self.plan.per_gpu_peak_gib

    @property
    def writable(self) -> bool:
        return self.knobs["deepspeed"] not in UNWRITABLE


@dataclass
class Result:
    label: str
    base: Any
    base_knobs: dict[str, Any]
    pins: dict[str, Any]
    global_batch: int
    candidates: list[Candidate]
    ranked: list[Candidate]
    rejected: list[dict[str, Any]]
    seconds: float = 0.0
    flops_source: str = "analytic"
    notes: list[str] = field(default_factory=list)

    @property
    def winner(self) -> Candidate | None:
        return next((c for c in self.ranked if c.writable), None)

    def diff(self, c: Candidate) -> dict[str, Any]:
        return {k: v for k, v in c.knobs.items() if self.base_knobs.get(k) != v}


def preset_zero(name: str, hidden: int):
    """The `Zero` of a preset name ('none', 'zero1' or a file under deepspeed_configs/)."""
    from vramfit.checks.deepspeed_json import CONFIG_DIR
    from vramfit.paths import repo_root
    from vramfit.planner.setup import Zero

    if name == "none":
        return Zero()
    file = "zero2" if name == "zero1" else name
    data = json.loads((repo_root(Path.cwd()) / CONFIG_DIR / f"{file}.json").read_text())
    if name == "zero1":
        data = {**data, "zero_optimization": {**data["zero_optimization"], "stage": 1}}
    return Zero.from_json(data, hidden)


def preset_name(setup) -> str:
    z = setup.zero
    if setup.engine != "deepspeed" or z.stage == 0:
        return "none"
    if z.stage == 1:
        return "zero1"
    name = f"zero{z.stage}"
    if z.offload_optimizer:
        name += "_offload_optimizer"
    if z.offload_params:
        name += "_params"
    return name


def knobs_of(setup) -> dict[str, Any]:
    k = {
        "deepspeed": preset_name(setup),
        "per_device_train_batch_size": setup.micro_batch,
        "gradient_accumulation_steps": setup.gradient_accumulation_steps,
        "gradient_checkpointing": setup.gradient_checkpointing,
        "use_liger_kernel": setup.liger,
        "attn_implementation": ATTN_LABEL[setup.attention],
        "optim": setup.optimizer,
    }
    if setup.method == "grpo":
        k["steps_per_generation"] = setup.steps_per_generation or setup.gradient_accumulation_steps
    return k


def apply(base, knobs: dict[str, Any], zeros: dict[str, Any]):
    from vramfit.planner.setup import ATTENTION

    name = knobs["deepspeed"]
    zero = zeros[name]
    engine = "deepspeed" if zero.stage else ("ddp" if base.world > 1 else "single")
    changes = dict(
        zero=zero, engine=engine,
        micro_batch=knobs["per_device_train_batch_size"],
        gradient_accumulation_steps=knobs["gradient_accumulation_steps"],
        gradient_checkpointing=knobs["gradient_checkpointing"],
        liger=knobs["use_liger_kernel"],
        attention=ATTENTION[knobs["attn_implementation"]],
        optimizer=knobs["optim"],
    )
    if base.method == "grpo":
        changes["steps_per_generation"] = knobs["steps_per_generation"]
    if base.quantization in ("nf4", "fp4"):
        # The written recipe stores 4-bit weights in bf16 under ZeRO-3 (so they shard), uint8 otherwise.
        changes["quant_storage_float"] = zero.stage == 3
    return base.replace(**changes)


def options(base, pins: dict[str, Any], global_batch: int, arch) -> dict[str, list[Any]]:
    """The values each knob may take (a pinned knob: its one value)."""
    from vramfit.hardware import CATALOGUE
    from vramfit.planner.training import liger_active

    world = base.world
    per_rank = global_batch // world
    out: dict[str, list[Any]] = {}
    out["deepspeed"] = [*UNWRITABLE, *PRESETS]
    micro = [d for d in divisors(per_rank) if d <= MAX_MICRO]
    out["per_device_train_batch_size"] = micro or [1]
    out["gradient_checkpointing"] = [False, True]
    out["use_liger_kernel"] = [False, True] if liger_active(base.replace(liger=True), arch) else [base.liger]
    # flash_attention_2 and sdpa are one candidate: on CUDA, PyTorch's SDPA dispatches to the FlashAttention-2
    # kernel (bf16/fp16, no mask materialised), so plan and step time agree; the base's spelling is kept.
    fast = "flash_attention_2" if base.attention == "flash" and CATALOGUE[base.gpu].bf16 else "sdpa"
    out["attn_implementation"] = [fast, "eager"]
    out["optim"] = list(dict.fromkeys([base.optimizer, *EIGHT_BIT]))
    for key, value in pins.items():
        if key in out:
            out[key] = [value]
    return out


@contextlib.contextmanager
def _one_summary_per_config():
    """`params.summary` re-reads the installed transformers version from package metadata on every call
    (90% of a search's time: ~20 ms per candidate); during a search the config and the library do not
    change, so each config is summarised once. Restored on exit. (The planner itself could cache
    `_transformers_version`; planner/ belongs to another branch.)"""
    from vramfit.planner import params

    original = params.summary
    cache: dict[Any, Any] = {}

    def summary(path):
        key = str(path)
        if key not in cache:
            cache[key] = original(path)
        return cache[key]

    params.summary = summary
    try:
        yield
    finally:
        params.summary = original


def search(base, global_batch: int, pins: dict[str, Any], base_knobs: dict[str, Any] | None = None,
           label: str = "", trace: bool = True) -> Result:
    """Plan and time every candidate; `base` already carries the pins' values."""
    with _one_summary_per_config():
        return _search(base, global_batch, pins, base_knobs, label, trace)


def _search(base, global_batch: int, pins: dict[str, Any], base_knobs: dict[str, Any] | None, label: str, trace: bool) -> Result:
    from vramfit.fit import steptime
    from vramfit.planner import params
    from vramfit.planner.plan import plan
    from vramfit.planner.setup import _hidden_size

    start = time.perf_counter()
    arch = params.summary(base.model_config)
    hidden = _hidden_size(params.read_config(base.model_config))
    zeros = {name: preset_zero(name, hidden) for name in (*UNWRITABLE, *PRESETS)}
    opts = options(base, pins, global_batch, arch)
    per_rank = global_batch // base.world
    grpo = base.method == "grpo"
    pinned_ga = pins.get("gradient_accumulation_steps")
    candidates: list[Candidate] = []
    keys = ["deepspeed", "per_device_train_batch_size", "gradient_checkpointing", "use_liger_kernel", "attn_implementation", "optim"]
    for values in itertools.product(*(opts[k] for k in keys)):
        knobs = dict(zip(keys, values))
        micro = knobs["per_device_train_batch_size"]
        knobs["gradient_accumulation_steps"] = per_rank // micro
        if pinned_ga is not None and pinned_ga != knobs["gradient_accumulation_steps"]:
            continue
        preset = knobs["deepspeed"]
        if knobs["optim"] in EIGHT_BIT and knobs["optim"] != base.optimizer and (preset.startswith("zero3") or "offload" in preset):
            continue
        if "offload" in preset and knobs["optim"] != base.optimizer:
            continue
        for spg in _generation_options(base, knobs, pins) if grpo else [None]:
            k = dict(knobs)
            if grpo:
                k["steps_per_generation"] = spg
            setup = apply(base, k, zeros)
            p = plan(setup)
            counts = params.count(arch, setup)
            candidates.append(Candidate(k, setup, p, steptime.estimate(setup, arch, counts)))
    fitting = [c for c in candidates if c.fits]
    _rank(fitting, base_knobs)
    result = Result(label or base.label, base, base_knobs or knobs_of(base), pins, global_batch, candidates, fitting, [])
    result.rejected = rejected(result)
    result.notes.append("not searched (the planner does not model them yet): FSDP, pure bf16 weights and optimizer states, "
                        "the vLLM memory share for GRPO")
    result.notes.append("attention: flash_attention_2 and sdpa are one candidate (CUDA SDPA runs the FlashAttention-2 kernel; "
                        "same plan and step time); the base's spelling is kept")
    if trace:
        _confirm_with_trace(result, arch, base_knobs)
    result.seconds = time.perf_counter() - start
    return result


def _rank(fitting: list[Candidate], base_knobs: dict[str, Any] | None) -> None:
    """Sort by predicted step time. Within 1% of each other two predictions are a tie (the model is not
    that precise): the fewer changes from the base win, then the larger margin."""
    best = min((c.time.seconds for c in fitting), default=1.0)
    fitting.sort(key=lambda c: (int(math.log(c.time.seconds / best) / math.log(1 + TIE)), c.margin_gib < THIN * c.plan.gpu_memory_gib,
                                _changes(c, base_knobs or {}), COMPLEXITY[c.knobs["deepspeed"]], -c.margin_gib, c.time.seconds))


def _generation_options(base, knobs: dict[str, Any], pins: dict[str, Any]) -> list[int]:
    ga = knobs["gradient_accumulation_steps"]
    if "steps_per_generation" in pins:
        return [pins["steps_per_generation"]]
    world, micro = base.world, knobs["per_device_train_batch_size"]
    return [d for d in divisors(ga) if (micro * world * d) % base.num_generations == 0]


def _changes(c: Candidate, base_knobs: dict[str, Any]) -> int:
    return sum(1 for k, v in c.knobs.items() if base_knobs.get(k) != v)


def _confirm_with_trace(result: Result, arch, base_knobs: dict[str, Any] | None = None) -> None:
    """Re-time the winner with the traced FLOPs when `vramfit.planner.trace` exists (issue 13)."""
    from vramfit.fit import steptime
    from vramfit.planner import params

    win = result.winner
    if win is None:
        return
    try:
        from vramfit.planner.trace import step_flops  # type: ignore[import-not-found]
    except ImportError:
        result.notes.append("FLOPs: analytic count (6 N tokens + attention, recompute added; vramfit.fit.steptime); "
                            "vramfit.planner.trace is not available")
        return
    try:
        traced = float(step_flops(win.setup))
    except Exception as exc:  # the trace is a second opinion: its failure must not lose the answer
        result.notes.append(f"FLOPs: analytic count; the trace of the winner failed ({exc.__class__.__name__}: {exc})")
        return
    counts = params.count(arch, win.setup)
    analytic = steptime.analytic_flops(win.setup, arch, counts)
    scale = traced / analytic.total if analytic.total else 1.0
    # Every fitting candidate is re-timed with the winner's traced/analytic ratio, not the winner alone: a
    # winner timed on traced FLOPs beside the others on analytic ones would be ranked against a different
    # count (a +9% trace made the winner slower than rows ranked below it).
    for c in result.ranked:
        c_counts = counts if c is win else params.count(arch, c.setup)
        a = analytic if c is win else steptime.analytic_flops(c.setup, arch, c_counts)
        flops = steptime.Flops(*(getattr(a, f) * scale for f in ("forward", "backward", "recompute", "reference")))
        c.time = steptime.estimate(c.setup, arch, c_counts, flops, "trace" if c is win else "trace ratio")
    _rank(result.ranked, base_knobs)
    result.rejected = rejected(result)
    result.flops_source = "trace (the first winner), its traced/analytic ratio applied to every fitting candidate"
    result.notes.append(f"FLOPs of the winner traced (FlopCounterMode): {traced:.3e} per micro-batch, "
                        f"analytic {analytic.total:.3e} ({(scale - 1) * 100:+.0f}%); every fitting candidate re-timed with that ratio")


def rejected(result: Result) -> list[dict[str, Any]]:
    """For every family value not chosen: why (does not fit, with its lowest peak; or slower)."""
    win = result.winner
    out = []
    for family, knob in FAMILIES.items():
        values = list(dict.fromkeys(c.knobs.get(knob) for c in result.candidates if knob in c.knobs))
        for value in values:
            if win is not None and win.knobs.get(knob) == value:
                continue
            group = [c for c in result.candidates if c.knobs.get(knob) == value]
            fitting = [c for c in group if c.fits]
            if knob in result.pins:
                continue
            if fitting:
                if win is None:
                    continue
                writable = [c for c in fitting if c.writable]
                best = min(writable or fitting, key=lambda c: c.time.seconds)
                if not writable:
                    reason = (f"fits ({best.plan.per_gpu_peak_gib:.1f} GiB), {best.time.seconds:.2f} s/step, but not writable as a recipe "
                              "(no shared preset under deepspeed_configs/)")
                elif best.time.seconds <= win.time.seconds * (1 + TIE):
                    reason = (f"fits ({best.plan.per_gpu_peak_gib:.1f} GiB), same predicted step ({best.time.seconds:.2f} s); "
                              "within 1%, ranked below on margin >= 5% of the card, fewer changes, a simpler engine, then margin")
                else:
                    reason = (f"fits ({best.plan.per_gpu_peak_gib:.1f} GiB) but slower: {best.time.seconds:.2f} s/step vs "
                              f"{win.time.seconds:.2f} s ({(best.time.seconds / win.time.seconds - 1) * 100:+.0f}%)")
            else:
                lowest = min(group, key=lambda c: c.plan.per_gpu_peak_gib)
                p = lowest.plan
                if p.fits and not p.host_ram_fits:
                    reason = (f"host RAM: {p.host_ram_gib:.0f} GiB > {p.host_ram_available_gib * 0.95:.0f} GiB usable "
                              f"({p.host_ram_available_gib:.0f} GiB x 0.95)")
                else:
                    reason = (f"does not fit: lowest peak {p.per_gpu_peak_gib:.1f} GiB > {p.usable_gib:.1f} GiB usable "
                              f"({p.gpu_memory_gib:.1f} x 0.95), with {_short(result.diff(lowest)) or 'the base settings'}")
            out.append({"family": family, "knob": knob, "value": value, "reason": reason})
    return out


def _short(diff: dict[str, Any]) -> str:
    return " ".join(f"{k}={_text(v)}" for k, v in diff.items())


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def deepspeed_path(preset: str) -> str:
    return f"deepspeed_configs/{preset}.json"


def preset_from_text(text: str) -> str:
    """'zero3', 'zero3.json' or 'deepspeed_configs/zero3.json' -> 'zero3'; 'none' stays."""
    return Path(str(text)).name.removesuffix(".json")
