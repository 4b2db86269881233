"""GRPO (TRL 1.16 GRPOTrainer): generations multiply the batch.

- `per_device_train_batch_size` counts completions; one rank generates per_device x
  steps_per_generation completions in one `generate` call (grpo_config.py: generation_batch_size =
  per_device x num_processes x steps_per_generation; steps_per_generation defaults to
  gradient_accumulation_steps), each with its own copy of the prompt and image.
- Generation (transformers `generate`, no vLLM): the KV cache of every sequence, prompt +
  max_completion_length tokens, 2 x layers x KV heads x head dim per token; the prefill runs the
  whole batch through each layer at once, the vision tower over every image. Under ZeRO-3 the
  policy is gathered whole on every rank for generation (`ds3_gather_for_generation`, default True).
- The reference model exists when beta != 0 (default 0.0 in TRL 1.16); with LoRA it is the base
  model with the adapter disabled (no copy). Under ZeRO-3 it is sharded like the policy.
- Log-probabilities come from TRL's fused LM head (trainer/utils.py add_fused_lm_head,
  kernels/chunked_logprob.py): no [tokens, vocab] logits, a [4096, 32768] tile, the hidden-state
  gradient in fp32 and, when the head trains, its fp32 weight gradient.
"""

from __future__ import annotations

from vramfit.planner.activations import FP32, nograd_layer_bytes
from vramfit.planner.params import Arch, Counts
from vramfit.planner.states import States, dequantized_bytes, full_weights
from vramfit.planner.training import act_bytes, vision_attention, vision_sequence

TOKEN_TILE = 4096  # trl kernels/chunked_logprob.py TOKEN_CHUNK_SIZE
VOCAB_TILE = 32768  # trl trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE


def sequence(setup) -> int:
    return setup.seq_len + setup.max_completion_length


def fused_head_bytes(setup, arch: Arch, counts: Counts, tokens: int | None = None) -> float:
    """TRL's fused LM head (trainer/utils.py add_fused_lm_head, kernels/chunked_logprob.py) over `tokens` positions
    (GRPO: the completions; DPO: chosen + rejected): one [4096 x 32768] projection tile, the fp32 gradient of the
    hidden states and, when the head trains, of its weight."""
    if tokens is None:
        tokens = setup.micro_batch * setup.max_completion_length
    tile = min(tokens, TOKEN_TILE) * min(arch.vocab, VOCAB_TILE) * act_bytes(setup)
    grad_hidden = tokens * arch.text.hidden * FP32
    grad_weight = arch.vocab * arch.text.hidden * FP32 if counts.lm_head_trainable else 0
    return tile + grad_hidden + grad_weight


def whole_logits_bytes(setup, arch: Arch, counts: Counts, tokens: int) -> float:
    """verl's log-probs (workers/actor/dp_actor.py `_forward_micro_batch`, use_remove_padding): the model's 16-bit logits
    over every token of the micro-batch, divided by the temperature in place; torch_functional.logprobs_from_logits runs
    flash-attn's cross_entropy_loss with inplace_backward=True, which keeps those logits (and an fp32 log-sum-exp per
    token) and writes their gradient into the same storage. Backward then holds the hidden states' gradient and, when
    the head trains, its weight's."""
    a = act_bytes(setup)
    grad_weight = arch.vocab * arch.text.hidden * FP32 if counts.lm_head_trainable else 0
    return tokens * arch.vocab * a + tokens * FP32 + tokens * arch.text.hidden * a + grad_weight


def reference_weights(setup, counts: Counts) -> float:
    if setup.beta == 0 or setup.lora:
        return 0.0
    full = full_weights(setup, counts) - counts.adapters * (2 if setup.sixteen_bit else 4)
    return full / setup.world if setup.engine == "deepspeed" and setup.zero.stage == 3 else full


def generation_peak(setup, arch: Arch, counts: Counts, states: States) -> dict[str, float]:
    """Transient components (bytes) of one `generate` call."""
    s, a = setup, act_bytes(setup)
    n = s.generation_batch
    text = arch.text
    total_len = sequence(s)
    kv = n * total_len * text.layers * 2 * text.kv_heads * text.head_dim * a
    prefill = n * s.seq_len * nograd_layer_bytes(text, a, s.attention, s.seq_len)
    vision = 0.0
    if "vision" in arch.stacks and s.images_per_sample:
        v = arch.stacks["vision"]
        vision = (
            n
            * s.images_per_sample
            * (s.vision_patches * nograd_layer_bytes(v, a, vision_attention(s, arch), vision_sequence(s, arch)) + s.image_tokens * text.hidden * a)
        )
    sampling = n * arch.vocab * FP32 * 2  # last-position logits in fp32 and their softmax
    gathered = 0.0
    if s.engine == "deepspeed" and s.zero.stage == 3 and s.ds3_gather_for_generation:
        gathered = max(0.0, full_weights(s, counts) - states.weights)
    activations = max(prefill + dequantized_bytes(s, counts), vision) + sampling
    return {"gathered_params": gathered, "kv_cache": kv, "activations": activations}
