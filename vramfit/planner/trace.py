"""The training step traced on the real model code, on the CPU, without the memory: fake tensors.

The model is built from its config by transformers under
`torch._subclasses.fake_tensor.FakeTensorMode` at its real widths, in the setup's dtype, attention
implementation, gradient checkpointing and LoRA (PEFT, which runs under fake tensors as it does on
a GPU), and one training step (forward, loss, backward, optimizer step) runs under
`torch.distributed._tools.mem_tracker.MemTracker`, which records every storage the step allocates
and frees, by category (parameter, buffer, gradient, activation, temporary, optimizer state).
the FLOPs of the same step (the recomputation of checkpointed layers included) are counted with
`torch.utils.flop_counter`'s own per-op formulas (FlopCounterMode's registry, applied in the
tracker's dispatch: FlopCounterMode's module tracker would hook the graph as ModTracker does, below).

Depth: the model is traced at two depths of its layer stacks (and a third to check that the kept
bytes grow linearly with depth) and extrapolated linearly to the full depth; a vision tower is
traced at two depths of its own. A trace that is not linear says so (`Trace.linear`).

Length: a text stack whose layers mix the sequence without attention (Qwen3-Next / Qwen3.5 Gated DeltaNet, Mamba)
runs, without its CUDA kernels, a Python loop per chunk or per token, so its trace takes time in proportion to the
length. Above 1,024 tokens such a model is traced at 128, 256, 384 and 512 tokens per sample and extrapolated in length,
moment by moment: along the parabola through the three longest when it meets the shortest exactly (an s x s attention
mask), else along the line through the two longest, the shorter two checked as depth is (`_length_extrapolate`). The
short runs are cached apart from the run's length (`Trace.lengths`; the plan says so).

What a GPU run keeps and a CPU run would not, made to match:
- attention: `F.scaled_dot_product_attention` picks its kernel per device. CUDA (torch
  aten/src/ATen/native/transformers/cuda/sdp_utils.cpp `select_sdp_backend`) takes flash attention
  for 16-bit inputs without an explicit mask and head_dim <= 256, else memory-efficient attention,
  else the math path; the trace calls the same CUDA kernels (`aten._scaled_dot_product_flash_attention`,
  `aten._scaled_dot_product_efficient_attention`, whose fake implementations give the tensors those
  kernels save), not the CPU flash kernel. `attn_implementation=flash_attention_2` is traced as SDPA's
  flash kernel: the same saved tensors (q, k, v, output, log-sum-exp).
- dropout: CUDA runs the fused `native_dropout`, which keeps a bool mask; the CPU multiplies by a
  noise tensor in the input's dtype (aten/src/ATen/native/Dropout.cpp). The trace calls the fused op.
- autocast: mixed precision outside DeepSpeed (fp32 weights, torch.autocast) follows CUDA's op lists
  (torch aten/src/ATen/autocast_mode.cpp, `AT_FORALL_LOWER_PRECISION_FP` / `AT_FORALL_FP32`), which
  differ from the CPU's: on CUDA layer_norm, softmax, log_softmax and the losses run in fp32 (and
  their outputs are kept in fp32), on the CPU they do not. `_CudaAutocast` applies the CUDA lists.
  Under DeepSpeed (bf16 / fp16 engines) the module itself is 16-bit and nothing is autocast.

What cannot run under fake tensors stays modelled analytically (training.py), and the plan says so:
bitsandbytes 4/8-bit kernels (a quantized base is traced as its 16-bit layout, the dequantized
weight is added analytically), Liger's Triton kernels, MoE routing and other code that branches on
tensor values, the GRPO generation loop, the DeepSpeed / FSDP sharding of model states.

API (stable; `vramfit fit`, issue 18, calls it):

    trace_step(setup, arch=None, *, cache=True) -> Trace
        Trace.peak_bytes         allocated peak of one single-GPU training step at full depth (bytes)
        Trace.by_category        MemTracker categories at that peak (bytes): Parameter, Buffer,
                                 Gradient, Activation, Temp, Optstate
        Trace.train_transient    peak of activations + temporaries during forward + backward (bytes)
        Trace.step_transient     temporaries of the optimizer step beyond its states (bytes)
        Trace.flops              FLOPs of one micro-batch step: forward + backward incl. recompute
        Trace.linear / depths / lengths / per_layer / seconds / cached / traced / modelled / notes
    step_flops(setup, arch=None) -> int
        the same FLOPs from the architecture's shapes (no trace; microseconds)
    TraceError: the model cannot be traced (the reason is its message); callers fall back to the
        analytic model and state it.

Traces are cached on disk under the user cache dir (params.cache_dir() / "trace"), keyed by the
config text, every setup field the trace reads, the trace schema and the torch / transformers /
peft versions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramfit.libraries import store_json
from vramfit.planner import params

SCHEMA = 4  # bump when what a trace measures changes: part of the cache key
CATEGORIES = ("Parameter", "Buffer", "Gradient", "Activation", "Temp", "Optstate", "Other")
# Relative tolerance of the linearity check: the middle depth's bytes against the line through
# the outer two. Fake tensors are exact, so any departure is a real non-linearity (a layer that
# differs from the others, an interleaved pattern longer than the traced depth).
LINEARITY_TOLERANCE = 0.01
LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "depth", "encoder_layers", "decoder_layers", "num_decoder_layers")


class TraceError(RuntimeError):
    """The step cannot be traced under fake tensors; the message says why."""


@dataclass(frozen=True)
class Trace:
    peak_bytes: int
    by_category: dict[str, int]
    train_transient: int
    step_transient: int
    flops: int
    linear: bool
    depths: tuple[tuple[int, int], ...]  # (text layers, vision layers) of each traced model
    per_layer: dict[str, int]  # bytes of train_transient per added layer, per stack
    seconds: float
    cached: bool = False
    traced: tuple[str, ...] = ()
    modelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    lengths: tuple[int, ...] = ()  # tokens per sample traced and extrapolated in length (`_length_plan`); () at the run's own

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------------------------
# Cache
# ----------------------------------------------------------------------------------------------

TRACE_FIELDS = (
    "method",
    "train_llm",
    "train_projector",
    "train_vision",
    "lora_r",
    "lora_targets",
    "lora_target_parameters",
    "lora_dropout",
    "modules_to_save",
    "quantization",
    "frozen_fp32",
    "master_fp32",
    "precision",
    "optimizer",
    "attention",
    "gradient_checkpointing",
    "seq_len",
    "decoder_seq_len",
    "micro_batch",
    "images_per_sample",
    "image_tokens",
    "vision_patches",
    "engine",
)


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("torch", "transformers", "peft"):
        try:
            out.append(f"{name}={version(name)}")
        except PackageNotFoundError:
            out.append(f"{name}=none")
    return ",".join(out)


def trace_key(setup) -> str:
    text = Path(setup.model_config).read_text(encoding="utf-8")
    knobs = {f: _jsonable(getattr(setup, f)) for f in TRACE_FIELDS}
    arch = params.summary(setup.model_config)
    if arch.encoder_decoder:
        # the class the trace builds (params.auto_classes): encoder-decoder configs were built as their
        # *ForCausalLM decoder before schema 3's key; decoder-only keys are unchanged
        knobs["architecture"] = arch.architecture
    from vramfit.planner.training import lora_input_copy_bytes

    if setup.loss_kernel == "chunked":
        # the causal LM's loss patched as a chunked cross-entropy (`_chunked_loss`); traces of the model's own loss keep
        # their keys
        knobs["loss"] = f"chunked-{setup.loss_chunks}" + ("-compiled" if setup.compile_loss else "")
    if any(s.mixers for s in arch.stacks.values()):
        # the sequence mixers' path (mixer_kernels.py): a trace of a model without such layers keeps its key
        knobs["mixer_kernels"] = setup.mixer_kernels
    if setup.lora and lora_input_copy_bytes(setup):
        # PEFT's fp32 adapters on a 16-bit base (AMP, or autocast_adapter_dtype=true): traced in the compute dtype
        # before; only these keys change
        knobs["lora_fp32_adapters"] = True
    if setup.engine == "fsdp" and not setup.master_fp32 and setup.precision not in ("fp32", "bf16-true"):
        # FSDP's 16-bit compute parameters (`_dtypes`): traced with fp32 weights under autocast before; only these keys change
        knobs["fsdp_compute"] = "param_dtype"
    if getattr(setup, "head", "lm") != "lm":
        # a classification head (the class the trace builds, its labels) or a patched one: only these keys change
        knobs["head"], knobs["num_labels"] = setup.head, setup.num_labels
    raw = json.dumps({"schema": SCHEMA, "versions": _versions(), "config": text, "knobs": knobs}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _jsonable(value):
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _cache_file(key: str) -> Path:
    return params.cache_dir() / "trace" / f"{key}.json"


def _load(key: str) -> Trace | None:
    path = _cache_file(key)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        data["depths"] = tuple(tuple(d) for d in data["depths"])
        for k in ("traced", "modelled", "notes", "lengths"):
            data[k] = tuple(data.get(k, ()))
        return Trace(**{**data, "cached": True})
    except (OSError, ValueError, TypeError, KeyError):
        return None  # stale or damaged: trace again


def _store(key: str, trace: Trace) -> None:
    store_json(_cache_file(key), trace.to_json())  # a read-only cache dir: the trace is still returned


def _load_raw(key: str):
    path = _cache_file(key)
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _store_raw(key: str, data) -> None:
    store_json(_cache_file(key), data)


# ----------------------------------------------------------------------------------------------
# Public entry points
# ----------------------------------------------------------------------------------------------


def trace_step(setup, arch=None, *, cache: bool = True, check_linear: bool = True) -> Trace:
    """Trace one training step of `setup` (see the module docstring). Raises TraceError.

    `check_linear=False` traces two depths instead of three (no linearity check): for sweeps that
    checked the architecture once."""
    key = trace_key(setup) + ("" if check_linear else "-2")
    if cache:
        hit = _memo.get(key) or _load(key)
        if hit is not None:
            _memo[key] = hit
            return hit
    arch = arch or params.summary(setup.model_config)
    result = _trace(setup, arch, check_linear, cache)
    _memo[key] = result
    if cache:
        _store(key, result)
    return result


_memo: dict[str, Trace] = {}
_raw_memo: dict[str, Any] = {}  # the short runs of `_length_runs`, by key


def step_flops(setup, arch=None) -> int:
    """FLOPs of one micro-batch training step (forward + backward, recompute included) from the
    architecture's linear shapes and attention, without tracing: matmuls 2 x tokens x in x out
    forward; backward 2x forward for a trained weight (input and weight gradients), 1x for a frozen
    one that still passes gradients back (LoRA's base), 0 for a frozen weight below every trained one;
    attention 4 x s^2 x heads x head_dim per sample forward (torch's flop_counter counts the full
    square, causal or not), 2.5x that backward (flop_counter.py `sdpa_backward_flop_count`: the
    scores are recomputed, five matmuls); checkpointing adds one forward of the layers."""
    arch = arch or params.summary(setup.model_config)
    counts = params.count(arch, setup)
    b = setup.micro_batch
    total = 0
    recompute = 0
    for name, stack in arch.stacks.items():
        if name == "vision":
            if not setup.images_per_sample:
                continue
            tokens, seq = b * setup.images_per_sample * setup.vision_patches, setup.vision_patches
            trains = counts.vision_grad_layers > 0
            base_grad = counts.vision_full
        else:
            seq = setup.decoder_seq_len or setup.seq_len if name == "decoder" else setup.seq_len
            tokens = b * seq
            trains = True
            base_grad = counts.text_trainable
        mm = sum(lin.in_features * lin.out_features for lin in arch.linears if lin.stack == name and lin.layer >= 0)
        lora = 0
        if setup.lora_r and name != "vision" or (name == "vision" and counts.vision_grad_layers and not counts.vision_full):
            lora = sum(setup.lora_r * (a.in_features + a.in_features) * a.per_layer for a in counts.adapted if a.stack == name) * stack.layers / 2
        attn = 4 * seq * stack.heads * stack.head_dim * stack.layers  # per token
        fwd = 2 * tokens * (mm + lora) + attn * tokens
        if not trains:
            total += fwd
            continue
        bwd = (2 if base_grad else 1) * 2 * tokens * mm + 2 * 2 * tokens * lora + 2.5 * attn * tokens
        total += fwd + bwd
        if setup.gradient_checkpointing:
            recompute += fwd
    head = 2 * b * (setup.decoder_seq_len or setup.seq_len) * arch.vocab * arch.text.hidden if arch.vocab else 0
    total += head * (3 if counts.lm_head_trainable else 2)
    return int(total + recompute)


# ----------------------------------------------------------------------------------------------
# Tracing
# ----------------------------------------------------------------------------------------------


def _depth_plan(arch, check_linear: bool = True, period: int = 1) -> tuple[list[tuple[int, int]], int, int]:
    """The (text layers, vision layers) to trace, and the full depths. `period`: the text layers repeat a pattern
    of that many layers of different kinds (`_mixer_period`); traced in whole periods (one and two), so the
    extrapolation adds whole periods."""
    if arch.encoder_decoder:
        full_text = max((arch.stacks[s].layers for s in ("encoder", "decoder") if s in arch.stacks), default=0)
    else:
        full_text = arch.stacks["text"].layers if "text" in arch.stacks else 0
    full_vision = arch.stacks["vision"].layers if "vision" in arch.stacks else 0
    if full_text <= 4:
        text = [full_text]
    elif period > 1 and 2 * period <= full_text:
        text = [period, 2 * period]
    else:
        text = [2, 3, 4] if check_linear else [2, 3]
    v0 = min(full_vision, 1)
    plan = [(t, v0) for t in text]
    if full_vision > 1:
        plan.append((text[0], 2))
    return plan, full_text, full_vision


def _mixer_period(setup, arch) -> int:
    """The period of the text stack's `layer_types` when its layers mix the sequence in more than one way (Qwen3-Next /
    Qwen3.5: three Gated DeltaNet layers, then one attention layer): traced at 2, 3, 4 layers such a stack is not
    linear in depth (one attention layer in four). 1 for a stack of one kind of layer."""
    stack = arch.stacks.get("text")
    if stack is None or not stack.mixers:
        return 1
    cfg = params.read_config(setup.model_config)
    for section in (cfg.get("text_config"), cfg.get("llm_config"), cfg):
        types = section.get("layer_types") if isinstance(section, dict) else None
        if isinstance(types, list) and len(types) == stack.layers and len(set(map(str, types))) > 1:
            return _period(types)
    # the config class's own per-layer lists where the file has none: Jamba's `layer_types` and `layers_num_experts`
    # (properties of attn_layer_period / offset and expert_layer_period / offset: attention every 8th layer, experts every
    # 2nd, so a period of 8), NemotronH's from its hybrid_override_pattern
    try:
        text = params.config_object(cfg).get_text_config()
    except Exception:  # noqa: BLE001 - a config the class refuses was planned otherwise
        return 1
    lists = []
    for name in PER_LAYER_LISTS:
        try:
            value = getattr(text, name, None)
        except Exception:  # noqa: BLE001 - a property that cannot be read at this config
            continue
        if isinstance(value, (list, tuple)) and len(value) == stack.layers:
            lists.append([str(v) for v in value])
    if not lists:
        return 1
    types = list(zip(*lists))
    return _period(types) if len(set(types)) > 1 else 1


# Per-layer lists of the config classes that say which layers differ (transformers 5.23 configuration_*.py)
PER_LAYER_LISTS = ("layer_types", "layers_block_type", "layers_num_experts", "mlp_layer_types")


def _period(types) -> int:
    """The shortest period of a per-layer pattern repeated from the first layer, 1 when it does not repeat."""
    for p in range(2, len(types) // 2 + 1):
        if all(types[i] == types[i % p] for i in range(len(types))):
            return p
    return 1


def _length_plan(setup, arch) -> tuple[int, ...] | None:
    """The lengths (tokens per sample) at which a text stack whose layers mix the sequence without attention is traced
    instead of its own length, or None to trace it at its length. Such mixers run a Python loop per chunk (transformers'
    `torch_chunk_gated_delta_rule`: one iteration per 64 tokens) or per token (the Mamba layers' `slow_forward`) when
    their CUDA kernels are absent, so under fake tensors their trace takes time in proportion to the length, where every
    other op takes the same time at any size. Their memory grows linearly with the length (chunk-local tensors and one
    recurrent state per chunk), so a few short lengths extrapolate to the run's (`_length_extrapolate`, checked).

    Four lengths, a step apart (LENGTH_STEPS: 8 tokens for a per-token loop, 128 for a per-chunk one), fixed for the setup whatever its length, so one set of short traces serves every
    length asked (a review's shorter-sample plans, the padding-free typical length). A VLM's sample shorter than its
    image tokens takes as many image features as it holds (`_forward`): the gradient rows of the merged features then
    grow with the traced length and stop growing at the image tokens, an over-count of at most (length - image tokens)
    x hidden x 2 bytes in backward, said in a note."""
    stack = arch.stacks.get("text")
    if stack is None or not stack.mixers or arch.encoder_decoder or setup.attention == "eager":
        return None  # eager attention keeps each layer's s x s scores: traced at the length itself
    loops = _looping_kernels(setup)
    if not loops:
        return None  # nothing loops over the sequence (the kernels' Functions, Mamba-2's chunked einsums): traced at the length itself
    step = min(LENGTH_STEPS[k] for k in loops)
    lengths = tuple(step * i for i in range(1, 5))
    return lengths if setup.seq_len > 2 * lengths[-1] else None


# The kernels whose torch path (what transformers runs without the kernel) loops in Python over the sequence, and the
# step of the lengths such a model is traced at (`_length_plan`): per token (modeling_mamba.py `mamba_selective_scan`'s
# `for index in range(seq_len)`, also in Jamba, Zamba, FalconMamba), or per 64-token chunk (`torch_chunk_gated_delta_rule`,
# Kimi-Linear's `chunk_kimi_delta_attention`: multiples of the chunk, so that no traced length pads its last chunk).
# Mamba-2's `mamba2_chunk_scan` is chunked einsums with no loop: traced at its length.
LENGTH_STEPS = {"selective_scan_fn": 8, "chunk_gated_delta_rule": 128, "chunk_kda": 128}
# Of those, the ones mixer_kernels.py has no Function for: traced on their torch path even with mixer_kernels=fused
LOOPING_UNMODELLED = ("chunk_kda",)


def _looping_kernels(setup) -> tuple[str, ...]:
    """The kernels of the model's modeling module (transformers' `use_kernel_func_from_hub_with_fallback` names, read off
    its source by mixer_kernels.decorated) whose trace loops over the sequence: those of LENGTH_STEPS on the torch path,
    those of LOOPING_UNMODELLED with the fused kernels."""
    import importlib

    from vramfit.planner import mixer_kernels

    looping = LENGTH_STEPS if setup.mixer_kernels == "torch" else LOOPING_UNMODELLED

    config = params.config_object(params.read_config(setup.model_config))
    found: set[str] = set()
    for cfg in {id(c): c for c in (config, config.get_text_config())}.values():
        name = type(cfg).__module__.replace(".configuration_", ".modeling_")
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - no modeling module of that name: nothing known to loop
            continue
        found |= set(mixer_kernels.decorated(name)) & set(looping)
    return tuple(sorted(found))


# A quadratic term in length (an s x s tensor: the attention mask of a padded batch) is taken only when the parabola
# through the three longest lengths meets the shortest within this many bytes (fake tensors count exactly; MemTracker
# rounds each storage up to 512 bytes); otherwise the line through the two longest, checked like depth (LINEARITY_TOLERANCE).
QUADRATIC_SLACK = 64 * 1024


def _trace(setup, arch, check_linear: bool = True, cache: bool = True) -> Trace:
    import torch

    started = time.perf_counter()
    period = _mixer_period(setup, arch)
    plan, full_text, full_vision = _depth_plan(arch, check_linear, period)
    if not full_text:
        plan = [(0, 0)]
    notes: list[str] = []
    if period > 1 and plan[0][0] == period:
        notes.append(
            f"the text layers repeat a pattern of {period} layers (layer_types: sequence mixers that are not attention, and attention): "
            f"traced at {period} and {2 * period} layers, whole patterns, and extrapolated by whole patterns"
        )
    seg_keys = [f"{kind}:{seg}" for kind in ("seg", "segp") for seg in SEGMENTS]
    keys = ("train_transient", "step_transient", "peak", "flops", *seg_keys, *[f"cat:{c}" for c in CATEGORIES])
    lengths = _length_plan(setup, arch)
    torch.manual_seed(0)
    if lengths is None:
        runs = {depth: _run(setup, arch, depth[0], depth[1], notes) for depth in plan}
        result, linear, per_layer = _depth_extrapolate(runs, plan, full_text, full_vision, keys, notes, check=True)
        base = runs[plan[0]]
    else:
        by_length = _length_runs(setup, arch, plan, lengths, notes, cache)
        at: dict[int, tuple[dict[str, float], bool, dict[str, float]]] = {}
        for length in lengths:
            traced_here = length in (lengths[0], lengths[-1])  # every depth traced at the outer lengths
            at[length] = _depth_extrapolate(by_length[length], plan, full_text, full_vision, keys, notes, check=traced_here)
        linear = all(at[length][1] for length in lengths)
        result, length_linear = _length_extrapolate({k: at[k][0] for k in lengths}, lengths, setup.seq_len, keys, notes)
        linear = linear and length_linear
        lo, hi = lengths[0], lengths[-1]
        per_layer = {k: v + (at[hi][2][k] - v) * (setup.seq_len - lo) / (hi - lo) for k, v in at[lo][2].items()}
        base = by_length[lo][plan[0]]
        notes.append(
            f"the text layers mix the sequence with {', '.join(arch.stacks['text'].mixers)}, whose trace loops over the sequence "
            f"(a Python loop per chunk or token without its CUDA kernels): traced at {', '.join(map(str, lengths))} tokens per sample "
            f"(the run's {setup.seq_len:,}) and extrapolated in length, {'linear' if length_linear else 'NOT linear'} in length"
        )
        image_tokens = setup.micro_batch * setup.images_per_sample * setup.image_tokens
        if image_tokens > lengths[0] * setup.micro_batch and "vision" in arch.stacks:
            hidden = arch.stacks["text"].hidden
            notes.append(
                f"the traced lengths hold fewer tokens than the images' {image_tokens:,}: the gradient of the merged image features is "
                f"extrapolated with the length, an over-count of at most {max(0, setup.seq_len * setup.micro_batch - image_tokens) * hidden * 2 / 2**30:.2f} GiB in backward"
            )
    # Each moment's bytes are linear in depth, their maximum is not: the peak is the largest of the
    # moments extrapolated one by one (at 2 layers a tied embedding's backward can outweigh the
    # kept activations that dominate at 12).
    seg_peak = max(result[f"segp:{seg}"] for seg in SEGMENTS)
    if seg_peak > 0:
        result["train_transient"] = max(result[f"seg:{seg}"] for seg in SEGMENTS if seg != "step")
        result["peak"] = seg_peak
    traced = ["activations", "logits and loss", "backward temporaries"]
    if setup.images_per_sample and "vision" in arch.stacks and base.get("vision_traced"):
        traced.append("vision tower")
    modelled = ["model states (ZeRO / FSDP sharding)", "CUDA context", "allocator reserve"]
    if setup.quantization:
        modelled.append("quantized base (traced as its 16-bit layout; dequantized weight added analytically)")
    if setup.liger:
        modelled.append("Liger kernels (Triton; the trace runs the unpatched model)")
    if setup.loss_kernel == "chunked" and setup.compile_loss and not setup.liger:
        modelled.append("the compiled per-chunk cross-entropy (emulated as activations.logits_bytes models it: torch.compile cannot run under fake tensors)")
    if setup.images_per_sample and "vision" in arch.stacks and not base.get("vision_traced"):
        modelled.append("vision tower (its image features could not be traced)")
    mixers = [m for s in arch.stacks.values() for m in s.mixers]
    if mixers:
        from vramfit.planner.mixer_kernels import PACKAGES

        kernels = base.get("mixer_kernels") or []
        if setup.mixer_kernels == "fused" and kernels:
            packages = sorted({p for k in kernels for p in PACKAGES[k].split(" and ")})
            modelled.append(
                f"the fused kernels of the sequence mixers ({', '.join(kernels)}): what they allocate and keep for backward, "
                "read from their source (planner/mixer_kernels.py), inside the traced step"
            )
            notes.append(
                f"the {', '.join(dict.fromkeys(mixers))} layers are planned with the kernels of {' and '.join(packages)} "
                "(mixer_kernels=fused: transformers calls them when they are installed); without them transformers runs its "
                "torch fallback, which keeps more: plan it with mixer_kernels=torch"
            )
        else:
            traced.append(f"the sequence mixers' torch fallback ({', '.join(dict.fromkeys(mixers))})")
            if setup.mixer_kernels == "torch":
                notes.append(
                    f"the {', '.join(dict.fromkeys(mixers))} layers are traced on transformers' torch fallback (mixer_kernels=torch: "
                    "the run without mamba-ssm / causal-conv1d / flash-linear-attention); with them installed they keep less: "
                    "mixer_kernels=fused"
                )
    notes.extend(base.get("notes", []))
    return Trace(
        peak_bytes=int(result["peak"]),
        by_category={c: int(result[f"cat:{c}"]) for c in CATEGORIES if result[f"cat:{c}"]},
        train_transient=int(result["train_transient"]),
        step_transient=int(max(result["step_transient"], 0)),
        flops=int(result["flops"]),
        linear=linear,
        depths=tuple(plan),
        per_layer={k: int(v) for k, v in per_layer.items()},
        seconds=round(time.perf_counter() - started, 3),
        traced=tuple(traced),
        modelled=tuple(modelled),
        notes=tuple(dict.fromkeys(notes)),
        lengths=tuple(lengths or ()),
    )


def _depth_extrapolate(runs, plan, full_text, full_vision, keys, notes, check: bool) -> tuple[dict[str, float], bool, dict[str, float]]:
    """(each key at the full depth, linear in depth, bytes per added layer per stack) from the runs at the depths of
    `plan`. `check`: the middle depth was traced (not interpolated), so linearity is checked."""
    t0, v0 = plan[0]
    base = runs[plan[0]]
    text_depths = [d for d in plan if d[1] == v0]
    linear = True
    per_layer: dict[str, float] = {}

    def slope(key, a, b, layers_a, layers_b):
        return (runs[b][key] - runs[a][key]) / (layers_b - layers_a) if layers_b != layers_a else 0.0

    seg_keys = [k for k in keys if k.startswith("seg")]
    result = {k: float(base[k]) for k in keys}
    if len(text_depths) >= 2:
        lo, hi = text_depths[0], text_depths[-1]
        for k in keys:
            result[k] += slope(k, lo, hi, lo[0], hi[0]) * (full_text - lo[0])
        if len(text_depths) == 3 and check:
            mid = text_depths[1]
            for k in seg_keys:
                expected = runs[lo][k] + slope(k, lo, hi, lo[0], hi[0]) * (mid[0] - lo[0])
                span = abs(runs[hi][k] - runs[lo][k]) or 1.0
                if abs(runs[mid][k] - expected) > LINEARITY_TOLERANCE * max(span, 0.01 * abs(runs[hi][k])):
                    linear = False
            if not linear:
                notes.append(
                    f"the traced bytes are not linear in depth ({', '.join(str(runs[d]['train_transient']) for d in text_depths)} "
                    f"at {', '.join(str(d[0]) for d in text_depths)} layers): the extrapolation to {full_text} layers is approximate"
                )
        per_layer["text"] = max(slope(f"seg:{seg}", lo, hi, lo[0], hi[0]) for seg in ("forward", "head"))
    vision_depths = [d for d in plan if d[0] == t0 and d[1] != v0]
    if vision_depths:
        hi = vision_depths[0]
        for k in keys:
            result[k] += slope(k, plan[0], hi, v0, hi[1]) * (full_vision - v0)
        moment = "seg:vision_back" if runs[vision_depths[0]].get("seg:vision_back") else "seg:tail"
        per_layer["vision"] = slope(moment, plan[0], vision_depths[0], v0, vision_depths[0][1])
    return result, linear, per_layer


def _length_runs(setup, arch, plan, lengths, notes, cache: bool = True) -> dict[int, dict[tuple[int, int], dict[str, Any]]]:
    """The runs at each depth of `plan` and each of `lengths` (`_length_plan`): the first depth at every length (one
    model built, one step per length); the other text depths at the shortest and longest length, their difference to the
    first depth interpolated linearly in length between (the kept bytes of a layer grow linearly with the length); the
    vision depths at the shortest length, their difference carried to the others (the vision tower does not see the
    text's length). Cached on disk apart from the run's length, so every length of one setup shares them."""
    key = trace_key(setup.replace(seq_len=0)) + "-lengths-" + "-".join(map(str, lengths)) + "-" + "-".join(f"{t}.{v}" for t, v in plan)
    cached = (_raw_memo.get(key) or _load_raw(key)) if cache else None
    v0 = plan[0][1]
    expected = {(plan[0][0], v0, length) for length in lengths} | {(t, v, lengths[0]) for t, v in plan}
    expected |= {(t, v, lengths[-1]) for t, v in plan if v == v0}
    try:
        runs = {tuple(k): v for k, v in cached} if cached is not None else None
        if runs is not None and not expected <= runs.keys():
            runs = None
    except (TypeError, ValueError):
        runs = None  # a damaged cache file: traced again
    if runs is None:
        t0, v0 = plan[0]
        runs: dict[tuple[int, int, int], dict[str, Any]] = {}
        for length, out in _runs(setup, arch, t0, v0, notes, lengths, split_vision=True).items():
            runs[(t0, v0, length)] = out
        for t, v in plan[1:]:
            at = (lengths[0], lengths[-1]) if v == v0 else (lengths[0],)
            for length, out in _runs(setup, arch, t, v, notes, at, split_vision=True).items():
                runs[(t, v, length)] = out
        if cache:
            _raw_memo[key] = [[list(k), v] for k, v in runs.items()]
            _store_raw(key, _raw_memo[key])
    else:
        _raw_memo[key] = cached
    t0, v0 = plan[0]
    lo, hi = lengths[0], lengths[-1]
    by_length: dict[int, dict[tuple[int, int], dict[str, Any]]] = {}
    for length in lengths:
        first = runs[(t0, v0, length)]
        here: dict[tuple[int, int], dict[str, Any]] = {(t0, v0): first}
        for t, v in plan[1:]:
            if (t, v, length) in runs:
                here[(t, v)] = runs[(t, v, length)]
                continue
            if v == v0:  # a text depth between the outer lengths: its difference to the first depth, interpolated
                w = (length - lo) / (hi - lo)
                diff = {k: (1 - w) * (runs[(t, v, lo)][k] - runs[(t0, v0, lo)][k]) + w * (runs[(t, v, hi)][k] - runs[(t0, v0, hi)][k]) for k in _numeric(first)}
            else:
                diff = {k: runs[(t, v, lo)][k] - runs[(t0, v0, lo)][k] for k in _numeric(first)}
            here[(t, v)] = {**first, **{k: first[k] + diff[k] for k in diff}}
        by_length[length] = here
    return by_length


def _numeric(out: dict[str, Any]) -> list[str]:
    return [k for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _length_extrapolate(at: dict[int, dict[str, float]], lengths, target: int, keys, notes) -> tuple[dict[str, float], bool]:
    """Each key at `target` tokens from its values at the four traced `lengths`. Fake tensors count exactly, so a key
    that is linear in the length lies exactly on a line, and one that also holds an s x s tensor (the attention mask of
    a padded batch) exactly on a parabola: the parabola through the three longest lengths is taken when it meets the
    shortest (QUADRATIC_SLACK) and bends upwards; otherwise the line through the two longest, with the shorter two
    checked against it as depth is (LINEARITY_TOLERANCE). A moment whose maximum moves from one op to another between the
    lengths is what fails the check."""
    l1, l2, l3, l4 = lengths
    result: dict[str, float] = {}
    linear = True
    bent: list[str] = []
    for k in keys:
        f1, f2, f3, f4 = (float(at[length][k]) for length in lengths)

        # Lagrange parabola through (l2, f2), (l3, f3), (l4, f4)
        def parabola(x, f2=f2, f3=f3, f4=f4):
            return (
                f2 * (x - l3) * (x - l4) / ((l2 - l3) * (l2 - l4))
                + f3 * (x - l2) * (x - l4) / ((l3 - l2) * (l3 - l4))
                + f4 * (x - l2) * (x - l3) / ((l4 - l2) * (l4 - l3))
            )

        curvature = f2 / ((l2 - l3) * (l2 - l4)) + f3 / ((l3 - l2) * (l3 - l4)) + f4 / ((l4 - l2) * (l4 - l3))
        slope = (f4 - f3) / (l4 - l3)
        if curvature > 0 and abs(parabola(l1) - f1) <= QUADRATIC_SLACK:
            result[k] = parabola(target)
            if k.startswith("seg") and curvature * target * target > LINEARITY_TOLERANCE * abs(result[k]):
                bent.append(f"{k.split(':')[-1]} {curvature:.3g} bytes per token squared")
            continue
        result[k] = f4 + slope * (target - l4)
        if k.startswith("seg"):
            span = abs(f4 - f1) or 1.0
            for x, f in ((l1, f1), (l2, f2)):
                if abs(f - (f4 + slope * (x - l4))) > LINEARITY_TOLERANCE * max(span, 0.01 * abs(f4)):
                    linear = False
    if bent:
        notes.append(
            "a term grows with the square of the length (an s x s tensor: the attention mask of a padded batch): "
            + "; ".join(dict.fromkeys(bent))
            + "; extrapolated along the parabola through the traced lengths"
        )
    if not linear:
        notes.append(
            f"the traced bytes are not linear in length ({', '.join(str(int(at[x]['train_transient'])) for x in lengths)} at "
            f"{', '.join(map(str, lengths))} tokens): the extrapolation to {target:,} tokens is approximate"
        )
    return result, linear


def _config_at_depth(arch, setup, text_layers: int, vision_layers: int):
    cfg_dict = params.read_config(setup.model_config)
    config = params.config_object(cfg_dict)
    subs = {id(config): config}
    text_cfg = config.get_text_config()
    for name in ("text_config", "decoder", "encoder", "llm_config"):
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            subs[id(sub)] = sub
    subs[id(text_cfg)] = text_cfg
    vision_cfg = getattr(config, "vision_config", None)
    full_text = max((arch.stacks[s].layers for s in ("text", "encoder", "decoder") if s in arch.stacks), default=0)
    full_vision = arch.stacks["vision"].layers if "vision" in arch.stacks else 0
    for sub in subs.values():
        if sub is vision_cfg:
            continue
        _set_depth(sub, full_text, text_layers)
    if vision_cfg is not None and full_vision:
        _set_depth(vision_cfg, full_vision, vision_layers)
    config.use_cache = False
    if hasattr(text_cfg, "use_cache"):
        text_cfg.use_cache = False
    return cfg_dict, config


def _set_depth(cfg, full: int, depth: int) -> None:
    for key in LAYER_KEYS:
        try:
            value = getattr(cfg, key, None)
        except Exception:  # noqa: BLE001 - per-layer configs
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value == full:
            setattr(cfg, key, depth)
    for key, value in list(vars(cfg).items()):
        # per-layer lists (layer_types); not a size that happens to have as many entries (window_kernel_size [2, 2])
        if isinstance(value, list) and len(value) == full and full and key not in ("architectures",) and not key.endswith("_size"):
            setattr(cfg, key, value[:depth])


def _dtypes(setup):
    """(dtype of trained weights, dtype of frozen weights, autocast dtype or None)."""
    import torch

    half = torch.float16 if setup.precision == "fp16" else torch.bfloat16
    if setup.precision == "fp32":
        return torch.float32, torch.float32, None
    if setup.precision == "bf16-true" or setup.engine == "deepspeed":
        return half, half, None  # DeepSpeed's bf16 / fp16 engine casts the module; no autocast
    # AMP (the Trainer's bf16 / fp16 flags) autocasts over the weights as loaded: fp32 master weights
    # only when the model is loaded in fp32 (`master_fp32`) or FSDP's mixed precision keeps them;
    # a model loaded in 16 bits trains 16-bit weights, and its elementwise activations stay 16-bit
    # (measured on an H100: Llama-3.2-3B loaded in bf16, benchmarks/gpu_memory.py).
    # FSDP keeps fp32 master shards, but computes with the unsharded parameters its mixed-precision policy casts to
    # param_dtype: accelerate's FullyShardedDataParallelPlugin.set_mixed_precision sets param_dtype to the run's bf16 /
    # fp16 (utils/dataclasses.py) after fsdp2_prepare_model upcasts the shards ("MixedPrecisionPolicy.param_dtype handles
    # compute cast", utils/fsdp_utils.py, accelerate 1.13-1.15), so autocast finds 16-bit weights and caches no cast
    # copies of them. Lightning's bf16-mixed FSDPPrecision computes in fp32 (param_dtype float32): master_fp32 (LitGPT).
    trained = torch.float32 if setup.master_fp32 else half
    frozen = torch.float32 if setup.frozen_fp32 else half
    return trained, frozen, half


def _run(setup, arch, text_layers: int, vision_layers: int, notes: list[str]) -> dict[str, Any]:
    """Build the model at this depth under fake tensors and run one step under MemTracker."""
    return _runs(setup, arch, text_layers, vision_layers, notes, (setup.seq_len,))[setup.seq_len]


def _runs(
    setup, arch, text_layers: int, vision_layers: int, notes: list[str], lengths: tuple[int, ...], split_vision: bool = False
) -> dict[int, dict[str, Any]]:
    """Build the model at this depth under fake tensors once, and run one step under MemTracker at each of `lengths`
    tokens per sample (the optimizer states exist before each step, the gradients do not: the steady state).

    `split_vision`: the vision tower's forward and backward are moments of their own ("vision", "vision_back"), apart
    from the language model's: a tower whose peak outweighs a short text's would otherwise hide, at every short length,
    how the text's grows with the length (`_length_plan`)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vramfit.planner import mixer_kernels

    cfg_dict, config = _config_at_depth(arch, setup, text_layers, vision_layers)
    head = getattr(setup, "head", "lm")
    if head in CLASSIFIERS:
        _classifier_config(config, setup)
    attention = "eager" if setup.attention == "eager" else "sdpa"
    try:
        config._attn_implementation = attention
    except Exception:  # noqa: BLE001
        pass
    train_dtype, frozen_dtype, autocast = _dtypes(setup)
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    outs: dict[int, dict[str, Any]] = {}
    where = _Where()
    length = setup.seq_len
    try:
        with fake, _quiet(), _small_constants(), _grouped_mm_dtypes(), contextlib.ExitStack() as stack:
            if setup.loss_kernel == "chunked" and setup.head == "lm" and not setup.liger:
                stack.enter_context(_chunked_loss(setup.loss_chunks, setup.compile_loss))
            where.stage = "building the model"
            model = _build(config, train_dtype, head)
            if head in PATCHED_HEADS:
                _patch_head(model, head)
            model.train()
            where.stage = "applying LoRA with PEFT (get_peft_model)" if setup.lora else "setting the trained parameters"
            _apply_training(model, setup, arch, train_dtype, frozen_dtype)
            where.stage = "building the optimizer states"
            amp = _CudaAutocast(autocast)
            if setup.gradient_checkpointing:
                # transformers 5.23 TrainingArguments: non-reentrant checkpointing
                kwargs = {"use_reentrant": False}
                if autocast is not None:
                    kwargs["context_fn"] = lambda: (contextlib.nullcontext(), amp.recompute_context())
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            trainable = [p for p in model.parameters() if p.requires_grad]
            optimizer = _optimizer(setup, trainable)
            if optimizer is not None:  # steady state: the optimizer states exist from the previous step
                for p in trainable:
                    p.grad = torch.zeros_like(p)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)  # transformers Trainer: model.zero_grad() sets None
            stack.enter_context(_real_vision_geometry())
            kernels: set[str] = set()
            if setup.mixer_kernels == "fused" and any(s.mixers for s in arch.stacks.values()):
                kernels = stack.enter_context(mixer_kernels.fused(model))
            for length in lengths:
                out: dict[str, Any] = {"notes": []}
                at = setup if length == setup.seq_len else setup.replace(seq_len=length)
                where.stage = "building the inputs"
                batch, vision = _inputs(model, config, at, arch, train_dtype if autocast is None else frozen_dtype)
                out["vision_traced"] = vision is not None
                tracker = _Tracker()
                tracker.track_external(optimizer)
                tracker.track_model(model)
                import gc

                with _segment_hooks(model, arch, tracker):
                    gc.collect()
                    with tracker:
                        with _cuda_sdpa(unpadded=setup.attention == "flash"):
                            with amp, where.modules(model):  # HF Trainer: autocast around the forward and the loss only
                                where.stage = "the forward pass"
                                if split_vision and vision is not None:
                                    tracker.segment = "vision"
                                loss = _forward(model, batch, vision, at, where, on_text=_text_moment(tracker) if split_vision else None)
                            tracker.mark("backward")
                            where.stage = "the backward pass"
                            loss.backward()
                        tracker.mark("step")
                        where.stage = "the optimizer step"
                        if optimizer is not None:
                            optimizer.step()
                        tracker.mark("done")
                del loss, batch, vision
                if optimizer is not None:
                    optimizer.zero_grad(set_to_none=True)
                else:
                    model.zero_grad(set_to_none=True)
                out["mixer_kernels"] = sorted(kernels)  # the kernels' Functions the step called (mixer_kernels.fused)
                out["flops"] = tracker.flops
                snap = tracker.peak_snap
                out["peak"] = tracker.peak
                for c in CATEGORIES:
                    out[f"cat:{c}"] = snap.get(c, 0)
                out["train_transient"] = tracker.train_transient
                for seg in SEGMENTS:
                    out[f"seg:{seg}"] = tracker.seg_transient.get(seg, 0)
                    out[f"segp:{seg}"] = tracker.seg_peak.get(seg, 0)
                out["step_transient"] = tracker.step_transient
                outs[length] = out
    except TraceError:
        raise
    except Exception as exc:  # noqa: BLE001 - model code that fake tensors cannot run
        if os.environ.get("VRAMFIT_TRACE_DEBUG"):
            raise
        depth = f"{text_layers} layers" + (f" + {vision_layers} vision layers" if vision_layers else "")
        if len(lengths) > 1:
            depth += f", {length} tokens"
        raise TraceError(f"{where.describe()} at {depth}: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}") from None
    return outs


@contextlib.contextmanager
def _chunked_loss(chunks: int, compiled: bool):
    """The causal LM's loss as a chunked cross-entropy (setup.loss_kernel "chunked"), patched in the way axolotl's
    `chunked_cross_entropy: true` patches it (src/axolotl/monkeypatch/loss/chunked.py at 130ef7c51,
    `patch_chunked_ce_loss_fn`: transformers' LOSS_MAPPING["ForCausalLM"] replaced; the model's whole 16-bit logits
    `.chunk(num_output_chunks, dim=1)`, no upcast of the whole, then `F.cross_entropy(chunk.float(), ...)` per chunk).
    axolotl runs that per-chunk function under torch.compile (`_build_chunked_ce_loss_fn`), which fake tensors cannot
    run: its memory is emulated by `_CompiledChunkCE` as activations.logits_bytes models the compiled chunk (forward: one
    fp32 chunk, the 16-bit chunk saved; backward: the chunk's fp32 gradient and its 16-bit cast). Not compiled, each
    chunk runs eagerly and is traced as it is."""
    import torch
    import torch.nn.functional as F
    from transformers.loss import loss_utils

    class _CompiledChunkCE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, chunk, labels):
            upcast = torch.empty(chunk.shape, dtype=torch.float32, device=chunk.device)
            del upcast
            ctx.save_for_backward(chunk)
            return chunk.new_zeros((), dtype=torch.float32)

        @staticmethod
        def backward(ctx, grad):
            (chunk,) = ctx.saved_tensors
            grad32 = torch.empty(chunk.shape, dtype=torch.float32, device=chunk.device)
            out = grad32.to(chunk.dtype)
            del grad32
            return out, None

    def loss(logits, labels, vocab_size=None, num_items_in_batch=None, ignore_index=-100, shift_labels=None, **kwargs):
        if shift_labels is None:
            shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:].contiguous()
        total = logits.new_zeros((), dtype=torch.float32)
        for part, target in zip(logits.chunk(chunks, dim=1), shift_labels.chunk(chunks, dim=1)):
            part = part.reshape(-1, part.size(-1))
            if compiled:
                total = total + _CompiledChunkCE.apply(part, target)
            else:
                total = total + F.cross_entropy(part.float(), target.reshape(-1), ignore_index=ignore_index, reduction="sum")
        return total / (num_items_in_batch or 1)

    saved = loss_utils.LOSS_MAPPING.get("ForCausalLM")
    loss_utils.LOSS_MAPPING["ForCausalLM"] = loss
    try:
        yield
    finally:
        loss_utils.LOSS_MAPPING["ForCausalLM"] = saved


