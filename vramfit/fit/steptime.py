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
Overlap: with overlap_comm (and DDP's bucketed all-reduce) a micro-batch takes max(compute, comm);
without it, compute + comm. The once-per-step all-gather is not overlapped.

Offload (ZeRO-Offload): per micro-batch the gradient partition goes to the host (4 B x T_train / W over
H), per step the updated 16-bit partition comes back (2 B x T_train / W); the CPU Adam step takes
T_train / nodes x CPU_ADAM_BYTES / HOST_BW. Parameter offload (ZeRO-3) adds 2 B x N / W over H per pass.
The GPU optimizer step streams OPT_BYTES per local trainable parameter (fp32 master, grad, moments read
and written: 4+2+2s+... see `optimizer_bytes`) at E_BW BW.

GRPO generation, bandwidth-bound decoding (one `generate` per `steps_per_generation` micro-batches,
n = the generation batch of one rank, C = max_completion_length, prompt length p):
    t_token = max(2 N n / (E_MM P), (W_gen + KV) / (E_BW BW)),  KV = n (p + C/2) layers 2 kv_heads head_dim 2 B
    t_gen   = C t_token + prefill (2 N n p / (E_MM P))
    ZeRO-3: ds3_gather_for_generation gathers the weights once per generate (r 2 N over L); without it
            every decoded token gathers them again (C r 2 N over L).
HF `generate`'s Python / kernel-launch overhead per token is not modelled: a lower bound for HF
generation, and the reason vLLM is used in practice (not modelled by the planner either).

Tokens per second = global batch x tokens per sample (the cap; packing or shorter samples are faster)
/ step time.
"""
from __future__ import annotations

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
        f_vis = (2 * arch.groups.get("vision", 0) * v
                 + 4 * s.micro_batch * s.images_per_sample * per_image * per_image * vs.heads * vs.head_dim * vs.layers)
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

    compute = (run(f.forward, w_bytes, elem) + run(f.backward, w_bytes, 2 * elem)
               + run(f.recompute, w_bytes, elem) + run(f.reference, w_bytes, elem / 2))
    ga = s.gradient_accumulation_steps
    world = s.world
    r = (world - 1) / world if world > 1 else 0.0
    trainable = counts.trainable
    stage = s.zero.stage if s.engine == "deepspeed" else 0
    per_micro_comm = per_step_comm = 0.0
    if world > 1:
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
    overlap = s.zero.overlap_comm or stage == 0
    micro = (max(compute, comm_micro) if overlap else compute + comm_micro) + offload_micro
    if stage == 0 and world > 1:
        # DDP overlaps its bucketed all-reduce with the last micro-batch's backward.
        last = max(compute, per_step_comm / link) - compute
        step_comm = last
    else:
        step_comm = per_step_comm / link if link else 0.0
    local_trainable = trainable / world if stage >= 1 else trainable
    opt_gpu = 0.0 if (stage and s.zero.offload_optimizer) else local_trainable * optimizer_bytes(s.optimizer) / bw
    gen = _generation(s, arch, counts, peak, bw, link, r) if s.method == "grpo" and not s.use_vllm else 0.0
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
    return StepTime(total, samples * seq, f.total, flops_source, {k: v for k, v in parts.items() if v > 0},
                    per_micro_comm * ga + per_step_comm)


def _generation(s, arch, counts, peak: float, bw: float, link: float, r: float) -> float:
    """Seconds of generation per optimizer step (bandwidth-bound decoding, see the module docstring)."""
    text = arch.text
    n = s.generation_batch
    p, c = s.seq_len, s.max_completion_length
    n_params = counts.total
    w_gen = _weight_bytes_per_param(s) * n_params
    kv = n * (p + c / 2) * text.layers * 2 * text.kv_heads * text.head_dim * 2
    per_token = max(2 * n_params * n / peak, (w_gen + kv) / bw)
    prefill = 2 * n_params * n * p / peak
    t = c * per_token + prefill
    stage = s.zero.stage if s.engine == "deepspeed" else 0
    if stage == 3 and link:
        gathers = 1 if s.ds3_gather_for_generation else c
        t += gathers * r * 2 * n_params / link
    calls = s.gradient_accumulation_steps / grpo_steps_per_generation(s.gradient_accumulation_steps, s.steps_per_generation)
    return t * calls
