"""GKD, generalized knowledge distillation (`trainer=gkd`): TRL 1.16's experimental GKDTrainer and ms-swift's
`swift rlhf --rlhf_type gkd`. Beyond supervised training of the student (the policy) a GKD step holds:

- The teacher: a second, frozen model (`teacher_model`, its own config.json, resolved like the policy's through
  vramfit.models; it may be larger). TRL: `AutoModelForCausalLM.from_pretrained(teacher_model_name_or_path)`, then
  `prepare_deepspeed` under DeepSpeed (trl/models/utils.py: ZeRO-3 keeps stage 3 - sharded, offloaded with
  offload_param -, any other stage becomes stage 0: a whole copy cast to the run's 16-bit dtype), else
  `accelerator.prepare_model(teacher, evaluation_mode=True)`, which wraps nothing (accelerate accelerator.py: the
  DDP / FSDP wrapping is under `if not evaluation_mode`): whole on every GPU, FSDP included. ms-swift
  (rlhf_trainers/rollout_mixin.py `_setup_teacher`): `prepare_deepspeed` with `--teacher_deepspeed` (its own ZeRO
  stage / offload) else the student's; `prepare_fsdp` under FSDP (sharded); else whole. No gradients, no optimizer
  states; its forward runs under no_grad (one layer's working set at a time) and returns its logits.
- The loss over student and teacher logits, both over the full vocabulary:
  - TRL `GKDTrainer.compute_loss` shifts both [batch, seq, vocab] logits and calls `generalized_jsd_loss` over
    every position (the -100 mask is applied to the per-token divergence at the end). Counted with fake tensors
    (tests/planner/test_gkd.py traces the pinned TRL's function under FakeTensorMode and MemTracker): at its peak
    it holds 17 tensors of batch x seq x vocab for 0 < beta < 1 (the two logits, their temperature-scaled copies,
    both log-softmaxes, the stacked pair of 2, the mixture, the two kl_div terms with what autograd keeps of them,
    and the beta-weighted sum) and 9 for beta 0 or 1 (one kl_div).
  - ms-swift `gkd_loss` (rlhf_trainers/gkd_loss.py) takes the labelled positions first (`extract_active`: a copy of
    each side's rows, then the temperature-scaled copies: 4 tensors of tokens x vocab beside the two whole logits)
    and runs the JSD in chunks of 512 rows; each chunk's saved tensors stay for the backward (log_softmax's output,
    the stacked pair, the mixture, exp of each log-prob, the difference: 7 per row for 0 < beta < 1; 2 for beta 0,
    3 for beta 1), so the whole is 6 + 7 = 13 at the cap, plus one chunk's transients.
  The logits are fp32 under accelerate's mixed precision (`prepare_model` wraps forward in
  `convert_outputs_to_fp32`, for the student and the evaluation-mode teacher alike) and the loss runs outside
  autocast (the Trainer's `compute_loss_context_manager` is a no-op on CUDA): every tensor is fp32; under
  DeepSpeed (no native AMP: the engine casts the module) or pure 16-bit they are 16-bit.
- On-policy generation (lmbda > 0; TRL's `seq_kd` has the teacher generate instead): the student generates
  `max_new_tokens` (ms-swift: `max_completion_length`) with `generate`, planned with the GRPO generation terms
  (grpo.generation_peak: KV cache, prefill, ZeRO-3 gather). TRL generates one micro-batch at a time with
  `use_cache = not gradient_checkpointing` (gkd_trainer.py generation_kwargs): with checkpointing on no KV cache,
  every new token re-runs the whole sequence under no_grad. TRL trains on prompt + new tokens (the prompt is up
  to max_length: DataCollatorForChatML), ms-swift on the re-encoded sample truncated to max_length. ms-swift with
  `use_vllm`: a colocated vLLM share (plan.vllm_share) or a server's own GPUs.
- A teacher served elsewhere (ms-swift `--teacher_model_server`) holds nothing on the training GPUs; the loss then
  runs on the teacher's top-k log-probs: the student's logits and its labelled rows only.
"""

from __future__ import annotations

from pathlib import Path

from vramfit.planner.activations import FP32, nograd_layer_bytes
from vramfit.planner.params import Arch, Counts

