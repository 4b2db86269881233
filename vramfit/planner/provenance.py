"""Where each measured constant of the planner comes from, and what it falls back to.

Most of the planner is read off library code (bytes per element, what an op saves, bucket sizes,
defaults) and papers (Korthikanti et al. 2022; Dettmers et al. 2023); those carry their citation
where they are used. The constants below are the ones taken from a *measurement*. Each names the
measurement and which published-peak source (the benchmark's `source` keys) it was read from or
compared with, if any, the benchmark figures (ids of scenarios.jsonl, heldout_figures.jsonl,
external_figures.jsonl) it was read from - none, for every constant here - and the value the planner
would use without it - derived from library code or a paper, not from a measurement.

Leave-one-source-out (`benchmarks/planner_accuracy.py`): for each benchmark source, every constant
whose evidence came from that source (`calibrated_on`, or a figure of that source in `from_figures`)
is re-derived without it. Each constant here rests on one measurement, so without it nothing is left
and the constant takes its fallback; then every figure of the source is predicted again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Benchmark source keys (benchmarks/planner_accuracy.py `source_of`).
PEFT, QWEN, MINICPM, TORCHTUNE = "huggingface/peft", "QwenLM/Qwen", "OpenBMB/MiniCPM-V", "pytorch/torchtune"


@dataclass(frozen=True)
class Constant:
    module: str  # dotted module path
    name: str  # attribute
    measured_in: str  # the measurement it is read from
    calibrated_on: str | None  # the benchmark source it was read from / compared with, None when none
    fallback: Any  # the value without that measurement
    fallback_source: str  # library code or paper the fallback comes from
    affects: str  # which figures it moves
    from_figures: tuple[str, ...] = ()  # benchmark figure ids the value was read from (none here)


CONSTANTS = (
    Constant(
        "vramfit.planner.plan",
        "FRAGMENTATION",
        "InternLM/InternLM-XComposer#118: 7.0 GiB reserved-but-unallocated next to 28.77 GiB allocated",
        None,
        0.0,
        "none: without a measurement the caching allocator's reserve is unknown (0 = allocated only)",
        "reserved / nvidia-smi / unstated rows",
    ),
    Constant(
        "vramfit.planner.plan",
        "FRAGMENTATION_EXPANDABLE",
        "OpenBMB/MiniCPM-V#338: 683.81 MiB reserved-but-unallocated of 77.49 GiB with expandable_segments",
        MINICPM,
        0.0,
        "c10/cuda/CUDACachingAllocator.cpp expandable segments: pages mapped on demand, 2 MiB granularity",
        "runs with expandable_segments (no benchmark row sets it)",
    ),
    Constant(
        "vramfit.planner.host",
        "PROCESS_BASE",
        "huggingface/peft README: '2.96 GB CPU' for a single-GPU loop with nothing offloaded",
        PEFT,
        0.0,
        "none (host RAM only)",
        "host RAM, never a GPU figure",
    ),
    Constant(
        "vramfit.hardware",
        "CATALOGUE[*].context_gib",
        "hardware.py: 'nvidia-smi minus max_memory_reserved on an idle trained process' (no source named)",
        None,
        None,
        "kept: no published-peak source named for it",
        "nvidia-smi rows",
    ),
)


def calibrated_on(source: str, figures: tuple[str, ...] | list[str] = ()) -> list[Constant]:
    """The constants read from (or compared with) `source`, or from any of its benchmark `figures`."""
    wanted = set(figures)
    return [c for c in CONSTANTS if c.calibrated_on == source or wanted & set(c.from_figures)]
