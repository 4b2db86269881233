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

- FSDP, a family beside ZeRO in the same knob (`deepspeed: none` plus `training.fsdp` / `fsdp_config` when
  written): `fsdp` = full_shard auto_wrap, `fsdp_offload` = full_shard auto_wrap offload (parameters,
  gradients and optimizer states on the host, torch's CPU optimizer step). The planner gives FSDP2 the same
  memory as FSDP1 and the step-time model the same traffic, so FSDP2 is searched only where the base (or a
  pin) uses it (`fsdp2`, `fsdp2_offload`, written with fsdp_config.version=2).
- GRPO with vLLM colocated (`use_vllm`, `vllm_gpu_memory_utilization` 0.3 / 0.5 / 0.7, and
  `vllm_enable_sleep_mode`): the share is planned on every GPU (sleep mode: while generating only);
  generation time stays bandwidth-bound decoding (steptime.py), limited by the KV cache the share leaves
  after vLLM's copy of the weights. A share too small for vLLM's weights is rejected with that reason.

Not searched (kept as the base has them, a pin kept as given): pure bf16 weights / optimizer states,
activation offloading and packing; they change what is trained or how samples are cut, not only speed
and memory, so they are the user's choice (pin them: `bf16=true master_fp32=false`, `activation_offloading=true`,
`packing=true`) and fit plans and times them as pinned.
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
from vramfit.libraries import grpo_steps_per_generation

PRESETS = ("zero2", "zero2_offload_optimizer", "zero3", "zero3_offload_optimizer", "zero3_offload_optimizer_params")
FSDP = ("fsdp2", "fsdp2_offload")  # transformers 5 defaults to FSDP2 (FSDP1 deprecated); FSDP1: fsdp, fsdp_offload
FSDP_ALL = ("fsdp", "fsdp_offload", "fsdp2", "fsdp2_offload")
VLLM_SHARES = (0.3, 0.5, 0.7)
UNWRITABLE = ("none", "zero1")
EIGHT_BIT = ("adamw_8bit", "paged_adamw_8bit")
ATTN_LABEL = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}
KNOBS = (
    "deepspeed",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "gradient_checkpointing",
    "use_liger_kernel",
    "attn_implementation",
    "optim",
    "steps_per_generation",
    "use_vllm",
    "vllm_gpu_memory_utilization",
    "vllm_enable_sleep_mode",
)
VLLM_KNOBS = ("use_vllm", "vllm_gpu_memory_utilization", "vllm_enable_sleep_mode")
FAMILIES = {  # family -> the knob whose value names it
    "ZeRO / FSDP / offload": "deepspeed",
    "micro-batch": "per_device_train_batch_size",
    "checkpointing": "gradient_checkpointing",
    "Liger": "use_liger_kernel",
    "attention": "attn_implementation",
    "optimizer": "optim",
    "generation batch": "steps_per_generation",
    "vLLM": "use_vllm",
    "vLLM share": "vllm_gpu_memory_utilization",
    "vLLM sleep": "vllm_enable_sleep_mode",
}
MAX_MICRO = 64
TIE = 0.01  # predicted step times within 1% rank as equal
THIN = 0.05  # among ties, a margin under 5% of the card (on top of the planner's 5% headroom) ranks last
# Among ties, the simpler engine first: fewer moving parts (sharded weights, host offload) to debug.
COMPLEXITY = {
    "none": 0,
    "zero1": 0,
    "zero2": 0,
    "zero3": 1,
    "zero2_offload_optimizer": 2,
    "zero3_offload_optimizer": 2,
    "zero3_offload_optimizer_params": 3,
    "fsdp": 1,
    "fsdp2": 1,
    "fsdp_offload": 3,
    "fsdp2_offload": 3,
}


@dataclass
class Candidate:
    knobs: dict[str, Any]
    setup: Any
    plan: Any
    time: Any
    veto: str = ""  # a reason the planner does not see (vLLM's weights do not fit its share)

    @property
    def fits(self) -> bool:
        return self.plan.ok and not self.veto

    @property
    def margin_gib(self) -> float:
        return self.plan.usable_gib - self.plan.per_gpu_peak_gib

    @property
    def writable(self) -> bool:
        name = self.knobs["deepspeed"]
        return name not in UNWRITABLE and (name not in FSDP_ALL or FSDP_WRITABLE())


_FSDP_WRITABLE: list[bool] = []


