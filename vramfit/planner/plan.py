"""Assemble the phases, the verdict and the fixes into a `Plan`.

Phases: `train` (forward + backward of one micro-batch), `optimizer_step`, `generation` (GRPO),
`evaluation` (when the recipe evaluates). Every phase holds the resident states (states.py) plus
its own transient tensors; the per-GPU peak is the largest phase, as the device sees it:

    device = allocated + allocator reserve + CUDA context

- allocator reserve: memory the caching allocator holds but has not handed out. Persistent states
  are allocated once; the transient tensors of a phase churn and fragment the cache. Without
  `expandable_segments` the reserve is taken as 25% of the transient: InternLM-XComposer#118 shows
  7.0 GiB reserved-but-unallocated (39.59 total - 3.20 free - 28.77 allocated - 0.6 context) next to
  28.77 GiB allocated, i.e. 25-45% of the transient part. With `expandable_segments:True` segments
  grow in 2 MiB pages and the residue is small: 2% (MiniCPM-V#338: 683.81 MiB of 77.49 GiB is 0.9%).
- cached train-phase blocks (DeepSpeed ZeRO-1/2/3 steps without optimizer offload): the caching allocator
  serves a request from a cached free block only when one is at least that large, and gives cached blocks back to
  the device only when cudaMalloc fails or on `empty_cache()` (c10/cuda/CUDACachingAllocator.cpp
  `DeviceCachingAllocator::malloc`: `get_free_block(params) || ... || alloc_block(params, false, ...) ||
  (release_available_cached_blocks(params) && alloc_block(...)) || (release_cached_blocks(...) && alloc_block(...))`;
  `get_free_block` takes the smallest cached block of at least the request's size). DeepSpeed's step allocates the
  fp32 gradient partition as one flat tensor (stage_1_and_2.py `step`: `single_grad_partition =
  self.flatten(self.averaged_gradients[i]).to(torch.float32)`; stage3.py `_prepare_fp32_grad_for_sub_group`):
  when that tensor is larger than every tensor of the forward / backward (states.step_block against
  `train_block`), it needs a new segment and the blocks the backward left cached stay reserved beside it. What
  `memory_reserved()` / nvidia-smi report for the step phase (`measures`, `cached_blocks`) holds them; the peak
  the run needs and the verdict do not, since the allocator frees them under pressure before it reports an OOM
  (and where they would not fit beside the step within the usable card, it has freed them: none are counted).
- CUDA context: hardware.py `context_gib` (measured per card).
- headroom (headroom.py): a plan fits when its peak is at most 95% of the card; host RAM likewise.
Paged optimizer states (bitsandbytes paged_*) live in CUDA unified memory and are evicted to the
host under pressure, so they are shown in the peak but not held against the card. They are allocated
outside PyTorch's caching allocator (bitsandbytes functional.py `get_paged`: cudaMallocManaged), so the
allocated and reserved figures a run logs (`max_memory_allocated` / `max_memory_reserved`) leave them
out; only the device figure (nvidia-smi) holds them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from vramfit.planner import device_map, evaluation, gkd, grpo, heads, host, knobs, params, ppo, states, training
from vramfit.planner.headroom import usable
from vramfit.planner.setup import Setup

GIB = 2**30
FRAGMENTATION = 0.25
FRAGMENTATION_EXPANDABLE = 0.02
RESIDENT = (
    "weights",
    "gradients",
    "optimizer_states",
    "paged_optimizer_states",
    "zero_buffers",
    "reference_model",
    "reward_model",
    "teacher_model",
    "critic",
    "vllm",
)
ORDER = (
    "vllm",
    "weights",
    "gathered_params",
    "gradients",
    "optimizer_states",
    "paged_optimizer_states",
    "zero_buffers",
    "reference_model",
    "reward_model",
    "teacher_model",
    "critic",
    "optimizer_step",
    "activations",
    "vision_activations",
    "logits",
    "kv_cache",
    "eval_logits",
    "allocator_reserve",
    "cuda_context",
)
FP32_BYTES = 4


@dataclass
class Plan:
    label: str
    setup: Setup
    gpu: str
    gpu_memory_gib: float
    per_gpu_peak_gib: float
    peak_phase: str
    fits: bool
    host_ram_gib: float
    host_ram_available_gib: float | None
    host_ram_fits: bool
    breakdown: dict[str, float]
    phases: dict[str, float]
    phase_breakdowns: dict[str, dict[str, float]]
    measures: dict[str, dict[str, float]]  # phase -> allocated / reserved / device (GiB)
    host_breakdown: dict[str, float]
    parameters: dict[str, int]
    notes: list[str] = field(default_factory=list)
    fixes: list[dict[str, Any]] = field(default_factory=list)
    fixes_searched: bool = False
    typical: dict[str, Any] | None = None  # the plan at a typical sample length (setup.typical_seq_len)
    incomplete: list[str] = field(default_factory=list)  # terms that could not be computed (exit 3)

    @property
    def usable_gib(self) -> float:
        return usable(self.gpu_memory_gib)

    @property
    def ok(self) -> bool:
        return self.fits and self.host_ram_fits

    def measure(self, metric: str) -> float:
        """Peak over phases of what a published figure measured: allocated, reserved or device."""
        key = {"allocated": "allocated", "reserved": "reserved", "nvidia-smi": "device"}.get(metric, "reserved")
        return max(m[key] for m in self.measures.values())

    def to_json(self) -> dict[str, Any]:
        from vramfit.planner.render import to_json

        return to_json(self)

    def render(self) -> str:
        from vramfit.planner.render import render

        return render(self)

    def plot(self, path) -> None:
        from vramfit.planner.render import plot

        plot(self, path)


def plan(setup: Setup, trace: bool = False) -> Plan:
    """Estimate every phase of `setup` (no fixes; see `plan_recipe` / fixes.py). `trace`: the train
    phase's activations and transients from the fake-tensor trace (trace.py); an architecture the
    analytic model cannot build is traced whatever `trace` says.

    With a typical length (`typical_seq_len`) the step is planned twice: at the cap (the verdict:
    the longest batch will come) and at the typical length (shown beside it)."""
    result = _plan(setup, trace)
    if setup.typical_seq_len and setup.typical_seq_len < setup.seq_len:
        if setup.packing:
            result.notes.append(
                f"packing fills every sequence to the cap ({setup.seq_len} tokens): a typical length of "
                f"{setup.typical_seq_len} does not lower the peak; the verdict uses the cap"
            )
            result.typical = {"seq_len": setup.seq_len, "per_gpu_peak_gib": result.per_gpu_peak_gib, "fits": result.fits}
        else:
            t = _plan(setup.replace(seq_len=setup.typical_seq_len, typical_seq_len=None), trace)
            what = "padding-free batches" if setup.padding_free else "batches padded to their longest sample"
            result.notes.append(
                f"at the typical length ({setup.typical_seq_len} tokens, {what}) the peak is "
                f"{t.per_gpu_peak_gib:.1f} GiB; the verdict uses the cap ({setup.seq_len} tokens, "
                f"{result.per_gpu_peak_gib:.1f} GiB), which the longest batch reaches"
            )
            result.typical = {"seq_len": setup.typical_seq_len, "per_gpu_peak_gib": t.per_gpu_peak_gib, "fits": t.fits}
    return result


def sequence_parallel_note(s: Setup, seq: int, arch) -> str:
    """What sequence parallelism changes in the plan (knobs.sequence_parallel_fields)."""
    n = s.sequence_parallel
    heads = arch.text.heads
    ulysses = math.gcd(heads, n) if heads else n
    how = f"Ulysses over {ulysses}" + (f", ring attention over {n // ulysses}" if ulysses < n else "")
    text = (
        f"sequence parallelism over {n} GPUs ({how}): each GPU holds {training.rank_tokens(s, seq):,} of every sample's "
        f"{seq:,} tokens for its layers, embeddings and loss (planned per GPU); "
        + (f"eager attention's scores span all {seq:,} keys for {heads}/{n} heads; " if s.attention == "eager" else "")
        + f"model states sharded over all {s.world} ranks as the engine shards them (ms-swift gives DeepSpeed no mpu); "
        "the all-to-all receive buffers (one layer's q / k / v / output at the GPU's share) are not added"
    )
    if s.world % n:
        text += f". {s.world} GPUs are not a multiple of sequence_parallel={n} (ms-swift's device mesh needs world % N == 0)"
    return text


def lora_targets(setup: Setup, arch) -> Setup:
    """`all-linear` on the LLM only (`lora_vision_tower=false`): PEFT's own all-linear takes every
    nn.Linear but the output layer (peft tuners_utils.py `_maybe_include_all_linear_layers`), the
    vision tower included; the LLM-only form names the other linears."""
    if setup.lora and setup.lora_targets == "all-linear" and not setup.lora_vision_tower:
        return setup.replace(lora_targets=tuple(lin.name for lin in arch.linears if lin.group != "vision"))
    if setup.lora and isinstance(setup.lora_targets, (list, tuple)) and not setup.lora_vision_tower:
        # names match by suffix in PEFT (`check_target_module_exists`), so `q_proj` would adapt the vision
        # tower's q_proj too; an LLM-only target (a regex like MiniCPM-V's `llm\..*layers\.\d+\.self_attn\.
        # (q_proj|k_proj)`) names the LLM's modules alone.
        wanted = tuple(str(t) for t in setup.lora_targets)
        return setup.replace(
            lora_targets=tuple(lin.name for lin in arch.linears if lin.group != "vision" and lin.name.endswith(tuple(f".{t}" for t in wanted) + wanted))
        )
    return setup


def embedding_lora(setup: Setup, arch) -> int:
    """LoRA parameters on the input embeddings / lm_head when target_modules names them (PEFT
    lora/layer.py `Embedding`: lora_embedding_A (r x vocab) and B (hidden x r); on lm_head a Linear
    (hidden -> vocab): r x (hidden + vocab), tied or not - PEFT wraps the output Linear module).
    params.count only sees the transformer linears."""
    if not setup.lora or isinstance(setup.lora_targets, str):
        return 0
    names = {t.rsplit(".", 1)[-1] for t in setup.lora_targets}
    embed = names & {"embed_tokens", "wte", "word_embeddings", "shared"}
    head = "lm_head" in names
    return (len(embed) > 0) * setup.lora_r * (arch.vocab + arch.text.hidden) + head * setup.lora_r * (arch.vocab + arch.text.hidden)


def _plan(setup: Setup, trace: bool = False) -> Plan:
    s = setup
    arch = training.with_head(params.summary(s.model_config), s)
    s = lora_targets(s, arch)
    counts = params.count(arch, s)
    if s.head in ("seq_cls", "token_cls") and not counts.lm_head_trainable:
        # the new `score` head always trains (PEFT SEQ_CLS / TOKEN_CLS task types add it to modules_to_save)
        counts = dataclasses.replace(counts, copies=counts.copies + arch.groups["lm_head"], lm_head_trainable=True)
    extra = embedding_lora(s, arch)
    if extra:
        counts = dataclasses.replace(counts, lora=counts.lora + extra)
    st = states.gpu_states(s, counts, arch)
    gpu = s.gpu_spec
    paged = st.optimizer_paged
    resident = {
        "vllm": vllm_share(s),
        "weights": st.weights,
        "gradients": st.gradients,
        "optimizer_states": st.optimizer - paged,
        "paged_optimizer_states": paged,
        "zero_buffers": st.buffers,
        "reference_model": grpo.reference_weights(s, counts) if s.method == "grpo" else states.reference_copy(s, counts),
    }
    is_gkd = s.trainer == "gkd"
    tarch = gkd.teacher_arch(s) if is_gkd else None
    if is_gkd:
        resident["teacher_model"] = gkd.teacher_weights(s, tarch)
    # PPO's critic (trained: its states held outside its update) and frozen reward model (ppo.py)
    crit = ppo.critic(s)
    rarch = ppo.reward_arch(s)
    is_ppo = s.trainer == "ppo" or crit is not None or rarch is not None or bool(s.critic_missing or s.reward_missing)
    if crit is not None:
        resident["critic"] = crit.resident()
    if rarch is not None:
        resident["reward_model"] = ppo.reward_weights(s, rarch)
    between_steps = {**resident, "gradients": st.gradients if st.persistent_grads else 0.0}
    is_grpo = s.method == "grpo"
    seq = grpo.sequence(s) if is_grpo else gkd.train_length(s) if is_gkd else s.seq_len
    if is_gkd and seq != s.seq_len:
        s = s.replace(seq_len=seq)  # TRL trains on the prompt (up to max_length) + max_new_tokens
    from vramfit.planner import trace as tracing

    # TRL's preference trainers run chosen + rejected as one batch: the step's activations are those of twice the
    # micro-batch (each sequence up to the cap); DPO's log-probs come from TRL's fused head, not whole logits
    ts = s.replace(micro_batch=s.micro_batch * s.sequences_per_sample) if s.sequences_per_sample > 1 else s
    sp = max(1, s.sequence_parallel)

    def analytic_terms(ts: Setup) -> dict[str, float]:
        loss = grpo.fused_head_bytes(ts, arch, counts) if is_grpo else None
        if is_grpo and ts.grpo_whole_logits:  # verl: the whole 16-bit logits, their gradient written in place
            loss = grpo.whole_logits_bytes(ts, arch, counts, ts.micro_batch * training.rank_tokens(ts, seq))
        if ts.fused_lm_head and not is_grpo:
            loss = grpo.fused_head_bytes(ts, arch, counts, tokens=ts.micro_batch * training.rank_tokens(ts, seq))
        if is_gkd:
            loss = gkd.loss_bytes(ts, arch, tarch, seq)
        return training.train_peak(ts, arch, counts, seq, loss)

    split_note = None
    if s.device_map_gpus > 1:  # one process, the model's layers spread over several GPUs: plan the busiest (device_map.py)
        per_gpu = []
        for g in device_map.split(s, arch, counts):
            gterms = analytic_terms(ts.replace(device_map_gpu=g))
            held = device_map.scale({**resident, "gradients": states.gradients_in_forward(s, st, gterms)}, g)
            per_gpu.append((g, (sum(held.values()) + sum(gterms.values())) / GIB))
        busiest = max(per_gpu, key=lambda item: item[1])[0]
        s, ts = s.replace(device_map_gpu=busiest), ts.replace(device_map_gpu=busiest)
        split_note = device_map.note(busiest, per_gpu, s)
    if s.device_map_gpu is not None:  # the split is planned analytically (the trace builds the whole model on one GPU)
        terms, notes, incomplete = None, [], []
        if trace:
            notes.append("--trace is not used for a device_map split (the trace builds the whole model on one GPU): planned analytically")
    else:
        # the trace runs one rank's share of each sequence (its layers, embeddings and loss); training.train_peak plans it
        traced = ts.replace(seq_len=training.rank_tokens(ts, ts.seq_len), sequence_parallel=1) if sp > 1 else ts
        terms, notes, incomplete = tracing.train_terms(traced, arch, counts, wanted=trace)
    if sp > 1:
        notes.append(sequence_parallel_note(s, seq, arch))
    if terms is None:
        terms = analytic_terms(ts)
    if split_note:
        notes.append(split_note)
    if is_gkd:
        notes.append(gkd.note(s, tarch, resident["teacher_model"], seq))
        if s.teacher_missing:
            incomplete.append(f"the GKD teacher's weights and logits ({s.teacher_missing})")
    elif is_ppo:
        notes.append(ppo.note(s, crit, rarch, resident.get("reward_model", 0.0), resident["reference_model"]))
        for what, why in (("critic's weights, gradients and optimizer states", s.critic_missing), ("reward model's weights", s.reward_missing)):
            if why:
                incomplete.append(f"the PPO {what} ({why})")
    elif s.trainer != "sft":
        notes.append(trainer_note(s, seq, resident["reference_model"]))
    if s.head in heads.NOTES or s.sequences_what:
        notes.append(heads.note(s, seq))
    raw = {
        "train": {**resident, "gradients": states.gradients_in_forward(s, st, terms), "gathered_params": st.gathered, **terms},
        "optimizer_step": {**resident, "zero_buffers": st.buffers if st.buffers_in_step else 0.0, "optimizer_step": st.step},
    }
    if crit is not None:
        _critic_phases(s, crit, raw, between_steps, seq, notes, incomplete, trace)
    for name, terms_ in ppo.rollout_phases(s, arch, counts, st).items():  # PPO's experience making (rollout_micro_batch)
        raw[name] = {**between_steps, **terms_}
    notes = list(s.notes) + notes
    fsdp2_note = knobs.fsdp2_accumulation_note(s)
    notes += [fsdp2_note] if fsdp2_note else []
    if s.resident_frozen:
        notes.append(f"weights include {states.resident_frozen_bytes(s) / GIB:.2f} GiB per GPU of the checkpoint's {s.resident_frozen_what} (audio_output)")
    if st.accumulated:
        shards = "the shards in host RAM" if st.gradients == 0 else f"not {st.gradients / GIB:.2f} GiB of shards"
        frozen = ", the frozen weights sharing the adapters' units included" if states.fsdp_unit_frozen(s, counts, arch) else ""
        notes.append(
            f"FSDP gradient accumulation: every micro-batch but the last of a step runs under no_sync and holds the unsharded "
            f"gradients on the GPU ({st.accumulated / GIB:.2f} GiB{frozen}; {shards}); sync_each_batch=true (accelerate) "
            "reduce-scatters after every micro-batch instead"
        )
    analytic = arch.analytic_gap is None
    if is_gkd:
        generation = gkd.generation_terms(s, arch, counts, st) if analytic else None
        if generation is not None:
            raw["generation"] = {**between_steps, **generation}
        elif s.lmbda > 0 and not analytic and not (s.use_vllm and s.gkd_loss == "swift"):
            incomplete.append("GKD on-policy generation (the analytic model cannot build this architecture)")
        teacher_generation = gkd.teacher_generation_terms(s, tarch, resident["teacher_model"])
        if teacher_generation is not None:
            raw["seq_kd"] = {**between_steps, **teacher_generation}
        elif s.seq_kd and s.gkd_loss == "trl" and s.lmbda < 1 and tarch is not None and tarch.analytic_gap:
            incomplete.append(f"GKD seq_kd: the teacher's generation (the analytic model cannot build it: {tarch.analytic_gap})")
        if s.use_vllm and s.gkd_loss == "swift" and s.lmbda > 0:
            _vllm_phases(s, raw, between_steps, notes)
    if is_grpo and not s.use_vllm and not analytic:
        incomplete.append("GRPO generation (the analytic model cannot build this architecture)")
    elif is_grpo and not s.use_vllm:
        raw["generation"] = {**between_steps, **grpo.generation_peak(s, arch, counts, st)}
    elif is_grpo and s.vllm_mode == "server":
        notes.append("vllm_mode=server: generation runs on the vLLM server's own GPUs (not these); plan those apart")
    elif is_grpo or (s.trainer == "ppo" and s.use_vllm):
        _vllm_phases(s, raw, between_steps, notes)
    host_eval = 0.0
    if s.eval_enabled and is_grpo:
        notes.append("GRPO evaluation generates like training; it is not planned as a phase of its own")
    elif s.eval_enabled and not analytic:
        incomplete.append("evaluation (the analytic model cannot build this architecture)")
    elif s.eval_enabled:
        es = s.replace(eval_batch=s.eval_batch * s.sequences_per_sample)  # chosen + rejected, as in training
        ev, host_eval = evaluation.eval_peak(es, arch, counts)
        if s.fused_lm_head:  # DPO / KTO evaluate through the fused head too (prediction_step -> compute_loss): one tile
            ev["logits"] = float(min(es.eval_batch * seq, grpo.TOKEN_TILE) * min(arch.vocab, grpo.VOCAB_TILE) * training.act_bytes(s))
        raw["evaluation"] = {**between_steps, "gathered_params": st.gathered, **ev}
    if s.device_map_gpu is not None:  # every phase's model states: the planned GPU's share of them
        raw = {name: device_map.scale(parts, s.device_map_gpu) for name, parts in raw.items()}
    frag = FRAGMENTATION_EXPANDABLE if s.expandable_segments else FRAGMENTATION
    carried = cached_train_blocks(ts, arch, st, raw["train"], frag, seq)
    phase_breakdowns, measures, phases = {}, {}, {}
    for name, parts in raw.items():
        allocated = sum(parts.values())
        transient = allocated - sum(parts.get(k, 0.0) for k in RESIDENT)
        full = {k: v / GIB for k, v in parts.items() if v > 0}
        full["allocator_reserve"] = frag * transient / GIB
        full["cuda_context"] = gpu.context_gib
        phase_breakdowns[name] = {k: full[k] for k in ORDER if k in full}
        # blocks only cached (module docstring) show in what the allocator / nvidia-smi report, not in the peak
        # the run needs: the allocator returns them to the device before it would report an OOM
        cached = (carried if name == "optimizer_step" else 0.0) / GIB
        device = sum(full.values())
        if device + cached > usable(gpu.memory_gib):
            # where the cache would not fit beside the step, cudaMalloc fails first and the allocator frees
            # its cached blocks and retries (`release_cached_blocks`); the 5% headroom stands for the memory
            # outside PyTorch's allocator (NCCL, cuBLAS workspaces: headroom.py)
            cached = 0.0
        # paged optimizer states are cudaMallocManaged memory outside PyTorch's caching allocator (states.paged_share):
        # max_memory_allocated / max_memory_reserved never count them; nvidia-smi shows them while resident
        torch_allocated = allocated - parts.get("paged_optimizer_states", 0.0)
        measures[name] = {
            "allocated": torch_allocated / GIB,
            "reserved": (torch_allocated + frag * transient) / GIB + cached,
            "device": device + cached,
        }
        if cached:
            measures[name]["cached_blocks"] = cached
        phases[name] = device
    peak_phase = max(phases, key=phases.get)
    peak = phases[peak_phase]
    binding = max(phases[p] - phase_breakdowns[p].get("paged_optimizer_states", 0.0) for p in phases)
    host_parts = host.host_ram(s, counts, arch, host_eval, training.offloaded_activation_bytes(ts, arch, counts, seq))
    if crit is not None and ppo.critic_host(crit):
        host_parts["critic"] = ppo.critic_host(crit)
    if ppo.reward_host(s, rarch):
        host_parts["reward_model"] = s.gpus_per_node * ppo.reward_host(s, rarch)
    host_total = sum(host_parts.values()) / GIB
    available = s.host_ram_gib
    if paged:
        notes.append(
            "paged optimizer states are shown in the peak but can page out to host RAM; not held against the card, and outside "
            "PyTorch's allocator (bitsandbytes cudaMallocManaged): torch.cuda.max_memory_allocated / max_memory_reserved leave them out"
        )
    return Plan(
        label=s.label,
        setup=s,
        gpu=s.gpu,
        gpu_memory_gib=gpu.memory_gib,
        per_gpu_peak_gib=peak,
        peak_phase=peak_phase,
        fits=binding <= usable(gpu.memory_gib),
        host_ram_gib=host_total,
        host_ram_available_gib=available,
        host_ram_fits=available is None or host_total <= usable(available),
        breakdown=phase_breakdowns[peak_phase],
        phases=phases,
        phase_breakdowns=phase_breakdowns,
        measures=measures,
        host_breakdown={k: v / GIB for k, v in host_parts.items()},
        parameters={
            "total": counts.total,
            "trainable": counts.trainable,
            "lora_and_copies": counts.adapters,
            "frozen": counts.frozen,
            "quantized": counts.quantized,
        },
        notes=notes,
        incomplete=incomplete,
    )


def _critic_phases(s: Setup, crit, raw: dict, between_steps: dict, seq: int, notes: list[str], incomplete: list[str], trace: bool) -> None:
    """The critic's training (ppo.py): its forward / backward beside the policy's resident states (`critic_update`, then
    its optimizer step `critic_step`) when it trains apart; in the policy's own backward when it trains jointly (TRL)."""
    if crit.arch.analytic_gap:
        incomplete.append(f"the PPO critic's activations (the analytic model cannot build it: {crit.arch.analytic_gap})")
        return
    cs, cst = crit.setup, crit.states
    terms = training.train_peak(cs, crit.arch, crit.counts, seq)
    grads = states.gradients_in_forward(cs, cst, terms)
    if trace:
        notes.append("the critic's activations are planned analytically (the trace runs the policy's step)")
    if s.critic_update == "joint":  # one backward through policy and value model (TRL PolicyAndValueWrapper)
        train = raw["train"]
        train["critic"] = crit.in_update(grads)
        for key, value in terms.items():
            train[key] = train.get(key, 0.0) + value
        step = raw["optimizer_step"]
        step["critic"] = cst.weights + cst.gradients + cst.optimizer + cst.buffers
        step["optimizer_step"] = step.get("optimizer_step", 0.0) + cst.step
        return
    # the policy's states while the critic trains: those verl keeps in host RAM outside the actor's update are there
    held = dict(between_steps)
    if "weights" in s.offload_outside_update:
        held["weights"], held["gradients"] = 0.0, 0.0
    if "optimizer" in s.offload_outside_update:
        held["optimizer_states"], held["paged_optimizer_states"] = 0.0, 0.0
    held.pop("critic", None)
    raw["critic_update"] = {**held, "critic": crit.in_update(grads), **terms}
    if cst.step:
        raw["critic_step"] = {
            **held,
            "critic": cst.weights + cst.gradients + cst.optimizer + (cst.buffers if cst.buffers_in_step else 0.0),
            "optimizer_step": cst.step,
        }