@contextlib.contextmanager
def _segment_hooks(model, arch, tracker):
    """Mark the moments of backward for the tracker: "head" (loss and output layer, every layer's
    kept tensors alive), "layers" (from the last layer's backward), "tail" (from the first layer's
    backward on: embeddings, a tied embedding's summed gradient, the vision tower). Gradient hooks on
    the layers' output tensors (`Tensor.register_hook`, called when the gradient of that output is
    computed) close over the tracker only, not over graph nodes, so they keep nothing alive."""
    import re

    import torch

    heads = {n for n, m in model.named_modules() if m is _safe(model.get_output_embeddings)}
    embeds = {n for n, m in model.named_modules() if m is _safe(model.get_input_embeddings)}
    layer = re.compile(r"(?:^|\.)(layers|layer|h|block|blocks)\.(\d+)$")
    modules = [m for n, m in model.named_modules() if layer.search(n) and params._group(n + ".weight", heads, embeds) not in ("vision", "audio", "projector")]
    seen: list[int] = []  # layers in the order the forward ran them

    def hook(module, args, output):
        if tracker.phase != "forward":
            return  # a checkpointed layer recomputed in backward
        out = output[0] if isinstance(output, (tuple, list)) else output
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return
        first = not seen
        seen.append(id(module))
        segment = "tail" if first else "layers"
        out.register_hook(lambda grad: (tracker.enter_segment(segment), None)[1])

    handles = [m.register_forward_hook(hook) for m in modules]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# forward, then backward's three moments (_segment_hooks), then the optimizer step; the vision tower's forward and
