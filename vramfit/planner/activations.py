"""Activation memory from the architecture: what autograd keeps per token, layer by layer.

The per-layer terms follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv:2205.05198, sec. 4: 34sbh + 5as^2b for GPT), re-derived for the modules
transformers 5.23 actually runs: what each op saves for its backward (PyTorch derivatives.yaml:
a linear saves its input only when its weight trains, an activation function saves its input,
a product saves both factors, dropout saves a bool mask), with

- norms: HF RMSNorm upcasts to fp32 and keeps that copy (4 B/elem) plus the 16-bit input of the
  weight multiply; nn.LayerNorm keeps its input; Liger's RMSNorm keeps the 16-bit input only;
- attention: flash / sdpa keep q, k, v, the output and a fp32 log-sum-exp per head (no s^2);
  sdpa with a padding mask repeats GQA key/value heads (transformers sdpa_attention.py
  `use_gqa_in_sdpa`), eager keeps the fp32 softmax and its 16-bit copy: heads x s^2;
- MLP: gated (SwiGLU / gated GELU) keeps gate, act(gate), up and their product; Liger's SwiGLU
  recomputes the activation (keeps gate and up); what the activation itself keeps is measured on
  the model's own activation module (params.py `_act_saves`: 1 input-sized tensor for torch
  kernels, 4 for the Python `gelu_new`);
- LoRA (PEFT 0.21): each adapted linear keeps its dropout output and mask, and the rank-r output; with
  PEFT's fp32 adapters on 16-bit weights it keeps its own cast of its input (`lora_copy`, 16-bit under
  autocast, fp32 without) instead of sharing the layer's;
  a frozen base linear keeps nothing - except a bitsandbytes 4-bit linear before 0.43.2, whose
  MatMul4Bit kept its input (`quant_keeps_input`, knobs.bnb_keeps_input); MoE experts wrapped whole
  keep a merged copy of their weights (`expert_merge_bytes`);
- gradient checkpointing (torch.utils.checkpoint, non-reentrant as transformers 5.23 sets it):
  each layer keeps only its input; one layer is recomputed at a time during backward.

Logits and cross-entropy (transformers loss_utils.ForCausalLMLoss): logits in the compute dtype,
upcast to fp32, log_softmax output kept; at the start of backward the kept log-probs plus two fp32
gradients coexist: 12 B per token x vocab (then the head's backward: the 16-bit logits gradient,
the input gradient and, when the head trains, its weight gradient). Liger's fused linear cross-entropy never materialises
them: it keeps a chunk of ceil(BT / ceil(V/H)) rows (rounded to a power of two) x V, the input
gradient (BT x H) and, when the head trains, its weight gradient (liger_kernel 0.8.5
ops/fused_linear_cross_entropy.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.planner.params import Adapted, Stack

FP32 = 4
MASK = 1  # torch.bool dropout mask


@dataclass(frozen=True)
class LayerMode:
    """How one transformer layer runs in training."""

    act: int  # bytes per activation element (2 for 16-bit compute, 4 for fp32)
    trainable: bool  # the layer's own linears train: their inputs are kept
    adapted: tuple[Adapted, ...] = ()  # LoRA inputs in this layer (per-layer averages)
    lora_rank: int = 0
    lora_dropout: bool = False
    attention: str = "sdpa"
    liger: bool = False  # Liger RMSNorm + SwiGLU patched in
    masked: bool = True  # a padding mask reaches attention (False: packing / padding-free, position_ids only)
    quant_keeps_input: bool = False  # bitsandbytes < 0.43.2 MatMul4Bit: every (4-bit) base linear keeps its input
    # bytes per element of the input copy each adapted linear keeps for itself (0: it reads its layer's input);
    # training.lora_input_copy_bytes
    lora_copy: int = 0


def layer_bytes(stack: Stack, mode: LayerMode, seq: int, kv_seq: int = 0) -> tuple[float, float]:
    """Bytes kept for backward by one layer: (per token, per sample).

    `seq` is the layer's own sequence (for eager s^2 scores); `kv_seq` the encoder length for the
    cross-attention of an encoder-decoder's decoder layer.
    """
    a = mode.act
    h, f, nh, kvh, hd = stack.hidden, stack.ffn, stack.heads, stack.kv_heads, stack.head_dim
    roles = {ad.role for ad in mode.adapted}
    keep_input = lambda role: mode.trainable or mode.quant_keeps_input or (role in roles and not mode.lora_dropout and not mode.lora_copy)  # noqa: E731
    per_token = 0.0
    per_sample = 0.0

    # Norms (one per sublayer; a parallel block such as Phi shares one). Only the norm in front of a
    # sublayer feeds its projections: Gemma 2/3's post-attention / post-feedforward norms feed the
    # residual add, which keeps nothing (one input norm per sublayer, two or three sublayers).
    sublayers = 3 if stack.cross_attention else 2
    for i in range(stack.norms_per_layer):
        if stack.norm == "layer":
            per_token += a * h  # nn.LayerNorm keeps its input (+ mean/rstd per token)
        elif mode.liger:
            per_token += a * h  # LigerRMSNorm keeps the input and rstd
        elif stack.norm_saves[0] and a == 2:
            per_token += stack.norm_saves[0 if mode.trainable else 1] * h  # measured on the model's own norm
        else:
            per_token += FP32 * h + (a * h if mode.trainable else 0)  # fp32 upcast + input of `weight * x`
        # the normalised output, input of the projections of the sublayer this norm feeds (the last one feeds the
        # MLP; a parallel block's single norm feeds both)
        feeds = ("attn_in", "mlp_in") if stack.norms_per_layer == 1 else (("mlp_in",) if i == sublayers - 1 else ("attn_in",))
        if any(keep_input(role) for role in feeds) and i < sublayers:
            per_token += a * h
    if stack.head_norm_elems:  # per-head q / k norms, measured like the layer's norm
        e = stack.head_norm_elems
        per_token += e * stack.norm_saves[0 if mode.trainable else 1] if stack.norm_saves[0] and a == 2 else e * (FP32 + (a if mode.trainable else 0))

    # Self-attention.
    # sdpa / eager expand GQA heads when masked (transformers integrations/sdpa_attention.py
    # `use_gqa_in_sdpa`: enable_gqa only without a mask); eager always repeats.
    repeat_kv = kvh < nh and (mode.attention == "eager" or (mode.attention == "sdpa" and mode.masked))
    if stack.kv_repeat != "interface":
        repeat_kv = kvh < nh and stack.kv_repeat == "always"  # the model's own attention code (params `_kv_repeat`)
    kv_heads = nh if repeat_kv else kvh
    # q, k, v (after RoPE) and the output: kept by flash / sdpa (which return it in [b, s, heads, d]
    # layout, so the output projection reads the same tensor); eager's matmul keeps no output, only
    # the output projection's transposed copy when that projection trains.
    per_token += a * (nh * hd + 2 * kv_heads * hd)
    if mode.attention != "eager" or keep_input("attn_out"):
        per_token += a * nh * hd
    if mode.attention == "flash" and keep_input("attn_out"):
        per_token += a * nh * hd  # flash-attn varlen: unpadded output kept, re-padded copy feeds o_proj
    cast = a if a != FP32 else 0  # the 16-bit copy of the fp32 softmax (none when computing in fp32)
    if mode.attention == "eager":
        per_token += (FP32 + cast) * nh * seq  # fp32 softmax (and its 16-bit copy), per query token
        if stack.attn_dropout > 0:
            per_token += (MASK + a) * nh * seq
    else:
        per_token += FP32 * nh  # log-sum-exp
    if stack.cross_attention:  # decoder: attend to the encoder output
        per_token += a * 2 * nh * hd + FP32 * nh  # q and output
        per_sample += a * 2 * nh * hd * kv_seq  # k, v of the encoder states
        if mode.attention == "eager":
            per_token += (FP32 + cast + (MASK + a if stack.attn_dropout > 0 else 0)) * nh * kv_seq

    # MLP.
    if stack.experts:
        per_token += moe_bytes(stack, a)
    if not stack.dense_ffn:
        pass  # the experts are the FFN
    elif stack.gated and mode.liger:
        per_token += a * 2 * f  # LigerSiLUMulFunction keeps gate and up, recomputes silu(gate)
    elif stack.gated:
        per_token += a * (stack.act_saves + 2) * f  # act(gate) keeps its input (+ intermediates); act out, up
    else:
        per_token += a * stack.act_saves * f  # fc1 output (+ intermediates of a Python activation)
    if keep_input("mlp_out") and stack.dense_ffn and not (stack.act_saves_output and not stack.gated and not stack.ffn_dropout):
        # input of the down projection / fc2; a ReLU feeding it directly keeps that same tensor (above)
        per_token += a * f
    if stack.hidden_dropout > 0:
        sublayers = 3 if stack.cross_attention else 2
        per_token += MASK * h * sublayers
        if stack.ffn_dropout:
            per_token += MASK * f  # dropout inside the FFN (T5)

    # LoRA branches. PEFT casts each adapted linear's input to its adapters' dtype (tuners/lora/layer.py
    # Linear.forward: `x = self._cast_input_dtype(x, lora_A.weight.dtype)`), so with fp32 adapters every
    # adapted linear keeps its own copy: the fp32 cast itself without autocast, autocast's 16-bit cast of it
    # under AMP (`lora_copy`); a dropout in front keeps its output (in that dtype) and mask instead.
    copy = mode.lora_copy or a
    rank_b = FP32 if mode.lora_copy == FP32 else a
    for ad in mode.adapted:
        if mode.lora_dropout:
            per_token += ad.per_layer * (copy + MASK) * ad.in_features  # dropout output + mask, kept by lora_A
        elif mode.lora_copy:
            per_token += ad.per_layer * copy * ad.in_features  # the adapted linear's own cast of its input
        per_token += ad.per_layer * rank_b * mode.lora_rank  # lora_A output, kept by lora_B
    return per_token, per_sample


def moe_bytes(stack: Stack, a: int) -> float:
    """Bytes per token a mixture-of-experts FFN keeps, as transformers integrations/moe.py
    `grouped_mm_experts_forward` runs it (the default experts implementation; `batched_mm` keeps the
    same rows): each token is copied once per routed expert, S = k rows per token, and
    - the router (MixtralTopKRouter / Qwen3MoeTopKRouter.forward): softmax over the E experts in fp32,
      its output kept;
    - the gathered input rows (S x H), kept by the grouped matmul (`_grouped_mm_fallback_setup_context`:
      `ctx.save_for_backward(input, weight)`);
    - gate_up output (S x 2F), kept whole by the activation (gate) and the product (up);
      act(gate) (S x F) kept by the product; the product (S x F), input of the down grouped matmul;
    - the down output (S x H), kept by `proj_out * sample_weights_g` (the routing weights train);
    - the routing permutation and its inverse, int64 per row."""
    k, F, h = stack.top_k, stack.expert_ffn, stack.hidden
    router = FP32 * stack.experts
    if stack.expert_gated:
        rows = a * (h + 2 * F + F + F + h)
    else:
        rows = a * (h + stack.act_saves * F + F + h)
    return router + k * (rows + 2 * 8)


def expert_merge_bytes(merge: tuple[int, ...], weight_bytes: int) -> tuple[float, float]:
    """(kept per layer, extra at the layer's backward) of LoRA on MoE parameters wrapped whole.

    PEFT 0.21 tuners/lora/layer.py ParamWrapper `_activate_lora`: each forward registers a
    parametrization that merges the adapter into the parameter (`_LoraFactorsProxy`: one
    `torch.baddbmm(W, lhs, rhs)` per 3-D expert stack; `_LoraParameterProxy`: W + B @ A for the 2-D
    router), a full-size copy in the weight's dtype that the experts' grouped matmul / the router's
    linear keeps for backward (`_grouped_mm_fallback_setup_context`: `save_for_backward(input,
    weight)`). In backward each copy gets a full-size gradient (the grouped matmul's weight
    gradient, which baddbmm's backward reduces to the LoRA factors); the copies are freed as their
    matmuls' backward runs, last read first, so at the backward of copy i the copies read before it
    (and itself) and its gradient coexist."""
    if not merge:
        return 0.0, 0.0
    kept = sum(merge) * weight_bytes
    peak = max(sum(merge[: i + 1]) + merge[i] for i in range(len(merge))) * weight_bytes
    return kept, peak - kept


def position_bias_bytes(stack: Stack, mode: LayerMode, seq: int, kv_seq: int, checkpointing: bool) -> tuple[float, float]:
    """(per layer, once per stack) bytes of a T5-style relative position bias under SDPA, per step.

    transformers integrations/sdpa_attention.py `create_position_bias_mask` turns the bias into the
    additive mask of every self-attention (`torch.where(causal_mask, position_bias, min)` in a
    decoder, `position_bias.contiguous()` of the permuted bias in an encoder): a [1, heads, q, k]
    copy per layer, which the memory-efficient kernel keeps as `attn_bias` for backward (it takes
    the bias gradient). Once per stack: the decoder's cross-attention bias (modeling_t5.py
    T5Attention.forward: `torch.zeros((1, n_heads, q, k))`, passed on to every layer and kept by
    each kernel); with gradient checkpointing also the stack's own bias, an input of every
    checkpointed layer (T5Stack.forward passes `position_bias` on), kept until backward. Without a
    padding mask the bias is not broadcast over the micro-batch (`is_causal` / no mask, as traced)."""
    if not stack.position_bias or mode.attention == "eager":
        return 0.0, 0.0
    a, nh = mode.act, stack.heads
    per_layer = a * nh * seq * seq
    shared = a * nh * seq * kv_seq if stack.cross_attention else 0.0
    if checkpointing:
        shared += a * nh * seq * seq
    return per_layer, shared


def nograd_layer_bytes(stack: Stack, act: int, attention: str, seq: int) -> float:
    """Peak bytes per token of one layer run without autograd (generation prefill, evaluation, a
    frozen vision tower): its input and output, and the widest set of intermediates alive at once."""
    h, f, nh, kvh, hd = stack.hidden, stack.ffn, stack.heads, stack.kv_heads, stack.head_dim
    attn = nh * hd * 2 + 2 * kvh * hd + (nh * seq * (FP32 + act) / act if attention == "eager" else 0)
    mlp = (3 if stack.gated else 2) * f
    return act * (2 * h + max(attn, mlp))


def backward_transient(stack: Stack, act: int) -> float:
    """Bytes per token alive only inside one layer's backward: the incoming and outgoing gradient
    of the widest op (the FFN) next to the residual-stream gradients."""
    width = max(stack.ffn if stack.dense_ffn else 0, stack.top_k * stack.expert_ffn * (2 if stack.expert_gated else 1))
    return act * 2 * (stack.hidden + width)


@dataclass(frozen=True)
class LogitsMode:
    vocab: int
    hidden: int
    act: int
    liger: bool
    head_trainable: bool
    head_bytes: int  # bytes per element of the lm_head weight (its gradient has that dtype in Liger)
    upcast: bool = True  # the loss runs on fp32 logits (setup.loss_fp32)
    kernel: str = "torch"  # torch | liger | cce | chunked (setup.loss_kernel)
    compiled: bool = False  # the cross-entropy runs under torch.compile (setup.compile_loss)
    # rows of the output weight whose gradient the head's backward writes when it trains (None: `vocab`, the logits'
    # width; heads.Output.weight_rows: the generative reranker reads 2 rows of lm_head and writes a dense vocab-row gradient)
    weight_rows: int | None = None


# torchtune modules/loss/ce_chunked_output_loss.py CEWithChunkedOutputLoss: num_output_chunks = 8.
CHUNKED_OUTPUT_CHUNKS = 8


def logits_bytes(m: LogitsMode, tokens: int) -> float:
    """Peak of the loss computation over `tokens` positions."""
    grad_weight = (m.vocab if m.weight_rows is None else m.weight_rows) * m.hidden * m.head_bytes if m.head_trainable else 0
    if m.kernel == "cce" and not m.liger:
        # Cut Cross-Entropy (Wijmans et al. 2024, arXiv:2411.09009; apple/ml-cross-entropy
        # cut_cross_entropy/cce.py): the logits are never written to global memory - forward keeps a
        # fp32 log-sum-exp per token, backward writes the gradient of the hidden states (`de`, the
        # input's dtype) and, when the head trains, of the classifier (`dc`).
        return tokens * FP32 + tokens * m.hidden * m.act + grad_weight
    if m.kernel == "chunked" and not m.liger:
        # torchtune: the output projection runs per chunk, so all 16-bit logits exist as 8 chunks;
        # CEWithChunkedOutputLoss upcasts one chunk at a time, and cross_entropy keeps each chunk's
        # fp32 log-softmax for backward. Backward: the kept log-probs, then per chunk its two fp32
        # gradients; then the head's backward as below.
        chunk = -(-tokens // CHUNKED_OUTPUT_CHUNKS)
        if m.compiled:
            # compiled `compute_cross_entropy`: the upcast and log-softmax fuse into one kernel that
            # saves its 16-bit input chunk and a log-sum-exp per row; backward writes the chunk's fp32
            # gradient and its 16-bit cast.
            forward = tokens * m.vocab * m.act + chunk * m.vocab * FP32
            backward = tokens * m.vocab * m.act + chunk * m.vocab * (FP32 + m.act)
        else:
            forward = tokens * m.vocab * (m.act + FP32) + chunk * m.vocab * FP32
            backward = tokens * m.vocab * FP32 + chunk * m.vocab * 2 * FP32
        head = tokens * m.vocab * m.act + tokens * m.hidden * m.act + grad_weight
        return max(forward, backward, head)
    if not m.liger and m.compiled and m.act != FP32:
        # the whole model compiled (HF torch_compile): the upcast and log-softmax fuse; saved are the
        # 16-bit logits and a log-sum-exp per token; backward writes the 16-bit logits gradient.
        forward = tokens * m.vocab * m.act + tokens * FP32
        backward = tokens * m.vocab * 2 * m.act
        head = tokens * m.vocab * m.act + tokens * m.hidden * m.act + grad_weight
        return max(forward, backward, head)
    if not m.liger and not m.upcast and m.act != FP32:
        # Cross-entropy on the 16-bit logits (Qwen-1 remote code under DeepSpeed): the logits, their
        # shifted contiguous copy and the 16-bit log_softmax output; in backward the kept log-probs,
        # their gradient and the gradient of the copy - three 16-bit tensors at either moment.
        forward = backward = tokens * m.vocab * 3 * m.act
        head = tokens * m.vocab * m.act + tokens * m.hidden * m.act + grad_weight
        return max(forward, backward, head)
    if not m.liger:
        forward = tokens * m.vocab * (m.act + FP32 + FP32) if m.act != FP32 else tokens * m.vocab * 2 * FP32
        backward = tokens * m.vocab * 3 * FP32  # kept log-probs + d(log-probs) + d(fp32 logits)
        # then the head's own backward: d(logits) in the compute dtype, its input gradient, its weight gradient
        head = tokens * m.vocab * m.act + tokens * m.hidden * m.act + grad_weight
        return max(forward, backward, head)
    chunk = min(tokens, _pow2(-(-tokens // -(-m.vocab // m.hidden))))
    return chunk * m.vocab * m.act + tokens * m.hidden * m.act + grad_weight


def sp_chunked_logits_bytes(m: LogitsMode, tokens: int, chunk: int) -> float:
    """ms-swift's ChunkedCrossEntropyLoss (swift/sequence_parallel/utils.py, CELOSS_PARALLEL_SIZE under sequence
    parallelism): forward saves the whole logits in the compute dtype and runs CrossEntropyLoss on `chunk` rows at a time
    (their fp32 upcast and log-softmax); backward re-runs each chunk under enable_grad (upcast, log-softmax, their
    gradients) and writes its gradient into the saved logits, which it returns as the logits' gradient; then the head's
    backward as `logits_bytes`."""
    grad_weight = m.vocab * m.hidden * m.head_bytes if m.head_trainable else 0
    rows = min(chunk, tokens) * m.vocab
    kept = tokens * m.vocab * m.act
    forward = kept + rows * (FP32 + FP32 if m.upcast else m.act)
    backward = kept + rows * (3 * FP32 if m.upcast else 3 * m.act)
    head = kept + tokens * m.hidden * m.act + grad_weight
    return max(forward, backward, head)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