def FSDP_WRITABLE() -> bool:  # noqa: N802 - reads as the constant it is for one process
    """Whether `vramfit validate` accepts a recipe with `deepspeed: none` (FSDP through training.fsdp): asked
    of the tree's DeepSpeed check once per process, so fit writes FSDP as soon as the validator supports it."""
    if not _FSDP_WRITABLE:
        from types import SimpleNamespace

        try:
            from vramfit.checks import deepspeed_json

            probe = SimpleNamespace(deepspeed="none", path=lambda p: Path("/nonexistent-vramfit-probe") / p)
            problems, _ = deepspeed_json.check(probe, None, "probe")
            _FSDP_WRITABLE.append(not problems)
        except Exception:
            _FSDP_WRITABLE.append(False)
    return _FSDP_WRITABLE[0]


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
    if setup.engine == "fsdp":
        return ("fsdp2" if setup.fsdp_version == 2 else "fsdp") + ("_offload" if setup.fsdp_offload else "")
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
        k["steps_per_generation"] = grpo_steps_per_generation(setup.gradient_accumulation_steps, setup.steps_per_generation)
        k["use_vllm"] = setup.use_vllm
        if setup.use_vllm and setup.vllm_mode == "colocate":
            k["vllm_gpu_memory_utilization"] = setup.vllm_gpu_memory_utilization
            k["vllm_enable_sleep_mode"] = setup.vllm_sleep
    return k


def apply(base, knobs: dict[str, Any], zeros: dict[str, Any]):
    from vramfit.planner.setup import ATTENTION

    name = knobs["deepspeed"]
    zero = zeros[name]
    if name in FSDP_ALL:
        engine = "fsdp"
        fsdp = dict(
            fsdp_offload=name.endswith("_offload"),
            fsdp_version=2 if name.startswith("fsdp2") else 1,
            fsdp_sharding=base.fsdp_sharding if base.engine == "fsdp" else "full_shard",
        )
    else:
        engine = "deepspeed" if zero.stage else ("ddp" if base.world > 1 else "single")
        fsdp = dict(fsdp_offload=False)
    changes = dict(
        zero=zero,
        engine=engine,
        **fsdp,
        micro_batch=knobs["per_device_train_batch_size"],
        gradient_accumulation_steps=knobs["gradient_accumulation_steps"],
        gradient_checkpointing=knobs["gradient_checkpointing"],
        liger=knobs["use_liger_kernel"],
        attention=ATTENTION[knobs["attn_implementation"]],
        optimizer=knobs["optim"],
    )
    if base.method == "grpo":
        changes["steps_per_generation"] = knobs["steps_per_generation"]
        if "use_vllm" in knobs:
            changes["use_vllm"] = knobs["use_vllm"]
        if knobs.get("vllm_gpu_memory_utilization") is not None:
            changes["vllm_gpu_memory_utilization"] = knobs["vllm_gpu_memory_utilization"]
        if knobs.get("vllm_enable_sleep_mode") is not None:
            changes["vllm_sleep"] = knobs["vllm_enable_sleep_mode"]
    if base.quantization in ("nf4", "fp4"):
        # The written recipe stores 4-bit weights in bf16 under ZeRO-3 / FSDP (so they shard), uint8 otherwise.
        changes["quant_storage_float"] = zero.stage == 3 or engine == "fsdp"
    return base.replace(**changes)


def options(base, pins: dict[str, Any], global_batch: int, arch) -> dict[str, list[Any]]:
    """The values each knob may take (a pinned knob: its one value)."""
    from vramfit.hardware import CATALOGUE
    from vramfit.planner.training import liger_active

    world = base.world
    per_rank = global_batch // world
    out: dict[str, list[Any]] = {}
    fsdp = ("fsdp", "fsdp_offload") if base.engine == "fsdp" and base.fsdp_version == 1 else FSDP
    out["deepspeed"] = [*UNWRITABLE, *PRESETS, *(fsdp if world > 1 else ())]
    micro = [d for d in divisors(per_rank) if d <= MAX_MICRO]
    out["per_device_train_batch_size"] = micro or [1]
    out["gradient_checkpointing"] = [False, True]
    out["use_liger_kernel"] = [False, True] if liger_active(base.replace(liger=True), arch) else [base.liger]
    # flash_attention_2 and sdpa are one candidate: on CUDA, PyTorch's SDPA dispatches to the FlashAttention-2
    # kernel (bf16/fp16, no mask materialised), so plan and step time agree; the base's spelling is kept.
    fast = "flash_attention_2" if base.attention == "flash" and CATALOGUE[base.gpu].bf16 else "sdpa"
    out["attn_implementation"] = [fast, "eager"]
    out["optim"] = list(dict.fromkeys([base.optimizer, *EIGHT_BIT]))
    if base.method == "grpo":
        if base.use_vllm and base.vllm_mode == "server":
            out["use_vllm"] = [True]  # a vLLM server on other GPUs: nothing of it on the training GPUs
        else:
            out["use_vllm"] = [False, True]
            out["vllm_gpu_memory_utilization"] = list(VLLM_SHARES)
            out["vllm_enable_sleep_mode"] = [False, True]
    for key, value in pins.items():
        if key in out:
            out[key] = [value]
    if any(k == "fsdp" or k.startswith("fsdp_config") for k in pins):
        out["deepspeed"] = [preset_name(base)]  # FSDP pinned through its own keys: the engine stays
    if "use_vllm" in out and "use_vllm" not in pins:
        if any(k in pins for k in ("vllm_gpu_memory_utilization", "vllm_enable_sleep_mode")):
            out["use_vllm"] = [True]  # a pinned share or sleep mode means vLLM
        elif "vllm_mode" in pins:
            out["use_vllm"] = [base.use_vllm]
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