# backward apart where a trace splits them (`_runs`' split_vision), else in "forward" and "tail"
SEGMENTS = ("vision", "forward", "head", "layers", "tail", "vision_back", "step")


def _text_moment(tracker):
    """For `_forward`: once the image features exist, the language model's forward begins; the gradient reaching the
    features begins the vision tower's backward."""

    def on_text(features):
        tracker.segment = "forward"
        if features.requires_grad:
            features.register_hook(lambda grad: (tracker.enter_segment("vision_back"), None)[1])

    return on_text


@contextlib.contextmanager
def _small_constants(limit: int = 1 << 20):
    """Small tensors written as literals (`torch.tensor(...)`: an image grid, a position table) stay
    real values inside the fake mode, so model code that reads them (Qwen2-VL's `grid_thw.tolist()`)
    runs; fake_tensor.py keeps such constants only up to CONSTANT_NUMEL_LIMIT elements (1)."""
    from torch._subclasses import fake_tensor

    previous = fake_tensor.CONSTANT_NUMEL_LIMIT
    fake_tensor.CONSTANT_NUMEL_LIMIT = limit
    try:
        yield
    finally:
        fake_tensor.CONSTANT_NUMEL_LIMIT = previous


class _Where:
    """Which part of the traced step is running, for the message of a trace that fails: the stage, and in the
    forward pass the innermost module entered (the vision tower's or the language model's)."""

    def __init__(self):
        self.stage = "starting"
        self.module = ""

    @contextlib.contextmanager
    def modules(self, model):
        import torch

        names = {id(m): n for n, m in model.named_modules()}
        stack: list[str] = []

        def enter(module, args):
            stack.append(names.get(id(module), ""))
            self.module = stack[-1]

        def leave(module, args, output):
            if stack:
                stack.pop()
            self.module = stack[-1] if stack else ""

        hooks = (torch.nn.modules.module.register_module_forward_pre_hook(enter), torch.nn.modules.module.register_module_forward_hook(leave))
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def describe(self) -> str:
        if not self.stage.endswith("forward pass") or not self.module:
            return self.stage
        part = "the vision tower's" if any(params._is_vision(p) for p in self.module.split(".")) else "the language model's"
        return f"{part} forward (module {self.module})"


