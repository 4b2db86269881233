"""`Setup`: everything the estimate needs, flat, and the two ways to build one.

(A calibration scenario becomes a Setup in benchmarks/calibration.py: benchmark-only code.)

- `Setup.from_recipe(recipe)`: a loaded `vramfit.recipe.Recipe` (training keys are Hugging Face /
  TRL names; the DeepSpeed JSON is read and its hidden-size "auto" buckets filled as transformers
  fills them).
- `Setup.from_args(model_config, gpu, gpus, nodes, deepspeed, overrides)`: `vramfit plan
  --model-config`, with `key=value` overrides named as in TrainingArguments / GRPOConfig plus a few
  planner keys (see `ARG_KEYS`).

Defaults that the libraries supply are read from the installed TrainingArguments / GRPOConfig
(vramfit.libraries), never written out here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramfit.hardware import CATALOGUE
from vramfit.problems import ConfigError, Problems, did_you_mean

# The library defaults the planner uses, read from the installed TrainingArguments / GRPOConfig
# (vramfit.libraries, cached per library versions): HF_DEFAULTS and GRPO_DEFAULTS below are computed.
HF_DEFAULT_KEYS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "per_device_eval_batch_size",
    "optim",
    "eval_strategy",
    "prediction_loss_only",
    "eval_accumulation_steps",
    "use_liger_kernel",
    "dataloader_num_workers",
)
GRPO_DEFAULT_KEYS = ("num_generations", "max_completion_length", "beta", "ds3_gather_for_generation", "use_vllm")


def __getattr__(name: str):
    from vramfit.libraries import argument_defaults

    if name == "HF_DEFAULTS":
        return {k: argument_defaults(None)[k] for k in HF_DEFAULT_KEYS}
    if name == "GRPO_DEFAULTS":
        return {k: argument_defaults("grpo")[k] for k in GRPO_DEFAULT_KEYS}
    raise AttributeError(name)


# torch.utils.data.DataLoader: prefetch_factor defaults to 2 when num_workers > 0.
DEFAULT_PREFETCH_FACTOR = 2
# When the eval file cannot be read the eval-set size is unknown; kept logits grow with it.
# Assumed, not measured: a 1,000-sample held-out split. Stated in the plan's notes.
ASSUMED_EVAL_SAMPLES = 1000
ATTENTION = {"flash_attention_2": "flash", "sdpa": "sdpa", "eager": "eager", "flash": "flash"}


@dataclass(frozen=True)
class Zero:
    """The DeepSpeed ZeRO block as it matters for memory (DeepSpeed 0.19.8 defaults)."""

    stage: int = 0
    offload_optimizer: bool = False
    offload_params: bool = False
    pin_memory: bool = True  # offload_config.py: pin_memory defaults to True
    overlap_comm: bool = False  # zero/config.py: None -> True for stage 3 only
    contiguous_gradients: bool = True
    reduce_bucket_size: int = 500_000_000
    allgather_bucket_size: int = 500_000_000
    prefetch_bucket_size: int = 50_000_000
    max_live_parameters: int = 1_000_000_000
    param_persistence_threshold: int = 100_000
    sub_group_size: int = 1_000_000_000
    optimizer_block: bool = False  # the JSON names its optimizer (DeepSpeed's Adam, not training.optim)

    @classmethod
    def from_json(cls, data: dict[str, Any], hidden: int) -> "Zero":
        zero = data.get("zero_optimization") or {}
        stage = int(zero.get("stage", 0))
        # transformers integrations/deepspeed.py trainer_config_finalize: "auto" hidden-size buckets.
        auto = {
            "reduce_bucket_size": hidden * hidden,
            "stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
            "stage3_param_persistence_threshold": 10 * hidden,
        }

        def get(key, default):
            value = zero.get(key, default)
            return auto.get(key, default) if value == "auto" else value

        off_opt = zero.get("offload_optimizer") or {}
        off_par = zero.get("offload_param") or {}
        overlap = zero.get("overlap_comm")
        return cls(
            stage=stage,
            offload_optimizer=off_opt.get("device", "none") not in ("none", None),
            offload_params=off_par.get("device", "none") not in ("none", None),
            pin_memory=bool(off_opt.get("pin_memory", True) or off_par.get("pin_memory", True)),
            overlap_comm=(stage == 3) if overlap is None else bool(overlap),
            contiguous_gradients=bool(zero.get("contiguous_gradients", True)),
            reduce_bucket_size=int(float(get("reduce_bucket_size", cls.reduce_bucket_size))),
            allgather_bucket_size=int(float(get("allgather_bucket_size", cls.allgather_bucket_size))),
            prefetch_bucket_size=int(float(get("stage3_prefetch_bucket_size", cls.prefetch_bucket_size))),
            max_live_parameters=int(float(get("stage3_max_live_parameters", cls.max_live_parameters))),
            param_persistence_threshold=int(float(get("stage3_param_persistence_threshold", cls.param_persistence_threshold))),
            sub_group_size=int(float(get("sub_group_size", cls.sub_group_size))),
            optimizer_block="optimizer" in data,
        )


@dataclass(frozen=True)
class Setup:
    label: str
    source: str
    model_config: Path
    gpu: str
    gpus_per_node: int
    nodes: int = 1
    host_ram_gib: float | None = None
    # what trains
    method: str = "full"  # full | lora | qlora | grpo
    train_llm: bool = True
    train_projector: bool = True
    train_vision: bool | int = False  # int N: vision layers N.. train
    lora_r: int | None = None
    lora_targets: Any = None  # list of names (suffix match), a regex string, or "all-linear"
    lora_target_parameters: tuple[str, ...] = ()  # PEFT target_parameters (params.named_parameter_lora)
    lora_dropout: float = 0.0
    lora_fused_qkv: bool = False
    modules_to_save: tuple[str, ...] = ()
    modules_to_save_copies: bool = True  # PEFT ModulesToSaveWrapper keeps the original and trains a copy
    quantization: str | None = None  # nf4 | fp4 | int8 | gptq-int4 | awq-int4
    quant_double: bool = True
    quant_storage_float: bool = False  # bnb 4-bit packed in a float dtype: ZeRO-3 / FSDP can shard it
    quant_keeps_input: bool = False  # bitsandbytes < 0.43.2: each 4-bit linear keeps its input (knobs.bnb_keeps_input)
    # PEFT's get_peft_model(autocast_adapter_dtype=True): fp32 adapters on a pure 16-bit base (bf16-true). Under AMP
    # the planner takes PEFT's fp32 adapters anyway (states.py); torchtune / litgpt keep them in the model's dtype.
    adapter_fp32: bool = False
    frozen_fp32: bool = False  # base weights kept in fp32 (loaded without torch_dtype)
    master_fp32: bool = False  # dtype=float32 under AMP: trainable weights, grads and moments in fp32
    # full fine-tuning of the weights these regexes name (re.match over named_parameters), the rest frozen (knobs.unfrozen_fields)
    unfrozen_parameters: tuple[str, ...] = ()
    lora_vision_tower: bool = True  # PEFT all-linear adapts the vision tower too; False: the LLM only
    # the runner cuts a sample at max_length before it expands each image placeholder into the image's tokens (ms-swift
    # 2.x's Qwen2-VL template): the LLM sequence is max_length + images x (image tokens - 1)
    images_past_max_length: bool = False
    # frozen parameters the checkpoint loads beside the model planned, unused by training (knobs.audio_output_fields:
    # Qwen2.5-Omni's Talker and vocoder), in the compute dtype; states.gpu_states adds their weights
    resident_frozen: int = 0
    resident_frozen_what: str = ""
    remote_code: bool = False  # the model runs its repository's own code (trust_remote_code), not transformers' class
    # The loss sees fp32 logits (transformers 5.23 loss_utils upcasts; so does torch.autocast, which
    # runs cross_entropy in fp32). False: the model's own code computes CrossEntropyLoss on its
    # 16-bit logits with no upcast and no autocast around it (see `_loss_fp32`).
    loss_fp32: bool = True
    # numerics
    precision: str = "bf16"  # bf16 | fp16 | fp32 | bf16-true
    optimizer: str = "adamw_torch_fused"
    attention: str = "sdpa"  # flash | sdpa | eager
    gradient_checkpointing: bool = False
    liger: bool = False
    loss_kernel: str = "torch"  # torch | liger | cce | chunked (knobs.py)
    # the sequence mixers' kernels (Mamba, Mamba-2, gated delta rule, short convolutions; knobs.mixer_kernels): "fused"
    # (mamba-ssm / causal-conv1d / flash-linear-attention installed, which transformers then calls) or "torch" (its
    # reference PyTorch path, taken when they are not); the trace sizes each (planner/mixer_kernels.py)
    mixer_kernels: str = "fused"
    loss_chunks: int = 8  # loss_kernel chunked: the chunks (torchtune CEWithChunkedOutputLoss / axolotl num_output_chunks)
    # lm | seq_cls | token_cls: the causal LM's lm_head or a classification `score` head; embedding | generative_reranker:
    # the causal LM with its lm_head's forward replaced (knobs.head_fields, heads.py)
    head: str = "lm"
    num_labels: int = 2  # outputs of a classification head (TRL RewardTrainer: 1)
    head_dropout: float = 0.0  # token classification: the dropout before the score (it keeps a bool mask)
    activation_offloading: bool = False  # TRL OffloadActivations: kept activations live in host RAM
    compile_layers: bool = False  # torch.compile over the decoder layers (HF torch_compile, torchtune compile)
    compile_loss: bool = False  # ... and over the cross-entropy (HF: inside the compiled model; torchtune: chunked CE)
    optimizer_in_backward: bool = False  # torchtune optimizer_in_bwd: each gradient freed after its step
    # the loop keeps the last step's output bound until the next forward returns (LitGPT's fit: `logits = model(...)`):
    # its logits and, with bitsandbytes < 0.43.2, the inputs its 4-bit linears kept as ctx attributes (training.py)
    keeps_previous_output: bool = False
    # lm_head quantized with the other linears (Lightning's BitsandbytesPrecision, LitGPT); transformers' bitsandbytes
    # integration keeps it in 16 bits (llm_int8_skip_modules / get_keys_to_not_convert)
    quantize_lm_head: bool = False
    # the fused 3-D MoE expert tensors quantized with the base (axolotl `quantize_moe_experts`: bitsandbytes skips them,
    # axolotl's monkeypatch/moe_quant.py quantizes them as they load); params.py `count`
    quantize_moe_experts: bool = False
    # GRPO's log-probs from the model's whole logits over every token of the micro-batch (verl's dp_actor.py), not TRL's
    # fused head (grpo.fused_head_bytes)
    grpo_whole_logits: bool = False
    # model states the engine moves to host RAM outside the update and back for it (verl's fsdp_config.param_offload /
    # optimizer_offload: fsdp_workers.py update_actor / rollout_mode): "weights", "optimizer" (the generation phase
    # holds neither; the update holds both)
    offload_outside_update: tuple[str, ...] = ()
    # sequence-parallel degree (knobs.sequence_parallel_fields): each rank holds seq_len / N tokens of every sample
    # for its layers, embeddings and loss; Ulysses attention sees all seq_len keys for heads / N (training.train_peak)
    sequence_parallel: int = 1
    # ms-swift CELOSS_PARALLEL_SIZE: under sequence parallelism its loss runs ChunkedCrossEntropyLoss over chunks of this
    # many tokens (activations.sp_chunked_logits_bytes); 0: CrossEntropyLoss over the whole shard
    celoss_parallel_size: int = 0
    # GPUs one process spreads its model over with device_map (device_map.py); the planned GPU's share of them
    device_map_gpus: int = 1
    device_map_policy: str = "balanced"  # "sequential": accelerate fills GPU 0 first (device_map.py)
    device_map_max_memory_gib: float | None = None  # from_pretrained's max_memory cap on each GPU (device_map.py)
    device_map_gpu: "object | None" = None  # device_map.Gpu: the GPU of the split being planned (None: the whole model)
    gradients_kept: bool = False  # torch < 2.0: zero_grad() zeroes in place, gradients live through the forward (knobs.torch_keeps_gradients)
    # batch and sequence
    seq_len: int = 2048  # LLM tokens per sample (GRPO: prompt tokens; enc-dec: encoder tokens)
    decoder_seq_len: int | None = None
    micro_batch: int = 1
    packing: bool = False  # TRL packing (BFD): every sequence filled to the cap, no padding mask
    padding_free: bool = False  # TRL padding_free: the batch flattened, no padding mask
    typical_seq_len: int | None = None  # a typical sample's tokens, planned besides the cap
    gradient_accumulation_steps: int = 1
    images_per_sample: int = 0
    image_tokens: int = 0  # LLM tokens per image
    vision_patches: int = 0  # vision-encoder tokens per image
    # parallelism
    engine: str = "deepspeed"  # deepspeed | fsdp | ddp | single
    zero: Zero = field(default_factory=Zero)
    fsdp_sharding: str = "full_shard"  # full_shard | shard_grad_op | hybrid_shard | hybrid_shard_zero2 | no_shard
    fsdp_version: int = 1
    fsdp_offload: bool = False
    # whether a LoRA adapter shares its layer's FSDP unit with the frozen weights (states.fsdp_unit_frozen):
    # "separate" (transformers' Trainer: PEFT's fsdp_auto_wrap_policy; FSDP2) | "layer" (Lightning Fabric, litgpt)
    fsdp_lora_units: str = "separate"
    # accelerate GradientAccumulationPlugin.sync_each_batch: reduce-scatter after every micro-batch instead of
    # accumulating unsharded gradients under no_sync (states.fsdp_accumulated_gradients)
    fsdp_sync_each_batch: bool = False
    # the run's accelerate (knobs.accelerate_fields); None: the installed one. < 1.11.0: FSDP2 reduce-scatters every
    # accumulation micro-batch (knobs.fsdp2_reduces_each_batch)
    accelerate_version: str | None = None
    # TRL preference trainers (knobs.trainer_fields): chosen + rejected in one batch, a frozen reference model,
    # DPO's fused LM head (log-probs in tiles, no whole logits)
    trainer: str = "sft"  # sft | dpo | orpo | cpo | reward | kto | gkd | ppo
    ref_model: str = "none"  # copy | none | precomputed
    fused_lm_head: bool = False
    sequences_per_sample: int = 1  # 2: chosen + rejected, each up to seq_len; embedding / reranker groups (heads.py)
    sequences_what: str = ""  # what an embedding / reranker sample's sequences are (heads.sequences_per_sample)
    # GKD (trainer=gkd; knobs.gkd_fields, gkd.py): the frozen teacher, the on-policy fraction, the divergence
    teacher_config: Path | None = None  # the teacher's config.json (None: served elsewhere, self-distillation, or unresolved)
    teacher_server: bool = False  # ms-swift --teacher_model_server: the teacher runs elsewhere
    teacher_self: bool = False  # ms-swift without a teacher: the policy itself, adapter disabled (no extra weights)
    teacher_missing: str = ""  # why the teacher's config was not found (the plan is incomplete)
    lmbda: float = 0.5  # GKDConfig: the fraction of steps that generate on-policy
    gkd_beta: float = 0.5  # GKDConfig.beta: 0 forward KL, 1 reverse KL, else the generalized JSD
    max_new_tokens: int = 128  # GKDConfig.max_new_tokens / ms-swift --max_completion_length
    seq_kd: bool = False  # GKDConfig.seq_kd: the teacher generates when a step is not on-policy
    gkd_loss: str = "trl"  # trl (GKDTrainer.generalized_jsd_loss) | swift (ms-swift gkd_loss)
    teacher_stage: int | None = None  # ms-swift --teacher_deepspeed: the teacher's own ZeRO stage (None: the policy's)
    teacher_offload: bool = False  # ... with offload_param (zero3_offload)
    offload_teacher_model: bool = False  # ms-swift --offload_teacher_model: the teacher in host RAM between its forwards
    # PPO (trainer=ppo, or a GRPO-style run with a critic: verl gae; knobs.ppo_fields, ppo.py): the critic, a value model
    # trained beside the policy, and a frozen reward model, each its own config.json
    critic_config: Path | None = None
    critic_missing: str = ""  # why the critic's config was not found (the plan is incomplete)
    critic_update: str = "separate"  # separate (OpenRLHF, verl: its own backward and step) | joint (TRL PPOTrainer)
    critic_micro_batch: int | None = None  # the critic's micro-batch (None: the policy's)
    critic_gradient_checkpointing: bool | None = None  # the critic's checkpointing (None: the policy's)
    critic_offload_outside_update: tuple[str, ...] = ()  # verl critic param_offload / optimizer_offload
    reward_config: Path | None = None
    reward_missing: str = ""  # why the reward model's config was not found (the plan is incomplete)
    rollout_micro_batch: int | None = None  # PPO experience making: sequences per generate / no-grad forward (ppo.rollout_phases)
    # GRPO (TRL 1.16)
    num_generations: int = 8
    max_completion_length: int = 512
    steps_per_generation: int | None = None
    beta: float = 0.0
    ds3_gather_for_generation: bool = True
    use_vllm: bool = False
    vllm_mode: str = "colocate"  # TRL 1.16 default
    vllm_gpu_memory_utilization: float = 0.3  # TRL 1.16 default
    vllm_sleep: bool = False  # vllm_enable_sleep_mode
    # evaluation
    eval_enabled: bool = False
    eval_batch: int = 8
    prediction_loss_only: bool = False
    eval_accumulation_steps: int | None = None
    eval_samples: int | None = None
    # host
    dataloader_workers: int = 0
    prefetch_factor: int = DEFAULT_PREFETCH_FACTOR
    expandable_segments: bool = False
    notes: tuple[str, ...] = ()

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def gpu_spec(self):
        return CATALOGUE[self.gpu]

    @property
    def sixteen_bit(self) -> bool:
        return self.precision in ("bf16", "fp16", "bf16-true")

    @property
    def lora(self) -> bool:
        return self.lora_r is not None

    @property
    def generation_batch(self) -> int:
        """Completions one rank generates in one go (TRL 1.16: per_device x steps_per_generation)."""
        from vramfit.libraries import grpo_generation_batch

        return grpo_generation_batch(self.micro_batch, 1, self.gradient_accumulation_steps, self.steps_per_generation)

    def replace(self, **changes) -> "Setup":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------------------------------
    @classmethod
    def from_recipe(cls, recipe) -> "Setup":
        from vramfit.planner import params

        file = str(recipe.source)
        problems = Problems()
        config_path = recipe.path(recipe.model.config)
        if not config_path.is_file():
            problems.add(file, "model.config", f"model config '{recipe.model.config}' does not exist", "point model.config at a file under model_configs/.")
            raise ConfigError(problems)
        config = params.read_config(config_path)
        # `deepspeed: none` - no DeepSpeed (FSDP via training.fsdp, or plain DDP)
        ds = {} if recipe.deepspeed == "none" else _read_deepspeed(recipe.path(recipe.deepspeed), file, problems)
        if problems:
            raise ConfigError(problems)
        t = dict(recipe.training)
        grpo = recipe.method == "grpo"
        hidden = _hidden_size(config)
        zero = Zero.from_json(ds, hidden)
        quant = recipe.model.quantization
        knob_values = {**t, **recipe.planner.model_dump(), "quant_method": quant.method if quant else None}
        if quant and quant.method == "bitsandbytes":
            knob_values.update(
                {
                    "load_in_4bit": quant.bits == 4,
                    "load_in_8bit": quant.bits == 8,
                    "bnb_4bit_quant_type": quant.quant_type,
                    "bnb_4bit_use_double_quant": quant.double_quant,
                    "bnb_4bit_quant_storage": quant.quant_storage,
                }
            )
        knob = _knob_fields(
            knob_values, recipe.method, config, zero, problems, file, lora=recipe.model.lora is not None, model_config=config_path, beside=Path(file).parent
        )
        if problems:
            raise ConfigError(problems)
        arch = params.summary(config_path)
        tokens, patches = image_geometry(arch, recipe.data.max_pixels, recipe.data.max_slice_nums, config, recipe.planner.max_tiles)
        images = recipe.data.images_per_sample if patches else 0
        seq = recipe.data.max_length
        if grpo:
            # TRL 1.16 does not truncate prompts: image tokens count in full even past data.max_length.
            seq = max(seq, images * tokens)
        elif knob.get("images_past_max_length"):
            seq += images * max(0, tokens - 1)
        lora = recipe.model.lora
        if lora:
            _peft_refused(arch, lora.target_modules, True, problems, file, "model.lora")
            _peft_dropout(arch, lora.target_modules, lora.dropout, True, problems, file, "model.lora", lora.target_parameters)
            if problems:
                raise ConfigError(problems)
        unfrozen_note = _unfrozen_note(arch, knob.get("unfrozen_parameters", ()), problems, file, "planner.unfrozen_parameters")
        if problems:
            raise ConfigError(problems)
        eval_on = str(t.get("eval_strategy", _get({}, "eval_strategy"))) != "no" or bool(t.get("do_eval"))
        eval_samples, notes = None, [unfrozen_note] if unfrozen_note else []
        parameters_note = _target_parameters_note(arch, lora.target_parameters) if lora else None
        notes += [parameters_note] if parameters_note else []
        if eval_on:
            eval_samples = _count_records(recipe.path(recipe.data.eval_file)) if recipe.data.eval_file else None
            if eval_samples is None and not _get(t, "prediction_loss_only"):
                eval_samples = ASSUMED_EVAL_SAMPLES
                notes.append(f"eval set size unknown (data.eval_file unreadable); {ASSUMED_EVAL_SAMPLES} samples assumed for the kept eval logits")
        engine = knob.pop("engine", None) or ("deepspeed" if zero.stage else "ddp")
        knob["remote_code"] = bool(knob.get("remote_code")) or recipe.model.trust_remote_code
        return cls(
            **{"zero": zero, **_training_fields(t, zero, grpo), **knob},
            label=recipe.name,
            source=file,
            model_config=config_path,
            gpu=recipe.hardware.gpu,
            gpus_per_node=recipe.hardware.gpus_per_node,
            nodes=recipe.hardware.nodes,
            host_ram_gib=recipe.hardware.host_ram_gib,
            method=recipe.method,
            train_llm=recipe.model.train.llm,
            train_projector=recipe.model.train.projector,
            train_vision=recipe.model.train.vision_tower,
            lora_r=lora.r if lora else None,
            lora_targets=lora.target_modules if lora else None,
            lora_target_parameters=tuple(lora.target_parameters) if lora else (),
            lora_dropout=lora.dropout if lora else 0.0,
            modules_to_save=tuple(lora.modules_to_save) if lora else (),
            attention=ATTENTION[recipe.model.attn_implementation],
            seq_len=seq,
            images_per_sample=images,
            image_tokens=tokens,
            vision_patches=patches,
            engine=engine,
            ds3_gather_for_generation=bool(_get(t, "ds3_gather_for_generation")),
            eval_enabled=eval_on,
            eval_samples=eval_samples,
            prefetch_factor=int(t.get("dataloader_prefetch_factor") or DEFAULT_PREFETCH_FACTOR),
            expandable_segments="expandable_segments:true" in recipe.env.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower(),
            notes=tuple(notes),
        )

    # ------------------------------------------------------------------------------------------
    @classmethod
    def from_args(cls, model_config, gpu: str, gpus: int, nodes: int = 1, deepspeed: str | None = None, overrides: list[str] | dict[str, Any] = ()) -> "Setup":
        """`vramfit plan --model-config ...`; raises ConfigError on bad input."""
        from vramfit.paths import repo_root
        from vramfit.planner import params

        problems = Problems()
        label = "vramfit plan"
        path = Path(model_config)
        from vramfit.checks.model_config import check as check_model_config

        check_model_config(path, problems)  # the input layer, sizes, and transformers' own config class
        if gpu not in CATALOGUE:
            problems.add(label, "--gpu", f"unknown GPU '{gpu}'.{did_you_mean(gpu, CATALOGUE)}", f"use one of: {', '.join(CATALOGUE)}.")
        if gpus < 1 or nodes < 1:
            problems.add(label, "--gpus", f"GPU and node counts must be >= 1 (gpus {gpus}, nodes {nodes})", "pass --gpus 8 --nodes 1.")
        values = _parse_overrides(overrides, problems, label)
        read_as, ignored = values.pop("_read_as", []), values.pop("_ignored", [])
        deepspeed = values.pop("deepspeed", deepspeed)
        ds = {}
        if deepspeed not in (None, "none"):
            root = repo_root(Path.cwd())
            name = deepspeed if deepspeed.endswith(".json") else f"{deepspeed}.json"
            ds_path = next(
                (p for p in (Path(deepspeed), root / deepspeed, root / "deepspeed_configs" / name) if p.is_file()), root / "deepspeed_configs" / name
            )
            ds = _read_deepspeed(ds_path, label, problems, key="--deepspeed") or {}
            _launch_time_deepspeed(ds, str(ds_path), problems)
        _launch_time_values(values, label, problems)
        if problems:
            raise ConfigError(problems)
        config = params.read_config(path)
        arch = params.summary(path)
        zero = Zero.from_json(ds, _hidden_size(config)) if ds else Zero()
        method = values.get("method", "full")
        grpo = method == "grpo"
        lora = method in ("lora", "qlora") or "lora_r" in values
        knob = _knob_fields(values, method, config, zero, problems, label, lora=lora, model_config=path, beside=Path.cwd())
        if problems:
            from vramfit.checks.model_config import _shown
            from vramfit.models import stand_in_for

            stand_in = stand_in_for(path) if "quantization_config" in config else None
            if stand_in is not None:  # the table plans this checkpoint's 16-bit layout: say where
                problems.items = [
                    dataclasses.replace(p, fix=f"plan vramfit's 16-bit stand-in of it: --model-config {_shown(stand_in)}.")
                    if p.key == "quant_method" and p.what.startswith("the checkpoint's")
                    else p
                    for p in problems.items
                ]
            raise ConfigError(problems)
        tokens, patches = image_geometry(arch, values.get("max_pixels"), values.get("max_slice_nums"), config, values.get("max_tiles"))
        images = int(values.get("images_per_sample", 1 if patches else 0)) if patches else 0
        frames = int(values.get("frames_per_sample", 0))
        if frames:
            video = video_geometry(arch, config, frames, values.get("video_max_pixels"))
            if video is None:
                problems.add(
                    label,
                    "frames_per_sample",
                    f"{path.name} has no video geometry the planner knows (Qwen2-VL family only)",
                    "drop frames_per_sample, or plan the frames as images (images_per_sample).",
                )
                raise ConfigError(problems)
            # one vision unit per sample holding the images and the video: same tokens, same patches
            tokens, patches = images * tokens + video[0], images * patches + video[1]
            images = 1
        seq = int(values.get("seq_len", values.get("max_length", values.get("max_prompt_length", 2048 if not grpo else 512))))
        if grpo:
            seq = max(seq, images * tokens)
        elif knob.get("images_past_max_length"):
            seq += images * max(0, tokens - 1)
        world = gpus * nodes
        engine = knob.pop("engine", None) or ("deepspeed" if zero.stage else ("ddp" if world > 1 else "single"))
        modules = tuple(m for m in str(values.get("modules_to_save", "")).split(",") if m) if lora else ()
        targets = _targets(values.get("lora_target_modules", "all-linear")) if lora else None
        parameters = tuple(p for p in str(values.get("lora_target_parameters", "")).split(",") if p) if lora else ()
        dropout, notes = float(values.get("lora_dropout", 0.05)) if lora else 0.0, []
        if read_as:
            notes.append(f"read {'; '.join(read_as)}")
        unmodelled = [k for k in ignored if k in UNMODELLED_ARGUMENTS]
        if unmodelled:
            notes.append(f"{', '.join(unmodelled)}: training arguments that change memory in ways the planner does not model: planned without them")
        if len(unmodelled) < len(ignored):
            said = ", ".join(k for k in ignored if k not in UNMODELLED_ARGUMENTS)
            notes.append(f"{said}: training arguments that change no term of the memory plan, not used")
        unfrozen_note = _unfrozen_note(arch, knob.get("unfrozen_parameters", ()), problems, label, "unfrozen_parameters")
        if problems:
            raise ConfigError(problems)
        notes += [unfrozen_note] if unfrozen_note else []
        if lora:
            targets, note = _peft_refused(arch, targets, "lora_target_modules" in values, problems, label, "")
            notes += [note] if note else []
            dropout, note = _peft_dropout(arch, targets, dropout, "lora_dropout" in values, problems, label, "", parameters)
            if problems:
                raise ConfigError(problems)
            notes += [note] if note else []
            note = _target_parameters_note(arch, parameters)
            notes += [note] if note else []
        return cls(
            **{"zero": zero, **_training_fields(values, zero, grpo), **knob},
            label=path.stem,
            source=label,
            model_config=path,
            gpu=gpu,
            gpus_per_node=gpus,
            nodes=nodes,
            host_ram_gib=values.get("host_ram_gib"),
            method=method,
            train_projector=bool(values.get("train_projector", not lora)),
            train_vision=bool(values.get("train_vision", False)),
            lora_r=int(values.get("lora_r", 16)) if lora else None,
            lora_targets=targets,
            lora_target_parameters=parameters,
            lora_dropout=dropout,
            modules_to_save=modules,
            attention=ATTENTION.get(str(values.get("attn_implementation", "sdpa")), "sdpa"),
            seq_len=seq,
            images_per_sample=images,
            image_tokens=tokens,
            vision_patches=patches,
            engine=engine,
            eval_enabled=any(k in values for k in ("per_device_eval_batch_size", "eval_samples")) or str(values.get("eval_strategy", "no")) != "no",
            eval_samples=int(values.get("eval_samples", ASSUMED_EVAL_SAMPLES)),
            expandable_segments=bool(values.get("expandable_segments", False)),
            notes=tuple(notes),
        )


def _knob_fields(
    values: dict[str, Any],
    method: str,
    config: dict[str, Any],
    zero: "Zero",
    problems: Problems,
    file: str,
    lora: bool = False,
    model_config: Path | None = None,
    beside: Path | None = None,
) -> dict[str, Any]:
    """Setup fields of the launch knobs (knobs.py), shared by recipes and `--model-config`."""
    from vramfit.planner import knobs

    out: dict[str, Any] = knobs.trainer_fields(values, lora or method in ("lora", "qlora"), problems, file)
    if out.get("trainer") == "reward" and values.get("head") is None and values.get("task_type") is None:
        # TRL RewardConfig / RewardTrainer: AutoModelForSequenceClassification with num_labels=1 (a score per sequence);
        # a recipe says its head itself (planner.head: the review sets it, review/mapping.py _head)
        values = {**values, "head": "seq_cls", "num_labels": values.get("num_labels") or 1}
    fsdp = knobs.fsdp_fields(values.get("fsdp"), values.get("fsdp_config"), problems, file)
    if fsdp:
        if zero.stage:
            problems.add(file, "fsdp", f"FSDP and DeepSpeed ZeRO-{zero.stage} both set (transformers refuses both)", "drop the DeepSpeed JSON or the fsdp key.")
        if fsdp["fsdp_offload"]:
            out["zero"] = Zero(offload_optimizer=True, offload_params=True)  # host.py reads the offload flags here
        out.update(fsdp)
    fsdp_config = {k.removeprefix("fsdp_"): v for k, v in (values.get("fsdp_config") or {}).items()}
    if fsdp and knobs._truthy(fsdp_config.get("activation_checkpointing")):
        out["gradient_checkpointing"] = True  # accelerate FSDP activation_checkpointing wraps every layer
    out.update(knobs.fsdp_accumulation_fields(values, fsdp, fsdp_config, problems, file))
    out.update(knobs.accelerate_fields(values, problems, file))
    out.update(knobs.precision_fields(values, method == "grpo", problems, file))
    out["frozen_fp32"] = out["master_fp32"]
    out.update(knobs.quant_fields(values, method, config, problems, file))
    out["quant_keeps_input"] = knobs.bnb_keeps_input(values, out.get("quantization"), problems, file)
    out["gradients_kept"] = knobs.torch_keeps_gradients(values, problems, file)
    out["keeps_previous_output"] = bool(values.get("keeps_previous_output"))
    out["quantize_lm_head"] = bool(values.get("quantize_lm_head")) and out.get("quantization") is not None
    out["quantize_moe_experts"] = bool(values.get("quantize_moe_experts")) and out.get("quantization") is not None
    out["grpo_whole_logits"] = bool(values.get("grpo_whole_logits"))
    out["offload_outside_update"] = knobs.offload_outside_update(values.get("offload_outside_update"), problems, file)
    out.update(knobs.sequence_parallel_fields(values, problems, file))
    out["device_map_gpus"] = knobs.device_map_gpus(values, problems, file)
    out.update(knobs.device_map_fields(values, problems, file))
    if out["device_map_gpus"] > 1 and (fsdp or zero.stage):
        # accelerate Accelerator.prepare_model refuses a model dispatched over several GPUs under DeepSpeed / FSDP
        # ("You can't train a model that has been loaded with `device_map='auto'` in any distributed mode")
        sharded = "FSDP" if fsdp else f"DeepSpeed ZeRO-{zero.stage}"
        problems.add(
            file,
            "planner.device_map_gpus",
            f"a model spread over {out['device_map_gpus']} GPUs with device_map cannot be sharded by {sharded} (accelerate refuses both)",
            "drop device_map_gpus, or the DeepSpeed JSON / fsdp key.",
        )
    optimizer = knobs.default_optimizer(values, problems, file)
    if optimizer and not zero.optimizer_block:  # a DeepSpeed JSON naming its optimizer runs DeepSpeed's, whatever torch
        out["optimizer"] = optimizer
    kernel = knobs.loss_kernel(values, problems, file)
    out["loss_kernel"] = kernel
    out["mixer_kernels"] = knobs.mixer_kernels(values, problems, file)
    if kernel == "liger":
        out["liger"] = True
    out["activation_offloading"] = knobs.offloading(values)
    out.update(knobs.compile_fields(values, kernel))
    if kernel == "chunked":
        out["loss_chunks"] = knobs.loss_chunks(values, problems, file)
    out.update(knobs.head_fields(values, config, problems, file))
    out["packing"] = bool(values.get("packing"))
    out["padding_free"] = bool(values.get("padding_free")) or out["packing"]  # TRL: BFD packing is padding-free
    if values.get("typical_length") is not None:
        out["typical_seq_len"] = int(values["typical_length"])
    out["optimizer_in_backward"] = bool(values.get("optimizer_in_bwd") or values.get("optimizer_in_backward"))
    if out["optimizer_in_backward"]:
        if zero.stage:
            problems.add(
                file,
                "optimizer_in_bwd",
                "optimizer-in-backward is a torchtune / plain-PyTorch feature; DeepSpeed runs its own step",
                "drop optimizer_in_bwd or the DeepSpeed JSON.",
            )
        if int(values.get("gradient_accumulation_steps") or 1) > 1:
            problems.add(
                file,
                "optimizer_in_bwd",
                f"optimizer-in-backward steps at every backward; gradient accumulation "
                f"({values.get('gradient_accumulation_steps')}) cannot work with it (torchtune refuses the pair)",
                "set gradient_accumulation_steps=1 or drop optimizer_in_bwd.",
            )
    out.update(knobs.vllm_fields(values, problems, file))
    out.update(knobs.gkd_fields(values, out.get("trainer", "sft"), problems, file, model_config, beside))
    out.update(knobs.ppo_fields(values, out.get("trainer", "sft"), method, problems, file, model_config, beside))
    out.update(knobs.audio_output_fields(values, model_config, problems, file))
    out.update(knobs.unfrozen_fields(values, lora or method in ("lora", "qlora"), problems, file))
    out["lora_vision_tower"] = bool(values.get("lora_vision_tower", True))
    out["images_past_max_length"] = bool(values.get("images_past_max_length", False))
    out["adapter_fp32"] = knobs._truthy(values.get("autocast_adapter_dtype", False))
    out["remote_code"] = bool(values.get("trust_remote_code", False))
    _check_target_regex(values, problems, file)  # a recipe's planner: section does not pass _launch_time_values
    from vramfit.planner.params import SAVE_GROUPS

    for name in str(values.get("modules_to_save") or "").split(","):
        if name and name not in SAVE_GROUPS:
            problems.add(
                file,
                "modules_to_save",
                f"'{name}' is not a module the planner can size.{did_you_mean(name, SAVE_GROUPS)}",
                f"use names from: {', '.join(SAVE_GROUPS)}.",
            )
    return out


def _unfrozen_note(arch, patterns: tuple[str, ...], problems: Problems, file: str, key: str) -> str | None:
    """The plan's note for `unfrozen_parameters` (what trains, how the activations are planned); a list that
    matches none of the model's parameters is an error (axolotl warns "All parameters are frozen")."""
    if not patterns:
        return None
    from vramfit.planner import params

    rows = params.unfrozen(arch, patterns)
    if not rows:
        first = ", ".join(n for n, _, _ in arch.parameters[:3])
        problems.add(
            file,
            key,
            f"none of the {len(patterns)} regexes matches a parameter name of {arch.architecture} ({len(arch.parameters)} parameters: {first}, ...)",
            "write the regexes against model.named_parameters() names (matched at their start, re.match).",
        )
        return None
    trained = sum(n for _, n, _ in rows)
    return (
        f"unfrozen_parameters: {len(rows)} of {len(arch.parameters)} parameter tensors train ({trained:,} of {arch.total:,} "
        f"parameters, {trained / max(arch.total, 1):.0%}), the rest frozen; gradients and optimizer states for those only. "
        "Activations planned as full fine-tuning (autograd keeps what the backward to the earliest trainable weight needs; "
        "an over-count when the first layers are frozen)"
    )


