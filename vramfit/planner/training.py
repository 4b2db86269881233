"""The training step's activation peak: which tensors coexist, and when.

Two moments compete (activations.py gives the per-layer terms):
- the loss: every layer's kept activations (or, with gradient checkpointing, every layer's input),
  the vision tower's kept activations, the embeddings, and the logits / cross-entropy peak;
- the backward of the last layer: the same kept tensors, minus the logits (freed once their
  gradient reached the hidden states), plus one recomputed layer and its backward temporaries.
The vision tower runs first and its backward last, after the LLM's activations are freed.
"""
from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

from vramfit.planner.activations import (FP32, LayerMode, LogitsMode, backward_transient, layer_bytes,
                                         logits_bytes, nograd_layer_bytes)
from vramfit.planner.params import Arch, Counts
from vramfit.planner.states import dequantized_bytes


@functools.lru_cache(maxsize=1)
def liger_model_types() -> frozenset[str]:
    """Model types Liger patches: the keys of MODEL_TYPE_TO_APPLY_LIGER_FN in the installed
    liger_kernel, read from its source (importing it loads Triton: seconds)."""
    spec = importlib.util.find_spec("liger_kernel")
    if spec is None or spec.origin is None:
        return frozenset()
    text = (Path(spec.origin).parent / "transformers" / "monkey_patch.py").read_text(encoding="utf-8")
    block = text[text.index("MODEL_TYPE_TO_APPLY_LIGER_FN = {"):]
    block = block[: block.index("}")]
    return frozenset(re.findall(r'"([a-z0-9_]+)":\s*apply_liger_kernel_to_', block))


def liger_active(setup, arch: Arch) -> bool:
    types = liger_model_types()
    return setup.liger and arch.model_type in types and arch.text_model_type in types | {arch.model_type}


def act_bytes(setup) -> int:
    return 2 if setup.sixteen_bit else 4


def text_mode(setup, arch: Arch, counts: Counts, stack: str) -> LayerMode:
    return LayerMode(
        act=act_bytes(setup), trainable=counts.text_trainable,
        adapted=tuple(ad for ad in counts.adapted if ad.stack == stack),
        lora_rank=setup.lora_r or 0, lora_dropout=setup.lora_dropout > 0,
        attention=setup.attention if arch.sdpa or setup.attention != "sdpa" else "eager", liger=liger_active(setup, arch),
    )


def text_sequences(setup, arch: Arch, seq: int) -> list[tuple[str, int, int]]:
    """(stack, own sequence, cross-attended sequence) for the LLM stacks."""
    if arch.encoder_decoder:
        return [("encoder", seq, 0), ("decoder", setup.decoder_seq_len or seq, seq)]
    return [("text", seq, 0)]


def train_peak(setup, arch: Arch, counts: Counts, seq: int, loss_bytes: float | None = None) -> dict[str, float]:
    """Activation components (bytes) at the training step's activation peak.

    `loss_bytes` replaces the logits term (GRPO computes its log-probs with TRL's fused head)."""
    s, a, b = setup, act_bytes(setup), setup.micro_batch
    kept = recompute = 0.0
    stacks = text_sequences(s, arch, seq)
    for name, own, cross in stacks:
        st = arch.stacks[name]
        per_token, per_sample = layer_bytes(st, text_mode(s, arch, counts, name), own, cross)
        tokens = b * own
        full = per_token * tokens + per_sample * b
        if s.gradient_checkpointing:
            kept += st.layers * a * st.hidden * tokens  # each layer's input
            recompute = max(recompute, full + backward_transient(st, a) * tokens)
        else:
            kept += st.layers * full
            recompute = max(recompute, backward_transient(st, a) * tokens)
    text = arch.text
    loss_tokens = b * stacks[-1][1]
    embed_tokens = sum(b * own for _, own, _ in stacks)
    embeddings = a * text.hidden * embed_tokens * (2 if s.images_per_sample else 1)  # + masked_scatter merge
    final_norm = (FP32 if text.norm == "rms" and not liger_active(s, arch) else a) * text.hidden * loss_tokens
    final_norm += a * text.hidden * loss_tokens if counts.lm_head_trainable else 0
    if loss_bytes is None:
        loss_bytes = logits_bytes(LogitsMode(arch.vocab, text.hidden, a, liger_active(s, arch),
                                             counts.lm_head_trainable, a, s.loss_fp32), loss_tokens)
    vision_kept, vision_bwd = vision_training(s, arch, counts)
    base = kept + embeddings + final_norm
    at_loss = {"activations": base, "vision_activations": vision_kept, "logits": loss_bytes}
    # the backward of a quantized linear holds its dequantized weight next to the layer's tensors
    at_layer = {"activations": base + recompute + dequantized_bytes(s, counts), "vision_activations": vision_kept,
                "logits": 0.0}
    at_vision = {"activations": 0.0, "vision_activations": vision_bwd, "logits": 0.0}
    return max((at_loss, at_layer, at_vision), key=lambda m: sum(m.values()))


def vision_training(setup, arch: Arch, counts: Counts) -> tuple[float, float]:
    """(kept through the LLM step, peak of the vision backward) in bytes."""
    if "vision" not in arch.stacks or not setup.images_per_sample:
        return 0.0, 0.0
    st = arch.stacks["vision"]
    a = act_bytes(setup)
    tokens = setup.micro_batch * setup.images_per_sample * setup.vision_patches
    layers = counts.vision_grad_layers
    if not layers:
        return 0.0, nograd_layer_bytes(st, a, setup.attention, setup.vision_patches) * tokens
    mode = LayerMode(act=a, trainable=counts.vision_full,
                     adapted=tuple(ad for ad in counts.adapted if ad.stack == "vision"),
                     lora_rank=setup.lora_r or 0, lora_dropout=setup.lora_dropout > 0, attention=setup.attention)
    per_token, _ = layer_bytes(st, mode, setup.vision_patches)
    full = per_token * tokens
    if setup.gradient_checkpointing:
        kept = layers * a * st.hidden * tokens
        return kept, kept + full + backward_transient(st, a) * tokens
    kept = layers * full
    return kept, kept + backward_transient(st, a) * tokens
