"""The evaluation phase (transformers 5.23 Trainer.evaluation_loop): a peak of its own.

Evaluation runs between optimizer steps with the training states still resident. Each eval step
is a forward without autograd at `per_device_eval_batch_size` (default 8, whatever the train
micro-batch), and computes the loss from materialised logits (Liger's fused loss is a training-only
path). Unless `prediction_loss_only`, the logits are kept for metrics: gathered from every rank
(`gather_for_metrics`), concatenated on the GPU (`EvalLoopContainer`, a new tensor per
concatenation) and only moved to the host every `eval_accumulation_steps` steps - never, when it is
unset, until the evaluation ends. Then they are converted to fp32 numpy arrays on every rank.
"""

from __future__ import annotations

from vramfit.planner import heads
from vramfit.planner.activations import FP32, nograd_layer_bytes
from vramfit.planner.params import Arch, Counts
from vramfit.planner.setup import ceil_div
from vramfit.planner.states import dequantized_bytes
from vramfit.planner.training import act_bytes, text_sequences, vision_attention, vision_sequence


def eval_steps(setup) -> int:
    return max(1, ceil_div(setup.eval_samples or 0, setup.eval_batch * setup.world))


def eval_peak(setup, arch: Arch, counts: Counts) -> tuple[dict[str, float], float]:
    """(GPU transient components in bytes, host bytes per rank for the kept logits)."""
    s, a, b = setup, act_bytes(setup), setup.eval_batch
    stacks = text_sequences(s, arch, s.seq_len)
    activations = max(b * own * nograd_layer_bytes(arch.stacks[name], a, s.attention, own) for name, own, _ in stacks)
    activations += dequantized_bytes(s, counts)  # a quantized linear's weight, dequantized for its matmul
    tokens = b * stacks[-1][1]
    activations += sum(a * arch.text.hidden * b * own for _, own, _ in stacks)  # embeddings / encoder output
    if "vision" in arch.stacks and s.images_per_sample:
        v = arch.stacks["vision"]
        activations += b * s.images_per_sample * s.vision_patches * nograd_layer_bytes(v, a, vision_attention(s, arch), vision_sequence(s, arch))
    out = heads.output(s, arch)  # an embedding / reranker / classification head writes no vocabulary-wide logits
    loss = tokens * out.width * (a + FP32 + FP32)  # logits, fp32 upcast, log_softmax
    if not out.width:
        loss = tokens * arch.text.hidden * a  # the embedding: the hidden states the head returns as they are
    kept = host = 0.0
    if not s.prediction_loss_only:
        # the kept predictions: per position (lm, token_cls) or one row per sequence (pooled heads)
        per_step = s.world * (tokens if out.per_token else b) * out.kept * a  # gathered from every rank
        steps = eval_steps(s)
        on_gpu = min(s.eval_accumulation_steps or steps, steps)
        kept = on_gpu * per_step + (on_gpu - 1) * per_step  # the concatenation copies the kept tensor
        host = steps * per_step * FP32 / a
    return {"activations": activations, "logits": loss, "eval_logits": kept}, host
