"""The smallest changes that make a plan fit, cheapest in throughput first, global batch kept.

Each candidate is a set of `key=value` overrides that `vramfit run` accepts (bare Hugging Face
names resolve to `training.*`; dotted paths such as `data.max_pixels` or `deepspeed=` go into the
recipe). Every candidate is verified by re-planning the overridden recipe, never by arithmetic.
Order (throughput cost, lowest first):

1. evaluation: keep no logits (`prediction_loss_only`), eval batch 1, logits to host every step -
   training speed unchanged;
2. allocator: `expandable_segments:True` - free;
3. Liger kernels - faster, and no [tokens x vocab] logits;
4. GRPO: generate in smaller batches (`steps_per_generation=1`) - more generate calls;
5. micro-batch down, accumulation up (same global batch) - a few % per halving; with `--model-config`
   under FSDP with accumulation also `sync_each_batch` (sharded gradients, one more reduce-scatter each);
6. gradient checkpointing - about 30% slower backward (one more forward);
7. fewer image tokens (`max_pixels`) - changes the data;
   with `--model-config` (the user's own run) also: Cut Cross-Entropy after Liger, activation
   offloading after checkpointing, FSDP CPU offload with the DeepSpeed offloads;
8. optimizer offload to host RAM (a DeepSpeed JSON from deepspeed_configs/) - the slowest.
Host RAM misfits try: fewer dataloader workers, then less offload.

Each family contributes its cheapest variant that fits; when no single change fits, the changes
that help are combined in the same order until the plan fits.
"""

from __future__ import annotations

import json
from typing import Any

from vramfit.divisors import divisors
from vramfit.libraries import grpo_steps_per_generation
from vramfit.planner import states
from vramfit.problems import ConfigError

COMMON_MAX_PIXELS = 1_003_520  # 1,280 image tokens (upstream-setups.md: "1,003,520 px is common")
LIMIT = 3


def _usable_excess(p) -> float:
    from vramfit.planner.headroom import HEADROOM

    gpu = max(0.0, p.per_gpu_peak_gib - p.gpu_memory_gib * (1 - HEADROOM))
    host = 0.0 if p.host_ram_available_gib is None else max(0.0, p.host_ram_gib - p.host_ram_available_gib * (1 - HEADROOM))
    return gpu + host


def _deepspeed_options(recipe, setup) -> list[tuple[str, Any]]:
    """(relative path, Zero) for every JSON under deepspeed_configs/ of the recipe's tree."""
    from vramfit.checks.deepspeed_json import CONFIG_DIR
    from vramfit.paths import repo_root
    from vramfit.planner import params
    from vramfit.planner.setup import Zero, _hidden_size

    root = repo_root(recipe.folder if recipe is not None else None)
    hidden = _hidden_size(params.read_config(setup.model_config))
    options = []
    for path in sorted((root / CONFIG_DIR).glob("*.json")):
        try:
            options.append((f"{CONFIG_DIR}/{path.name}", Zero.from_json(json.loads(path.read_text()), hidden)))
        except (OSError, ValueError):
            continue
    return options