def _vllm_phases(s: Setup, raw: dict, between_steps: dict, notes: list[str]) -> None:
    """A vLLM engine generating for GRPO or ms-swift's GKD: its share on every GPU (server mode: none here)."""
    if s.vllm_mode == "server":
        notes.append("vllm_mode=server: generation runs on the vLLM server's own GPUs (not these); plan those apart")
        return
    share = s.vllm_gpu_memory_utilization * s.gpu_spec.memory_gib
    if s.vllm_sleep:
        # vllm_enable_sleep_mode: TRL puts the engine to sleep (level 1: weights offloaded to the CPU,
        # KV cache discarded) outside generation and wakes it for each generation.
        for phase in raw.values():
            phase["vllm"] = 0.0
        held = dict(between_steps)
        away = []
        if "weights" in s.offload_outside_update:  # verl param_offload: the weights (and their gradients) in host RAM
            held["weights"], held["gradients"] = 0.0, 0.0
            away.append("weights")
        if "optimizer" in s.offload_outside_update:  # verl optimizer_offload
            held["optimizer_states"], held["paged_optimizer_states"] = 0.0, 0.0
            away.append("optimizer states")
        raw["generation"] = {**held, "vllm": share * GIB}
        notes.append(f"vLLM colocated with sleep mode: its {s.vllm_gpu_memory_utilization:.0%} share ({share:.1f} GiB) is held only while generating")
        if away:
            notes.append(f"the {' and '.join(away)} are in host RAM while generating and back on the GPU for the update (offload_outside_update)")
    else:
        notes.append(
            f"vLLM colocated: it holds vllm_gpu_memory_utilization={s.vllm_gpu_memory_utilization:g} of the card "
            f"({share:.1f} GiB: weights, activations and KV cache) next to training, on every GPU"
        )