def _training_fields(t: dict, zero, grpo: bool) -> dict:
    """What the estimate reads from Hugging Face / TRL argument names (a recipe's `training:` or
    the `key=value` arguments of `vramfit plan --model-config`); missing keys take the library defaults."""
    return dict(
        optimizer="adamw_torch_fused" if zero.optimizer_block else str(_get(t, "optim")),
        gradient_checkpointing=_gradient_checkpointing(t, grpo),
        liger=bool(_get(t, "use_liger_kernel")),
        micro_batch=int(_get(t, "per_device_train_batch_size")),
        gradient_accumulation_steps=int(_get(t, "gradient_accumulation_steps")),
        num_generations=int(_get(t, "num_generations")),
        max_completion_length=int(_get(t, "max_completion_length")) if grpo else 0,
        steps_per_generation=t.get("steps_per_generation"),
        beta=float(_get(t, "beta")),
        eval_batch=int(_get(t, "per_device_eval_batch_size")),
        prediction_loss_only=bool(_get(t, "prediction_loss_only")),
        eval_accumulation_steps=t.get("eval_accumulation_steps"),
        dataloader_workers=int(_get(t, "dataloader_num_workers")),
    )


# ----------------------------------------------------------------------------------------------
# `--model-config` keys: Hugging Face / TRL names, then planner keys. Value kinds for parsing.
ARG_KEYS = {
    "per_device_train_batch_size": int,
    "gradient_accumulation_steps": int,
    "gradient_checkpointing": (bool, ("offload",)),
    "use_liger_kernel": bool,
    "optim": str,
    "bf16": (bool, ("full",)),
    "fp16": bool,
    "per_device_eval_batch_size": int,
    "prediction_loss_only": bool,
    "eval_accumulation_steps": int,
    "eval_strategy": str,
    "num_generations": int,
    "max_completion_length": int,
    "max_prompt_length": int,
    "beta": float,
    "steps_per_generation": int,
    "dataloader_num_workers": int,
    "attn_implementation": str,
    "method": str,
    "seq_len": int,
    "max_length": int,
    "lora_r": int,
    "lora_dropout": float,
    "lora_target_modules": str,
    "max_pixels": int,
    "max_slice_nums": int,
    "images_per_sample": int,
    "train_vision": bool,
    "host_ram_gib": float,
    "eval_samples": int,
    "expandable_segments": bool,
    "deepspeed": str,
    # launch knobs (knobs.py): TrainingArguments / accelerate, TRL, PEFT, bitsandbytes, torchtune, axolotl names
    "fsdp": str,
    "dtype": str,
    "torch_dtype": str,
    "load_in_4bit": bool,
    "load_in_8bit": bool,
    "bnb_4bit_quant_type": str,
    "bnb_4bit_use_double_quant": bool,
    "bnb_4bit_quant_storage": str,
    "quant_method": str,
    "bitsandbytes_version": str,
    "torch_version": str,
    "accelerate_version": str,
    "modules_to_save": str,
    "lora_target_parameters": str,
    "activation_offloading": bool,
    "packing": bool,
    "padding_free": bool,
    "cut_cross_entropy": bool,
    "optimizer_in_bwd": bool,
    "torch_compile": bool,
    "compile": bool,
    "use_vllm": bool,
    "vllm_mode": str,
    "vllm_gpu_memory_utilization": float,
    "vllm_enable_sleep_mode": bool,
    "sync_each_batch": bool,
    "autocast_adapter_dtype": bool,
    # planner keys
    "fsdp_lora_units": str,
    "keeps_previous_output": bool,
    "quantize_lm_head": bool,
    "grpo_whole_logits": bool,
    "offload_outside_update": str,
    "quantize_moe_experts": bool,
    "sequence_parallel": int,
    "celoss_parallel_size": int,
    "device_map_gpus": int,
    "device_map_policy": str,
    "device_map_max_memory_gib": float,
    "unfrozen_parameters": str,
    "typical_length": int,
    "loss_kernel": str,
    "loss_chunks": int,
    "compile_loss": bool,
    "mixer_kernels": str,
    "head": str,
    "task_type": str,
    "num_labels": int,
    "negatives": int,
    "positives": int,
    "lora_vision_tower": bool,
    "images_past_max_length": bool,
    "audio_output": bool,
    "trust_remote_code": bool,
    "train_projector": bool,
    "max_tiles": int,
    "frames_per_sample": int,
    "video_max_pixels": int,
    "trainer": str,
    "ref_model": str,
    "fused_lm_head": bool,
    "precompute_ref_log_probs": bool,
    # GKD (knobs.gkd_fields): TRL GKDConfig and ms-swift names, and the planner's gkd_beta / gkd_loss
    "teacher_model": str,
    "teacher_model_name_or_path": str,
    "teacher_model_server": str,
    "lmbda": float,
    "gkd_beta": float,
    "max_new_tokens": int,
    "seq_kd": bool,
    "gkd_loss": str,
    "teacher_deepspeed": str,
    "offload_teacher_model": bool,
    # PPO (knobs.ppo_fields): the critic and the reward model (a config.json or a model id), how the critic trains
    "critic_model": str,
    "reward_model_path": str,
    "critic_update": str,
    "critic_micro_batch": int,
    "critic_gradient_checkpointing": bool,
    "critic_offload_outside_update": str,
    "rollout_vllm": str,
    "rollout_vllm_gpu_memory_utilization": float,
    "rollout_vllm_sleep": bool,
    "rollout_micro_batch": int,
}
# `fsdp_config.<key>=...`: accelerate / TrainingArguments fsdp_config keys (with or without "fsdp_").
FSDP_CONFIG_KEYS = (
    "version",
    "sharding_strategy",
    "reshard_after_forward",
    "offload_params",
    "cpu_offload",
    "auto_wrap_policy",
    "transformer_layer_cls_to_wrap",
    "activation_checkpointing",
    "cpu_ram_efficient_loading",
    "state_dict_type",
    "use_orig_params",
    "sync_module_states",
    "forward_prefetch",
    "backward_prefetch",
    "limit_all_gathers",
    "min_num_params",
    "xla",
)
CHOICES = {
    "method": ("full", "lora", "qlora", "grpo"),
    "attn_implementation": tuple(ATTENTION),
    "vllm_mode": ("colocate", "server"),
    "device_map_policy": ("balanced", "sequential"),
    "loss_kernel": ("torch", "liger", "cce", "chunked"),
    "mixer_kernels": ("fused", "torch"),
    "fsdp_lora_units": ("separate", "layer"),
    "head": ("lm", "seq_cls", "token_cls", "embedding", "generative_reranker"),
    "trainer": ("sft", "dpo", "orpo", "cpo", "reward", "kto", "gkd", "ppo"),
    "critic_update": ("separate", "joint"),
    "rollout_vllm": ("colocate", "server"),
    "gkd_loss": ("trl", "swift"),
    "ref_model": ("copy", "none", "precomputed"),
    "bnb_4bit_quant_type": ("nf4", "fp4"),
    "quant_method": ("bitsandbytes", "gptq", "awq"),
    "dtype": ("auto", "bfloat16", "float16", "float32"),
    "torch_dtype": ("auto", "bfloat16", "float16", "float32"),
    "bnb_4bit_quant_storage": ("uint8", "bfloat16", "float16", "float32"),
}
FRACTIONS = ("vllm_gpu_memory_utilization", "lmbda", "gkd_beta", "rollout_vllm_gpu_memory_utilization")
# numeric keys for which 0 is a value (every other one must be positive)
ZERO_ALLOWED = ("beta", "gkd_beta", "lmbda", "lora_dropout", "dataloader_num_workers", "images_per_sample", "frames_per_sample", "negatives")