# Tensors of tokens x vocab held at the loss's peak (module docstring). TRL: counted by the fake-tensor trace of
# trl.experimental.gkd GKDTrainer.generalized_jsd_loss (tests/planner/test_gkd.py), the two logits included.
TRL_LOSS_TENSORS = {"jsd": 17, "kl": 9}
# ms-swift gkd_loss: the two whole logits, the 4 copies of the active rows, and what each chunk saves for backward.
SWIFT_LOSS_COPIES = 6
SWIFT_SAVED = {"jsd": 7, "kl": 2, "reverse_kl": 3}
SWIFT_CHUNK = 512  # gkd_loss / jsd_loss chunk_size
# One chunk's transients beside its saved tensors: the two shifted log-probs before the stack, the stack's inputs,
# logsumexp's temporaries (aten ReduceOps.cpp logsumexp_out_impl: maxes, self - maxes): at most 10 rows' worth.
SWIFT_CHUNK_TRANSIENT = 10
GKD_LOSSES = ("trl", "swift")


def teacher_arch(setup) -> Arch | None:
    if setup.trainer != "gkd" or setup.teacher_server or setup.teacher_config is None:
        return None
    from vramfit.planner import params

    return params.summary(setup.teacher_config)


def _teacher_bytes(setup) -> int:
    """The teacher's dtype: the run's (TRL's prepare_deepspeed casts it to the DeepSpeed config's 16-bit dtype;
    ms-swift loads it with --torch_dtype), fp32 only for an fp32 run outside DeepSpeed."""
    return 4 if setup.precision == "fp32" and setup.engine != "deepspeed" else (2 if setup.sixteen_bit else 4)


def _teacher_sharding(setup) -> tuple[int, bool]:
    """(ranks the teacher's weights are sharded over, whether those shards live in host RAM)."""
    s = setup
    if s.engine == "deepspeed":
        stage = s.teacher_stage if s.teacher_stage is not None else s.zero.stage
        offload = s.teacher_offload if s.teacher_stage is not None else s.zero.offload_params
        return (s.world, offload) if stage == 3 else (1, False)
    if s.engine == "fsdp" and s.gkd_loss == "swift":  # ms-swift prepare_fsdp; TRL's evaluation-mode prepare wraps nothing
        from vramfit.planner.states import _fsdp_dp

        return _fsdp_dp(s), bool(s.fsdp_offload or s.zero.offload_params)
    return 1, False


def _quantized(setup, tarch: Arch) -> tuple[int, float]:
    """(teacher parameters quantized, bytes each): TRL's gkd.py passes the policy's quantization_config
    (--load_in_4bit / --load_in_8bit) to the teacher too (`teacher_model_kwargs["quantization_config"]`); its quantized
    weights and their constants stay whole on every GPU, as the reference copy's do (states.reference_copy)."""
    if setup.gkd_loss != "trl" or not setup.quantization:
        return 0, 0.0
    from vramfit.planner import params
    from vramfit.planner.states import quant_bytes

    return params.count(tarch, setup).quantized, quant_bytes(setup)


def teacher_weights(setup, tarch: Arch | None) -> float:
    """Bytes per GPU of the teacher's weights, resident for the whole run."""
    if tarch is None or setup.offload_teacher_model:
        return 0.0
    ranks, host = _teacher_sharding(setup)
    quantized, qbytes = _quantized(setup, tarch)
    dense = (tarch.total - quantized) * _teacher_bytes(setup)
    return (0.0 if host else dense / ranks) + quantized * qbytes


def teacher_host(setup, tarch: Arch | None) -> float:
    """Bytes per rank of the teacher in host RAM (ZeRO-3 offload_param / FSDP CPU offload shards; ms-swift
    --offload_teacher_model keeps the whole teacher there between its forwards)."""
    if tarch is None:
        return 0.0
    quantized, _ = _quantized(setup, tarch)
    dense = (tarch.total - quantized) * _teacher_bytes(setup)
    if setup.offload_teacher_model:
        return dense
    ranks, host = _teacher_sharding(setup)
    return dense / ranks if host else 0.0


def train_length(setup) -> int:
    """Tokens per sequence the step trains on: TRL appends max_new_tokens to a prompt of up to max_length when it
    generates (lmbda > 0 or seq_kd); ms-swift re-encodes to max_length."""
    generates = setup.lmbda > 0 or setup.seq_kd
    return setup.seq_len + setup.max_new_tokens if setup.gkd_loss == "trl" and generates else setup.seq_len


