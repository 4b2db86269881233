"""The training step's activation peak: which tensors coexist, and when.

Two moments compete (activations.py gives the per-layer terms):
- the loss: every layer's kept activations (or, with gradient checkpointing, every layer's input),
  the vision tower's kept activations, the embeddings, and the logits / cross-entropy peak;
- the backward of the last layer: the same kept tensors, minus the logits (freed once their
  gradient reached the hidden states), plus one recomputed layer and its backward temporaries.
The vision tower runs first and its backward last, after the LLM's activations are freed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import re
from pathlib import Path

from vramfit.planner import heads
from vramfit.planner.activations import (
    FP32,
    MASK,
    LayerMode,
    LogitsMode,
    backward_transient,
    expert_merge_bytes,
    layer_bytes,
    logits_bytes,
    nograd_layer_bytes,
    position_bias_bytes,
    sp_chunked_logits_bytes,
)
from vramfit.planner.params import Arch, Counts
from vramfit.planner.setup import tile_patches
from vramfit.planner.states import dequantized_bytes


@functools.lru_cache(maxsize=1)
def liger_model_types() -> frozenset[str]:
    """Model types Liger patches: the keys of MODEL_TYPE_TO_APPLY_LIGER_FN in the installed
    liger_kernel, read from its source (importing it loads Triton: seconds)."""
    spec = importlib.util.find_spec("liger_kernel")
    if spec is None or spec.origin is None:
        return frozenset()
    text = (Path(spec.origin).parent / "transformers" / "monkey_patch.py").read_text(encoding="utf-8")
    block = text[text.index("MODEL_TYPE_TO_APPLY_LIGER_FN = {") :]
    block = block[: block.index("}")]
    return frozenset(re.findall(r'"([a-z0-9_]+)":\s*apply_liger_kernel_to_', block))


def liger_active(setup, arch: Arch) -> bool:
    """Liger patches transformers' classes of the model types it knows (the Trainer's `use_liger_kernel` looks the
    instance's `config.model_type` up in liger_kernel.transformers MODEL_TYPE_TO_APPLY_LIGER_FN); a repository's own code
    (`remote_code`: its own classes, its own model_type, often its own loss) is left as it is."""
    types = liger_model_types()
    return (
        (setup.liger or setup.loss_kernel == "liger")
        and not setup.remote_code
        and arch.model_type in types
        and arch.text_model_type in types | {arch.model_type}
    )


def with_head(arch: Arch, setup) -> Arch:
    """The architecture the run builds for its head (`setup.head`, knobs.head_fields).

    transformers modeling_layers.py `GenericForSequenceClassification` / `GenericForTokenClassification` (what
    AutoModelForSequenceClassification / AutoModelForTokenClassification build for a decoder LLM; TRL's RewardTrainer
    with num_labels=1, its PRMTrainer with a token-classification model): the base model without lm_head, and
    `score = nn.Linear(hidden, num_labels, bias=False)` over every position's last hidden state. So the output
    layer is hidden x num_labels (a tied lm_head is not built; the input embedding stays), and every logits term
    is num_labels wide: [batch, seq, num_labels] from the score, of which sequence classification keeps the last
    non-pad position ([batch, num_labels], `pooled_logits`) for its loss - no vocabulary-wide tensor anywhere."""
    if getattr(setup, "head", "lm") not in ("seq_cls", "token_cls") or "text" not in arch.stacks:
        return arch  # lm, and the causal LM whose lm_head's forward a task replaces (heads.py): its parameters stay
    labels = setup.num_labels
    hidden = arch.text.hidden
    groups = dict(arch.groups)
    old = groups.get("lm_head", 0)
    # the token-classification score is nn.Linear(hidden, num_labels) with its bias; the sequence one has none
    groups["lm_head"] = labels * hidden + (labels if setup.head == "token_cls" else 0)
    linears = tuple(dataclasses.replace(lin, out_features=labels) if lin.group == "lm_head" else lin for lin in arch.linears)
    return dataclasses.replace(arch, groups=groups, total=arch.total - old + groups["lm_head"], linears=linears, vocab=labels, tied_embeddings=False)


def act_bytes(setup) -> int:
    return 2 if setup.sixteen_bit else 4


def lora_input_copy_bytes(setup) -> int:
    """Bytes per element of the input copy each LoRA-adapted linear keeps for itself (0: it keeps the layer's
    own input, shared by the linears that read it). PEFT's adapters are fp32 on a 16-bit base
    (get_peft_model's `autocast_adapter_dtype=True`, the default: states.py plans them so under AMP), and
    tuners/lora/layer.py Linear.forward casts the input to them: `x = self._cast_input_dtype(x,
    lora_A.weight.dtype)` - a new tensor per adapted linear. Under autocast lora_A then keeps autocast's
    16-bit cast of it (checked on the pinned peft 0.21.2 / torch 2.13 with saved_tensors_hooks: two
    adapted linears on one input keep two 16-bit copies, not the input); without autocast (pure 16-bit
    weights, `autocast_adapter_dtype=true` said) it keeps the fp32 cast. DeepSpeed's engine and FSDP's
    mixed precision cast the adapters to the compute dtype first, so the cast is a no-op there; torchtune
    and litgpt keep adapters in the model's dtype (pure bf16 without the knob)."""
    if not setup.lora_r or setup.engine in ("deepspeed", "fsdp"):
        return 0
    if setup.precision in ("bf16", "fp16"):
        return act_bytes(setup)
    if setup.precision == "bf16-true" and setup.adapter_fp32:
        return FP32
    return 0


def text_mode(setup, arch: Arch, counts: Counts, stack: str) -> LayerMode:
    return LayerMode(
        act=act_bytes(setup),
        trainable=counts.text_trainable,
        adapted=tuple(ad for ad in counts.adapted if ad.stack == stack),
        lora_rank=setup.lora_r or 0,
        lora_dropout=setup.lora_dropout > 0,
        # torch.compile's partitioner (torch/_functorch/partitioners.py `min_cut_rematerialization_partition`)
        # recomputes the pointwise ops it fused instead of saving their outputs: the RMSNorm keeps its
        # input (not the fp32 copy), the gated MLP keeps gate and up (act(gate) and the product are
        # recomputed) - what Liger's kernels keep, so the same per-layer terms apply.
        # A model with no SDPA path (BLOOM) runs eager whatever is asked (transformers falls back).
        attention=setup.attention if arch.sdpa or setup.attention != "sdpa" else "eager",
        liger=liger_active(setup, arch) or setup.compile_layers,
        masked=not (setup.packing or setup.padding_free),
        quant_keeps_input=setup.quant_keeps_input,
        lora_copy=lora_input_copy_bytes(setup),
    )


def frozen_weight_bytes(setup) -> int:
    """Bytes per element of a frozen weight (states.py `_gpu_states` frozen_b)."""
    if (setup.precision == "fp32" or setup.frozen_fp32) and setup.engine != "deepspeed":
        return 4
    return act_bytes(setup)


def loss_upcast(setup, arch: Arch) -> bool:
    """The cross-entropy runs on fp32 logits: the model's own loss upcasts (params `_loss_upcast`), or
    torch.autocast does it - cross_entropy / log_softmax are on CUDA autocast's fp32 list
    (aten/src/ATen/autocast_mode.cpp), and HF Trainer / Accelerate autocast for bf16 / fp16 mixed
    precision except under DeepSpeed, whose engine casts the module instead (setup `_loss_fp32`)."""
    if not setup.loss_fp32:
        return False
    amp = setup.engine != "deepspeed" and setup.precision in ("bf16", "fp16")
    return arch.loss_upcast or amp or not setup.sixteen_bit


def text_sequences(setup, arch: Arch, seq: int) -> list[tuple[str, int, int]]:
    """(stack, own sequence, cross-attended sequence) for the LLM stacks."""
    if arch.encoder_decoder:
        return [("encoder", seq, 0), ("decoder", setup.decoder_seq_len or seq, seq)]
    return [("text", seq, 0)]


def rank_tokens(setup, seq: int) -> int:
    """Tokens of one sample a rank holds: all of them, or its 1/N share under sequence parallelism (ms-swift
    `SequenceParallel.pad_and_split_inputs` pads the sequence to a multiple of N and splits it on dim 1)."""
    n = max(1, int(getattr(setup, "sequence_parallel", 1) or 1))
    return -(-seq // n)


def train_peak(setup, arch: Arch, counts: Counts, seq: int, loss_bytes: float | None = None) -> dict[str, float]:
    """Activation components (bytes) at the training step's activation peak.

    `loss_bytes` replaces the logits term (GRPO computes its log-probs with TRL's fused head)."""
    s, a, b = setup, act_bytes(setup), setup.micro_batch
    kept = recompute = 0.0
    stacks = text_sequences(s, arch, seq)
    for name, own, cross in stacks:
        st = arch.stacks[name]
        mode = text_mode(s, arch, counts, name)
        # eager scores per query token span all `own` keys: under Ulysses a rank holds every query of heads / N, the same
        # bytes as seq_len / N queries over all keys (layer_bytes at the full length, tokens at the rank's share)
        per_token, per_sample = layer_bytes(st, mode, own, cross)
        bias, shared_bias = position_bias_bytes(st, mode, own, cross, s.gradient_checkpointing)
        tokens = b * rank_tokens(s, own)
        merged, merged_bwd = expert_merge_bytes(counts.expert_merge, frozen_weight_bytes(s)) if name == "text" else (0.0, 0.0)
        full = per_token * tokens + per_sample * b + bias + merged
        per_layer = a * st.hidden * tokens if s.gradient_checkpointing else full  # checkpointed: the layer input
        kept += on_gpu_layers(s, st.layers) * per_layer + shared_bias
        if s.gradient_checkpointing:
            recompute = max(recompute, full + backward_transient(st, a) * tokens + merged_bwd)
        else:
            recompute = max(recompute, backward_transient(st, a) * tokens + merged_bwd)
    text = arch.text
    loss_tokens = b * rank_tokens(s, stacks[-1][1])  # ms-swift splits the rolled labels: each rank's loss on its shard
    # ms-swift's task heads under sequence parallelism (swift/trainers/mixin.py `_patch_tasks`: sp_gather_hook ->
    # gather_sequence_parallel_outputs) gather the LLM's output from every rank first: the head sees the whole sequence
    head_tokens = b * stacks[-1][1] if getattr(s, "sequence_parallel", 1) > 1 and s.head != "lm" else loss_tokens
    embed_tokens = sum(b * rank_tokens(s, own) for _, own, _ in stacks)
    embeddings = a * text.hidden * embed_tokens * (2 if s.images_per_sample else 1)  # + masked_scatter merge
    out = heads.output(s, arch)
    final_norm = (FP32 if text.norm == "rms" and not liger_active(s, arch) else a) * text.hidden * loss_tokens
    # the output layer's saved input (its weight gradient reads it); an embedding's identity head saves nothing
    final_norm += a * text.hidden * loss_tokens if counts.lm_head_trainable and out.weight_rows else 0
    if s.head == "token_cls" and s.head_dropout > 0:
        final_norm += MASK * text.hidden * loss_tokens  # the dropout before the score keeps its bool mask
    sp_chunk = s.celoss_parallel_size if getattr(s, "sequence_parallel", 1) > 1 and s.head == "lm" else 0
    if loss_bytes is None and sp_chunk and not liger_active(s, arch) and s.loss_kernel == "torch":
        # ms-swift's sequence-parallel loss with CELOSS_PARALLEL_SIZE: ChunkedCrossEntropyLoss (activations.py)
        mode = LogitsMode(arch.vocab, text.hidden, a, False, counts.lm_head_trainable, a, loss_upcast(s, arch))
        loss_bytes = sp_chunked_logits_bytes(mode, loss_tokens, sp_chunk)
    if loss_bytes is None:
        # an embedding head (width 0) leaves the hidden state's gradient: its pooling index's backward writes it dense
        loss_bytes = logits_bytes(
            LogitsMode(
                out.width,
                text.hidden,
                a,
                liger_active(s, arch) and s.head == "lm",  # Liger / CCE / chunked losses replace the causal LM's loss only
                counts.lm_head_trainable and out.weight_rows > 0,
                a,
                loss_upcast(s, arch),
                s.loss_kernel if s.head == "lm" else "torch",
                s.compile_loss,
                out.weight_rows,
            ),
            head_tokens,
        )
    vision_kept, vision_bwd = vision_training(s, arch, counts)
    gpu = s.device_map_gpu  # device_map: the planned GPU holds only its own modules' activations (device_map.py)
    if gpu is not None and not gpu.embed:
        embeddings, vision_kept, vision_bwd = 0.0, 0.0, 0.0
    if gpu is not None and not gpu.head:
        final_norm, loss_bytes = 0.0, 0.0
    if gpu is not None and not gpu.layers:
        recompute = 0.0
    base = kept + embeddings + final_norm
    copies, layer_copies = autocast_weight_copies(s, arch, counts)
    at_loss = {"activations": base + copies, "vision_activations": vision_kept, "logits": loss_bytes}
    # the backward of a quantized linear holds its dequantized weight next to the layer's tensors
    at_layer = {
        "activations": base + recompute + dequantized_bytes(s, counts) + (layer_copies if s.gradient_checkpointing else copies),
        "vision_activations": vision_kept,
        "logits": 0.0,
    }
    at_vision = {"activations": 0.0, "vision_activations": vision_bwd, "logits": 0.0}
    tail = tied_embedding_tail(s, arch, counts, embed_tokens) if gpu is None or gpu.embed else 0.0
    at_tail = {"activations": tail, "vision_activations": vision_kept, "logits": 0.0}
    points = [at_loss, at_layer, at_vision, at_tail]
    if s.keeps_previous_output or s.quantize_lm_head:
        points.append(previous_output_point(s, arch, counts, seq, base + copies, vision_kept))
    return max(points, key=lambda m: sum(m.values()))


def previous_output_point(setup, arch: Arch, counts: Counts, seq: int, kept: float, vision_kept: float) -> dict[str, float]:
    """The end of a forward whose loop still holds the previous step's output (setup.keeps_previous_output).

    LitGPT's fit (finetune/lora.py, full.py, adapter.py) binds `logits = model(input_ids, ...)`: the previous step's
    logits stay referenced until the new forward returns, so at its end both steps' logits (16-bit, vocab x tokens)
    are alive beside this step's kept activations. Backward freed the previous graph's saved tensors, but not
    what an autograd Function kept as a ctx attribute: bitsandbytes < 0.43.2 MatMul4Bit's `ctx.tensors = (A, B)`
    keeps each 4-bit linear's input until the graph dies (setup.quant_keeps_input) - one more copy of those inputs.
    Planned at the same length as this step (the longest batches set the peak). A quantized lm_head
    (setup.quantize_lm_head) is dequantized whole for each chunk it computes: at the forward's end that weight sits
    beside the logits (states.dequantized_bytes)."""
    s, a, b = setup, act_bytes(setup), setup.micro_batch
    tokens = b * text_sequences(s, arch, seq)[-1][1]
    logits = (2 if s.keeps_previous_output else 1) * a * arch.vocab * tokens  # this step's and the previous step's
    dequantized = dequantized_bytes(s, counts) if s.quantize_lm_head else 0.0
    leaked = 0.0
    if s.keeps_previous_output and s.quant_keeps_input and not s.gradient_checkpointing:
        for name, own, cross in text_sequences(s, arch, seq):
            st = arch.stacks[name]
            mode = text_mode(s, arch, counts, name)
            with_inputs = layer_bytes(st, mode, own, cross)
            without = layer_bytes(st, dataclasses.replace(mode, quant_keeps_input=False), own, cross)
            leaked += on_gpu_layers(s, st.layers) * ((with_inputs[0] - without[0]) * b * own + (with_inputs[1] - without[1]) * b)
    return {"activations": kept + leaked + dequantized, "vision_activations": vision_kept, "logits": logits}


def tied_embedding_tail(setup, arch: Arch, counts: Counts, tokens: int) -> float:
    """Bytes alive beyond the model states at the embedding's backward when a tied input / output
    embedding trains. Autograd sums the weight's two gradients in the engine's input buffer before
    its AccumulateGrad runs (torch/csrc/autograd/input_buffer.cpp `accumulate`): the output layer's
    gradient waits there through the whole backward (the gradient the states count), the embedding
    backward writes a second vocab x hidden gradient, and their sum is a third, allocated out of place
    (torch 2.13: `aten::add`, not `add_`, under torch.profiler on a tied F.linear / nn.Embedding pair).
    Beyond the states: two vocab x hidden gradients and the embedding output's gradient."""
    if not (arch.tied_embeddings and arch.vocab and counts.text_trainable and counts.lm_head_trainable):
        return 0.0
    if not heads.output(setup, arch).weight_rows:  # an embedding's identity head: the output layer writes no gradient
        return 0.0
    if setup.precision == "bf16-true" or setup.engine == "deepspeed":
        grad_b = act_bytes(setup)  # states.py `_gpu_states` train_b: the module's own dtype
    else:
        grad_b = FP32  # AMP: fp32 trainable weights and gradients
    return 2 * arch.vocab * arch.text.hidden * grad_b + tokens * arch.text.hidden * act_bytes(setup)


def autocast_weight_copies(setup, arch: Arch, counts: Counts) -> tuple[float, float]:
    """16-bit copies of fp32 linear weights that torch.autocast makes, alive at the forward's end and,
    without checkpointing, until each layer's backward: (the whole model's, one layer's) in bytes.

    aten/src/ATen/autocast_mode.cpp `cached_cast`: a leaf tensor that requires grad (a trained fp32
    weight) is cast once and cached until the autocast region exits - the Trainer computes the loss
    inside it (`autocast_smart_context_manager`), so the copies of every trained linear weight live
    through the forward; each linear's backward also saves its (cast) weight for the input gradient,
    so without checkpointing the copies of frozen fp32 weights live too, until that layer's backward;
    with checkpointing the recomputed layer casts its own again. Only over fp32 weights (`dtype=float32`
    under fp16 / bf16; PEFT's fp32 LoRA matrices, small); DeepSpeed casts the module itself and FSDP's
    mixed precision gathers 16-bit parameters, so neither autocasts an fp32 weight. Embedding lookups
    are not autocast ops: an untied input embedding is not cast."""
    s = setup
    if s.precision not in ("fp16", "bf16") or s.engine not in ("single", "ddp"):
        return 0.0, 0.0
    lookup = arch.groups.get("embed", 0) if arch.groups.get("lm_head", 0) else 0  # tied: the head casts it
    trained = (counts.trainable_base - (lookup if counts.trainable_base >= lookup else 0) if s.master_fp32 else 0) + counts.lora
    frozen = max(0, counts.frozen - lookup) if s.frozen_fp32 and not s.gradient_checkpointing else 0
    layers = max(1, sum(st.layers for st in arch.stacks.values()))
    whole = 2.0 * (trained + frozen)
    return whole, 2.0 * (trained + (counts.frozen if s.frozen_fp32 else 0)) / layers


def vision_attention(setup, arch: Arch) -> str:
    """The vision tower's attention: the setup's, except where the model's own (remote) code runs the tower
    eager unless flash_attention_2 is asked for (params.EAGER_VISION_REMOTE_CODE). vramfit's own recipe trains
    the transformers-native stand-in (SDPA), so only a run of the repository's code (`remote_code`) is eager."""
    return "eager" if setup.remote_code and arch.image.get("vision_eager") and setup.attention != "flash" else setup.attention


def vision_sequence(setup, arch: Arch) -> int:
    """The sequence one attention of the vision tower spans: a slice / crop where the processor cuts the image
    (setup.tile_patches), else the whole image's patches. The s^2 score terms of eager attention use it; the
    per-token terms use every patch (`setup.vision_patches`)."""
    return tile_patches(arch) or setup.vision_patches


def vision_training(setup, arch: Arch, counts: Counts) -> tuple[float, float]:
    """(kept through the LLM step, peak of the vision backward) in bytes."""
    if "vision" not in arch.stacks or not setup.images_per_sample:
        return 0.0, 0.0
    st = arch.stacks["vision"]
    a = act_bytes(setup)
    tokens = setup.micro_batch * setup.images_per_sample * setup.vision_patches
    layers = counts.vision_grad_layers
    if not layers and setup.gradient_checkpointing:
        # A frozen tower runs under autograd all the same once checkpointing is on: transformers 5.23
        # modeling_utils `gradient_checkpointing_enable` calls `enable_input_require_grads`, which hooks
        # the input embeddings of every PreTrainedModel inside (the tower's patch embedding too) to
        # `requires_grad_(True)` their output. Each checkpointed block keeps its input and the backward
        # runs through the tower (measured on the real code, Qwen2.5-VL: every block input alive after
        # get_image_features with checkpointing, none without).
        layers = st.layers
    if not layers:
        return 0.0, nograd_layer_bytes(st, a, vision_attention(setup, arch), vision_sequence(setup, arch)) * tokens
    mode = LayerMode(
        act=a,
        trainable=counts.vision_full,
        adapted=tuple(ad for ad in counts.adapted if ad.stack == "vision"),
        lora_rank=setup.lora_r or 0,
        lora_dropout=setup.lora_dropout > 0,
        attention=vision_attention(setup, arch),
        quant_keeps_input=setup.quant_keeps_input,
        lora_copy=lora_input_copy_bytes(setup),
    )
    per_token, _ = layer_bytes(st, mode, vision_sequence(setup, arch))
    full = per_token * tokens
    if setup.gradient_checkpointing:
        kept = on_gpu_layers(setup, layers) * a * st.hidden * tokens
        return kept, kept + full + backward_transient(st, a) * tokens
    kept = on_gpu_layers(setup, layers) * full
    return kept, kept + backward_transient(st, a) * tokens


# trl/models/activation_offloading.py OffloadActivations (TRL 1.16; axolotl uses the same): every saved
# tensor of >= min_offload_size (1024) bytes is copied to pinned host memory in forward; with streams
# (the default) the last `max_fwd_stash_size` (5) saved tensors stay alive on the GPU until their copy
# is done, and backward brings back the tensors of the autograd node it is running. The last output
# Linear is exempt (get_act_offloading_ctx_manager wraps lm_head in NoOpManager): the logits stay.
# On the GPU at the loss: with checkpointing (one saved input per layer) the last 5 layer inputs;
# without, 5 tensors of the last layer - counted as that whole layer.
MAX_FWD_STASH_SIZE = 5


def on_gpu_layers(setup, layers: int) -> int:
    """Layers whose kept activations sit on the GPU at the loss (device_map: those placed on the planned GPU)."""
    gpu = getattr(setup, "device_map_gpu", None)
    if gpu is not None:
        layers = gpu.layer_share(layers)
    if not setup.activation_offloading:
        return layers
    return min(layers, MAX_FWD_STASH_SIZE if setup.gradient_checkpointing else 1)


def offloaded_activation_bytes(setup, arch: Arch, counts: Counts, seq: int) -> float:
    """Bytes of kept activations one rank holds in host memory under activation offloading."""
    if not setup.activation_offloading:
        return 0.0
    s, a, b = setup, act_bytes(setup), setup.micro_batch
    total = 0.0
    for name, own, cross in text_sequences(s, arch, seq):
        st = arch.stacks[name]
        per_token, per_sample = layer_bytes(st, text_mode(s, arch, counts, name), own, cross)
        tokens = b * rank_tokens(s, own)
        per_layer = a * st.hidden * tokens if s.gradient_checkpointing else per_token * tokens + per_sample * b
        total += (st.layers - on_gpu_layers(s, st.layers)) * per_layer
    return total