ALIASES = {"lora_modules_to_save": "modules_to_save", "use_bnb_nested_quant": "bnb_4bit_use_double_quant"}
# Argument-class fields that do change what a GPU holds, in ways the planner has no term for: said as left out, not
# as harmless (PEFT LoraConfig use_dora: the weight-norm magnitude and its activations; TrainingArguments
# optim_target_modules: GaLore / APOLLO projections; auto_find_batch_size: the batch halves on OOM; use_cpu; TRL
# GRPOConfig cast_lm_head_to_fp32, ds3_gather_for_generation, generation_batch_size, vllm_tensor_parallel_size)
UNMODELLED_ARGUMENTS = frozenset(
    {
        "use_dora",
        "lora_use_dora",
        "optim_target_modules",
        "auto_find_batch_size",
        "use_cpu",
        "cast_lm_head_to_fp32",
        "ds3_gather_for_generation",
        "generation_batch_size",
        "vllm_tensor_parallel_size",
        "bf16_full_eval",
        "fp16_full_eval",
        "model_init_kwargs",
        "gradient_checkpointing_kwargs",
    }
)


@functools.lru_cache(maxsize=1)
def _argument_fields() -> frozenset[str]:
    """Every field of the argument classes people copy keys from (transformers TrainingArguments, TRL's configs and
    ModelConfig, PEFT's LoraConfig and its `lora_`-prefixed spellings): accepted by --model-config overrides, said as
    changing nothing the planner models where they are not one of its keys."""
    import dataclasses as dc

    names: set[str] = set()
    try:
        import trl
        from peft import LoraConfig
        from transformers import TrainingArguments

        classes = [TrainingArguments, LoraConfig, trl.ModelConfig]
        classes += [getattr(trl, n) for n in dir(trl) if n.endswith("Config") and dc.is_dataclass(getattr(trl, n, None))]
    except Exception:  # a library that does not import: its fields stay unknown keys
        return frozenset()
    for cls in classes:
        names |= {f.name for f in dc.fields(cls)}
    names |= {f"lora_{f.name}" for f in dc.fields(LoraConfig)}
    return frozenset(names)