def trainer_note(s: Setup, seq: int, reference: float) -> str:
    """What the plan of a TRL preference trainer holds beyond supervised training (knobs.trainer_fields)."""
    parts = []
    if s.sequences_per_sample > 1:
        parts.append(f"chosen + rejected in one forward: {s.sequences_per_sample} x {s.micro_batch} sequences of up to {seq} tokens")
    if s.fused_lm_head:
        parts.append("log-probs from TRL's fused LM head (no whole logits)")
    if s.ref_model == "copy":
        parts.append(f"a frozen reference copy of the base ({reference / GIB:.2f} GiB per GPU; its forward runs under no_grad)")
    elif s.ref_model == "precomputed":
        parts.append("no reference model (reference log-probs precomputed before training)")
    elif s.trainer in ("dpo", "kto"):
        parts.append("no reference model (the PEFT adapter is disabled for the reference pass)")
    if s.trainer == "kto":
        parts.append("KTO's KL batch (mismatched pairs) runs under no_grad through the fused head: a transient below the backward's")
    return f"trainer={s.trainer}: " + "; ".join(parts)


def train_block(setup: Setup, arch, seq: int) -> float:
    """Bytes of the largest single tensor the forward / backward allocates, hence of the largest block the
    caching allocator can hold cached after it: the logits in the loss dtype (none with a fused loss), a
    whole parameter or gradient of the largest module in the compute dtype (a ZeRO-3 gather, an embedding's
    dense gradient), one layer's widest activation, or an eager attention's fp32 scores."""
    a, b = training.act_bytes(setup), setup.micro_batch
    own = training.text_sequences(setup, arch, seq)[-1][1]
    tokens = b * own
    # GRPO's loss runs TRL's fused head (grpo.fused_head_bytes): no whole-vocabulary tensor either
    grpo_fused = setup.method == "grpo" and not setup.grpo_whole_logits
    fused = training.liger_active(setup, arch) or setup.loss_kernel != "torch" or grpo_fused or setup.fused_lm_head
    upcast = training.loss_upcast(setup, arch) and not setup.grpo_whole_logits  # verl: 16-bit logits (grpo.whole_logits_bytes)
    width = heads.output(setup, arch).width  # the vocabulary, a classification head's labels, or a task's few columns
    logits = 0 if fused else tokens * width * (FP32_BYTES if upcast else a)
    module = arch.largest_module * (2 if setup.sixteen_bit else FP32_BYTES)
    widest = tokens * a * max((max(st.ffn, st.hidden) for st in arch.stacks.values()), default=0)
    # eager attention materialises each layer's fp32 softmax over heads x s x s (activations.layer_bytes)
    # (a model with no SDPA path runs eager whatever is asked: training.text_mode)
    eager = setup.attention == "eager" or (setup.attention == "sdpa" and not arch.sdpa)
    stacks = [(arch.stacks.get(name), q) for name, q, _ in training.text_sequences(setup, arch, seq)]
    scores = max((b * st.heads * q * q * FP32_BYTES for st, q in stacks if st is not None), default=0) if eager else 0
    if "vision" in arch.stacks and setup.images_per_sample and training.vision_attention(setup, arch) == "eager":
        v = training.vision_sequence(setup, arch)
        slices = max(1, setup.vision_patches // max(1, v))
        scores = max(scores, b * setup.images_per_sample * slices * arch.stacks["vision"].heads * v * v * FP32_BYTES)
    return float(max(logits, module, widest, scores))


def cached_train_blocks(setup: Setup, arch, st, train: dict[str, float], frag: float, seq: int) -> float:
    """Bytes the caching allocator still holds from the train phase while DeepSpeed's step allocates its flat
    fp32 gradient partition (module docstring: cached train-phase blocks); 0 when the step's tensor fits
    in a cached block."""
    if setup.engine != "deepspeed" or not st.step_block:
        return 0.0
    largest = train_block(setup, arch, seq)
    if st.step_block <= largest:
        return 0.0
    transient = (1 + frag) * (sum(train.values()) - sum(train.get(k, 0.0) for k in RESIDENT))
    # ZeRO-1/2's reduce buckets, released at the end of backward (states.States.buffers_in_step), are cached blocks too
    transient += 0.0 if st.buffers_in_step else st.buffers
    # the step's other tensor (the 16-bit flat copy of the gradient partition) is carved from a cached block
    # when one is large enough: that much of the cache is in use, not extra
    rest = st.step - st.step_block
    return max(0.0, transient - (rest if rest <= largest else 0.0))


def vllm_share(setup: Setup) -> float:
    """Bytes a colocated vLLM engine holds on each training GPU: vLLM sizes its instance as
    gpu_memory_utilization x the card's total memory (vllm/worker/gpu_worker.py
    `determine_available_memory`: requested_memory = total_gpu_memory * gpu_memory_utilization), weights
    and KV cache inside it; TRL's GRPOTrainer builds one per process in colocate mode."""
    gkd_vllm = setup.trainer == "gkd" and setup.gkd_loss == "swift" and setup.lmbda > 0
    # OpenRLHF's train_ppo_ray with --colocate_all_models: its vLLM engines on the actor's GPUs
    if not (setup.method == "grpo" or gkd_vllm or setup.trainer == "ppo") or not setup.use_vllm or setup.vllm_mode != "colocate":
        return 0.0
    return setup.vllm_gpu_memory_utilization * setup.gpu_spec.memory_gib * GIB


def plan_recipe(recipe, fixes: bool = True, trace: bool = False, resolved=None) -> Plan:
    """Plan a loaded recipe; when it does not fit, search the smallest fixes (each re-planned).

    `resolved` (from_validation.Resolved, `vramfit.validate`'s `result.resolved` for this recipe): the
    arguments and DeepSpeed JSON as the libraries resolved them feed the plan and every fix's re-plan;
    without it the planner reads the library defaults itself (`review`, the docs)."""
    from vramfit.planner import from_validation

    def setup_of(r) -> Setup:
        return Setup.from_recipe(r) if resolved is None else from_validation.setup(r, resolved)

    result = plan(setup_of(recipe), trace=trace)
    if fixes and not result.ok:
        from vramfit.planner.fixes import search

        def replan(overrides: dict[str, Any]) -> Plan:
            return plan(setup_of(with_overrides(recipe, overrides)))

        result.fixes = search(result, replan, mode="recipe", recipe=recipe)
        result.fixes_searched = True
    return result


def with_overrides(recipe, overrides: "dict[str, Any] | list[str]"):
    """The recipe as `vramfit.recipe.load(file, [key=value ...])` would build it with these overrides
    (a dict, or `key=value` items) on top of whatever it was loaded with: same override parser, same schema validation."""
    from vramfit.checks.training_args import fields_for
    from vramfit.problems import ConfigError
    from vramfit.recipe import Recipe, apply_overrides

    data = recipe.resolved_dict()
    items = [f"{k}={_text(v)}" for k, v in overrides.items()] if isinstance(overrides, dict) else list(overrides)
    problems = apply_overrides(data, items, fields_for(recipe.method), str(recipe.source))
    if problems:
        raise ConfigError(problems)
    new = Recipe.model_validate(data)
    new.source = recipe.source
    return new


def plan_args(model_config, gpu, gpus, nodes=1, deepspeed=None, overrides=(), fixes: bool = True, trace: bool = False) -> Plan:
    """Plan `vramfit plan --model-config ...`; fixes re-plan with the same keys."""
    setup = Setup.from_args(model_config, gpu, gpus, nodes, deepspeed, overrides)
    result = plan(setup, trace=trace)
    if fixes and not result.ok:
        from vramfit.planner.fixes import search

        def replan(extra: dict[str, Any]) -> Plan:
            items = [*overrides, *(f"{k}={_text(v)}" for k, v in extra.items())]
            return plan(Setup.from_args(model_config, gpu, gpus, nodes, deepspeed, items))

        result.fixes = search(result, replan, mode="args")
        result.fixes_searched = True
    return result


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