def search(base, global_batch: int, pins: dict[str, Any], base_knobs: dict[str, Any] | None = None, label: str = "", trace: bool = True) -> Result:
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
    from vramfit.planner.setup import Zero

    zeros = {name: preset_zero(name, hidden) for name in (*UNWRITABLE, *PRESETS)}
    for name in FSDP_ALL:  # the planner reads FSDP's host offload from the Zero flags (setup.py)
        zeros[name] = Zero(offload_optimizer=True, offload_params=True) if name.endswith("_offload") else Zero()
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
            for vllm in _vllm_options(opts) if grpo else [{}]:
                k = dict(knobs)
                if grpo:
                    k["steps_per_generation"] = spg
                    k.update(vllm)
                setup = apply(base, k, zeros)
                p = plan(setup)
                counts = params.count(arch, setup)
                candidates.append(Candidate(k, setup, p, steptime.estimate(setup, arch, counts), steptime.vllm_veto(setup, arch, counts)))
    fitting = _rank(candidates, base_knobs or {})
    result = Result(label or base.label, base, base_knobs or knobs_of(base), pins, global_batch, candidates, fitting, [])
    if not trace:
        result.rejected = rejected(result)
    result.notes.append(
        "kept as the base has them (pin to change; fit plans and times them as given): pure bf16 weights and "
        "optimizer states, activation offloading, packing - they change what is trained or how samples are cut"
    )
    if base.world > 1:
        v = "FSDP1" if any(c.knobs["deepspeed"] in ("fsdp", "fsdp_offload") for c in candidates) else "FSDP2"
        result.notes.append(
            f"FSDP searched as {v} full shard (the planner gives FSDP1 and FSDP2 the same memory and traffic; "
            "FSDP2 unless the base or a pin says fsdp_config.version=1)"
        )
        if not FSDP_WRITABLE():
            result.notes.append(
                "FSDP candidates are planned and timed but not writable: this tree's validator "
                "(vramfit/checks/deepspeed_json.py check) rejects `deepspeed: none`"
            )
    result.notes.append(
        "attention: flash_attention_2 and sdpa are one candidate (CUDA SDPA runs the FlashAttention-2 kernel; "
        "same plan and step time); the base's spelling is kept"
    )
    if trace:
        _confirm_with_trace(result, arch)
        result.ranked = _rank(candidates, base_knobs or {})
        result.rejected = rejected(result)  # after the re-timing, so the reasons quote the times shown
    result.seconds = time.perf_counter() - start
    return result


