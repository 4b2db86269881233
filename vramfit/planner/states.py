"""Model states on one GPU: weights, gradients, optimizer states, ZeRO / FSDP buffers.

Bytes per parameter (DeepSpeed's own accounting, deepspeed/runtime/zero/stage_1_and_2.py
`estimate_zero2_model_states_mem_needs`: "2 = params_16bit, 18 = 2_grads_16bit + 4_grads_32bit +
4_params_32bit + 8_optimizer_states_32bit"), applied per stage:

| engine | weights | gradients | master + moments | at the optimizer step |
|---|---|---|---|---|
| ZeRO-1 | 16-bit, full | 16-bit, full | /dp | fp32 grad partition /dp |
| ZeRO-2 | 16-bit, full | 16-bit /dp | /dp | fp32 grad partition /dp |
| ZeRO-3 | 16-bit /dp + gathered layer | 16-bit /dp | /dp | fp32 grads of one sub-group |
| FSDP full shard | stored dtype /dp + 2 gathered units | /dp | /dp | - |
| DDP / single GPU (AMP) | fp32 trainable, 16-bit frozen | fp32 (+1 copy in DDP buckets) | moments | - |

Offload moves master + moments (optimizer) and the 16-bit parameters (params, ZeRO-3 only) to
host RAM (host.py). ZeRO buffers: the reduce bucket (`reduce_bucket_size` elements, twice with
`overlap_comm`; ZeRO-1/2 as the transformers docs size them with the all-gather bucket), the prefetch bucket
and the persistent small parameters (ZeRO-3) - deepspeed/runtime/zero/stage3.py and stage_1_and_2.py. ZeRO-1/2
release theirs at the end of each backward (stage_1_and_2.py `_release_ipg_buffers`), so they are not held
through the optimizer step; the caching allocator keeps them reserved (plan.py `cached_train_blocks`).

Quantized frozen weights (bytes per parameter): nf4/fp4 4 bits + one absmax per 64 weights, with
double quantization an 8-bit absmax plus one fp32 per 256 blocks (Dettmers et al. 2023, QLoRA,
sec. 3: 0.127 bits/param of constants); int8 LLM.int8() 1 byte + an fp32 row scale; GPTQ int4
(group 128) 4 bits + an fp16 scale and a 4-bit zero per group. Only the packed weights of a
bitsandbytes 4-bit layer stored in a float dtype (`bnb_4bit_quant_storage`) are a parameter that
ZeRO-3 / FSDP can shard and offload; the constants are a `QuantState` attribute of the weight
(bitsandbytes nn/modules.py `Params4bit.quant_state`, restored from `Linear4bit.quant_state` after
FSDP flattens the parameter), neither a parameter nor a buffer, so every GPU keeps all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramfit.planner.params import Arch, Counts

FP32_BYTES = 4
QUANT_BYTES = {
    "nf4": 0.5 + 4 / 64,
    "nf4-dq": 0.5 + 1 / 64 + 4 / (64 * 256),
    "int8": 1.0 + 4 / 4096,
    "gptq-int4": 0.5 + (2 + 0.5) / 128,
    # AutoAWQ awq/modules/linear/gemm.py WQLinear_GEMM: qweight int32 (in, out/8) = 4 bits a weight,
    # qzeros int32 (in/128, out/8) = a 4-bit zero and scales fp16 (in/128, out) per group of 128.
    "awq-int4": 0.5 + (2 + 0.5) / 128,
}
PACKED_BYTES = {"nf4": 0.5, "fp4": 0.5, "int8": 1.0, "gptq-int4": 0.5, "awq-int4": 0.5}  # the weights alone, no constants
BNB = ("nf4", "fp4", "int8")  # bitsandbytes formats: the matmul dequantizes the whole weight first


def optimizer_state_bytes(name: str) -> float:
    """Optimizer state bytes per trainable parameter, fp32 moments (transformers OptimizerNames)."""
    n = name.lower()
    if "8bit" in n:
        # bitsandbytes 8-bit: uint8 states + one fp32 absmax per 256-element block (blocksize 256).
        per_state = 1 + 4 / 256
        return per_state * (1 if "lion" in n else 2)
    if n.startswith("sgd"):
        return 0.0  # torch SGD, momentum 0 (HF default): no state
    if "lion" in n or "adagrad" in n or "rmsprop" in n:
        return 4.0  # one fp32 moment
    if "adafactor" in n:
        return 0.0  # factored second moment: rows + columns, negligible per parameter
    return 8.0  # Adam family: exp_avg + exp_avg_sq in fp32


def states_follow_param_dtype(name: str) -> bool:
    """Whether the optimizer's states take the parameter's dtype. torch.optim creates them with
    `torch.zeros_like(p)` (bf16 parameters: bf16 moments); bitsandbytes picks the state dtype from its
    own bit width whatever the parameter's (optim/optimizer.py `Optimizer2State.init_state`: float32
    for 32-bit, uint8 for 8-bit, float32 below `min_8bit_size`) and torchao's low-bit AdamW keeps its
    own codes and fp32 block scales (torchao optim/subclass_8bit.py `OptimState8bit`)."""
    n = name.lower()
    low_bit = "8bit" in n or "4bit" in n or "32bit" in n or "bnb" in n
    return not (low_bit or n.startswith(("paged_", "lion", "ademamix")))


def foreach_intermediate(name: str) -> bool:
    """torch.optim.AdamW's default multi-tensor (foreach) path keeps one moment-sized intermediate
    (torch/optim/adam.py `_multi_tensor_adam`: exp_avg_sq_sqrt = torch._foreach_sqrt(...));
    `adamw_torch_fused` and bitsandbytes / DeepSpeed optimizers update in place."""
    return name.lower() == "adamw_torch"


def paged(name: str) -> bool:
    return name.lower().startswith("paged_")


def paged_share(setup, counts: Counts) -> float:
    """Share of the optimizer states a bitsandbytes paged optimizer puts in CUDA unified memory.
    bitsandbytes optim/optimizer.py `get_state_buffer` pages a state only for a parameter of at least
    1e5 elements (params.PAGED_MIN_NUMEL), through functional.py `get_paged`: `lib.cget_managed_ptr`
    (cudaMallocManaged) wrapped by `torch.frombuffer` - memory PyTorch's caching allocator never sees,
    so `max_memory_allocated` / `max_memory_reserved` leave it out while nvidia-smi shows what is
    resident. Smaller states (LoRA A / B of a low rank, norms) are `torch.zeros_like`: ordinary
    device memory. Norms and biases of a fully trained model are taken as paged (a few MB)."""
    if not paged(setup.optimizer) or counts.trainable <= 0:
        return 0.0
    return max(0.0, counts.trainable - counts.lora_small) / counts.trainable


@dataclass(frozen=True)
class States:
    weights: float
    gradients: float
    optimizer: float
    optimizer_paged: float  # part of `optimizer` in CUDA unified memory (pages to host under pressure)
    buffers: float  # ZeRO reduce buckets and persistent small params, allocated for the whole run
    gathered: float  # parameters gathered for the layers being computed (ZeRO-3 / FSDP)
    step: float  # alive only during the optimizer step
    persistent_grads: bool  # the gradient storage outlives the step (ZeRO-3 flat buffer)
    step_block: float = 0.0  # the largest single tensor the step allocates (DeepSpeed's flat fp32 gradient partition)
    # FSDP gradient accumulation under `no_sync()`: the unsharded gradients every micro-batch but the
    # last holds in place of `gradients` (`fsdp_accumulated_gradients`); 0 when the run syncs each one.
    accumulated: float = 0.0
    # ZeRO-1/2's reduce buckets live through backward only: stage_1_and_2.py `setup_buckets` allocates them as a
    # backward starts and `independent_gradient_partition_epilogue` ends it with `_release_ipg_buffers`, before the step
    buffers_in_step: bool = True


def quant_bytes(setup) -> float:
    if setup.quantization is None:
        return 0.0
    if setup.quantization in ("nf4", "fp4"):
        return QUANT_BYTES["nf4-dq" if setup.quant_double else "nf4"]
    return QUANT_BYTES[setup.quantization]


def shardable_quant_bytes(setup) -> float:
    """Bytes per quantized parameter that ZeRO-3 / FSDP shard (and offload): the packed 4-bit
    weights when bitsandbytes stores them in a float dtype, nothing otherwise (int8 / GPTQ tensors
    and every quantization constant stay whole on each GPU)."""
    if setup.quantization in ("nf4", "fp4") and setup.quant_storage_float:
        return PACKED_BYTES[setup.quantization]
    return 0.0


def dequantized_bytes(setup, counts: Counts) -> float:
    """bitsandbytes computes a quantized linear by dequantizing its whole weight to the compute
    dtype (autograd/_functions.py MatMul4Bit: `F.dequantize_4bit(B, quant_state).to(A.dtype)` in
    forward and again in backward; MatMul8bitLt's backward rebuilds `CB * SCB / 127`): one weight
    of the widest quantized linear, alive next to that layer's activations. GPTQ kernels do not."""
    if setup.quantization not in BNB:
        return 0.0
    return counts.largest_quantized * (2 if setup.sixteen_bit else 4)


def gpu_states(setup, counts: Counts, arch: Arch) -> States:
    st = _gpu_states(setup, counts, arch)
    if setup.resident_frozen:
        st = replace(st, weights=st.weights + resident_frozen_bytes(setup))
    if setup.optimizer_in_backward:
        # torchtune `optimizer_in_bwd` (training/_optimizer_in_bwd / torch `register_post_accumulate_grad_hook`):
        # each parameter steps as soon as its gradient is accumulated and the gradient is freed, so
        # gradients never coexist - at most the largest trainable tensor's - and no step phase follows.
        b = 2 if setup.precision == "bf16-true" or (setup.sixteen_bit and not setup.master_fp32 and setup.engine != "fsdp") else 4
        largest = arch.largest_module if counts.trainable_base else 0
        dp = _fsdp_dp(setup) if setup.engine == "fsdp" else 1
        st = replace(st, gradients=min(counts.trainable, largest) * b / dp, step=0.0, persistent_grads=False)
    return st


def resident_frozen_bytes(setup) -> float:
    """Frozen parameters the checkpoint loads beside the planned model (setup.resident_frozen: Qwen2.5-Omni's Talker and
    vocoder), in the 16-bit dtype they load in: whole on every GPU, a shard under ZeRO-3 (none with offload_param) or
    FSDP, which partition every parameter of the module they wrap."""
    b = (2 if setup.sixteen_bit else 4) * setup.resident_frozen
    if setup.engine == "deepspeed" and setup.zero.stage == 3:
        return 0.0 if setup.zero.offload_params else b / setup.world
    if setup.engine == "fsdp":
        return 0.0 if setup.fsdp_offload else b / _fsdp_dp(setup)
    return b


def _fsdp_dp(setup) -> int:
    """Ranks one FSDP unit is sharded over: none for NO_SHARD, the node for the hybrid strategies
    (torch FSDP HYBRID_SHARD: shard within a node, replicate across nodes; accelerate builds the
    2-D device mesh the same way for FSDP2)."""
    mode = setup.fsdp_sharding
    if mode == "no_shard":
        return 1
    return setup.gpus_per_node if mode.startswith("hybrid") else setup.world


def _gpu_states(setup, counts: Counts, arch: Arch) -> States:
    s, c = setup, counts
    dp = s.world
    ds = s.engine == "deepspeed"
    qb = quant_bytes(s)
    sixteen = s.sixteen_bit
    compute_b = 2 if sixteen else 4
    if s.precision == "bf16-true":
        train_b, master, moment_scale = 2, 0, 0.5  # pure bf16: bf16 weights, grads and moments
    elif ds:
        train_b, master, moment_scale = compute_b, (4 if sixteen else 0), 1.0  # DeepSpeed casts the module
    else:
        train_b, master, moment_scale = 4, 0, 1.0  # AMP: trainable params stay fp32, autocast computes in 16-bit
    frozen_b = 4 if (s.precision == "fp32" or s.frozen_fp32) and not ds else compute_b
    if not states_follow_param_dtype(s.optimizer):
        moment_scale = 1.0  # 8-bit / bitsandbytes states: their own dtype, not the parameter's
    moments = optimizer_state_bytes(s.optimizer) * moment_scale
    T, F, Q = c.trainable, c.frozen, c.quantized
    unit = max(c.largest_layer, arch.largest_module)

    if ds and s.zero.stage == 3:
        z = s.zero
        q_shard = Q * shardable_quant_bytes(s)
        weights = 0.0 if z.offload_params else (T * train_b + F * frozen_b + q_shard) / dp
        weights += Q * qb - q_shard  # quantization constants (and unshardable packed weights), whole
        persistent = sum(n * k for n, k in arch.small_params.items() if n <= z.param_persistence_threshold) * compute_b
        gradients = 0.0 if z.offload_optimizer else T * train_b / dp
        optimizer = 0.0 if z.offload_optimizer else T * (master + moments) / dp
        buffers = z.reduce_bucket_size * train_b * (2 if z.overlap_comm else 1) + persistent
        # Gathered at once (partitioned_param_coordinator.py): the module in use (up to the largest, often
        # the vocabulary matrix), a layer kept for its reuse in backward (stage3_max_reuse_distance), and
        # the prefetch bucket; prefetching stops at stage3_max_live_parameters, a single module never does.
        working = min(z.max_live_parameters, c.largest_layer + unit + z.prefetch_bucket_size)
        gathered = compute_b * min(arch.total, max(unit, working))
        if z.offload_params:
            # partition_parameters.py `_all_gather_sequential`: the CPU partition is first copied to the
            # GPU (`param_ds_tensor.to(device)`) and gathered from there into the full buffer.
            gathered += compute_b * unit / dp
        # stage3.py `_prepare_fp32_grad_for_sub_group`: `self.flatten(averaged_gradients).to(fp32)` - a
        # 16-bit flat copy of the sub-group's gradient partition, then its fp32 copy, both alive at once.
        # Then `_optimizer_step` runs the wrapped optimizer on that fp32 partition (set as the flat fp32 master's .grad):
        # torch's multi-tensor AdamW adds its moment-sized intermediate beside it (`foreach_intermediate`), as at ZeRO-1/2.
        sub = min(T / dp, z.sub_group_size)
        step = 0.0 if z.offload_optimizer else sub * max(FP32_BYTES + train_b, FP32_BYTES * (2 if foreach_intermediate(s.optimizer) else 1))
        block = 0.0 if z.offload_optimizer else FP32_BYTES * sub
        return States(weights, gradients, optimizer, optimizer * paged_share(s, c), buffers, gathered, step, True, block)
    if ds:  # ZeRO-1 / ZeRO-2
        z = s.zero
        weights = T * train_b + F * frozen_b + Q * qb
        gradients = 0.0 if z.offload_optimizer else T * train_b / (dp if z.stage == 2 else 1)
        optimizer = 0.0 if z.offload_optimizer else T * (master + moments) / dp
        # transformers DeepSpeed docs (ZeRO-2): "overlap_comm uses 4.5x the allgather_bucket_size and
        # reduce_bucket_size values ... (5e8 x 2Bytes x 2 x 4.5)"; without it, one of each.
        buffers = (4.5 if z.overlap_comm else 1) * (z.allgather_bucket_size + z.reduce_bucket_size) * train_b
        # stage_1_and_2.py `step`: `flat_grad_partition = self.flatten(averaged_gradients)` (16-bit) then
        # `.to(fp32)` - both alive until `del flat_grad_partition`; then the fp32 partition alone (plus a
        # foreach intermediate for torch's multi-tensor AdamW).
        step = 0.0 if z.offload_optimizer else T / dp * max(FP32_BYTES + train_b, FP32_BYTES * (2 if foreach_intermediate(s.optimizer) else 1))
        block = 0.0 if z.offload_optimizer else FP32_BYTES * T / dp  # `single_grad_partition`: one flat fp32 tensor
        return States(weights, gradients, optimizer, optimizer * paged_share(s, c), buffers, 0.0, step, False, block, buffers_in_step=False)
    if s.engine == "fsdp":
        dp = _fsdp_dp(s)
        offload = s.fsdp_offload or s.zero.offload_params or s.zero.offload_optimizer
        q_shard = Q * shardable_quant_bytes(s)
        weights = 0.0 if offload else (T * train_b + F * frozen_b + q_shard) / dp
        weights += Q * qb - q_shard  # quantization constants are not FSDP parameters: whole, on the GPU
        gather_b = shardable_quant_bytes(s) or compute_b  # a unit gathers its packed 4-bit weights as stored
        if s.fsdp_sharding in ("shard_grad_op", "hybrid_shard_zero2"):
            # SHARD_GRAD_OP (FSDP2: reshard_after_forward=False): torch/distributed/fsdp/_runtime_utils.py
            # `_post_forward_reshard` does not free the unsharded parameters after forward; every unit
            # stays gathered until its backward: the whole model unsharded through the step.
            gathered = (c.total - Q + c.adapters) * compute_b + q_shard * dp
        elif s.fsdp_sharding == "no_shard":
            # NO_SHARD keeps every parameter whole; with a mixed-precision policy (param_dtype 16-bit
            # over fp32 parameters) the low-precision copy of the whole model is live for the step.
            gathered = (c.total - Q + c.adapters) * compute_b if train_b != compute_b else 0.0
        else:
            gathered = 2 * c.largest_layer * gather_b  # current unit + backward prefetch (BACKWARD_PRE)
            # The root unit (what no wrapped layer owns: embeddings, lm_head, projector) is not resharded
            # after forward - torch/distributed/fsdp/_runtime_utils.py `_post_forward_reshard`:
            # `free_unsharded_flat_param = not state._is_root and ...`; FSDP2 likewise
            # (_fully_shard/_fsdp_state.py `_lazy_init`: the root's post_forward_mesh_info = None) - so it
            # stays gathered through the forward and backward; bitsandbytes leaves these modules
            # unquantized (compute dtype).
            root = sum(arch.groups.get(g, 0) for g in ("embed", "lm_head", "projector"))
            gathered += root * compute_b * (1 + (1 / dp if offload else 0))  # + the shard copied up from the CPU
        in_units = fsdp_unit_frozen(s, c, arch)  # frozen weights whose gradients FSDP computes (shared units)
        gradients = 0.0 if offload else (T + in_units) * train_b / dp
        optimizer = 0.0 if offload else T * moments / dp
        accumulated = fsdp_accumulated_gradients(s, T + in_units)
        # The optimizer steps the local shards as any torch optimizer steps its parameters: torch.optim.AdamW's
        # default multi-tensor path over FSDP's flat shards (FSDP1) or DTensor shards (FSDP2) keeps one
        # moment-sized intermediate of the shard (`foreach_intermediate`); with CPU offload the step runs on the host.
        step = 0.0 if offload else (optimizer / 2 if foreach_intermediate(s.optimizer) else 0.0)
        return States(weights, gradients, optimizer, optimizer * paged_share(s, c), 0.0, gathered, step, False, accumulated=accumulated)
    # single GPU / DDP with autocast: parameters keep the dtype they were loaded in (16-bit), and so
    # do their gradients and torch AdamW moments (zeros_like); PEFT creates LoRA A/B in fp32.
    ddp_copy = 2 if s.engine == "ddp" and dp > 1 else 1  # gradient_as_bucket_view=False: grads + buckets
    # dtype=float32 (`master_fp32`): the trainable weights are loaded in fp32, autocast computes in
    # 16 bits - fp32 weights, gradients and moments (the "mixed precision with fp32 master" of AMP).
    loaded = T - c.lora if sixteen and s.precision != "bf16-true" and not s.master_fp32 else 0
    fp32_trainable = T - loaded
    per_loaded = compute_b / FP32_BYTES if states_follow_param_dtype(s.optimizer) else 1.0
    weights = fp32_trainable * train_b + loaded * compute_b + F * frozen_b + Q * qb
    gradients = (fp32_trainable * train_b + loaded * compute_b) * ddp_copy
    optimizer = (fp32_trainable + loaded * per_loaded) * moments
    if s.precision == "bf16-true" and s.adapter_fp32 and c.lora:
        # PEFT's autocast_adapter_dtype=True on a pure 16-bit base: the adapters (and so their gradients and
        # zeros_like moments) are fp32 while the rest trains in 16 bits
        weights += c.lora * (FP32_BYTES - train_b)
        gradients += c.lora * (FP32_BYTES - train_b) * ddp_copy
        if states_follow_param_dtype(s.optimizer):
            optimizer += c.lora * optimizer_state_bytes(s.optimizer) * (1 - moment_scale)
    step = optimizer / 2 if foreach_intermediate(s.optimizer) else 0.0  # one of the two moments
    return States(weights, gradients, optimizer, optimizer * paged_share(s, c), 0.0, 0.0, step, False)


def fsdp_unit_frozen(setup, counts: Counts, arch: Arch) -> int:
    """Frozen parameters that share an FSDP unit with LoRA adapters (`fsdp_lora_units=layer`), 0 otherwise.

    FSDP1 with `use_orig_params=True` flattens a wrapped layer's parameters into one FlatParameter
    whatever their `requires_grad` and makes it require grad when any of them does (torch 2.1
    distributed/fsdp/flat_param.py `_validate_tensors_to_flatten`, lines 715-741); in forward every
    original parameter, frozen or not, is a view into it (`_use_unsharded_views`, lines 1817-1830), so
    autograd computes the frozen weights' gradients too, into the unit's flat gradient. torch's own
    docstring (fully_sharded_data_parallel.py lines 181-186): mixing frozen and non-frozen parameters
    in one unit makes "the gradient memory usage ... equivalent to not freezing those parameters".
    This is how Lightning Fabric runs litgpt's LoRA on several GPUs: FSDPStrategy(auto_wrap_policy={Block})
    over blocks holding the frozen weights and lora_A / lora_B (litgpt 8641822 finetune/lora.py lines
    83-89, lit_gpt/lora.py `mark_only_lora_as_trainable`), use_orig_params=True by default (Lightning
    71aed75 fabric/strategies/fsdp.py lines 173-175). Not so under transformers' Trainer, which wraps
    every PEFT LoRA layer in a unit of its own (transformers/distributed/fsdp.py `update_fsdp_plugin_peft`:
    peft `fsdp_auto_wrap_policy`), nor under FSDP2, which shards each parameter on its own.

    Counted: every parameter of the layers of each stack that carries an adapter, but quantized
    linears (their packed storage's share of the unit is not modelled) and weights that train anyway.
    The root unit (embeddings, lm_head) holds no adapter and keeps requires_grad=False."""
    if setup.engine != "fsdp" or setup.fsdp_lora_units != "layer" or not setup.lora:
        return 0
    total = 0
    for stack in sorted({a.stack for a in counts.adapted}):
        if stack == "vision" and counts.vision_full or stack != "vision" and counts.text_trainable:
            continue
        quantized = sum(lin.in_features * lin.out_features for lin in arch.linears if lin.stack == stack) if setup.quantization else 0
        total += sum(arch.stacks[stack].layer_params) - quantized
    return max(0, total)


def fsdp_accumulated_gradients(setup, elements: int) -> float:
    """Gradient bytes an FSDP rank holds through the micro-batches of an accumulation window.

    With `gradient_accumulation_steps` > 1, transformers' Trainer runs every micro-batch but the last
    under `accelerator.no_sync` (transformers 5.23 trainer.py lines 1896-1907, unless accelerate's `sync_each_batch`),
    which is FSDP1's `no_sync()` or FSDP2's `set_requires_gradient_sync(False)` (accelerate
    accelerator.py `no_sync`); Lightning Fabric's `no_backward_sync(model, enabled=is_accumulating)`,
    as litgpt calls it (finetune/lora.py line 215), is FSDP1's `no_sync()` too (fabric/strategies/fsdp.py
    `_FSDPBackwardSyncControl`). Under it no gradient is reduce-scattered: torch 2.1's
    `_post_backward_hook` returns before `_reduce_grad` when `not state._sync_gradients`
    (_runtime_utils.py lines 762-765) and `_finalize_params` keeps ".grad ... the unsharded gradient
    from prior `no_sync()` iterations" (lines 1179-1184); its docstring: FSDP "will accumulate the full
    model gradients (instead of gradient shards) until the eventual sync", on the GPU even with CPU
    offload (fully_sharded_data_parallel.py lines 1025-1031). FSDP2 keeps each unsharded gradient
    likewise (_fully_shard/_fsdp_param_group.py `post_backward`: `if not self.reduce_grads`). The
    gradients are those of the unsharded parameters, in the dtype the forward ran in: accelerate's
    mixed-precision policy sets param_dtype = reduce_dtype (utils/dataclasses.py `set_mixed_precision`),
    and a bf16 model has bf16 gradients. accelerate < 1.11.0 (before huggingface/accelerate#3762) had no no_sync for
    FSDP2 (`getattr(model, "no_sync", nullcontext)`): every micro-batch reduce-scattered, as with sync_each_batch."""
    if setup.engine != "fsdp" or setup.gradient_accumulation_steps <= 1 or setup.fsdp_sync_each_batch or setup.fsdp_sharding == "no_shard":
        return 0.0
    from vramfit.planner import knobs

    if knobs.fsdp2_reduces_each_batch(setup):  # accelerate < 1.11.0: no no_sync for FSDP2 (knobs.FSDP2_NO_SYNC_SINCE)
        return 0.0
    return elements * (2 if setup.sixteen_bit else 4)


def gradients_in_forward(setup, st: States, terms: dict[str, float]) -> float:
    """Gradient bytes the train phase's peak holds beside its activations (`terms`).

    The Trainer ends each optimizer step with `model.zero_grad()` and torchtune with
    `optimizer.zero_grad(set_to_none=True)` (torch.nn.Module.zero_grad: set_to_none=True by default since
    torch 2.0), so the next forward runs with no gradients. In the backward, autograd frees each node's
    saved tensors as it runs while AccumulateGrad creates the gradients: the activations fall as the
    gradients rise, so the peak holds the larger of the two, not their sum; the optimizer-step phase counts
    them whole. Kept through the forward: gradient accumulation (later micro-batches sum into them), ZeRO-3's
    flat buffer (`persistent_grads`), DeepSpeed's and FSDP's gradient buffers, and DDP's reducer buckets (half
    of the DDP figure, `gradient_as_bucket_view=False`), and every gradient on torch < 2.0, whose
    `zero_grad()` zeroed them in place (`set_to_none=False`; `gradients_kept`, knobs.torch_keeps_gradients). Measured on an H100 (benchmarks/gpu_memory.py
    --compare; benchmarks/gradient_lifetime.py): Llama-3.2-3B full bf16 at 4k peaked at weights + moments +
    activations, 6 GiB of gradients below the sum."""
    if setup.optimizer_in_backward:
        return st.gradients
    if st.accumulated:
        return st.accumulated  # FSDP no_sync: every micro-batch but the last holds the unsharded gradients whole
    if st.persistent_grads or setup.gradient_accumulation_steps > 1 or setup.engine not in ("single", "ddp") or setup.gradients_kept:
        return st.gradients
    freed = st.gradients / 2 if setup.engine == "ddp" and setup.world > 1 else st.gradients
    return st.gradients - freed + max(0.0, freed - sum(terms.values()))


def _reference_16bit(s, counts: Counts) -> float:
    """Bytes of the reference copy's unquantized weights: the policy's compute dtype (fp32 where the policy's weights are
    fp32 outside DeepSpeed, whose engine casts the module)."""
    compute_b = 2 if s.sixteen_bit else 4
    b = 4 if (s.precision == "fp32" or s.frozen_fp32) and s.engine != "deepspeed" else compute_b
    return (counts.total - counts.quantized) * b


def reference_copy(setup, counts: Counts) -> float:
    """TRL DPOTrainer's reference model (`ref_model=copy`, knobs.trainer_fields): the base built again in the policy's
    dtype and quantization (dpo_trainer.py `ref_model_init_kwargs.setdefault("dtype", self.model.dtype)`), frozen,
    and prepared like the policy (frozen_copy)."""
    return frozen_copy(setup, counts) if setup.ref_model == "copy" else 0.0


def frozen_copy(setup, counts: Counts) -> float:
    """Bytes per GPU of a frozen model prepared like the policy (the reference copy; PPO's reward model): trl/models/utils.py
    `prepare_deepspeed` keeps ZeRO-3 (sharded, offloaded with offload_param) and gives other stages a whole copy (OpenRLHF
    `get_ds_eval_config`: stage 3 when the run is ZeRO-3, else 0); `prepare_fsdp` shards it as the policy's units
    (offloaded with the policy's CPU offload)."""
    s = setup
    ds, base = s.engine == "deepspeed", _reference_16bit(s, counts)
    quantized = counts.quantized * quant_bytes(s)
    if ds and s.zero.stage == 3:
        return (0.0 if s.zero.offload_params else base / s.world) + quantized
    if s.engine == "fsdp":
        offload = s.fsdp_offload or s.zero.offload_params
        return (0.0 if offload else base / _fsdp_dp(s)) + quantized
    return base + quantized


def reference_copy_host(setup, counts: Counts) -> float:
    """Bytes per rank of the reference copy's shards in host RAM: ZeRO-3 with offload_param, or FSDP CPU offload."""
    return frozen_copy_host(setup, counts) if setup.ref_model == "copy" else 0.0


def frozen_copy_host(setup, counts: Counts) -> float:
    s = setup
    ds, base = s.engine == "deepspeed", _reference_16bit(s, counts)
    if ds and s.zero.stage == 3 and s.zero.offload_params:
        return base / s.world
    if s.engine == "fsdp" and (s.fsdp_offload or s.zero.offload_params):
        return base / _fsdp_dp(s)
    return 0.0


def full_weights(setup, counts: Counts) -> float:
    """The whole model in its compute dtype on one GPU (ZeRO-3 gather for generation)."""
    b = 2 if setup.sixteen_bit else 4
    return (counts.total - counts.quantized) * b + counts.quantized * quant_bytes(setup) + counts.adapters * b