def _parse_overrides(overrides, problems: Problems, label: str) -> dict[str, Any]:
    from vramfit.recipe import parse_value

    items = overrides.items() if isinstance(overrides, dict) else []
    if not isinstance(overrides, dict):
        parsed = []
        for item in overrides:
            if "=" not in item:
                problems.add(label, item, "an override must be key=value", f"write e.g. per_device_train_batch_size=2, not '{item}'.")
                continue
            key, text = item.split("=", 1)
            parsed.append((key.strip().removeprefix("training."), parse_value(text)))
        items = parsed
    values: dict[str, Any] = {}
    for key, value in items:
        if key.startswith("fsdp_config."):
            sub = key.split(".", 1)[1].removeprefix("fsdp_")
            if sub not in FSDP_CONFIG_KEYS:
                problems.add(
                    label, key, f"unknown fsdp_config key '{sub}'.{did_you_mean(sub, FSDP_CONFIG_KEYS)}", f"use one of: {', '.join(FSDP_CONFIG_KEYS)}."
                )
                continue
            values.setdefault("fsdp_config", {})[sub] = value
            continue
        if key == "max_seq_length" and "max_length" not in dict(items):  # TRL before 0.20: SFTConfig's name for max_length
            key = "max_length"
            values.setdefault("_read_as", []).append("max_seq_length as max_length (its name in TRL before 0.20)")
        if key in ALIASES and ALIASES[key] not in dict(items):  # TRL's ModelConfig spellings of planner keys
            values.setdefault("_read_as", []).append(f"{key} as {ALIASES[key]} (TRL's ModelConfig)")
            key = ALIASES[key]
        if key == "use_peft" and value is True and "method" not in dict(items):  # TRL's ModelConfig: LoRA through PEFT
            key, value = "method", "lora"
            values.setdefault("_read_as", []).append("use_peft=true as method=lora (TRL's ModelConfig)")
        kind = ARG_KEYS.get(key)
        if kind is None and key in _argument_fields():  # a real training argument that changes no memory term
            values.setdefault("_ignored", []).append(key)
            continue
        if kind is None:
            problems.add(
                label,
                key,
                f"unknown key '{key}'.{did_you_mean(key, [*ARG_KEYS, 'fsdp_config.version', *sorted(_argument_fields())])}",
                f"use one of: {', '.join(ARG_KEYS)}, fsdp_config.<key>.",
            )
            continue
        words: tuple[str, ...] = ()
        if isinstance(kind, tuple):
            kind, words = kind
        if key in ("bitsandbytes_version", "torch_version", "accelerate_version") and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # 0.43 parses as a number; a version is a name
        if key == "fsdp" and isinstance(value, bool):
            value = "full_shard" if value else ""
        if key == "fsdp" and isinstance(value, list):  # TrainingArguments also takes a list of options
            value = " ".join(map(str, value))
        ok = (
            (isinstance(value, bool) or (isinstance(value, str) and value.lower() in words))
            if kind is bool
            else (
                isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or float(value).is_integer())
                if kind in (int, float)
                else isinstance(value, str)
            )
        )
        if ok and kind in (int, float) and (value < 0 or (value == 0 and key not in ZERO_ALLOWED)):
            ok = False
        if ok and key in FRACTIONS and value > 1:
            ok = False
        if not ok or (key in CHOICES and value not in CHOICES[key]):
            want = (
                f"one of {', '.join(CHOICES[key])}"
                if key in CHOICES
                else "a fraction in (0, 1]"
                if key in FRACTIONS
                else (
                    f"true, false or {' or '.join(words)}"
                    if words
                    else {
                        bool: "true or false",
                        int: "a whole number >= 0" if key in ZERO_ALLOWED else "a positive whole number",
                        float: "a non-negative number",
                        str: "a name",
                    }[kind]
                )
            )
            problems.add(label, key, f"{value!r} is not {want} ({key}={value!r})", f"write {key}=<{want}>.")
            continue
        values[key] = value
    return values


