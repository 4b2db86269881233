"""The run's settings as the log shows them: launch command, TrainingArguments dump, DeepSpeed config.

Only the handful of settings the fixes need are read, each under its Hugging Face / TRL name; the
first valid value wins (launch command and argument dumps come first; error messages are not read).
"""

from __future__ import annotations

import re

from vramfit.doctor.units import gib

# canonical name -> (type, spellings seen in logs: CLI flags, dataclass reprs, YAML, banners)
KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "per_device_train_batch_size": (
        "int",
        ("per_device_train_batch_size", "micro_batch_size", "train_micro_batch_size_per_gpu", "instantaneous batch size per device"),
    ),
    "per_device_eval_batch_size": ("int", ("per_device_eval_batch_size", "eval_batch_size")),
    "gradient_accumulation_steps": ("int", ("gradient_accumulation_steps",)),
    "global_batch_size": ("int", ("train_batch_size", "total train batch size (w. parallel, distributed & accumulation)")),
    "max_steps": ("int", ("total optimization steps",)),
    "eval_steps": ("int", ("eval_steps",)),
    "eval_strategy": ("word", ("eval_strategy", "evaluation_strategy")),
    "num_generations": ("int", ("num_generations",)),
    "max_completion_length": ("int", ("max_completion_length",)),
    "generation_batch_size": ("int", ("generation_batch_size",)),
    "gradient_checkpointing": ("bool", ("gradient_checkpointing",)),
    "use_liger_kernel": ("bool", ("use_liger_kernel", "liger_fused_linear_cross_entropy")),
    "world_size": ("int", ("world_size", "dist_world_size")),
    "nproc_per_node": ("int", ("nproc_per_node", "num_local_procs", "num_gpus", "num_processes", "num processes")),
    "nnodes": ("int", ("nnodes", "num_nodes")),
    "ddp_timeout": ("int", ("ddp_timeout",)),
    "max_pixels": ("int", ("max_pixels",)),
    "dataloader_num_workers": ("int", ("dataloader_num_workers",)),
    "dataloader_pin_memory": ("bool", ("dataloader_pin_memory",)),
    "zero_stage": ("int", ("zero_stage", "zero_optimization_stage")),
    "vocab_size": ("int", ("vocab_size",)),
    "max_seq_length": ("int", ("max_seq_length", "max_seq_len", "cutoff_len", "seq_length")),
}
_SPELLING = {re.sub(r"[ -]", "_", s): k for k, (_, spellings) in KEYS.items() for s in spellings}
_KEYS = "|".join("[_ -]".join(re.escape(part) for part in s.split("_")) for s in sorted(_SPELLING, key=len, reverse=True))
# key, then "=", ":", spaces or DeepSpeed's dotted padding, then the value
SETTING = re.compile(
    r"(?<![\w.-])(?:--)?(" + _KEYS + r")[\"']?(?:\s*[=:]\s*|\s+(?:\.+\s+)?)[\"']?([\w.:/-]+)",
    re.IGNORECASE,
)
OFFLOAD_REPR = re.compile(  # DeepSpeed's config print: offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu', ...)
    r"offload_(param|optimizer)=\w*\(device=[^,]*?\b(cpu|nvme|none)\b[^)]*?pin_memory=(True|False)"
)
OFFLOAD_SECTION = re.compile(r"[\"']offload_(param|optimizer)[\"']\s*:\s*\{")
JSON_DEVICE = re.compile(r"[\"']device[\"']\s*:\s*[\"'](\w+)")
JSON_PIN = re.compile(r"[\"']pin_memory[\"']\s*:\s*(true|false)", re.IGNORECASE)
JSON_STAGE = re.compile(r"[\"']stage[\"']\s*:\s*(\d)")
REPR_STAGE = re.compile(r"zero_config\b.*?\bstage=(\d)|deepspeed\W+\S*zero(\d)")  # or a JSON named zero3*
ZERO3_FILES = ("zero/stage3.py", "partition_parameters.py", "parameter_offload.py", "partitioned_param_coordinator")
# A tensor's shape as torch prints it, only where the line says it is a shape: torch.Size([4, 4096, 32000]),
# view's "shape '[4, 4096, 32000]' is invalid", "of shape [..]" / "shape=(..)" in warnings. Bare lists are not read.
SHAPE = re.compile(r"(?:torch\.Size\(\[|\bshape\s*[=:]?\s*'?[\[(])(\d+(?:,\s*\d+)*)[\])]")
# Vocabularies of the model families in the logs people paste; a log's own vocab_size is used first.
VOCABS = frozenset(
    {
        30522,
        32000,
        32001,
        32002,
        32016,
        32064,
        32128,
        32256,
        49152,
        50257,
        50265,
        50272,
        50280,
        50304,
        51200,
        64000,
        65024,
        92416,
        92544,
        100352,
        102400,
        128256,
        151646,
        151936,
        152064,
        163840,
        250002,
        250112,
        256000,
        262144,
    }
)
MAX_ROWS = 512  # a leading dimension above this is not a micro-batch
# FSDP as launch commands and configs spell it: TrainingArguments `--fsdp "full_shard auto_wrap offload"` (or
# `fsdp: ...` in YAML), accelerate's `distributed_type: FSDP` and `fsdp_offload_params: true`, llama-recipes'
# `--enable_fsdp`, torch's `CPUOffload(offload_params=True)`.
FSDP_OPTIONS = re.compile(
    r"(?<![\w.-])(?:--)?fsdp[\"']?\s*[=: ]\s*[\"'\[]*((?:(?:full_shard|shard_grad_op|hybrid_shard|hybrid_shard_zero2|no_shard|offload|auto_wrap)[\"',\s]*)+)"
)
FSDP_ON = re.compile(r"--enable_fsdp\b|distributed_type\W+(?:DistributedType\.)?FSDP\b|\bfsdp_config\b|\bfsdp_version\b")
FSDP_OFFLOAD = re.compile(r"fsdp_offload_params\W+true|offload_params=True|cpu_offload\W+true", re.IGNORECASE)
ALLOC_CONF = re.compile(r"PYTORCH_CUDA_ALLOC_CONF\s*[=:]\s*[\"']?([\w:,.]+)")