def loss_dtype_bytes(setup) -> int:
    """fp32 logits under accelerate's mixed precision (convert_outputs_to_fp32) and in fp32 runs; 16-bit under
    DeepSpeed's 16-bit engine and pure 16-bit runs."""
    if setup.precision == "fp32":
        return FP32
    amp = setup.engine != "deepspeed" and setup.precision in ("bf16", "fp16")
    return FP32 if amp else 2


def _divergence(beta: float) -> str:
    return "kl" if beta == 0 else "reverse_kl" if beta == 1 else "jsd"


def scored_tokens(setup, seq: int) -> int:
    """Positions per micro-batch whose full-vocabulary logits the loss holds. TRL: every position of every sequence
    (compute_loss shifts the whole logits; the label mask applies to the per-token divergence at the end). ms-swift:
    the labelled completion only - `prepare_logits_to_keep` (swift/trainers/mixin.py) trims both forwards' logits to
    it (a boolean mask of the labelled tokens in a padding-free row, else from the batch's earliest label to the end)
    and `extract_active` keeps the labelled rows; planned at max_completion_length per sample (the completion cap of
    on-policy generation; the text beside the image tokens where that is shorter), and at the whole row when
    packing fills it with samples - a dataset whose responses run longer scores more (plan it with
    max_completion_length set to their length)."""
    s = setup
    if s.gkd_loss == "trl":
        return s.micro_batch * seq
    text = max(1, seq - s.images_per_sample * s.image_tokens)
    if s.packing:  # a packed row holds as many samples as fit in max_length: their completions can fill it
        return s.micro_batch * text
    return s.micro_batch * max(1, min(text, s.max_new_tokens))


def loss_bytes(setup, arch: Arch, tarch: Arch | None, seq: int) -> float:
    """Bytes of the full-vocabulary tensors at the GKD loss's peak (module docstring), and the teacher's forward
    (its no_grad working set beside both logits) where that is larger."""
    s, b = setup, loss_dtype_bytes(setup)
    tokens = scored_tokens(s, seq)
    # ms-swift `_align_vocab` pads the smaller vocabulary to the larger (TRL refuses a pair that differs: knobs.gkd_fields)
    row = max(arch.vocab, tarch.vocab if tarch is not None else 0) * b
    kind = _divergence(s.gkd_beta)
    if s.teacher_server:  # ms-swift teacher API: top-k log-probs; the student's logits and its active rows
        return float(2 * tokens * row)
    if s.gkd_loss == "trl":
        loss = TRL_LOSS_TENSORS["jsd" if kind == "jsd" else "kl"] * tokens * row
    else:
        loss = (SWIFT_LOSS_COPIES + SWIFT_SAVED[kind]) * tokens * row + SWIFT_CHUNK_TRANSIENT * min(tokens, SWIFT_CHUNK) * row
    teacher_forward = 0.0
    if tarch is not None:
        a = 2 if s.sixteen_bit else FP32
        # a teacher whose layers the analytic model cannot size (Arch.analytic_gap): its logits only
        layer = 0.0 if tarch.analytic_gap else nograd_layer_bytes(tarch.text, a, s.attention, seq) * s.micro_batch * seq
        teacher_forward = tokens * row + tokens * tarch.vocab * b + layer  # the student's logits, the teacher's, a layer
    return float(max(loss, teacher_forward))


def generation_terms(setup, arch: Arch, counts: Counts, st) -> dict[str, float] | None:
    """The student's on-policy `generate` (lmbda > 0), as GRPO's generation terms; None when nothing generates on
    these GPUs (lmbda 0 without seq_kd, or vLLM)."""
    from vramfit.planner import grpo

    s = setup
    if s.lmbda <= 0 or (s.use_vllm and s.gkd_loss == "swift"):
        return None
    per_round = 1 if s.gkd_loss == "trl" else None  # TRL: one micro-batch per training_step; ms-swift: the generation batch
    gs = s.replace(
        method="grpo",
        max_completion_length=s.max_new_tokens,
        steps_per_generation=per_round,
        gradient_accumulation_steps=1 if per_round else s.gradient_accumulation_steps,
        ds3_gather_for_generation=True,  # TRL unwrap_model_for_generation / ms-swift gather the ZeRO-3 policy
    )
    terms = grpo.generation_peak(gs, arch, counts, st)
    if s.gkd_loss == "trl" and s.gradient_checkpointing:
        # generation_kwargs use_cache=False: no KV cache; each new token re-runs prompt + completion under no_grad
        a, n, total = (2 if s.sixteen_bit else FP32), gs.generation_batch, grpo.sequence(gs)
        terms["kv_cache"] = 0.0
        terms["activations"] = n * total * nograd_layer_bytes(arch.text, a, s.attention, total) + n * arch.vocab * FP32 * 2
    return terms