PEFT_DROPOUT_RULE = "peft-param-wrapper-dropout"  # the reviewer writes this problem's fix in the user's own keys
ATTENTION_TARGETS = "q_proj,k_proj,v_proj,o_proj"


def _target_parameters_note(arch, parameters) -> str | None:
    """What an explicit target_parameters list adapts, as PEFT matches it (params.named_parameter_targets): a parameter
    whose lora.ParamWrapper shape the planner does not know is said and left out of the plan, never guessed; an entry
    that matches nothing is said too (PEFT warns "were set but no parameter was matched" and adapts none)."""
    from vramfit.planner import params

    if not parameters:
        return None
    known, unknown, unmatched = params.named_parameter_targets(arch, parameters)
    stack = arch.stacks.get("text")
    said = []
    if known and (stack is None or not stack.experts or not stack.expert_gated):
        unknown = [n for names in known.values() for n in names] + unknown
        known = {}
    if known:
        said.append("LoRA target_parameters planned through lora.ParamWrapper: " + ", ".join(f"{k} x {len(v)}" for k, v in known.items()))
    if unknown:
        shown = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        said.append(
            f"LoRA target_parameters {shown}: PEFT wraps them, but the planner knows the ParamWrapper shapes of the MoE router "
            f"and fused experts only ({', '.join(params.PARAMETER_SHAPES)}); their adapters are not planned"
        )
    if unmatched:
        said.append(f"LoRA target_parameters {', '.join(unmatched)} match no parameter of {arch.architecture} (PEFT warns and adapts none)")
    return "; ".join(said) or None