def _value(kind: str, text: str):
    if kind == "int":
        return int(float(text)) if re.fullmatch(r"\d+(?:\.0+)?", text) else None
    if kind == "bool":
        return {"true": True, "false": False}.get(text.lower())
    word = text.rsplit(".", 1)[-1].lower()  # IntervalStrategy.STEPS -> steps
    return word if word.isidentifier() else None


class Settings:
    """Accumulates settings line by line; `values` maps canonical names to values."""

    def __init__(self):
        self.values: dict = {}
        self._section: dict[str, tuple[str, int]] = {}  # per stream: open offload block, lines left
        self.shapes: list[tuple[int, int, int, int, str]] = []  # logits shapes: (line, rows, seq, vocab, text)

    def _set(self, key: str, value) -> None:
        if value is not None:
            self.values.setdefault(key, value)

    def read(self, stream: str, text: str) -> bool:
        """Take what this line says; True if it taught anything new (or is inside a config block)."""
        known = len(self.values)
        for match in SETTING.finditer(text):
            key = _SPELLING[re.sub(r"[ -]", "_", match.group(1).lower())]
            self._set(key, _value(KEYS[key][0], match.group(2)))
        if "deepspeed" in text.lower():
            self.values.setdefault("uses_deepspeed", True)
        if "offload" in text or "device" in text or "pin_memory" in text:
            self._offload(stream, text)
        if "fsdp" in text.lower() or "offload_params" in text:
            self._fsdp(text)
        match = JSON_STAGE.search(text) or REPR_STAGE.search(text)
        if match:
            self._set("zero_stage", int(match.group(1) or match.group(2)))
        if "PYTORCH_CUDA_ALLOC_CONF" in text and "try setting" not in text:
            match = ALLOC_CONF.search(text)
            if match:
                self._set("PYTORCH_CUDA_ALLOC_CONF", match.group(1))
        return len(self.values) > known or stream in self._section

    def read_shapes(self, line: int, text: str) -> None:
        """Keep each logits-shaped tensor the line prints, [rows, sequence, vocabulary]: three dimensions, the
        last a vocabulary (the log's vocab_size, or a known model family's), the first a plausible batch
        shorter than the sequence. Weight shapes ([32000, 4096]) and anything else are left alone."""
        if "ize" not in text and "shape" not in text or len(self.shapes) >= 8:
            return
        for match in SHAPE.finditer(text):
            dims = [int(d) for d in match.group(1).split(",")]
            if len(dims) != 3:
                continue
            rows, seq, vocab = dims
            known = self.values.get("vocab_size")
            if (vocab == known or (known is None and vocab in VOCABS)) and 1 <= rows <= MAX_ROWS and rows < seq < vocab:
                self.shapes.append((line, rows, seq, vocab, text.strip()[:160]))

    def micro_batch(self, requested_gib: float | None = None, halve: bool = False):
        """The micro-batch the log's tensors show, with the evidence, or None when they do not say it
        unambiguously. `halve`: the shape is DPO's chosen+rejected concatenation, two rows per sample.
        Without a shape, a request sized exactly rows x seq x vocab x (2 or 4 bytes), with the sequence and
        vocabulary from the log, says it when only one row count fits."""
        rows = {shape[1] for shape in self.shapes}
        if len(rows) == 1:
            line, count, seq, vocab, text = self.shapes[0]
            if halve:
                if count % 2:
                    return None
                count //= 2
            return (
                count,
                {"line": line, "text": text},
                f"the logits shape [{self.shapes[0][1]}, {seq}, {vocab}]" + (" (chosen and rejected concatenated)" if halve else "") + f" at line {line}",
            )
        if rows or not requested_gib or halve:
            return None
        seq, vocab = self.values.get("max_seq_length"), self.values.get("vocab_size")
        if not seq or not vocab or seq > 1 << 20:
            return None
        fits = []
        for width in (2, 4):
            count = requested_gib * 2**30 / (seq * vocab * width)
            # the message prints two decimals of GiB (or of MiB below 1 GiB): allow that rounding, nothing more
            slack = 0.006 * (2**30 if requested_gib >= 1 else 2**20)
            if round(count) >= 1 and abs(count - round(count)) * seq * vocab * width <= slack:
                fits.append((round(count), width))
        if len(fits) != 1:  # 2 rows in bf16 or 1 in fp32 look the same: say nothing
            return None
        count, width = fits[0]
        return count, None, (f"the {gib(requested_gib)} request is exactly {count} x {seq} x {vocab} x {width} bytes (rows x max_seq_length x vocab_size)")

    def _fsdp(self, text: str) -> None:
        options = FSDP_OPTIONS.search(text)
        if options and not re.fullmatch(r"[\s\"',]*(?:no_shard[\s\"',]*)?", options.group(1)):
            self._set("fsdp", True)
            self._set("fsdp_offload", "offload" in options.group(1))
        if FSDP_ON.search(text):
            self._set("fsdp", True)
        if FSDP_OFFLOAD.search(text):
            self.values["fsdp"] = True
            self.values["fsdp_offload"] = True

    def _offload(self, stream: str, text: str) -> None:
        for which, device, pin in OFFLOAD_REPR.findall(text):
            self._set(f"offload_{which}", device)
            self._set(f"offload_{which}_pin_memory", pin == "True")
        match = OFFLOAD_SECTION.search(text)
        if match:
            self._section[stream] = (match.group(1), 8)
            text = text[match.end() :]
        if stream not in self._section:
            return
        which, left = self._section[stream]
        device, pin = JSON_DEVICE.search(text), JSON_PIN.search(text)
        if device:
            self._set(f"offload_{which}", device.group(1).lower())
        if pin:
            self._set(f"offload_{which}_pin_memory", pin.group(1).lower() == "true")
        if "}" in text or left <= 1:
            del self._section[stream]
        else:
            self._section[stream] = (which, left - 1)

    def from_frame(self, path: str, func: str) -> None:
        """What a traceback's frames prove about the run: a frame inside ZeRO-3's files means ZeRO-3 is on,
        whatever an earlier line said; one inside torch.utils.checkpoint means checkpointing is on."""
        v = self.values
        if "deepspeed" in path:
            v.setdefault("uses_deepspeed", True)
            if any(name in path for name in ZERO3_FILES):
                v["zero_stage"] = 3
            elif "stage_1_and_2" in path or "zero/stage2" in path or "zero/stage1" in path:
                if v.get("zero_stage") == 3 or v.get("zero_stage") is None:
                    v["zero_stage"] = 2
            if "cpu_adam" in path:
                v["offload_optimizer"] = v.get("offload_optimizer") if v.get("offload_optimizer") in ("cpu", "nvme") else "cpu"
        if "torch/utils/checkpoint" in path or func in ("checkpoint", "_checkpoint_without_reentrant_generator"):
            v["gradient_checkpointing"] = True
        if "fully_sharded_data_parallel" in path or "/fsdp/" in path:
            v.setdefault("fsdp", True)

    def per_node(self) -> int | None:
        """Ranks per node: what shares one host's RAM."""
        v = self.values
        if "nproc_per_node" in v:
            return v["nproc_per_node"]
        world = self.world_size()
        return world // v.get("nnodes", 1) if world else None

    def world_size(self) -> int | None:
        v = self.values
        if "world_size" in v:
            return v["world_size"]
        if "nproc_per_node" in v:
            return v["nproc_per_node"] * v.get("nnodes", 1)
        per_device, accumulation = v.get("per_device_train_batch_size"), v.get("gradient_accumulation_steps")
        if v.get("global_batch_size") and per_device and accumulation:
            return v["global_batch_size"] // (per_device * accumulation) or None
        return None