def teacher_generation_terms(setup, tarch: Arch | None, teacher: float) -> dict[str, float] | None:
    """TRL's seq_kd: when a step is not on-policy the teacher generates (`unwrap_model_for_generation(teacher)`, which
    gathers a ZeRO-3 teacher whole); planned as GRPO's generation terms over the teacher's config."""
    from types import SimpleNamespace

    from vramfit.planner import grpo, params

    s = setup
    if not (s.seq_kd and s.gkd_loss == "trl" and s.lmbda < 1) or tarch is None or tarch.analytic_gap:
        return None
    ts = s.replace(
        method="grpo",
        model_config=s.teacher_config,
        lora_r=None,
        lora_targets=None,
        quantization=None,
        max_completion_length=s.max_new_tokens,
        steps_per_generation=1,
        gradient_accumulation_steps=1,
        ds3_gather_for_generation=True,
        images_per_sample=0,
    )
    counts = params.count(tarch, ts)
    terms = grpo.generation_peak(ts, tarch, counts, SimpleNamespace(weights=teacher))
    if not s.gradient_checkpointing:
        return terms
    a, n, total = (2 if s.sixteen_bit else FP32), ts.generation_batch, grpo.sequence(ts)
    terms["kv_cache"] = 0.0
    terms["activations"] = n * total * nograd_layer_bytes(tarch.text, a, s.attention, total) + n * tarch.vocab * FP32 * 2
    return terms


def note(setup, tarch: Arch | None, teacher: float, seq: int) -> str:
    s = setup
    parts = []
    if s.teacher_server:
        parts.append("teacher served elsewhere (teacher_model_server): no teacher weights here; the loss on its top-k log-probs")
    elif tarch is not None:
        ranks, host = _teacher_sharding(s)
        where = "offloaded to host RAM" if host or s.offload_teacher_model else f"sharded over {ranks} GPUs" if ranks > 1 else "whole on every GPU"
        parts.append(
            f"a frozen teacher ({Path(s.teacher_config).name}, {tarch.total / 1e9:.2f} B parameters in {_teacher_bytes(s) * 8}-bit"
            f"{', its linears quantized like the policy (' + s.quantization + ')' if _quantized(s, tarch)[0] else ''}, {where}: "
            f"{teacher / 2**30:.2f} GiB per GPU; its forward under no_grad)"
        )
    kind = _divergence(s.gkd_beta)
    what = {"jsd": f"generalized JSD (beta {s.gkd_beta:g})", "kl": "forward KL (beta 0)", "reverse_kl": "reverse KL (beta 1)"}[kind]
    if not s.teacher_server:
        count = TRL_LOSS_TENSORS["jsd" if kind == "jsd" else "kl"] if s.gkd_loss == "trl" else SWIFT_LOSS_COPIES + SWIFT_SAVED[kind]
        impl = (
            "TRL generalized_jsd_loss over every position (modelled; its tensor count is the fake-tensor trace of the pinned TRL's function)"
            if s.gkd_loss == "trl"
            else "ms-swift gkd_loss over the labelled completion in 512-row chunks (modelled from its source), planned at "
            + (
                "every position of the packed rows"
                if s.packing
                else f"max_completion_length {s.max_new_tokens} scored tokens per sample (longer dataset responses score more)"
            )
        )
        tokens = scored_tokens(s, seq)
        parts.append(f"loss: {what}, {impl}: {count} x {tokens} tokens x vocab in {loss_dtype_bytes(s) * 8}-bit at its peak")
    if s.lmbda > 0 and s.use_vllm and s.gkd_loss == "swift":
        parts.append(f"on-policy generation (lmbda {s.lmbda:g}) through vLLM ({s.vllm_mode})")
    elif s.lmbda > 0:
        cache = "no KV cache (use_cache off with gradient checkpointing)" if s.gkd_loss == "trl" and s.gradient_checkpointing else "its KV cache"
        parts.append(f"on-policy generation (lmbda {s.lmbda:g}): the student generates {s.max_new_tokens} tokens with generate, {cache}")
    if s.seq_kd and s.gkd_loss == "trl" and s.lmbda < 1:
        parts.append("seq_kd: the teacher generates when the step is not on-policy (its KV cache and, under ZeRO-3, its gathered weights)")
    return "trainer=gkd: " + "; ".join(parts)