@contextlib.contextmanager
def _grouped_mm_dtypes():
    """MoE experts in fp32 / fp16 (transformers integrations/moe.py `_grouped_mm`): on a GPU torch's
    `_grouped_mm` runs them through its per-group fallback (pytorch#161717, CUDA SM80+ for float32 /
    float16 / bfloat16), but its meta registration (torch/_meta_registrations.py
    `_meta_grouped_mm_common`) checks only the bf16 fast path's dtype and refuses them under fake
    tensors. They are traced through transformers' own fallback op (`transformers::grouped_mm_fallback`,
    whose fake gives the same output and whose autograd saves the same input and weight)."""
    import torch

    try:
        from transformers.integrations import moe
    except ImportError:
        yield
        return
    saved = moe._can_use_grouped_mm

    def can_use(input, weight, offs):
        return weight.dtype == torch.bfloat16 and input.dtype in (torch.bfloat16, weight.dtype) and saved(input, weight, offs)

    moe._can_use_grouped_mm = can_use
    try:
        yield
    finally:
        moe._can_use_grouped_mm = saved


@contextlib.contextmanager
def _real_vision_geometry():
    """transformers' vision_utils helpers compute index tables from the image grid (window index,
    position ids, cu_seqlens: `index[index != -100]`, `.tolist()`): shapes that depend on values.
    They read nothing but the grid, a small literal the fake mode keeps as a constant, so they run
    here on real tensors and hand their small index tables to the traced model."""
    import sys

    import torch
    from torch._guards import active_fake_mode
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
    from torch.utils._pytree import tree_map
    from transformers import vision_utils

    helpers = {name: fn for name, fn in vars(vision_utils).items() if name.startswith("get_vision_") and callable(fn)}

    def real(x):
        if isinstance(x, FakeTensor):
            if x.constant is None:
                raise TraceError("an image-geometry helper reads a tensor that is not a constant under fake tensors")
            return x.constant
        return x

    def wrap(fn):
        def inner(*args, **kwargs):
            mode = active_fake_mode()
            with unset_fake_temporarily():
                out = fn(*tree_map(real, args), **tree_map(real, kwargs))
            if mode is None:
                return out
            # back as fake tensors that keep their values, so code that reads them (`.tolist()`) runs
            convert = mode.fake_tensor_converter.from_real_tensor
            return tree_map(lambda t: convert(mode, t, make_constant=True) if isinstance(t, torch.Tensor) else t, out)

        return inner

    patched = []
    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith("transformers."):
            continue
        for name, fn in helpers.items():
            if getattr(module, name, None) is fn:
                patched.append((module, name, fn))
                setattr(module, name, wrap(fn))
    try:
        yield
    finally:
        for module, name, fn in patched:
            setattr(module, name, fn)


