"""The ranked table and the JSON of a fit `Result` (one voice with `vramfit plan`)."""

from __future__ import annotations

from typing import Any

from vramfit.fit import steptime
from vramfit.fit.search import Candidate, Result, _short


def _efficiencies(result: Result) -> dict[str, Any]:
    g = result.base.gpu_spec
    return {
        "matmul": f"{steptime.E_MM:.0%} of {g.peak_tflops:g} TFLOP/s",
        "memory": f"{steptime.E_BW:.0%} of {g.memory_gbs:g} GB/s",
        "links": f"{steptime.E_LINK:.0%} of {g.link_gbs:g} GB/s ({g.link})"
        + (f", {g.network_gbs:g} GB/s per GPU between nodes" if result.base.nodes > 1 else ""),
        "pcie": f"{steptime.E_PCIE:.0%} of {g.pcie_gbs:g} GB/s",
        "host_adam": f"{steptime.CPU_ADAM_BYTES} B/param at {steptime.HOST_BW / 1e9:g} GB/s per node",
    }


def _row(result: Result, c: Candidate, rank: int | None) -> dict[str, Any]:
    return {
        "rank": rank,
        "config": result.diff(c),
        "knobs": c.knobs,
        "fits": c.fits,
        "writable": c.writable,
        "peak_gib": round(c.plan.per_gpu_peak_gib, 2),
        "usable_gib": round(c.plan.usable_gib, 2),
        "margin_gib": round(c.margin_gib, 2),
        "host_ram_gib": round(c.plan.host_ram_gib, 1),
        "step_s": round(c.time.seconds, 4),
        "tokens_per_s": round(c.time.tokens_per_s, 1),
        "tokens_per_step": c.time.tokens_per_step,
        "flops_per_micro_batch": c.time.flops_per_micro,
        "flops_source": c.time.flops_source,
        "step_parts_s": {k: round(v, 4) for k, v in c.time.parts.items()},
        "comm_gb_per_step": round(c.time.comm_bytes / 1e9, 3),
    }


def to_json(result: Result, top: int = 10) -> dict[str, Any]:
    b = result.base
    win = result.winner
    closest = sorted(result.candidates, key=lambda c: c.plan.per_gpu_peak_gib)[:top] if win is None else []
    return {
        "label": result.label,
        "method": b.method,
        "gpu": b.gpu,
        "gpus_per_node": b.gpus_per_node,
        "nodes": b.nodes,
        "global_batch_size": result.global_batch,
        "seq_len": b.seq_len,
        "pins": result.pins,
        "base": result.base_knobs,
        "searched": len(result.candidates),
        "fitting": len(result.ranked),
        "seconds": round(result.seconds, 3),
        "flops_source": result.flops_source,
        "efficiencies": _efficiencies(result),
        "winner": _row(result, win, 1) if win else None,
        "ranked": [_row(result, c, i + 1) for i, c in enumerate(result.ranked[:top])],
        "closest": [_row(result, c, None) for c in closest],
        "rejected": result.rejected,
        "notes": result.notes,
    }


def table(result: Result, top: int = 10) -> str:
    b = result.base
    g = b.gpu_spec
    win = result.winner
    hw = f"{b.nodes} x {b.gpus_per_node} x {b.gpu} ({g.memory_gib:.1f} GiB)"
    out = [
        f"vramfit fit: {result.label}, {b.method} on {hw}, global batch {result.global_batch} x {b.seq_len + (b.max_completion_length if b.method == 'grpo' else 0)} tokens",
        f"searched {len(result.candidates)} configurations in {result.seconds:.1f} s; {len(result.ranked)} fit",
        "step time: " + "; ".join(f"{k} {v}" for k, v in _efficiencies(result).items()) + f"; FLOPs: {result.flops_source}",
    ]
    if result.pins:
        out.append("pinned: " + _short(result.pins))
    out.append("")
    shown = win or result.ranked
    rows = result.ranked[:top] if shown else sorted(result.candidates, key=lambda c: c.plan.per_gpu_peak_gib)[:top]
    out.append(
        "ranked (config as a diff from the " + ("recipe" if result.label == b.label and b.source != "vramfit plan" else "defaults") + "):"
        if win
        else ("these fit, but none is writable as a recipe (see the notes):" if shown else "nothing fits; the lowest peaks:")
    )
    header = f"{'#':>3}  {'config':<70} {'peak GiB':>8} {'margin':>7} {'s/step':>8} {'tokens/s':>10}"
    out.append(header)
    for i, c in enumerate(rows):
        diff = _short(result.diff(c)) or "(as the base)"
        mark = "" if c.writable else "  [not writable]"
        out.append(
            f"{i + 1 if shown else '-':>3}  {diff + mark:<70} {c.plan.per_gpu_peak_gib:>8.1f} {c.margin_gib:>+7.1f} "
            f"{c.time.seconds:>8.2f} {c.time.tokens_per_s:>10,.0f}"
        )
    if win:
        parts = " + ".join(f"{k} {v:.2f}" for k, v in win.time.parts.items())
        out += [
            "",
            f"winner: {_short(result.diff(win)) or 'the base configuration'}",
            f"  peak {win.plan.per_gpu_peak_gib:.1f} of {win.plan.usable_gib:.1f} GiB usable (margin {win.margin_gib:.1f}); "
            f"host RAM {win.plan.host_ram_gib:.0f} GiB per node",
            f"  step {win.time.seconds:.2f} s = {parts}; {win.time.tokens_per_s:,.0f} tokens/s",
        ]
    if result.rejected:
        out += ["", "rejected (each family value not chosen, and why):"]
        for r in result.rejected:
            value = r["value"]
            value = ("true" if value else "false") if isinstance(value, bool) else value
            out.append(f"  {r['knob']}={value}: {r['reason']}")
    if result.notes:
        out += ["", *(f"note: {n}" for n in result.notes)]
    return "\n".join(out)
