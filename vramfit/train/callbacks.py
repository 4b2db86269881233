"""What a run leaves in its output directory besides the Trainer's own files.

- metrics.jsonl: every logged dict (loss, grad_norm, rewards, ...) with its step, from rank 0;
- param_check.json: a fingerprint (sum, sum of squares) of every parameter before and after
  training, with its part and whether it trained: trained parameters must move, frozen ones must
  not (under ZeRO-3 each parameter is gathered from its shards first);
- checkpoint-N/COMPLETE: written once every rank has saved checkpoint N (what `--resume` trusts).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from vramfit import outputs
from vramfit.train.model import part_of


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


class MetricsLog(TrainerCallback):
    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            values = {k: v for k, v in logs.items() if isinstance(v, (int, float, str))}
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": state.global_step, **values}) + "\n")


def fingerprint(model) -> dict[str, list[float]]:
    """(sum, sum of squares) of every parameter in float64; collective under ZeRO-3 (every rank calls it).

    bitsandbytes-quantized weights are packed bytes (in a float dtype when quant_storage is one), so
    their bytes are summed instead of their meaningless float values.
    """
    import deepspeed

    prints = {}
    for name, param in model.named_parameters():
        with deepspeed.zero.GatheredParameters([param], modifier_rank=None, enabled=hasattr(param, "ds_id")):
            data = param.data.detach()
            data = (data.contiguous().view(torch.uint8) if hasattr(param, "quant_state") or hasattr(param, "SCB") else data).double()
            prints[name] = [data.sum().item(), data.square().sum().item()]
    return prints


class ParamCheck(TrainerCallback):
    def __init__(self, path: Path):
        self.path = path
        self.before: dict[str, list[float]] = {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.before = fingerprint(model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        after = fingerprint(model)
        if not state.is_world_process_zero:
            return
        params = {
            name: {
                "part": part_of(name),
                "trainable": param.requires_grad,
                "before": self.before[name],
                "after": after[name],
                "changed": self.before[name] != after[name],
                "finite": all(math.isfinite(v) for v in after[name]),
            }
            for name, param in model.named_parameters()
        }
        self.path.write_text(json.dumps({"steps": state.global_step, "params": params}, indent=1) + "\n")


class MarkComplete(TrainerCallback):
    """After every rank has written checkpoint-N, rank 0 marks it complete."""

    def on_save(self, args, state, control, **kwargs):
        _barrier()
        if state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if checkpoint.is_dir():
                outputs.mark_complete(checkpoint, state.global_step, args.world_size)


class ProgressLine(TrainerCallback):
    """One short line per logged step on rank 0, in place of the Trainer's progress bar (or its raw dicts)."""

    KEYS = (("loss", "loss", ".4g"), ("reward", "reward", ".3g"), ("grad_norm", "grad", ".3g"), ("learning_rate", "lr", ".2e"))

    def on_log(self, args, state, control, logs=None, **kwargs):
        # the Trainer's end-of-training log carries train_loss (train_runtime is in every step's log once
        # input tokens are counted: include_num_input_tokens_seen)
        if not state.is_world_process_zero or not logs or "train_loss" in logs:
            return
        parts = [f"{label} {logs[key]:{fmt}}" for key, label, fmt in self.KEYS if isinstance(logs.get(key), (int, float))]
        if parts:
            print(f"vramfit: step {state.global_step}/{state.max_steps}  " + "  ".join(parts), flush=True)


def _peak_memory_bytes() -> int | None:
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.max_memory_reserved())


class RunSummary(TrainerCallback):
    """Rank 0 writes summary.json (vramfit.train.summary renders it): steps, first/last loss and reward,
    tokens, training time, and every rank's measured peak GPU memory (None on CPU)."""

    def __init__(self, path: Path, method: str):
        self.path = path
        self.method = method
        self.rows: list[dict] = []

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.path.unlink(missing_ok=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs:
            self.rows.append({"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}})

    def on_train_end(self, args, state, control, **kwargs):
        from vramfit.train.summary import from_metrics

        peak = _peak_memory_bytes()
        peaks = [peak]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            peaks = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(peaks, peak)
        if state.is_world_process_zero:
            facts = {**from_metrics(self.rows, self.method), "steps": state.global_step, "max_steps": state.max_steps, "peak_memory_bytes": peaks}
            self.path.write_text(json.dumps(facts, indent=1) + "\n")


def quiet_printer(trainer) -> None:
    """With the progress bar off (quiet), the Trainer prints every logged dict raw: ProgressLine says it in one line."""
    from transformers.trainer_callback import PrinterCallback

    if any(isinstance(c, ProgressLine) for c in trainer.callback_handler.callbacks):
        trainer.remove_callback(PrinterCallback)
