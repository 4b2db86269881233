"""Predicted time of one optimizer step, from FLOPs, bytes and the card's catalogue figures.

Everything is per GPU (rank), in seconds; P = `peak_tflops`, BW = `memory_gbs`, L = the link the
collectives run over (`link_gbs` inside a node; with several nodes the ring crosses the network, so
L = min(link_gbs, network_gbs)), H = `pcie_gbs` (vramfit/hardware.py, each with its source).

Stated efficiencies (what a step reaches of the datasheet figure):
- E_MM = 0.45 of P for the matmuls of a whole step: Llama 3 pre-training reports 38-43% bf16 MFU on
  H100 (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4), PaLM 46.2% on TPU v4 (Chowdhery et
  al. 2022, Table 3); fine-tuning stacks with less tuning sit at or below that.
- E_BW = 0.7 of BW for bandwidth-bound kernels (weight streaming, element-wise ops, the optimizer
  step): STREAM-like copy kernels reach 70-90% of HBM peak; 0.7 is the low end, stated, not fitted.
- E_LINK = 0.7 of L for NCCL ring collectives (nccl-tests bus bandwidth reaches 70-85% of the NVLink
  per-direction figure on DGX systems); E_PCIE = 0.8 of H for pinned host copies.
- Host: CPU Adam (DeepSpeed `DeepSpeedCPUAdam`, ZeRO-Offload) is memory-bound on the host:
  CPU_ADAM_BYTES = 30 B per parameter (read fp32 param, grad, m, v = 16; write param, m, v = 12;
  write the 16-bit copy = 2) at HOST_BW = 100 GB/s per node (an assumed 2-socket server: STREAM
  triad 200-400 GB/s, of which CPU Adam's vectorised loop reaches a fraction); the ranks of a node
  share it.

FLOPs of one micro-batch (`analytic_flops`; `vramfit.planner.trace.step_flops` replaces it when it
exists: FlopCounterMode over the traced step, recompute included):
    T  = micro x seq LLM tokens (GRPO: prompt + completion), V = micro x images x vision patches
    F_fwd = 2 N_text T + 2 N_vis V + 4 micro seq^2 (heads x head_dim) layers      (attention counted in
            full, as FlopCounterMode counts SDPA: no causal discount; vision attention likewise,
            an upper bound for windowed towers such as Qwen2.5-VL's)
    F_bwd = F_fwd (gradients w.r.t. activations, through every layer after the first trained one)
            + 2 N_trainable T (gradients w.r.t. trained weights)
    F_rec = F_fwd of the checkpointed stacks (gradient checkpointing recomputes the forward)
    F_ref = F_fwd when GRPO keeps a reference model (beta > 0)
N_text counts the LLM's linear weights and the output head (the embedding lookup is not a matmul).

Time of one pass (roofline per pass plus the element-wise traffic that no matmul hides):
    t_pass = max(F_pass / (E_MM P), W_bytes / (E_BW BW)) + B_elem / (E_BW BW)
    W_bytes = bytes of weights read by the pass (2 B/param; 4-bit bases: 0.5 read + 2 written + 2 read
              for the dequantized copy bitsandbytes makes = 4.5 B/param)
    B_elem  = T x layers x 2 (12 hidden + 3 ffn) B per forward (norms with fp32 upcast, residual adds,
              rotary, the gated activation), x2 for backward; Liger's fused RMSNorm / SwiGLU / RoPE
              halve it; eager attention adds 3 x micro x heads x seq^2 x 2 B per layer (scores,
              softmax, dropout written and read); logits add T x vocab x 24 B (bf16 logits, fp32
              upcast, log-softmax and their gradients), 4 B with Liger's fused linear cross-entropy.

Communication per micro-batch (bytes sent per rank; ring factor r = (W-1)/W, W = ranks):
    DDP (stage 0):  2 r G once per optimizer step (HF Trainer skips the all-reduce on accumulation
                    steps with no_sync); G = trainable x 4 B under autocast (fp32 parameters), 2 B in bf16
    ZeRO-1/2:       r 2 T_train every micro-batch (DeepSpeed reduce-scatters in the backward hooks of each
                    micro-batch) + r 2 T_train once per step (all-gather of the updated 16-bit weights)
    ZeRO-3:         r 2 N every forward, backward and recompute (parameters gathered per layer) +
                    r 2 T_train reduce-scatter every micro-batch
    FSDP full shard (FSDP1 and FSDP2 alike; torch FSDP is the same collective pattern as ZeRO-3):
                    r 2 N all-gather every forward, backward and recompute (each wrapped unit gathered
                    before use, resharded after) + r 2 T_train reduce-scatter of the gradients every
                    micro-batch (accelerate's FSDP mixed precision reduces in the 16-bit dtype; HF
                    Trainer does not skip it on accumulation steps under FSDP, as it keeps sharded
                    gradients):   C_fsdp = r 2 N (2 + [checkpointing] + [reference]) + r 2 T_train
                    shard_grad_op (reshard_after_forward=False) gathers once for forward and backward
                    (passes = 1 + [reference]); hybrid shard runs over the node's link only.
Overlap: with overlap_comm (and DDP's bucketed all-reduce, FSDP's forward / backward prefetch) a micro-
batch takes max(compute, comm); without it, compute + comm. The once-per-step all-gather is not overlapped.

Offload (ZeRO-Offload): per micro-batch the gradient partition goes to the host (4 B x T_train / W over
H), per step the updated 16-bit partition comes back (2 B x T_train / W); the CPU Adam step takes
T_train / nodes x CPU_ADAM_BYTES / HOST_BW. Parameter offload (ZeRO-3) adds 2 B x N / W over H per pass.
FSDP offload (CPUOffload(offload_params=True)): the fp32 shard comes to the GPU before every gather
(4 B x N / W over H per pass), the fp32 gradient shard goes back every micro-batch (4 B x T_train / W),
and torch's CPU AdamW steps the shard on the host at the same CPU_ADAM_BYTES / HOST_BW (a lower bound:
torch's foreach CPU step is not DeepSpeedCPUAdam's fused AVX loop).
The GPU optimizer step streams OPT_BYTES per local trainable parameter (fp32 master, grad, moments read
and written: 4+2+2s+... see `optimizer_bytes`) at E_BW BW.

GRPO generation, bandwidth-bound decoding (one `generate` per `steps_per_generation` micro-batches,
n = the generation batch of one rank, C = max_completion_length, prompt length p):
    t_token = max(2 N n / (E_MM P), (W_gen + KV) / (E_BW BW)),  KV = n (p + C/2) layers 2 kv_heads head_dim 2 B
    t_gen   = C t_token + prefill (2 N n p / (E_MM P))
    ZeRO-3: ds3_gather_for_generation gathers the weights once per generate (r 2 N over L); without it
            every decoded token gathers them again (C r 2 N over L).
    FSDP: HF generate runs the wrapped model, so every decoded token gathers the weights (C r 2 N over L).
HF `generate`'s Python / kernel-launch overhead per token is not modelled: a lower bound for HF
generation, and the reason vLLM is used in practice.

GRPO with vLLM colocated (`use_vllm`, vllm_mode=colocate; TRL runs one vLLM engine per rank, tensor
parallel 1): decoding is the same bandwidth-bound roofline over vLLM's own 16-bit weights
(W_vllm = 2 B x N, no dequantized copy), but the batch that decodes at once is capped by the KV cache
the share leaves:  KV_cap = u x card - W_vllm - 1 GiB (vLLM's activation / CUDA-graph reserve),
    n_conc = min(n, floor(KV_cap / KV_seq)),  KV_seq = (p + C) layers 2 kv_heads head_dim 2 B
    t_gen  = ceil(n / n_conc) x (C t_token(n_conc) + prefill(n_conc))
plus, once per generate: the weight sync TRL does (`_move_model_to_vllm`: under ZeRO-3 / FSDP a gather
of r 2 N over L, then a 2 B x N device copy at E_BW BW), and with sleep mode the wake-up that brings the
weights back from the host (2 B x N over H; the KV cache is rebuilt, not copied). A share with
KV_cap < KV_seq cannot start vLLM: that candidate is rejected (`vllm_veto`). vllm_mode=server: the
generation runs on other GPUs; it is not timed here (0 s, stated in the plan notes).

Tokens per second = global batch x tokens per sample (the cap; packing or shorter samples are faster)
/ step time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vramfit.libraries import grpo_steps_per_generation

E_MM = 0.45
E_BW = 0.7
E_LINK = 0.7
E_PCIE = 0.8
HOST_BW = 100e9
CPU_ADAM_BYTES = 30
TFLOP = 1e12
GB = 1e9


@dataclass
class StepTime:
    seconds: float
    tokens_per_step: int
    flops_per_micro: float
    flops_source: str
    parts: dict[str, float] = field(default_factory=dict)  # seconds per optimizer step, by component
    comm_bytes: float = 0.0  # sent per rank per optimizer step (ZeRO / DDP collectives)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class Flops:
    forward: float
    backward: float
    recompute: float
    reference: float

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.recompute + self.reference


def _text_matmul_params(arch) -> float:
    g = arch.groups
    head = g.get("lm_head") or (arch.vocab * arch.text.hidden)
    return g.get("llm", 0) + head


def tokens(setup) -> tuple[int, int, int]:
    """(LLM tokens per sample, vision patches per sample, LLM image tokens per sample)."""
    seq = setup.seq_len + (setup.max_completion_length if setup.method == "grpo" else 0)
    return seq, setup.images_per_sample * setup.vision_patches, setup.images_per_sample * setup.image_tokens


def analytic_flops(setup, arch, counts) -> Flops:
    s = setup
    seq, patches, img_tokens = tokens(s)
    t = s.micro_batch * seq
    v = s.micro_batch * patches
    text = arch.text
    attn = 4 * s.micro_batch * seq * seq * text.heads * text.head_dim * text.layers
    f_text = 2 * _text_matmul_params(arch) * t + attn
    f_vis = 0.0
    if v and "vision" in arch.stacks:
        vs = arch.stacks["vision"]
        per_image = patches / max(1, s.images_per_sample)
        f_vis = 2 * arch.groups.get("vision", 0) * v + 4 * s.micro_batch * s.images_per_sample * per_image * per_image * vs.heads * vs.head_dim * vs.layers
    f_proj = 2 * arch.groups.get("projector", 0) * s.micro_batch * img_tokens
    forward = f_text + f_vis + f_proj
    vision_trains = bool(counts.vision_grad_layers)
    # Gradients w.r.t. activations flow through the LLM whenever anything at or before it trains.
    backward = f_text + (f_vis if vision_trains else 0.0) + f_proj * (1 if s.train_projector or vision_trains else 0)
    trained_in_matmuls = counts.trainable
    backward += 2 * trained_in_matmuls * (t if not vision_trains else t + v)
    recompute = 0.0
    if s.gradient_checkpointing:
        recompute = f_text + (f_vis if vision_trains else 0.0)
    reference = forward if s.method == "grpo" and s.beta > 0 else 0.0
    return Flops(forward, backward, recompute, reference)


def optimizer_bytes(name: str) -> float:
    """Bytes streamed per trainable parameter by one GPU optimizer step: fp32 master read + written (8),
    the 16-bit gradient read (2), each moment read + written, the 16-bit weight copy written (2)."""
    from vramfit.planner.states import optimizer_state_bytes

    return 8 + 2 + 2 * optimizer_state_bytes(name) + 2


def _weight_bytes_per_param(setup) -> float:
    if setup.quantization in ("nf4", "fp4", "gptq-int4"):
        return 0.5 + 2 + 2
    if setup.quantization == "int8":
        return 1 + 2 + 2
    return 2.0 if setup.sixteen_bit else 4.0


def _elementwise_bytes(setup, arch, seq: int) -> float:
    s, text = setup, arch.text
    t = s.micro_batch * seq
    per = t * text.layers * 2 * (12 * text.hidden + 3 * text.ffn)
    if s.liger:
        per /= 2
    if s.attention == "eager":
        per += 3 * s.micro_batch * text.heads * seq * seq * 2 * text.layers
    logit_tokens = s.micro_batch * (s.max_completion_length if s.method == "grpo" else seq)
    per += logit_tokens * arch.vocab * (4 if s.liger else 24)
    return per


def estimate(setup, arch, counts, flops: Flops | None = None, flops_source: str = "analytic") -> StepTime:
    from vramfit.hardware import CATALOGUE

    s = setup
    g = CATALOGUE[s.gpu]
    peak, bw = g.peak_tflops * TFLOP * E_MM, g.memory_gbs * GB * E_BW
    link = (min(g.link_gbs, g.network_gbs) if s.nodes > 1 else g.link_gbs) * GB * E_LINK
    pcie = g.pcie_gbs * GB * E_PCIE
    f = flops or analytic_flops(s, arch, counts)
    seq, _, _ = tokens(s)
    w_bytes = _weight_bytes_per_param(s) * counts.total
    elem = _elementwise_bytes(s, arch, seq)

    def run(fl: float, weights: float, el: float) -> float:
        return (max(fl / peak, weights / bw) + el / bw) if fl else 0.0

    compute = run(f.forward, w_bytes, elem) + run(f.backward, w_bytes, 2 * elem) + run(f.recompute, w_bytes, elem) + run(f.reference, w_bytes, elem / 2)
    ga = s.gradient_accumulation_steps
    world = s.world
    r = (world - 1) / world if world > 1 else 0.0
    trainable = counts.trainable
    stage = s.zero.stage if s.engine == "deepspeed" else 0
    fsdp = s.engine == "fsdp"
    if fsdp and s.fsdp_sharding.startswith("hybrid") and s.nodes > 1:
        link = g.link_gbs * GB * E_LINK  # hybrid shard: the gathers stay inside the node
    per_micro_comm = per_step_comm = 0.0
    if world > 1 and fsdp:
        if s.fsdp_sharding == "no_shard":
            per_step_comm = 2 * r * 2 * trainable
        else:
            passes = (1 if s.fsdp_sharding in ("shard_grad_op", "hybrid_shard_zero2") else 2 + (1 if s.gradient_checkpointing else 0)) + (
                1 if f.reference else 0
            )
            per_micro_comm = r * 2 * counts.total * passes + r * 2 * trainable
    elif world > 1:
        if stage == 0:
            grad_bytes = 2 if s.precision == "bf16-true" else 4  # autocast keeps fp32 parameters and gradients
            per_step_comm = 2 * r * grad_bytes * trainable
        elif stage in (1, 2):
            per_micro_comm = r * 2 * trainable
            per_step_comm = r * 2 * trainable
        else:
            passes = 2 + (1 if s.gradient_checkpointing else 0) + (1 if f.reference else 0)
            per_micro_comm = r * 2 * counts.total * passes + r * 2 * trainable
    comm_micro = per_micro_comm / link if link else 0.0
    offload_micro = offload_step = cpu_adam = 0.0
    if stage and s.zero.offload_optimizer:
        offload_micro = 4 * trainable / world / pcie
        offload_step = 2 * trainable / world / pcie
        cpu_adam = trainable / s.nodes * CPU_ADAM_BYTES / HOST_BW
    if stage == 3 and s.zero.offload_params:
        passes = 2 + (1 if s.gradient_checkpointing else 0)
        offload_micro += 2 * counts.total / world * passes / pcie
    if fsdp and s.fsdp_offload:
        passes = 2 + (1 if s.gradient_checkpointing else 0)
        shards = world if s.fsdp_sharding != "no_shard" else 1
        offload_micro = 4 * counts.total / shards * passes / pcie + 4 * trainable / shards / pcie
        cpu_adam = trainable / shards * s.gpus_per_node * CPU_ADAM_BYTES / HOST_BW
    overlap = s.zero.overlap_comm or stage == 0 or fsdp
    micro = (max(compute, comm_micro) if overlap else compute + comm_micro) + offload_micro
    if stage == 0 and world > 1 and not fsdp:
        # DDP overlaps its bucketed all-reduce with the last micro-batch's backward.
        last = max(compute, per_step_comm / link) - compute
        step_comm = last
    else:
        step_comm = per_step_comm / link if link else 0.0
    sharded = stage >= 1 or (fsdp and s.fsdp_sharding != "no_shard")
    local_trainable = trainable / world if sharded else trainable
    offloaded = (stage and s.zero.offload_optimizer) or (fsdp and s.fsdp_offload)
    opt_gpu = 0.0 if offloaded else local_trainable * optimizer_bytes(s.optimizer) / bw
    gen = 0.0
    if s.method == "grpo" and not (s.use_vllm and s.vllm_mode == "server"):
        gen = _generation(s, arch, counts, peak, bw, link, r, pcie)
    parts = {
        "compute": compute * ga,
        "communication": max(0.0, micro - compute - offload_micro) * ga + step_comm,
        "offload_pcie": offload_micro * ga + offload_step,
        "cpu_adam": cpu_adam,
        "optimizer_step": opt_gpu,
        "generation": gen,
    }
    total = sum(parts.values())
    samples = s.micro_batch * ga * world
    return StepTime(total, samples * seq, f.total, flops_source, {k: v for k, v in parts.items() if v > 0}, per_micro_comm * ga + per_step_comm)


GIB = 1024**3
VLLM_RESERVE = 1 * GIB  # vLLM's activation / CUDA-graph working space inside its share (stated, not fitted)


def _kv_per_seq(s, arch) -> float:
    text = arch.text
    return (s.seq_len + s.max_completion_length) * text.layers * 2 * text.kv_heads * text.head_dim * 2


def _vllm_kv_cap(s, counts) -> float:
    return s.vllm_gpu_memory_utilization * s.gpu_spec.memory_gib * GIB - 2 * counts.total - VLLM_RESERVE


def vllm_veto(setup, arch, counts) -> str:
    """Why vLLM cannot start in this share ('' when it can, or when vLLM is not colocated)."""
    s = setup
    if s.method != "grpo" or not s.use_vllm or s.vllm_mode != "colocate":
        return ""
    cap = _vllm_kv_cap(s, counts)
    need = _kv_per_seq(s, arch)
    if cap >= need:
        return ""
    share = s.vllm_gpu_memory_utilization * s.gpu_spec.memory_gib
    return (
        f"vLLM cannot start: vllm_gpu_memory_utilization={s.vllm_gpu_memory_utilization:g} gives {share:.1f} GiB, "
        f"its 16-bit weights take {2 * counts.total / GIB:.1f} GiB + {VLLM_RESERVE / GIB:.0f} GiB reserve, "
        f"leaving {max(cap, 0) / GIB:.2f} GiB < {need / GIB:.2f} GiB of KV cache for one sequence"
    )


def _generation(s, arch, counts, peak: float, bw: float, link: float, r: float, pcie: float = 0.0) -> float:
    """Seconds of generation per optimizer step (bandwidth-bound decoding, see the module docstring)."""
    text = arch.text
    n = s.generation_batch
    p, c = s.seq_len, s.max_completion_length
    n_params = counts.total
    stage = s.zero.stage if s.engine == "deepspeed" else 0
    sharded = stage == 3 or (s.engine == "fsdp" and s.fsdp_sharding != "no_shard")
    calls = s.gradient_accumulation_steps / grpo_steps_per_generation(s.gradient_accumulation_steps, s.steps_per_generation)
    if s.use_vllm:
        w_gen = 2.0 * n_params
        cap = _vllm_kv_cap(s, counts)
        conc = max(1, min(n, int(cap // _kv_per_seq(s, arch)))) if cap > 0 else 1
        waves = math.ceil(n / conc)
        kv = conc * (p + c / 2) * text.layers * 2 * text.kv_heads * text.head_dim * 2
        per_token = max(2 * n_params * conc / peak, (w_gen + kv) / bw)
        t = waves * (c * per_token + 2 * n_params * conc * p / peak)
        t += 2 * n_params / bw  # load_weights: the 16-bit weights copied into vLLM's engine
        if sharded and link:
            t += r * 2 * n_params / link
        if s.vllm_sleep and pcie:
            t += 2 * n_params / pcie  # wake_up: the weights come back from host memory
        return t * calls
    w_gen = _weight_bytes_per_param(s) * n_params
    kv = n * (p + c / 2) * text.layers * 2 * text.kv_heads * text.head_dim * 2
    per_token = max(2 * n_params * n / peak, (w_gen + kv) / bw)
    prefill = 2 * n_params * n * p / peak
    t = c * per_token + prefill
    if stage == 3 and link:
        gathers = 1 if s.ds3_gather_for_generation else c
        t += gathers * r * 2 * n_params / link
    elif sharded and link:
        t += c * r * 2 * n_params / link
    return t * calls