def _vllm_options(opts: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """HF generate (use_vllm false), and vLLM colocated at each share, with and without sleep mode."""
    out: list[dict[str, Any]] = []
    for use in opts["use_vllm"]:
        if not use or "vllm_gpu_memory_utilization" not in opts:
            out.append({"use_vllm": use})
            continue
        for share in opts["vllm_gpu_memory_utilization"]:
            for sleep in opts["vllm_enable_sleep_mode"]:
                out.append({"use_vllm": True, "vllm_gpu_memory_utilization": share, "vllm_enable_sleep_mode": sleep})
    return out


def _rank(candidates: list[Candidate], base_knobs: dict[str, Any]) -> list[Candidate]:
    """The fitting candidates, fastest first. Within 1% of each other two predictions are a tie (the model is
    not that precise): a thin margin ranks last, then the fewer changes from the base win, the simpler
    engine, then the larger margin."""
    fitting = [c for c in candidates if c.fits]
    best = min((c.time.seconds for c in fitting), default=1.0)
    fitting.sort(
        key=lambda c: (
            int(math.log(c.time.seconds / best) / math.log(1 + TIE)),
            c.margin_gib < THIN * c.plan.gpu_memory_gib,
            _changes(c, base_knobs),
            COMPLEXITY[c.knobs["deepspeed"]],
            -c.margin_gib,
            c.time.seconds,
        )
    )
    return fitting


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
        result.notes.append("FLOPs: analytic count (6 N tokens + attention, recompute added; vramfit.fit.steptime); vramfit.planner.trace is not available")
        return
    # step_flops counts one micro-batch of `seq_len` tokens without GRPO's completion or reference forward:
    # for GRPO it is asked about the whole sequence (prompt + completion) and compared without the reference.
    grpo = win.setup.method == "grpo"
    probe = win.setup.replace(seq_len=win.setup.seq_len + win.setup.max_completion_length) if grpo else win.setup
    try:
        traced = float(step_flops(probe))
    except Exception as exc:  # the trace is a second opinion: its failure must not lose the answer
        result.notes.append(f"FLOPs: analytic count; the trace of the winner failed ({exc.__class__.__name__}: {exc})")
        return
    counts = params.count(arch, win.setup)
    analytic = steptime.analytic_flops(win.setup, arch, counts)
    compared = analytic.total - analytic.reference
    scale = traced / compared if compared else 1.0
    # Every candidate is re-timed with the same traced / analytic ratio, so the ranking compares like with
    # like (a traced winner beside analytic others would read slower than its runner-up); then re-ranked.
    for c in result.candidates:
        if not c.fits:
            continue
        n = counts if c is win else params.count(arch, c.setup)
        a = steptime.analytic_flops(c.setup, arch, n)
        flops = steptime.Flops(*(getattr(a, f) * scale for f in ("forward", "backward", "recompute", "reference")))
        c.time = steptime.estimate(c.setup, arch, n, flops, "trace" if c is win else "analytic x trace ratio")
    result.flops_source = f"vramfit.planner.trace.step_flops for the winner (FlopCounterMode's counting rules); the others analytic x its ratio ({scale:.3f})"
    result.notes.append(
        f"FLOPs of the winner from vramfit.planner.trace.step_flops (FlopCounterMode's counting rules): {traced:.3e} per "
        f"micro-batch{' (prompt + completion, policy only)' if grpo else ''}, analytic {compared:.3e} "
        f"({(scale - 1) * 100:+.0f}%); every fitting candidate "
        f"re-timed with that ratio and re-ranked"
    )


def rejected(result: Result) -> list[dict[str, Any]]:
    """For every family value not chosen: why (does not fit, with its lowest peak; or slower)."""
    win = result.winner
    out = []
    groups: dict[str, dict[Any, list[Candidate]]] = {knob: {} for knob in FAMILIES.values()}
    for c in result.candidates:  # one pass: every candidate into the group of each of its knob values
        for knob, by_value in groups.items():
            if knob in c.knobs:
                by_value.setdefault(c.knobs[knob], []).append(c)
    for family, knob in FAMILIES.items():
        for value, group in groups[knob].items():
            if win is not None and win.knobs.get(knob) == value:
                continue
            fitting = [c for c in group if c.fits]
            if knob in result.pins or (knob == "deepspeed" and any(k == "fsdp" or k.startswith("fsdp_config") for k in result.pins)):
                continue
            if fitting:
                if win is None:
                    continue
                writable = [c for c in fitting if c.writable]
                best = min(writable or fitting, key=lambda c: c.time.seconds)
                if not writable:
                    why = (
                        "this tree's validator rejects `deepspeed: none` (vramfit/checks/deepspeed_json.py)"
                        if value in FSDP_ALL
                        else "no shared preset under deepspeed_configs/"
                    )
                    reason = f"fits ({best.plan.per_gpu_peak_gib:.1f} GiB), {best.time.seconds:.2f} s/step, but not writable as a recipe ({why})"
                elif best.time.seconds <= win.time.seconds * (1 + TIE):
                    reason = (
                        f"fits ({best.plan.per_gpu_peak_gib:.1f} GiB), same predicted step ({best.time.seconds:.2f} s); "
                        "within 1%, ranked below on margin >= 5% of the card, fewer changes, a simpler engine, then margin"
                    )
                else:
                    reason = (
                        f"fits ({best.plan.per_gpu_peak_gib:.1f} GiB) but slower: {best.time.seconds:.2f} s/step vs "
                        f"{win.time.seconds:.2f} s ({(best.time.seconds / win.time.seconds - 1) * 100:+.0f}%)"
                    )
            else:
                vetoed = [c for c in group if c.plan.ok and c.veto]
                lowest = min(group, key=lambda c: c.plan.per_gpu_peak_gib)
                p = lowest.plan
                if vetoed:
                    reason = vetoed[0].veto
                elif p.fits and not p.host_ram_fits:
                    reason = (
                        f"host RAM: {p.host_ram_gib:.0f} GiB > {p.host_ram_available_gib * 0.95:.0f} GiB usable ({p.host_ram_available_gib:.0f} GiB x 0.95)"
                    )
                else:
                    reason = (
                        f"does not fit: lowest peak {p.per_gpu_peak_gib:.1f} GiB > {p.usable_gib:.1f} GiB usable "
                        f"({p.gpu_memory_gib:.1f} x 0.95), with {_short(result.diff(lowest)) or 'the base settings'}"
                    )
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