@contextlib.contextmanager
def _quiet():
    import warnings

    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


@contextlib.contextmanager
def _valueless_init():
    """Weight initialisers whose code reads values (torch.nn.init.trunc_normal_ resamples until
    `mask.any()` is false) cannot run on fake tensors; the trace needs no values, so they do nothing."""
    import torch
    from transformers import initialization

    saved = torch.nn.init.trunc_normal_
    table = getattr(initialization, "TORCH_INIT_FUNCTIONS", {})
    saved_table = table.get("trunc_normal_")
    noop = lambda tensor, *args, **kwargs: tensor  # noqa: E731
    torch.nn.init.trunc_normal_ = noop
    if saved_table is not None:
        table["trunc_normal_"] = noop
    try:
        yield
    finally:
        torch.nn.init.trunc_normal_ = saved
        if saved_table is not None:
            table["trunc_normal_"] = saved_table


# the auto class transformers builds for a classification head (knobs.head_fields; training.with_head plans the same)
CLASSIFIERS = {"seq_cls": "AutoModelForSequenceClassification", "token_cls": "AutoModelForTokenClassification"}


def _classifier_config(config, setup) -> None:
    """num_labels, the loss's problem type, and a pad token for the sequence classifier's last-token pooling
    (GenericForSequenceClassification refuses batches > 1 without one; which id it is changes no memory)."""
    config.num_labels = setup.num_labels
    if setup.head == "seq_cls":
        config.problem_type = "regression" if setup.num_labels == 1 else "single_label_classification"
    for cfg in {id(c): c for c in (config, config.get_text_config())}.values():
        if getattr(cfg, "pad_token_id", None) is None:
            cfg.pad_token_id = 0