def _peft_dropout(arch, targets, dropout: float, given: bool, problems: Problems, file: str, prefix: str, parameters=()) -> tuple[float, str | None]:
    """(the dropout PEFT can build, a note): PEFT wraps a fused MoE model's experts with lora.ParamWrapper
    (params.peft_parameter_targets), whose __init__ raises "does not work with lora_dropout != 0" (peft
    tuners/lora/layer.py): a dropout the run sets is bad input (the run stops in get_peft_model); the
    planner's own default is planned as 0, said in a note."""
    from vramfit.planner import params

    wrapped = params.peft_parameter_targets(arch, targets) if dropout else ()
    if dropout and parameters:  # an explicit target_parameters list: every parameter it matches is a ParamWrapper
        known, unknown, _ = params.named_parameter_targets(arch, parameters)
        wrapped = tuple(dict.fromkeys([*(wrapped or ()), *known, *unknown]))
    if not wrapped:
        return dropout, None
    import peft

    key = f"{prefix}.dropout" if prefix else "lora_dropout"
    spelt = ",".join(targets) if isinstance(targets, (list, tuple)) else targets
    what = (
        f"PEFT {peft.__version__} adapts the fused MoE experts of {arch.architecture} (target_modules {spelt} -> target_parameters "
        f"{', '.join(wrapped)}) through lora.ParamWrapper, which refuses dropout"
    )
    if given:
        targets_key = f"{prefix}.target_modules" if prefix else "lora_target_modules"
        problems.add(
            file,
            key,
            f"{what} (lora_dropout {dropout:g} != 0): the run stops in get_peft_model",
            f"set {key} to 0, or {targets_key} to the attention projections alone ({ATTENTION_TARGETS}).",
            rule=PEFT_DROPOUT_RULE,
        )
        return dropout, None
    return 0.0, f"lora_dropout 0 planned, not the default {dropout:g}: {what} (a run that sets lora_dropout > 0 stops in get_peft_model)"


