"""What the doctor concluded about one log."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

KINDS = (
    "cuda_oom",
    "host_oom",
    "shm_exhausted",
    "nccl_timeout",
    "collective_mismatch",
    "batch_mismatch",
    "config_mismatch",
    "grpo_divisibility",
    "checkpointing_error",
    "other_error",
    "unknown",
)
PHASES = ("model_load", "forward", "backward", "optimizer_step", "evaluation", "generation", "checkpoint_save", "unknown")
CAUSES = (
    "true_capacity",
    "fragmentation",
    "evaluation_spike",
    "generation_rollout",
    "host_ram",
    "configuration_error",
    "communication",
    "shared_memory",
    "not_memory",
    "unknown",
)


@dataclass
class Diagnosis:
    source: str  # the log's path, or the stream's name
    kind: str = "unknown"  # KINDS
    phase: str = "unknown"  # PHASES
    cause: str = "unknown"  # CAUSES
    why: str = ""  # one sentence on the cause, quoting the numbers read
    figures: dict = field(default_factory=dict)  # *_gib floats, gpu, step, and kind-specific numbers
    # Each fix: {"overrides": {name: value}} (recipe / TrainingArguments / GRPOConfig names),
    # {"env": {VAR: value}} or {"deepspeed": {dotted.key: value}} (an edit inside the DeepSpeed JSON),
    # with "why"; cheapest first.
    fixes: list = field(default_factory=list)
    evidence: list = field(default_factory=list)  # [{"line": n, "text": "..."}], a few
    ranks: list = field(default_factory=list)  # ranks that failed, if the log says
    notes: list = field(default_factory=list)  # other failures in the log and how they relate
    settings: dict = field(default_factory=dict)  # run settings read from the log
    lines_read: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)