def _build(config, dtype, head: str = "lm"):
    with _valueless_init():
        return _build_model(config, dtype, head)


def _build_model(config, dtype, head: str = "lm"):
    import torch
    import transformers

    errors = []
    classes = [getattr(transformers, CLASSIFIERS[head])] if head in CLASSIFIERS else params.auto_classes(config)
    for auto in classes:
        try:
            model = auto.from_config(config, dtype=dtype)
            return model
        except ValueError as exc:
            if "attention implementation" not in str(exc) or config._attn_implementation == "eager":
                errors.append(f"{auto.__name__}: ValueError: {str(exc)[:160]}")
                continue
            # a model without SDPA support (BLOOM): transformers runs it eager, so does the trace
            config._attn_implementation = "eager"
            try:
                return auto.from_config(config, dtype=dtype)
            except Exception as again:  # noqa: BLE001
                errors.append(f"{auto.__name__}: {type(again).__name__}: {str(again)[:160]}")
        except Exception as exc:  # noqa: BLE001
            if os.environ.get("VRAMFIT_TRACE_DEBUG"):
                raise
            errors.append(f"{auto.__name__}: {type(exc).__name__}: {str(exc)[:160]}")
    del torch
    raise TraceError("no auto class builds it under fake tensors (" + "; ".join(errors) + ")")


def _apply_training(model, setup, arch, train_dtype, frozen_dtype) -> None:
    """requires_grad and dtypes as the setup trains them; LoRA through PEFT."""
    heads = {n for n, m in model.named_modules() if m is _safe(model.get_output_embeddings)}
    embeds = {n for n, m in model.named_modules() if m is _safe(model.get_input_embeddings)}
    vision_from = params._vision_from(arch, setup.train_vision)
    for name, p in model.named_parameters():
        group = params._group(name, heads, embeds)
        if group == "vision":
            stack, _, idx = params._stack_of(name, group)
            trains = vision_from is not None and (vision_from == 0 or idx >= vision_from)
        elif group == "projector":
            trains = setup.train_projector
        else:
            trains = setup.train_llm and not setup.lora
        p.requires_grad_(trains)
    if setup.lora:
        from peft import LoraConfig, get_peft_model

        targets = setup.lora_targets or "all-linear"
        targets = list(targets) if isinstance(targets, (list, tuple)) else targets
        keep = {n for n, p in model.named_parameters() if p.requires_grad}
        lora = LoraConfig(
            r=setup.lora_r,
            lora_alpha=2 * setup.lora_r,
            lora_dropout=setup.lora_dropout,
            target_modules=targets,
            target_parameters=list(getattr(setup, "lora_target_parameters", ())) or None,
            # PEFT's SEQ_CLS / TOKEN_CLS task types add the new `score` head to modules_to_save (plan.py trains it too)
            modules_to_save=list(setup.modules_to_save) + (["score"] if getattr(setup, "head", "lm") in CLASSIFIERS else []) or None,
        )
        # PEFT builds its adapters in the default dtype and then `.to()`s them onto the base layer's
        # device and dtype (tuners_utils `_move_adapter_to_device_of_base_layer`), a parameter swap
        # fake tensors refuse (Module._apply swaps FakeTensor parameters). Built in the base layer's
        # dtype on the one (CPU) device, there is nothing to move.
        import torch
        from peft.tuners.tuners_utils import BaseTunerLayer

        default = torch.get_default_dtype()
        move, to = BaseTunerLayer._move_adapter_to_device_of_base_layer, torch.nn.Module.to
        torch.set_default_dtype(frozen_dtype)
        BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda self, *a, **k: None
        torch.nn.Module.to = lambda self, *a, **k: self  # LoraModel._replace_module: `.to(weight.device)`
        try:
            peft_model = get_peft_model(model, lora)
        finally:
            torch.set_default_dtype(default)
            BaseTunerLayer._move_adapter_to_device_of_base_layer, torch.nn.Module.to = move, to
        for name, p in peft_model.base_model.model.named_parameters():
            if name in keep:
                p.requires_grad_(True)
        model.__dict__["_vramfit_peft"] = peft_model
    # PEFT's adapters are fp32 on a 16-bit base (get_peft_model's autocast_adapter_dtype=True) unless DeepSpeed's
    # engine or FSDP's mixed precision casts them (training.lora_input_copy_bytes: the same cases)
    from vramfit.planner.training import lora_input_copy_bytes

    lora_fp32 = setup.lora and lora_input_copy_bytes(setup) > 0
    for name, p in model.named_parameters():
        want = train_dtype if p.requires_grad else frozen_dtype
        if lora_fp32 and p.requires_grad and "lora_" in name:
            want = torch.float32
        if p.dtype.is_floating_point and p.dtype != want:
            p.data = p.data.to(want)