PEFT_REFUSED_RULE = "peft-refused-target"  # the reviewer re-plans with the targets PEFT accepts


def peft_accepted_targets(arch, targets) -> tuple[list[str], Any]:
    """(the module names PEFT refuses among those `targets` adapts, the targets with them left out; `all-linear` as the
    model's linear leaf names). Nothing refused, or a regex: ([], targets)."""
    from vramfit.planner import params

    leaves = list(dict.fromkeys(lin.name.rsplit(".", 1)[-1] for lin in arch.linears))
    if targets == "all-linear":
        named = leaves
    elif isinstance(targets, (list, tuple)):
        named = [str(t).rsplit(".", 1)[-1] for t in targets]
    else:
        return [], targets
    refused = set(params.peft_refused_modules(arch.model_type, set(named) | set(leaves)))
    hit = [n for n in dict.fromkeys(named) if n in refused]
    if not hit:
        return [], targets
    return hit, [t for t in (leaves if targets == "all-linear" else targets) if str(t).rsplit(".", 1)[-1] not in refused]


def _peft_refused(arch, targets, given: bool, problems: Problems, file: str, prefix: str) -> tuple[Any, str | None]:
    """(the LoRA targets PEFT builds, a note): PEFT refuses some modules on some architectures (params.peft_refused_modules:
    `out_proj` / `conv1d` on Mamba-family models), `all-linear` included, with a ValueError in get_peft_model. Targets the
    run gives are bad input naming the targets PEFT accepts; the planner's own default (`all-linear`) is planned on the
    linear modules PEFT accepts, said in a note. A regex is left to PEFT (the trace meets its answer)."""
    hit, accepted = peft_accepted_targets(arch, targets)
    if not hit:
        return targets, None
    import peft

    spelt = ",".join(targets) if isinstance(targets, (list, tuple)) else targets
    what = (
        f"PEFT {peft.__version__} refuses LoRA on {', '.join(hit)} of {arch.architecture} (model_type {arch.model_type}; "
        f"peft tuners_utils `_check_target_module_compatiblity`), which target_modules {spelt} names"
    )
    key = f"{prefix}.target_modules" if prefix else "lora_target_modules"
    if given:
        fix = f"set {key} to {','.join(accepted)}." if accepted else f"drop {', '.join(hit)} from {key}."
        problems.add(file, key, f"{what}: the run stops in get_peft_model", fix, rule=PEFT_REFUSED_RULE)
        return targets, None
    return accepted, f"LoRA targets not given: planned on the linear modules PEFT accepts ({','.join(accepted)}), not all-linear: {what}"


def _targets(value: str):
    """`all-linear`, a regex (PEFT matches it in full), or comma-separated module names."""
    return value.split(",") if "," in value else value


def _launch_time_deepspeed(ds: dict[str, Any], file: str, problems: Problems) -> None:
    """What DeepSpeed refuses at launch: planned as if it ran, it would answer "fits" for a job that cannot start."""
    from vramfit.checks.deepspeed_json import launch_time_problems, section

    if not ds:
        return
    stage = section(ds, "zero_optimization").get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        problems.add(file, "zero_optimization.stage", f"{stage!r} is not a ZeRO stage", "use 0, 1, 2 or 3.")
    micro = ds.get("train_micro_batch_size_per_gpu", "auto")
    if micro != "auto" and (isinstance(micro, bool) or not isinstance(micro, int) or micro < 1):
        problems.add(file, "train_micro_batch_size_per_gpu", f"{micro!r} is not a positive whole number", 'write "auto" or a number >= 1.')
    launch_time_problems(ds, file, problems)


def _launch_time_values(values: dict[str, Any], file: str, problems: Problems) -> None:
    """Values the Trainer refuses at launch: an optimizer name it does not know, a target regex that does not compile."""

    optim = values.get("optim")
    if optim is not None:
        from transformers.training_args import OptimizerNames

        names = [o.value for o in OptimizerNames]
        if optim not in names:
            problems.add(
                file,
                "optim",
                f"'{optim}' is not an optimizer transformers knows.{did_you_mean(optim, names)}",
                "use e.g. optim=adamw_torch_fused (see transformers.training_args.OptimizerNames).",
            )
    _check_target_regex(values, problems, file)