def candidates(p, mode: str, recipe=None) -> list[tuple[str, dict[str, Any], str]]:
    """(family, overrides, why) in the order of the module docstring."""
    from vramfit.planner.training import liger_active

    s = p.setup
    out: list[tuple[str, dict[str, Any], str]] = []
    gpu_short = not p.fits
    eval_short = gpu_short and "evaluation" in p.phases and p.phases["evaluation"] > p.usable_gib
    if eval_short:
        if not s.prediction_loss_only:
            out.append(("eval", {"prediction_loss_only": True}, "evaluation keeps no logits for metrics"))
            if s.eval_accumulation_steps != 1:
                out.append(("eval", {"eval_accumulation_steps": 1}, "kept eval logits go to host RAM after every eval step"))
        if s.eval_batch > 1:
            out.append(("eval", {"per_device_eval_batch_size": 1, "prediction_loss_only": True}, "evaluation forward at batch 1, loss only"))
    if gpu_short and not s.expandable_segments:
        if mode == "recipe":
            out.append(("allocator", {"env.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "less allocator fragmentation"))
        else:
            out.append(("allocator", {"expandable_segments": True}, "less allocator fragmentation"))
    if gpu_short and s.method != "grpo" and not s.liger and liger_active(s.replace(liger=True), _arch(s)):
        out.append(("liger", {"use_liger_kernel": True}, "Liger fused linear cross-entropy: no logits tensor; faster"))
    # --model-config plans the user's own run, which can switch a loss kernel, offload activations or
    # FSDP state; a recipe's runner does not apply the planner: keys, so recipes get none of these.
    own_run = mode == "args"
    if own_run and gpu_short and s.method != "grpo" and s.loss_kernel == "torch" and not liger_active(s, _arch(s)):
        out.append(("loss", {"loss_kernel": "cce"}, "Cut Cross-Entropy: the loss without a [tokens x vocab] logits tensor"))
    if gpu_short and s.method == "grpo" and "generation" in p.phases and grpo_steps_per_generation(s.gradient_accumulation_steps, s.steps_per_generation) > 1:
        if (s.micro_batch * s.world) % s.num_generations == 0:
            # TRL refuses steps_per_generation beside a generation_batch_size: a recipe that sets the batch gets it lowered
            pinned = recipe is not None and recipe.training.get("generation_batch_size")
            key, value = ("generation_batch_size", s.micro_batch * s.world) if pinned else ("steps_per_generation", 1)
            out.append(("generation", {key: value}, "generate one micro-step's completions at a time"))
    if gpu_short:
        b, ga = s.micro_batch, s.gradient_accumulation_steps
        for nb in reversed(divisors(b, up_to=b - 1)):
            out.append(
                (
                    "micro_batch",
                    {"per_device_train_batch_size": nb, "gradient_accumulation_steps": ga * b // nb},
                    f"micro-batch {b} -> {nb}, accumulation {ga} -> {ga * b // nb}: same global batch",
                )
            )
        if own_run and s.engine == "fsdp" and states.fsdp_accumulated_gradients(s, 1) and not s.fsdp_sync_each_batch:
            out.append(
                (
                    "sync_each_batch",
                    {"sync_each_batch": True},
                    "FSDP reduce-scatters after every micro-batch (accelerate sync_each_batch): the gradients stay sharded "
                    "instead of whole under no_sync; one more reduce-scatter per micro-batch",
                )
            )
        if not s.gradient_checkpointing:
            out.append(("checkpointing", {"gradient_checkpointing": True}, "recompute activations in backward (~30% slower)"))
        if own_run and not s.activation_offloading:
            out.append(
                (
                    "activation_offloading",
                    {"activation_offloading": True},
                    "kept activations in pinned host RAM (TRL / axolotl activation_offloading), copies overlap compute",
                )
            )
        if s.image_tokens > COMMON_MAX_PIXELS // 784 and _arch(s).image.get("per_28px_square"):
            key = "data.max_pixels" if mode == "recipe" else "max_pixels"
            out.append(("max_pixels", {key: COMMON_MAX_PIXELS}, f"{s.image_tokens} -> {COMMON_MAX_PIXELS // 784} image tokens per image"))
    if s.engine == "deepspeed":
        options = _deepspeed_options(recipe, s)
        z = s.zero
        if gpu_short and not z.offload_optimizer:
            for path, opt in sorted(options, key=lambda o: (o[1].offload_params, o[1].stage != z.stage)):
                if opt.offload_optimizer and opt.stage >= z.stage:
                    out.append(("offload", {"deepspeed": path}, f"ZeRO-{opt.stage}, optimizer{' + parameters' if opt.offload_params else ''} in host RAM"))
        if not p.host_ram_fits:
            if s.dataloader_workers:
                out.append(("workers", {"dataloader_num_workers": 0}, "no forked dataloader workers"))
            for path, opt in sorted(options, key=lambda o: (o[1].offload_params, o[1].offload_optimizer), reverse=True):
                less = (opt.offload_params, opt.offload_optimizer) < (z.offload_params, z.offload_optimizer)
                if less and opt.stage >= z.stage:
                    out.append(("offload_less", {"deepspeed": path}, f"ZeRO-{opt.stage}, less in host RAM"))
    elif s.engine == "fsdp" and own_run and gpu_short and not s.fsdp_offload:
        out.append(("offload", {"fsdp_config.offload_params": True}, "FSDP CPU offload: parameters, gradients and optimizer step in host RAM"))
    elif not p.host_ram_fits and s.dataloader_workers:
        out.append(("workers", {"dataloader_num_workers": 0}, "no forked dataloader workers"))
    return out


def _arch(setup):
    from vramfit.planner import params

    return params.summary(setup.model_config)


def search(p, replan, mode: str, recipe=None) -> list[dict[str, Any]]:
    """Verified fixes for plan `p`; `replan(overrides)` plans the overridden recipe / setup."""
    fixes: list[dict[str, Any]] = []
    done: set[str] = set()
    helpful: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for family, overrides, why in candidates(p, mode, recipe):
        if family in done:
            continue
        q = _try(replan, overrides, p)
        if q is None:
            continue  # an override the recipe's schema refuses: not a fix
        if q.ok:
            fixes.append(_entry(overrides, q, why))
            done.add(family)
            if len(fixes) >= LIMIT:
                break
        elif _usable_excess(q) < _usable_excess(p):
            helpful.setdefault(family, []).append((overrides, why))
    if fixes:
        return fixes
    # No single change fits: combine families in order, each at its mildest sufficient variant.
    combined: dict[str, Any] = {}
    reasons: list[str] = []
    best = p
    for variants in helpful.values():
        pick = None
        for overrides, why in variants:
            q = _try(replan, {**combined, **overrides}, p)
            if q is None:
                continue
            if q.ok:
                return [_entry({**combined, **overrides}, q, "; ".join([*reasons, why]))]
            if _usable_excess(q) < _usable_excess(best):
                pick, best = (overrides, why), q
        if pick:
            combined.update(pick[0])
            reasons.append(pick[1])
    return []


def _try(replan, overrides, p):
    """The re-plan, or None: an override the schema refuses, or one whose plan leaves out a term the plan
    it would fix computed (Liger on a model only the trace sizes: its kernels cannot be traced), which
    would verify the fix against a lower bound."""
    try:
        q = replan(overrides)
    except ConfigError:
        return None
    return None if set(q.incomplete) - set(p.incomplete) else q


def _entry(overrides: dict[str, Any], q, why: str) -> dict[str, Any]:
    return {"overrides": overrides, "per_gpu_peak_gib": round(q.per_gpu_peak_gib, 2), "host_ram_gib": round(q.host_ram_gib, 2), "why": why}