def _safe(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return None


def _optimizer(setup, trainable):
    import torch

    if not trainable:
        return None
    name = setup.optimizer.lower()
    if name.startswith("sgd"):
        return torch.optim.SGD(trainable, lr=1e-4)
    if "8bit" in name or "paged" in name or "bnb" in name:
        return None  # bitsandbytes states: modelled (states.py)
    return torch.optim.AdamW(trainable, lr=1e-4, fused="fused" in name or None, foreach=None if "fused" in name else True)


def _inputs(model, config, setup, arch, pixel_dtype):
    """Token ids / labels of the setup's length and micro-batch; pixel inputs of its image geometry."""
    import torch

    b = setup.micro_batch
    seq = setup.seq_len
    vocab = max(2, min(arch.vocab or 2, 1000))
    ids = torch.randint(0, vocab, (b, seq))
    batch: dict[str, Any] = {"input_ids": ids, "labels": ids.clone()}
    head = getattr(setup, "head", "lm")
    if head == "seq_cls":  # a score per sequence: MSE on a float for one label, cross-entropy on a class id else
        batch["labels"] = torch.randn(b) if setup.num_labels == 1 else torch.randint(0, setup.num_labels, (b,))
    elif head == "token_cls":
        batch["labels"] = torch.randint(0, setup.num_labels, (b, seq))
    if arch.encoder_decoder:  # decoder inputs given: some configs lack decoder_start_token_id
        dec = setup.decoder_seq_len or seq
        batch["labels"] = torch.randint(0, vocab, (b, dec))
        batch["decoder_input_ids"] = torch.randint(0, vocab, (b, dec))
    vision = None
    if setup.images_per_sample and "vision" in arch.stacks:
        vision = _vision_inputs(model, config, setup, arch, pixel_dtype)
    return batch, vision


def _vision_inputs(model, config, setup, arch, dtype):
    """Pixel inputs for `get_image_features`, per family; None when the family is not known."""
    import torch

    vc = config.vision_config
    n = setup.micro_batch * setup.images_per_sample
    channels = getattr(vc, "num_channels", None) or getattr(vc, "in_channels", None) or getattr(vc, "in_chans", None) or 3
    patch = params._first_int(getattr(vc, "patch_size", None), 14)
    if getattr(vc, "temporal_patch_size", None):  # Qwen2-VL family: flattened patches + grid
        t = vc.temporal_patch_size
        merge = getattr(vc, "spatial_merge_size", 2) or 2
        per_image = setup.vision_patches
        side = max(merge, int(round(per_image**0.5)) // merge * merge)
        grid = torch.tensor([[1, side, side]] * n)
        pixels = torch.randn(n * side * side, channels * t * patch * patch, dtype=dtype)
        return {"pixel_values": pixels, "image_grid_thw": grid}
    if (
        "target_sizes" in inspect.signature(model.get_image_features).parameters
        or "target_sizes" in inspect.signature(getattr(getattr(model, "model", None), "get_image_features", model.get_image_features)).parameters
    ):
        # MiniCPM-V 4.6 (modeling_minicpmv4_6.py `get_image_features`): every image's patches packed NaViT-style into one
        # (1, channels, patch, patches x patch) row, each image's grid (in patches) in `target_sizes`; the grid halves in the
        # ViT's window merger, then in each round of the merger's 2 x 2 kernel: a side divisible by 16 takes them all.
        side = max(16, int(round(setup.vision_patches**0.5)) // 16 * 16)
        pixels = torch.randn(1, channels, patch, n * side * side * patch, dtype=dtype)
        return {"pixel_values": pixels, "target_sizes": torch.tensor([[side, side]] * n, dtype=torch.int32)}
    # the tower's own input size; crops / slices (DocOwl, MiniCPM-V) are that many more images
    size = params._first_int(getattr(vc, "image_size", None), 224)
    per_crop = (size // patch) ** 2
    crops = max(1, round(setup.vision_patches / per_crop)) if setup.vision_patches else 1
    pixels = torch.randn(n * crops, channels, size, size, dtype=dtype)
    return {"pixel_values": pixels}


# ms-swift's tasks whose lm_head forward it replaces (heads.py): traced with the same replacement on the causal LM
PATCHED_HEADS = ("embedding", "generative_reranker")


def _patch_head(model, head: str) -> None:
    """Replace the causal LM's lm_head forward as ms-swift does: swift/model/patcher.py `patch_output_normalizer`
    (`return hidden_states`) or swift/utils/torch_utils.py `get_generative_reranker_logits` (F.linear over the yes / no
    rows of lm_head's weight, then their difference)."""
    import types

    import torch.nn.functional as F

    out = model.get_output_embeddings()
    if head == "embedding":
        out.forward = types.MethodType(lambda self, hidden_states: hidden_states, out)
    else:

        def scores(self, hidden_states):
            logits = F.linear(hidden_states, self.weight[[1, 0]])  # the yes / no token ids: which ones changes no memory
            return logits[..., 0:1] - logits[..., 1:2]

        out.forward = types.MethodType(scores, out)


def _task_loss(runner, batch, setup):
    """ms-swift's loss of the patched head on the last position of every sequence: an embedding's L2-normalised rows and
    InfoNCE over consecutive (anchor, positive) pairs (swift/loss/embedding.py InfonceLoss, in-batch), a reranker's score
    and BCE (swift/loss/reranker.py PointwiseRerankerLoss); sizes as ms-swift's, values irrelevant."""
    import torch
    import torch.nn.functional as F

    logits = runner(input_ids=batch["input_ids"]).logits
    rows = torch.arange(logits.shape[0])
    last = logits[rows, -1]  # get_last_valid_indices of an unpadded batch
    if setup.head == "embedding":
        emb = F.normalize(last, p=2, dim=1)
        anchors, docs = emb[0::2], emb[1::2]
        return F.cross_entropy((anchors @ docs.T) / 0.1, torch.arange(anchors.shape[0]))
    return F.binary_cross_entropy_with_logits(last.squeeze(-1), torch.zeros(last.shape[0], dtype=last.dtype))


def _forward(model, batch, vision, setup, where=None, on_text=None):
    import torch

    if where is not None and vision is not None:
        where.stage = "the vision tower's forward pass (get_image_features)"

    peft = model.__dict__.get("_vramfit_peft")
    runner = peft if peft is not None else model
    if vision is None and getattr(setup, "head", "lm") in PATCHED_HEADS:
        return _task_loss(runner, batch, setup)
    if vision is None:
        return runner(**batch).loss
    inner = getattr(model, "model", None)
    if callable(getattr(getattr(inner, "connector", None), "pixel_shuffle", None)) and hasattr(inner, "vision_model"):
        # Idefics3 / SmolVLM: get_image_features (modeling_idefics3.py) drops all-zero padding images
        # with a boolean index (`pixel_values[real_images_inds]`), a nonzero whose size fake tensors
        # cannot know; a batch without padding images keeps every one, so its vision model and
        # connector run here on all of them, with the all-true patch mask it builds for them.
        pixels = vision["pixel_values"]
        patch = inner.config.vision_config.patch_size
        mask = torch.ones((pixels.shape[0], pixels.shape[2] // patch, pixels.shape[3] // patch), dtype=torch.bool)
        hidden = inner.vision_model(pixel_values=pixels, patch_attention_mask=mask, return_dict=True).last_hidden_state
        features = inner.connector(hidden)
    else:
        features = model.get_image_features(**vision)
    if hasattr(features, "pooler_output") and not isinstance(features, torch.Tensor):
        features = features.pooler_output
    if isinstance(features, (list, tuple)):
        features = torch.cat([f.reshape(-1, f.shape[-1]) for f in features])
    features = features.reshape(-1, features.shape[-1])
    if on_text is not None:
        on_text(features)
    if where is not None:
        where.stage = "the forward pass"
    embeds = model.get_input_embeddings()(batch["input_ids"])
    count = min(features.shape[0], embeds.shape[0] * embeds.shape[1])
    mask = torch.zeros(embeds.shape[:2], dtype=torch.bool)
    mask.view(-1)[:count] = True
    # every image's features in the text's dtype, as the models convert them (`image_embeds.to(inputs_embeds.dtype)`), then
    # as many as the sample holds (a sample shorter than its images: a traced length below the run's, `_length_plan`)
    merged = embeds.masked_scatter(mask.unsqueeze(-1).expand_as(embeds), features.to(embeds.dtype)[:count])
    return runner(inputs_embeds=merged, labels=batch["labels"]).loss


# ----------------------------------------------------------------------------------------------
# What a CUDA run keeps
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _cuda_sdpa(unpadded: bool = False):
    """Route F.scaled_dot_product_attention to the kernel CUDA would pick (module docstring).

    `unpadded`: the batch has no padding, as flash_attention_2 sees it (it unpads). transformers
    then drops the mask and passes `is_causal` (masking_utils `_ignore_causal_mask_sdpa`), a check
    that reads the mask's values and so is skipped for fake tensors; it is answered here as a GPU
    run without padding answers it (and there is one sequence per row: no packed-sequence search).
    Otherwise the mask stays, as in a padded batch."""
    import torch
    import torch.nn.functional as F
    from transformers import masking_utils

    original = F.scaled_dot_product_attention
    saved = {name: getattr(masking_utils, name) for name in ("_ignore_causal_mask_sdpa", "find_packed_sequence_indices")}
    ignore = saved["_ignore_causal_mask_sdpa"]

    def ignore_unpadded(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size=None):
        # what `_ignore_causal_mask_sdpa` answers on a GPU for a batch without padding
        if padding_mask is None and (q_length == 1 or kv_length == q_length) and (local_attention_size is None or kv_length < local_attention_size):
            return True
        return ignore(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size)

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        backend = cuda_backend(query, key, value, attn_mask, dropout_p, enable_gqa)
        if backend == "flash":  # FlashAttention-2 takes fewer key/value heads as they are
            return torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        if backend == "efficient":
            return torch.ops.aten._scaled_dot_product_efficient_attention(query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale)[0]
        if enable_gqa and key.shape[-3] != query.shape[-3]:
            rep = query.shape[-3] // key.shape[-3]
            key, value = key.repeat_interleave(rep, -3), value.repeat_interleave(rep, -3)
        return torch.ops.aten._scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal, scale=scale)[0]

    dropout = F.dropout

    def cuda_dropout(input, p=0.5, training=True, inplace=False):
        # aten/src/ATen/native/Dropout.cpp `dropout`: CUDA takes the fused kernel (native_dropout,
        # a bool mask kept for backward); the CPU multiplies by a noise tensor of the input's dtype
        # (`_dropout_impl`), a mask twice the size in 16 bits.
        if training and 0 < p < 1 and input.is_floating_point():
            return torch.native_dropout(input, p, True)[0]
        return dropout(input, p, training, inplace)

    F.scaled_dot_product_attention = sdpa
    F.dropout = cuda_dropout
    if unpadded:
        masking_utils._ignore_causal_mask_sdpa = ignore_unpadded
        masking_utils.find_packed_sequence_indices = lambda position_ids: None  # one sequence per row
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
        F.dropout = dropout
        for name, fn in saved.items():
            setattr(masking_utils, name, fn)


def cuda_backend(query, key, value, attn_mask=None, dropout_p=0.0, enable_gqa=False) -> str:
    """torch 2.13 sdp_utils.cpp `select_sdp_backend` on an sm80+ GPU, default priority
    (flash, efficient, math): flash needs 16-bit q/k/v, no explicit mask and head_dim <= 256, a
    multiple of 8; memory-efficient needs head_dim a multiple of 8 (4 in fp32), takes masks, and
    not grouped key/value heads (`check_grouped_query_attention` admits flash and math only)."""
    import torch

    head_dim = query.shape[-1]
    sixteen = query.dtype in (torch.float16, torch.bfloat16)
    if sixteen and attn_mask is None and head_dim <= 256 and head_dim % 8 == 0 and value.shape[-1] == head_dim:
        return "flash"
    gqa = enable_gqa and key.shape[-3] != query.shape[-3]
    if not gqa and head_dim % (8 if sixteen else 4) == 0 and value.shape[-1] % (8 if sixteen else 4) == 0:
        return "efficient"
    return "math"


# torch 2.13 aten/src/ATen/autocast_mode.cpp, CUDA: ops cast to the lower precision, and ops that
# run in fp32 (outputs fp32) under autocast. Only the ones transformers' training code calls are
# listed; the CPU lists differ (no layer_norm / softmax / log_softmax / group_norm in its fp32 list).
CUDA_LOWER = ("linear", "matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "conv1d", "conv2d", "conv3d", "einsum", "scaled_dot_product_attention", "prelu")
CUDA_FP32 = (
    "layer_norm",
    "group_norm",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "binary_cross_entropy_with_logits",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "cosine_similarity",
    "norm",
    "logsumexp",
    "exp",
    "log",
    "pow",
    "rsqrt",
    "reciprocal",
    "cumsum",
    "sum",
    "prod",
)


class _CudaAutocast:
    """CUDA autocast on CPU fake tensors, as a TorchFunctionMode (above autograd, as autocast is):
    lower-precision ops get their floating inputs cast to the autocast dtype (casts of leaf
    weights cached for the step, as autocast caches them), fp32 ops get fp32 inputs."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.mode = None

    def __enter__(self):
        if self.dtype is None:
            return self
        import torch
        from torch.overrides import TorchFunctionMode

        lower_names, fp32_names, dtype = set(CUDA_LOWER), set(CUDA_FP32), self.dtype

        def name_of(func):
            return getattr(func, "__name__", "").lstrip("_")

        def cast(x, to, cache):
            if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != to and x.dtype != torch.float64:
                # autocast_mode.cpp `cached_cast`: casts of leaf tensors that require grad (the
                # weights) are cached until the autocast region exits
                if to != torch.float32 and x.is_leaf and x.requires_grad:
                    hit = cache.get(id(x))
                    if hit is None or hit[1] is not x:
                        hit = cache[id(x)] = (x.to(to), x)
                    return hit[0]
                return x.to(to)
            if isinstance(x, (list, tuple)):
                return type(x)(cast(v, to, cache) for v in x)
            return x

        class Mode(TorchFunctionMode):
            def __init__(self):
                super().__init__()
                self.cache: dict[int, Any] = {}

            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = name_of(func)
                if name in lower_names:
                    args = cast(args, dtype, self.cache)
                    kwargs = {k: cast(v, dtype, self.cache) for k, v in kwargs.items()}
                elif name in fp32_names:
                    if not (name in ("sum", "prod", "cumsum") and kwargs.get("dtype") is not None):
                        args = cast(args, torch.float32, self.cache)
                return func(*args, **kwargs)

            def __exit__(self, *exc):
                self.cache.clear()
                return super().__exit__(*exc)

        self._mode_class = Mode
        self.mode = Mode()
        self.mode.__enter__()
        return self

    def recompute_context(self):
        """The same autocast for a checkpointed layer's recomputation in backward, as
        torch.utils.checkpoint re-enters torch.autocast (passed as its `context_fn`)."""
        if self.dtype is None or self.mode is None:
            return contextlib.nullcontext()
        return self._mode_class()

    def __exit__(self, *exc):
        if self.mode is not None:
            self.mode.__exit__(*exc)
        return False


# ----------------------------------------------------------------------------------------------
# The tracker
# ----------------------------------------------------------------------------------------------


class _Tracker:
    """MemTracker's storage accounting (every storage an op creates, by category, freed when its
    last reference goes), recording per op the total and the transient (activations +
    temporaries). The phase (forward / backward / optimizer step) is set by the caller instead of
    MemTracker's ModTracker: ModTracker's backward hooks (`register_multi_grad_hook`) close over the
    graph nodes they hook, a reference cycle that keeps dead graph branches and their saved tensors
    alive until Python's garbage collector runs - memory a real run frees at once."""

    def __new__(cls):
        from functools import partial

        import torch
        from torch._guards import active_fake_mode
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_map_only
        from torch.utils.flop_counter import flop_registry

        device_op = torch.ops.prim.device.default

        class Tracker(MemTracker):
            def track_model(self, model):
                self._track_module_params_and_buffers(model, install_grad_hooks=False)
                for param in model.parameters():  # gradients, as MemTracker hooks them, trained weights only
                    if param.requires_grad and self._param_to_grad_hook_handles.get(param) is None:
                        hook = partial(self._update_and_maybe_create_winfos, reftype=_MemRefType.GRAD)
                        self._param_to_grad_hook_handles[param] = (
                            param.register_hook(lambda g, hook=hook: (hook(g), None)[1]),
                            param.register_post_accumulate_grad_hook(lambda q, hook=hook: (hook(q.grad), None)[1]),
                        )

            def __enter__(self):
                self._fake_mode_on_entry = active_fake_mode()
                self._register_global_optimizer_hook()
                self._track_resize()
                TorchDispatchMode.__enter__(self)
                return self

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func is device_op and len(args) == 1 and type(args[0]) is FakeTensor:
                    # a tensor's device, asked by autograd for every tensor it passes (two in three ops of a step):
                    # allocates nothing; answered as FakeTensor.__torch_dispatch__ answers it, without the dispatch
                    return torch.device("meta") if args[0].fake_mode.in_kernel_invocation else args[0].fake_device
                kwargs = kwargs or {}
                res = func(*args, **kwargs)
                count = flop_registry.get(func._overloadpacket)
                if count is not None and self.phase in ("forward", "backward"):
                    self.flops += count(*args, **kwargs, out_val=res)
                if self._in_opt:
                    reftype = _MemRefType.OPT
                elif self.phase == "backward":
                    reftype = _MemRefType.TEMP
                else:
                    reftype = _MemRefType.ACT
                tree_map_only(torch.Tensor, partial(self._track, reftype), res)
                self._update_peak_stats(None)
                return res

            def __init__(self):
                super().__init__()
                self.peak = 0
                self.flops = 0
                self.peak_snap: dict[str, int] = {}
                self.phase = "forward"
                self.train_transient = 0
                self.step_peak = 0
                self.step_transient = 0
                self._opt_base = 0
                # Moments of the step whose peaks grow each at its own rate with depth (see SEGMENTS).
                self.segment = "forward"
                self.seg_transient: dict[str, int] = {}
                self.seg_peak: dict[str, int] = {}

            def mark(self, phase):
                snap = self._snap()
                if phase == "step":
                    self._opt_base = snap.get("Activation", 0) + snap.get("Temp", 0)
                self.phase = phase
                if phase in ("backward", "step"):
                    self.segment = "head" if phase == "backward" else "step"

            def enter_segment(self, segment):
                """Called by the layer-output gradient hooks (`_segment_hooks`) in backward."""
                if self.phase == "backward" and SEGMENTS.index(segment) > SEGMENTS.index(self.segment):
                    self.segment = segment

            def _snap(self):
                merged: dict[str, int] = {}
                for dev_snap in self._curr_mem_snap.values():
                    for k, v in dev_snap.items():
                        merged[str(getattr(k, "value", k))] = merged.get(str(getattr(k, "value", k)), 0) + v
                return merged

            def _update_peak_stats(self, peak_state):
                snap = self._snap()
                total = snap.get("Total", 0)
                if total > self.peak:
                    self.peak, self.peak_snap = total, snap
                seg = self.segment
                self.seg_peak[seg] = max(self.seg_peak.get(seg, 0), total)
                if seg != "step":
                    self.seg_transient[seg] = max(self.seg_transient.get(seg, 0), snap.get("Activation", 0) + snap.get("Temp", 0))
                if self.phase in ("forward", "backward"):
                    transient = snap.get("Activation", 0) + snap.get("Temp", 0)
                    self.train_transient = max(self.train_transient, transient)
                elif self.phase == "step":
                    live = snap.get("Optstate", 0) + snap.get("Activation", 0) + snap.get("Temp", 0)
                    self.step_peak = max(self.step_peak, live)

            def __exit__(self, *args):
                self._deregister_param_and_optimizer_hooks()
                self._restore_resize()
                TorchDispatchMode.__exit__(self, *args)
                final = self._snap()
                states = final.get("Optstate", 0)
                self.step_transient = max(0, self.step_peak - states - self._opt_base)

        return Tracker()


# ----------------------------------------------------------------------------------------------
# For the plan
# ----------------------------------------------------------------------------------------------


def train_terms(setup, arch, counts, wanted: bool) -> tuple[dict[str, float] | None, list[str], list[str]]:
    """(train-phase activation terms or None for the analytic ones, notes, what could not be computed).

    Traced when `wanted` (plan --trace) or when the analytic model cannot build the architecture
    (`Arch.analytic_gap`). Model states, the CUDA context and the allocator reserve stay analytic."""
    from vramfit.planner.states import dequantized_bytes
    from vramfit.planner.training import liger_active

    gap = arch.analytic_gap
    notes = [f"architecture: {n}" for n in arch.notes]
    if not wanted and gap is None:
        return None, notes, []
    why = f"{gap}: " if gap else ""
    if setup.method == "grpo":
        return _fallback(gap, notes, f"{why}GRPO's generation loop and fused log-prob head cannot run under fake tensors", arch)
    if liger_active(setup, arch):
        return _fallback(gap, notes, f"{why}Liger's Triton kernels cannot run under fake tensors", arch)
    if getattr(setup, "trainer", "sft") == "gkd":
        return _fallback(gap, notes, f"{why}the trace runs the model's own loss, not GKD's divergence over student and teacher logits (gkd.py)", arch)
    if getattr(setup, "fused_lm_head", False):
        return _fallback(gap, notes, f"{why}the trace runs the model's own loss, not TRL's fused log-prob head (DPO)", arch)
    if getattr(setup, "head", "lm") in PATCHED_HEADS and setup.images_per_sample:
        return _fallback(gap, notes, f"{why}the trace patches ms-swift's {setup.head} head on a text model only", arch)
    try:
        t = trace_step(setup, arch)
    except TraceError as exc:
        return _fallback(gap, notes, f"{why}the trace failed ({exc})", arch)
    extra = dequantized_bytes(setup, counts)
    depths = ", ".join(f"{d[0]}" + (f"+{d[1]} vision" if d[1] else "") for d in t.depths)
    lengths = getattr(t, "lengths", ())
    where = f"{depths} layers and {', '.join(map(str, lengths))} tokens per sample" if lengths else f"{depths} layers"
    to = f"the full depth and to {setup.seq_len:,} tokens" if lengths else "the full depth"
    shape = "depth and length" if lengths else "depth"
    notes.append(
        f"trace: activations and transients of the train phase traced with fake tensors at {where}, "
        f"extrapolated to {to} ({'cached' if t.cached else f'{t.seconds:.1f} s'}; "
        f"{'linear' if t.linear else f'NOT linear in {shape}'}); traced: {', '.join(t.traced)}"
    )
    notes.append(f"modelled, not traced: {', '.join(t.modelled)}; the optimizer step's transients")
    if gap:
        notes.append(f"analytic model: {gap}; the trace stands in for it")
    if setup.loss_kernel == "cce" and getattr(setup, "head", "lm") == "lm":
        notes.append(
            "trace: the loss ran as the model's own cross-entropy over its whole logits; Cut Cross-Entropy (Triton, not run "
            "under fake tensors) writes no logits, so the traced peak over-counts them (an upper bound)"
        )
    notes.extend(f"trace: {n}" for n in t.notes)
    return {"activations": float(t.train_transient + extra), "vision_activations": 0.0, "logits": 0.0}, notes, []


def _fallback(gap, notes, why, arch=None):
    if gap is None:
        return None, [*notes, f"trace: not used, activations modelled analytically ({why})"], []
    # The analytic model still sizes the language model when what it cannot build is the vision tower alone;
    # a language model it cannot size (no stack found, layers that are not attention blocks) leaves the
    # activations and the logits out: model states only, a lower bound, said as incomplete.
    names = ("encoder", "decoder") if arch is not None and arch.encoder_decoder else ("text",)
    text_ok = arch is not None and all(n in arch.stacks and not arch.stacks[n].mixers for n in names)
    if text_ok:
        return None, [*notes, f"vision-tower activations not computed: {why}"], [f"vision-tower activations ({why})"]
    return (
        {"activations": 0.0, "vision_activations": 0.0, "logits": 0.0},
        [*notes, f"activations and logits not computed (the peak below is model states only, a lower bound): {why}"],
        [f"activations and logits ({why})"],
    )