def _check_target_regex(values: dict[str, Any], problems: Problems, file: str) -> None:
    """lora_target_modules as one string is a regex PEFT full-matches module names against; one wording for both paths."""
    import re

    targets = values.get("lora_target_modules")
    if isinstance(targets, str) and targets != "all-linear" and "," not in targets:
        try:
            re.compile(targets)
        except re.error as exc:
            problems.add(
                file,
                "lora_target_modules",
                f"'{targets}' is not a valid regex ({exc})",
                "fix the regex, or list module names (q_proj,v_proj), or write all-linear.",
            )


def _read_deepspeed(path: Path, file: str, problems: Problems, key: str = "deepspeed") -> dict[str, Any] | None:
    from vramfit.checks.deepspeed_json import read

    return read(path, problems, file, key)


def _hidden_size(config: dict[str, Any]) -> int:
    from vramfit.checks.deepspeed_json import _hidden_size as hidden_size

    return int(hidden_size(config) or 0)


def _get(values: dict[str, Any], key: str):
    """A training value, else the library default (GRPO-only keys are unused outside GRPO)."""
    value = values.get(key)
    if value is not None or key not in (*HF_DEFAULT_KEYS, *GRPO_DEFAULT_KEYS):
        return value
    from vramfit.libraries import argument_default

    return argument_default("grpo" if key in GRPO_DEFAULT_KEYS else None, key)


def _precision(values: dict[str, Any], grpo: bool) -> str:
    if values.get("fp16"):
        return "fp16"
    bf16 = values.get("bf16")
    if bf16 is None:
        bf16 = grpo  # GRPOConfig: bf16 defaults to True when fp16 is not set
    return "bf16" if bf16 else "fp32"


def _gradient_checkpointing(values: dict[str, Any], grpo: bool) -> bool:
    # transformers 5.23 renames gradient_checkpointing to activation_checkpointing (both accepted);
    # TrainingArguments defaults it off, GRPOConfig on.
    for key in ("activation_checkpointing", "gradient_checkpointing"):
        if values.get(key) is not None:
            return bool(values[key])
    return grpo


def _count_records(path: Path) -> int | None:
    """Samples in a JSON list or JSON-lines file, None when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        data = json.loads(text)
        return len(data) if isinstance(data, list) else 1
    except json.JSONDecodeError:
        return sum(1 for line in text.splitlines() if line.strip())


# Model code that computes its own loss on the 16-bit logits, without `logits.float()`:
# Qwen-1's remote QWenLMHeadModel.forward (modeling_qwen.py: `shift_logits = lm_logits[..., :-1, :]
# .contiguous()`, then `CrossEntropyLoss()(shift_logits.view(...), ...)`). Recognised by the config's
# `_original.model_type` (model_configs write remote-code models as native shapes, see their README).
NO_UPCAST_MODEL_TYPES = frozenset({"qwen"})


def _loss_fp32(config: dict[str, Any], precision: str, engine: str) -> bool:
    """Whether the cross-entropy runs on fp32 logits.

    Only a model whose own code skips the upcast can compute it in 16 bits, and only when nothing
    upcasts for it: torch.autocast puts cross_entropy / log_softmax on its fp32 list, and HF Trainer /
    Accelerate enable autocast for fp16 / bf16 mixed precision except under DeepSpeed, whose engine
    casts the module to 16 bits instead (accelerate `Accelerator.__init__`: native_amp is not set
    for DistributedType.DEEPSPEED)."""
    original = (config.get("_original") or {}).get("model_type")
    if original not in NO_UPCAST_MODEL_TYPES or precision == "fp32":
        return True
    autocast = engine != "deepspeed" and precision in ("bf16", "fp16")
    return autocast


# Processor defaults for stock Hugging Face configs (transformers 5.23), used when the config carries
# no `_image_tokens` of ours and the user passes no processor setting:
# qwen2_vl/image_processing_qwen2_vl.py: size longest_edge 28 * 28 * 1280 (max_pixels);
# qwen2_vl/video_processing_qwen2_vl.py: longest_edge 28 * 28 * 768 per frame, temporal_patch_size 2.
QWEN2VL_MAX_PIXELS = 28 * 28 * 1280
QWEN2VL_VIDEO_MAX_PIXELS = 28 * 28 * 768


def _patch_size(img: dict) -> int:
    patch = img.get("patch_size") or 14
    return patch[0] if isinstance(patch, (list, tuple)) else patch


def tile_patches(arch) -> int | None:
    """Vision-encoder tokens of one slice / crop where the processor cuts an image into several, each run as its
    own sequence in the tower's batch (MiniCPM-V's slices, DocOwl's crops with their CLS token); None where the
    image is one sequence."""
    img = arch.image
    if "per_slice" in img or "per_448px_slice_16x" in img:
        return ((img.get("slice_px") or 448) // _patch_size(img)) ** 2
    if "per_crop" in img:
        return (img["crop_px"] // _patch_size(img)) ** 2 + 1
    return None


def image_geometry(arch, max_pixels: int | None, max_slices: int | None, config: dict | None = None, max_tiles: int | None = None) -> tuple[int, int]:
    """(LLM tokens, vision-encoder tokens) per image at the recipe's worst case (the caps)."""
    img = arch.image
    if not arch.groups.get("vision"):
        return 0, 0
    patch = _patch_size(img)
    if "per_28px_square" in img or (img.get("spatial_merge_size") and not img.get("image_size")):
        # Qwen2-VL family (a stock config: vision_config.spatial_merge_size): 2x2 patches merged into one token
        merge = img.get("spatial_merge_size") or 2
        pixels = max_pixels or img.get("default_max_pixels") or QWEN2VL_MAX_PIXELS
        tokens = pixels // (patch * merge) ** 2
        return tokens, tokens * merge * merge
    if "per_slice" in img or "per_448px_slice_16x" in img:  # MiniCPM-V: slices + an overview image
        per = img.get("per_slice") or img["per_448px_slice_16x"]
        slices = (max_slices or img["max_slices"]) + (1 if img.get("plus_overview_image") else 0)
        return per * slices, tile_patches(arch) * slices
    if "per_crop" in img:  # DocOwl: crops + a global image, ViT with a CLS token per crop
        crops = img["max_crops"] + (1 if img.get("plus_global_image") else 0)
        return img["per_crop"] * crops, tile_patches(arch) * crops
    if "per_image" in img:
        side = (img.get("image_px") or img["image_size"]) // patch
        patches = img.get("patches_before_merge") or side * side + (1 if img.get("select_strategy") == "default" else 0)
        return img["per_image"], patches
    size = img.get("image_size") or 224
    if isinstance(size, (list, tuple)):
        size = size[0]
    side = size // patch
    config = config or {}
    if config.get("image_seq_length") and config.get("downsample_ratio"):
        # InternVL (stock config): image_seq_length tokens per 448-px tile after pixel shuffle; the ViT sees
        # its patches + a CLS token per tile; tiles: GotOcr2ImageProcessor crop_to_patches up to max_patches
        # plus a thumbnail (max_tiles=N; the class default crops nothing: one tile).
        tiles = (max_tiles + 1) if max_tiles and max_tiles > 1 else 1
        return int(config["image_seq_length"]) * tiles, (side * side + 1) * tiles
    if config.get("mm_tokens_per_image"):  # Gemma 3: a fixed number of pooled tokens per image
        return int(config["mm_tokens_per_image"]), side * side
    return side * side, side * side


def video_geometry(arch, config: dict, frames: int, max_pixels: int | None) -> tuple[int, int] | None:
    """(LLM tokens, vision-encoder tokens) of one video of `frames` frames (Qwen2-VL family: frames are
    grouped by the vision config's temporal_patch_size, each group tokenised like one image)."""
    vision = (config or {}).get("vision_config") or {}
    temporal = vision.get("temporal_patch_size")
    if not temporal or not arch.image.get("spatial_merge_size"):
        return None
    merge = arch.image["spatial_merge_size"]
    patch = arch.image.get("patch_size") or 14
    per_group = (max_pixels or QWEN2VL_VIDEO_MAX_PIXELS) // (patch * merge) ** 2
    groups = -(-frames // temporal)
    return groups * per_group, groups * per_group * merge * merge


def ceil_div(a: int, b: int) -> int:
    return -(-a // b) if b else 0
