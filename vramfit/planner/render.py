"""A plan as JSON, as text (table, phases, verdict with its equation, fixes) and as a chart."""

from __future__ import annotations

from typing import Any

LABELS = {
    "vllm": "vLLM (colocated share)",
    "weights": "weights",
    "gathered_params": "gathered params (ZeRO-3/FSDP)",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "paged_optimizer_states": "optimizer states (paged)",
    "zero_buffers": "ZeRO buffers",
    "reference_model": "reference model",
    "reward_model": "reward model",
    "teacher_model": "teacher model (GKD)",
    "critic": "critic (PPO value model)",
    "optimizer_step": "optimizer step temporaries",
    "activations": "activations",
    "vision_activations": "vision activations",
    "logits": "logits + loss",
    "kv_cache": "KV cache",
    "eval_logits": "kept eval logits",
    "allocator_reserve": "allocator reserve",
    "cuda_context": "CUDA context",
}


def _r(x: float) -> float:
    return round(x, 2)


def to_json(p) -> dict[str, Any]:
    from vramfit.planner.headroom import HEADROOM

    s = p.setup
    return {
        "recipe": p.label,
        "gpu": p.gpu,
        "gpus": s.world,
        "per_gpu_peak_gib": _r(p.per_gpu_peak_gib),
        "gpu_memory_gib": p.gpu_memory_gib,
        "usable_gib": _r(p.usable_gib),
        "headroom": HEADROOM,
        "fits": p.fits,
        "peak_phase": p.peak_phase,
        "host_ram_gib": _r(p.host_ram_gib),
        "host_ram_available_gib": p.host_ram_available_gib,
        "host_ram_fits": p.host_ram_fits,
        "breakdown": {k: _r(v) for k, v in p.breakdown.items()},
        "phases": {k: _r(v) for k, v in p.phases.items()},
        "phase_breakdowns": {ph: {k: _r(v) for k, v in parts.items()} for ph, parts in p.phase_breakdowns.items()},
        "measures": {ph: {k: _r(v) for k, v in m.items()} for ph, m in p.measures.items()},
        "host_breakdown": {k: _r(v) for k, v in p.host_breakdown.items()},
        "parameters": p.parameters,
        "inputs": {
            "method": s.method,
            "precision": s.precision,
            "optimizer": s.optimizer,
            "engine": s.engine,
            "zero_stage": s.zero.stage,
            "offload_optimizer": s.zero.offload_optimizer,
            "offload_params": s.zero.offload_params,
            "micro_batch": s.micro_batch,
            "gradient_accumulation_steps": s.gradient_accumulation_steps,
            "seq_len": s.seq_len,
            "image_tokens_per_image": s.image_tokens,
            "gradient_checkpointing": s.gradient_checkpointing,
            "liger": s.liger,
            "attention": s.attention,
            "precision_master_fp32": s.master_fp32,
            "fsdp": {
                "sharding": s.fsdp_sharding,
                "version": s.fsdp_version,
                "offload": s.fsdp_offload,
                "lora_units": s.fsdp_lora_units,
                "sync_each_batch": s.fsdp_sync_each_batch,
            }
            if s.engine == "fsdp"
            else None,
            "quantization": s.quantization,
            "quant_double": s.quant_double,
            "quant_storage_float": s.quant_storage_float,
            "modules_to_save": list(s.modules_to_save),
            "loss_kernel": s.loss_kernel,
            "mixer_kernels": s.mixer_kernels,
            "activation_offloading": s.activation_offloading,
            "packing": s.packing,
            "padding_free": s.padding_free,
            "typical_seq_len": s.typical_seq_len,
            "optimizer_in_backward": s.optimizer_in_backward,
            "use_vllm": s.use_vllm,
            "vllm_mode": s.vllm_mode if s.use_vllm else None,
            "vllm_gpu_memory_utilization": s.vllm_gpu_memory_utilization if s.use_vllm else None,
        },
        "typical_length": p.typical,
        "fixes": p.fixes,
        "notes": p.notes,
    }


def render(p) -> str:
    from vramfit.planner.headroom import HEADROOM

    s = p.setup
    phases = list(p.phase_breakdowns)
    components = [k for k in LABELS if any(k in p.phase_breakdowns[ph] for ph in phases)]
    width = max(len(LABELS[k]) for k in components)
    lines = [
        f"{p.label}: {s.world} x {s.gpu_spec.label} ({p.gpu_memory_gib:.2f} GiB), {s.method}, "
        f"{s.engine}{' ZeRO-' + str(s.zero.stage) if s.zero.stage else ''}"
        f"{f' {s.fsdp_sharding} v{s.fsdp_version}' if s.engine == 'fsdp' else ''}"
        f"{' + optimizer offload' if s.zero.offload_optimizer else ''}{' + param offload' if s.zero.offload_params else ''}, "
        f"micro-batch {s.micro_batch} x {s.seq_len} tokens"
        + (f" ({-(-s.seq_len // s.sequence_parallel)} per GPU, sequence parallel over {s.sequence_parallel})" if s.sequence_parallel > 1 else "")
        + (f" + {s.max_completion_length} completion" if s.method == "grpo" else ""),
        f"parameters: {p.parameters['total'] / 1e9:.3f} B, trainable {p.parameters['trainable'] / 1e9:.3f} B",
        "",
    ]
    head = f"  {'GiB per GPU':<{width}}" + "".join(f"{ph:>16}" for ph in phases)
    lines.append(head)
    for k in components:
        row = f"  {LABELS[k]:<{width}}"
        for ph in phases:
            v = p.phase_breakdowns[ph].get(k)
            row += f"{v:>16.2f}" if v is not None else f"{'-':>16}"
        lines.append(row)
    lines.append(f"  {'total':<{width}}" + "".join(f"{p.phases[ph]:>16.2f}" for ph in phases))
    lines.append("")
    terms = " + ".join(f"{LABELS[k]} {v:.2f}" for k, v in p.breakdown.items() if v >= 0.005)
    verdict = "FITS" if p.fits else "DOES NOT FIT"
    lines.append(f"per-GPU peak ({p.peak_phase}) = {terms} = {p.per_gpu_peak_gib:.2f} GiB")
    lines.append(f"GPU: {p.per_gpu_peak_gib:.2f} GiB vs {p.usable_gib:.2f} GiB usable ({p.gpu_memory_gib:.2f} GiB less {HEADROOM:.0%} headroom): {verdict}")
    host_terms = " + ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in p.host_breakdown.items())
    if p.host_ram_available_gib is None:
        lines.append(f"host RAM per node = {host_terms} = {p.host_ram_gib:.1f} GiB (node size not given: not checked)")
    else:
        lines.append(
            f"host RAM per node = {host_terms} = {p.host_ram_gib:.1f} GiB vs "
            f"{p.host_ram_available_gib * (1 - HEADROOM):.1f} GiB usable of {p.host_ram_available_gib:g} GiB: "
            f"{'FITS' if p.host_ram_fits else 'DOES NOT FIT'}"
        )
    for note in p.notes:
        lines.append(f"note: {note}")
    if not p.ok and p.fixes_searched:
        lines.append("")
        if p.fixes:
            lines.append("smallest fixes (each re-planned), cheapest first:")
            for fix in p.fixes:
                args = " ".join(f"{k}={_text(v)}" for k, v in fix["overrides"].items())
                lines.append(f"  {args}")
                lines.append(f"      -> {fix['per_gpu_peak_gib']:.2f} GiB per GPU, host {fix['host_ram_gib']:.1f} GiB: {fix['why']}")
        else:
            lines.append("no single or combined change from the fix list fits: more GPUs or a larger card.")
    return "\n".join(lines)


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def plot(p, path) -> None:
    """Stacked bars per phase against the card's capacity and the usable line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = list(p.phase_breakdowns)
    components = [k for k in LABELS if any(k in p.phase_breakdowns[ph] for ph in phases)]
    fig, ax = plt.subplots(figsize=(1.8 * len(phases) + 5, 5))
    bottoms = [0.0] * len(phases)
    cmap = plt.get_cmap("tab20")
    for i, k in enumerate(components):
        values = [p.phase_breakdowns[ph].get(k, 0.0) for ph in phases]
        ax.bar(phases, values, bottom=bottoms, label=LABELS[k], color=cmap(i % 20))
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.axhline(p.gpu_memory_gib, color="black", linestyle="-", linewidth=1.2, label=f"capacity {p.gpu_memory_gib:.1f} GiB")
    ax.axhline(p.usable_gib, color="red", linestyle="--", linewidth=1.0, label=f"usable {p.usable_gib:.1f} GiB")
    ax.set_ylabel("GiB per GPU")
    ax.set_title(f"{p.label}: {'fits' if p.fits else 'does not fit'} ({p.per_gpu_peak_gib:.1f} GiB peak, {p.peak_phase})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
