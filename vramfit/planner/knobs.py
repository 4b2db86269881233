r"""The launch knobs beyond batch and length, read as the libraries spell them, into `Setup` fields.

One reader for both ways in: a recipe (`training:` holds TrainingArguments / GRPOConfig names,
`planner:` the knobs the runner's own arguments cannot say) and `vramfit plan --model-config`
overrides. Each knob names the library code whose behaviour the planner models:

| knob (as spelt) | library | modelled (module) |
|---|---|---|
| `fsdp="full_shard auto_wrap offload"`, `fsdp_config.version=2`, `fsdp_config.reshard_after_forward` | transformers `TrainingArguments.fsdp` (FSDPOption), accelerate `FullyShardedDataParallelPlugin` | states.py FSDP branch |
| `bf16=full` (axolotl), `dtype=bfloat16` with neither bf16 nor fp16 (HF Trainer: no autocast) | axolotl `bf16: full`; transformers `from_pretrained(dtype=...)` | states.py: pure bf16 |
| `dtype=float32` with `bf16=true` | torch.autocast over fp32 parameters | states.py: fp32 master in AMP |
| `load_in_4bit`, `load_in_8bit`, `bnb_4bit_quant_type`, `bnb_4bit_use_double_quant`, `bnb_4bit_quant_storage` | transformers `BitsAndBytesConfig` (defaults fp4, no double quant, uint8 storage) | states.py quant bytes / sharding |
| `quant_method=gptq\|awq` (or the config.json `quantization_config`) | auto-gptq / AutoAWQ int4 group-128 layers | states.py QUANT_BYTES |
| `modules_to_save=embed_tokens,lm_head`, LoRA `target_modules` naming `embed_tokens` / `lm_head` | PEFT `ModulesToSaveWrapper`, `lora.Embedding` | params.count + plan.py |
| `lora_vision_tower=false` (planner) | PEFT `all-linear` takes every nn.Linear but the output layer, vision tower included | plan.py |
| `train_projector=true\|false` (planner) | - | params.count |
| `images_past_max_length=true` (planner; the review sets it for ms-swift 2.x on a Qwen2-VL-family model) | ms-swift 2.x swift/llm/utils/template.py: `Template._encode` cuts at max_length while each image is one placeholder, `Qwen2VLTemplate._encode` then expands it into the image's tokens | setup.py: the LLM sequence is max_length + images x (image tokens - 1) |
| `activation_offloading=true` (TRL SFTConfig), `gradient_checkpointing=offload` (axolotl) | trl/models/activation_offloading.py `OffloadActivations` | training.py |
| `packing`, `padding_free` (TRL SFTConfig), `typical_length` (planner) | trl/trainer/sft_trainer.py BFD packing, `DataCollatorForLanguageModeling(padding_free=True)` | activations.py / plan.py |
| `loss_kernel=torch\|liger\|cce\|chunked` (planner), `cut_cross_entropy=true` (axolotl) | liger FLCE, apple ml-cross-entropy, torchtune `CEWithChunkedOutputLoss` | activations.py `logits_bytes` |
| `mixer_kernels=fused\|torch` (planner; review `--mixer-kernels`) | transformers hub_kernels.py `use_kernel_func_from_hub_with_fallback`; mamba-ssm `MambaInnerFn` / `SelectiveScanFn` / `MambaSplitConv1dScanCombinedFn`, causal-conv1d `CausalConv1dFn`, fla `ChunkGatedDeltaRuleFunction` | mixer_kernels.py (traced step) |
| `torch_compile=true` (TrainingArguments), `compile=true` (torchtune) | torch/_functorch/partitioners.py `min_cut_rematerialization_partition` | activations.py (norms, MLP, loss) |
| `optimizer_in_bwd=true` (torchtune) | torchtune `create_optim_in_bwd_wrapper` / torch `register_post_accumulate_grad_hook` | states.py |
| `use_vllm`, `vllm_mode=colocate\|server`, `vllm_gpu_memory_utilization`, `vllm_enable_sleep_mode` | TRL 1.16 GRPOConfig (defaults colocate, 0.3, off) | plan.py |
| `head=lm\|seq_cls\|token_cls`, `num_labels`; PEFT `task_type=SEQ_CLS\|TOKEN_CLS` | transformers `GenericForSequenceClassification` / `GenericForTokenClassification` (modeling_layers.py): `score` = Linear(hidden, num_labels) in place of lm_head; TRL RewardTrainer (num_labels=1), PRMTrainer (AutoModelForTokenClassification) | training.py `with_head`, activations.py `logits_bytes` |
| `head=embedding\|generative_reranker`; ms-swift `task_type=embedding\|reranker\|generative_reranker\|seq_cls`; `negatives`, `positives` (planner; the review reads ms-swift's MAX_NEGATIVE_SAMPLES / MAX_POSITIVE_SAMPLES) | ms-swift swift/model/register.py `get_model` + patcher.py `patch_output_normalizer` (lm_head forward = identity, last-token pooling), `_patch_generative_reranker` (yes / no rows of lm_head only), reranker = AutoModelForSequenceClassification num_labels 1; swift/template/base.py: an embedding sample is anchor + positive + negatives sequences, a reranker sample positives x (1 + negatives) (defaults 1 and 7), all in one batch | heads.py, training.py `train_peak`, evaluation.py |
| `torch_version=1.13` (planner) | torch < 2.0 `nn.Module.zero_grad(set_to_none=False)`: the Trainer's `model.zero_grad()` keeps the gradients through the next forward; torch < 2.8: the Trainer's default optimizer is the multi-tensor `adamw_torch`, not `adamw_torch_fused` | states.py `gradients_in_forward`, `foreach_intermediate` |
| `accelerate_version=1.10.1` (planner; review: an `accelerate==` pin beside the script or `--accelerate-version`) | accelerate < 1.11.0 (before huggingface/accelerate#3762) runs FSDP2 accumulation micro-batches synced: sharded gradients, not unsharded | states.py `fsdp_accumulated_gradients`, knobs.py `FSDP2_NO_SYNC_SINCE` |
| `sync_each_batch=true` (accelerate `GradientAccumulationPlugin`; TrainingArguments `accelerator_config.gradient_accumulation_kwargs.sync_each_batch`) | without it transformers' Trainer runs every accumulation micro-batch but the last under `no_sync` (FSDP1 `no_sync()`, FSDP2 `set_requires_gradient_sync(False)`): unsharded gradients | states.py `fsdp_accumulated_gradients` |
| `fsdp_lora_units=layer` (planner; default `separate`) | FSDP1 `use_orig_params=True` with LoRA inside its layer's unit (Lightning Fabric `FSDPStrategy(auto_wrap_policy={Block})`, litgpt): the frozen weights get gradients; transformers' Trainer wraps PEFT layers apart | states.py `fsdp_unit_frozen` |
| `trainer=sft\|dpo\|orpo\|cpo\|reward\|kto` (planner) | TRL 1.16 preference trainers: DPOTrainer, RewardTrainer and experimental ORPO / CPO collate chosen + rejected into one batch of 2 x per_device_train_batch_size sequences (each up to max_length) and run one forward | plan.py `_plan` (2 x micro-batch activations) |
| `ref_model=copy\|none\|precomputed` (planner), `precompute_ref_log_probs` (DPOConfig / KTOConfig) | trl/trainer/dpo_trainer.py: with no `ref_model` a second frozen copy of the base in the policy's dtype (and quantization), prepared like the policy (`prepare_deepspeed`: ZeRO-3 shards it, other stages hold it whole; `prepare_fsdp` shards it); none for a PEFT policy (adapter disabled for the reference pass) or with precomputed reference log-probs; its forward runs under no_grad | plan.py `reference_copy` |
| `fused_lm_head=true\|false` (planner; default true for trainer=dpo and kto) | trl/trainer/utils.py `add_fused_lm_head` + trl/kernels/chunked_logprob.py: log-probs in [4096 tokens x 32768 vocab] tiles, no (batch, seq, vocab) logits; false: a TRL before the fused head (or LLaMA-Factory's own `concatenated_forward`), whose logits of the 2 x micro-batch are whole | grpo.py `fused_head_bytes` |
| `trainer=gkd`, `teacher_model` / `teacher_model_name_or_path` (a config.json or a model id, resolved like the policy's), `teacher_model_server`, `lmbda`, `beta` / `gkd_beta`, `max_new_tokens` / `max_completion_length`, `seq_kd`, `gkd_loss=trl\|swift`, `teacher_deepspeed`, `offload_teacher_model` | TRL 1.16 trl/experimental/gkd GKDTrainer / GKDConfig (defaults lmbda 0.5, beta 0.5, max_new_tokens 128); ms-swift rlhf_trainers/gkd_trainer.py, gkd_loss.py, rollout_mixin.py `_setup_teacher` | gkd.py: the teacher's weights, the loss's full-vocabulary tensors, on-policy generation |
| `trainer=ppo`, `critic_model` (a config.json or a model id; default the reward model's, else the policy's; `none`: no critic; `policy`: the policy's own config), `reward_model_path`, `critic_update=separate\|joint`, `critic_micro_batch`, `critic_gradient_checkpointing`, `critic_offload_outside_update=weights,optimizer`, `rollout_vllm=colocate\|server` with `rollout_vllm_gpu_memory_utilization` / `rollout_vllm_sleep`, `rollout_micro_batch` with `max_new_tokens` (planner; the review reads OpenRLHF's train_ppo / train_ppo_ray, ms-swift `swift rlhf --rlhf_type ppo` and verl's gae critic) | OpenRLHF cli/train_ppo.py (3b116caf) / train_ppo_ray.py (v0.8.5): the critic (`get_llm_for_sequence_regression`, a value head over every position) trained with its own optimizer under the run's ZeRO stage, the reward model and the reference (`initial_model`) as eval engines (ZeRO-3 when the run is, else whole); `ppo_train` steps the actor then the critic; Ray: each model its own GPUs unless `--colocate_actor_ref` / `--colocate_all_models` (vLLM engines too); verl fsdp_workers.py CriticWorker (`AutoModelForTokenClassification`, num_labels 1; param / optimizer offload around its update); TRL PPOTrainer `PolicyAndValueWrapper`: one backward through policy and value model | ppo.py: the critic's states (states.gpu_states over its counts), its update phase, the reward model (states.frozen_copy) |
| `bitsandbytes_version=0.41.1` (planner) | bitsandbytes < 0.43.2 `MatMul4Bit` keeps each 4-bit linear's input for backward | activations.py `keep_input` |
| `autocast_adapter_dtype=true` (PEFT `get_peft_model`) | with pure 16-bit weights: fp32 adapters, and each adapted linear keeps its own fp32 cast of its input (peft tuners/lora/layer.py `_cast_input_dtype`); under AMP the planner takes PEFT's fp32 adapters and their 16-bit casts anyway | states.py, training.py `lora_input_copy_bytes` |
| `keeps_previous_output=true` (planner; the LitGPT reader sets it) | litgpt finetune/*.py fit(): `logits = model(...)` holds the last step's logits (and bitsandbytes < 0.43.2's ctx-kept inputs) until the next forward returns | training.py `previous_output_point` |
| `quantize_lm_head=true` (planner; the LitGPT reader sets it for `quantize`) | Lightning `BitsandbytesPrecision` swaps every `nn.Linear`, lm_head included; each lm_head call dequantizes it whole | params.py `count`, training.py `previous_output_point` |
| `grpo_whole_logits=true` (planner; the verl reader sets it) | verl workers/actor/dp_actor.py `_forward_micro_batch`: `logits_rmpad = output.logits` over every token of the micro-batch, log-probs (and the entropy) from them; TRL's GRPOTrainer uses its fused head instead | plan.py `analytic_terms` (training.py's logits term), `train_block` |
| `offload_outside_update=weights,optimizer` (planner; the verl reader sets it from `fsdp_config.param_offload` / `optimizer_offload`) | verl workers/fsdp_workers.py: `update_actor` loads the offloaded weights / optimizer states to the GPU for the update and offloads them after it; `rollout_mode` offloads the weights again before the rollout engine resumes | plan.py `_vllm_phases`: the generation phase holds neither |
| `quantize_moe_experts=true` (planner; the review reads axolotl `quantize_moe_experts:`) | transformers v5 stores MoE experts as fused 3-D parameters, which bitsandbytes (nn.Linear only) leaves in 16 bits; axolotl monkeypatch/moe_quant.py quantizes every >= 3-D parameter named "expert" as it loads (4-bit: bitsandbytes parametrize `replace_parameter_4bit`; 8-bit: its int8 parametrization), dequantized whole on access | params.py `count` (`Arch.expert_tensors`) |
| `device_map_gpus=N` (planner; the review sets it for an ms-swift process that sees N GPUs, and for one process whose Python file loads the model with device_map "auto" / "balanced" / "sequential": vramfit/review/device_map.py) | transformers `from_pretrained(device_map="auto"\|"balanced")`: accelerate `get_balanced_memory` + `infer_auto_device_map` (whole `_no_split_modules` layers, the first GPU keeping room for the largest layer, tied weights together) and `dispatch_model`: one micro-batch through the GPUs in turn | device_map.py, training.py `on_gpu_layers` |
| `device_map_policy=sequential`, `device_map_max_memory_gib=G` (planner; the review reads `from_pretrained(device_map="sequential", max_memory=...)` in a Python file: vramfit/review/device_map.py) | transformers `_get_device_map`: "sequential" takes `get_max_memory` (the caps, else each GPU's memory: GPU 0 filled first), the others `get_balanced_memory`, which caps every GPU but the last at min(balanced share, max_memory) | device_map.py `_caps` |
| `unfrozen_parameters=REGEX;REGEX` (planner; the review reads axolotl `unfrozen_parameters:` and TRL / philschmid `spectrum_config_path`) | full fine-tuning with every parameter but those whose `named_parameters()` name a regex matches at its start (`re.match`) frozen: philschmid run_sft.py `setup_model_for_spectrum`, axolotl utils/freeze.py `freeze_layers_except` (train.py applies it after the model loads) | params.py `unfrozen` / `count`: gradients, master weights, optimizer and ZeRO / FSDP states for the listed weights only; activations as full fine-tuning |
| `sequence_parallel=N` (planner; the review reads ms-swift `--sequence_parallel_size`, axolotl `context_parallel_size` / `sequence_parallel_degree`: utils/ctx_managers/sequence_parallel.py chunks every batch key on dim 1, loss on the local chunk) | ms-swift swift/sequence_parallel/sequence_parallel.py: a (data, [ring,] sequence) device mesh of world / N data-parallel groups; `pad_and_split_inputs` splits input_ids / embeddings, position_ids and the rolled labels on the sequence dim, so each rank runs its layers, embeddings and loss on seq_len / N tokens of every sample of its per_device_train_batch_size (SequenceParallelSampler draws by data rank); Ulysses all-to-all gives attention all seq_len tokens for heads / N (N = gcd(heads, size), the rest ring attention over local keys); DeepSpeed is initialised without an mpu, so ZeRO shards over every rank | training.py `train_peak` (per-rank tokens; eager scores at all keys), states unchanged |
| `audio_output=true` (planner; the review sets it for an ms-swift launch of Qwen2.5-Omni unless ENABLE_AUDIO_OUTPUT is false) | transformers `Qwen2_5OmniForConditionalGeneration.enable_talker` (with `config.enable_audio_output`): the Talker and token2wav vocoder built beside the Thinker the planner builds, frozen, unused by training | states.py `resident_frozen_bytes` |
| `celoss_parallel_size=N` (planner; the review reads ms-swift's `CELOSS_PARALLEL_SIZE` environment variable) | ms-swift swift/trainers/utils.py `per_token_loss_func_sp` -> sequence_parallel/utils.py `ChunkedCrossEntropyLoss`: saves the whole 16-bit logits, runs CrossEntropyLoss over N-token chunks and writes each chunk's gradient back into the saved logits (only with sequence_parallel > 1) | activations.py `sp_chunked_logits_bytes` |
"""

from __future__ import annotations

from typing import Any

from vramfit.problems import Problems

# transformers 5.23 trainer_utils.FSDPOption values (`fsdp` is a space-separated string or a list).
FSDP_OPTIONS = ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard", "offload", "auto_wrap")
SHARDING = ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard")
# accelerate utils/dataclasses.py FullyShardedDataParallelPlugin: sharding_strategy as a name or
# the 1-based index of torch's ShardingStrategy enum (FULL_SHARD=1, SHARD_GRAD_OP=2, NO_SHARD=3,
# HYBRID_SHARD=4, _HYBRID_SHARD_ZERO2=5).
ACCELERATE_SHARDING = {"1": "full_shard", "2": "shard_grad_op", "3": "no_shard", "4": "hybrid_shard", "5": "hybrid_shard_zero2"}
LOSS_KERNELS = ("torch", "liger", "cce", "chunked")
MIXER_KERNELS = ("fused", "torch")  # planner/mixer_kernels.py
CRITIC_UPDATES = ("separate", "joint")  # planner/ppo.py
# The model class's output layer: the causal LM's lm_head, or the `score` head of
# AutoModelForSequenceClassification / AutoModelForTokenClassification (transformers modeling_layers.py).
# `embedding` and `generative_reranker`: the causal LM with its lm_head's forward replaced (heads.py).
HEADS = ("lm", "seq_cls", "token_cls", "embedding", "generative_reranker")
# PEFT TaskType values (peft/utils/peft_types.py) that name a head; other task types keep the model's own.
PEFT_TASK_HEADS = {"CAUSAL_LM": "lm", "SEQ_CLS": "seq_cls", "TOKEN_CLS": "token_cls"}
# transformers PretrainedConfig: num_labels defaults to 2 (id2label of two labels) when neither the call nor
# the config sets it.
DEFAULT_NUM_LABELS = 2
# transformers modeling_layers.py GenericForTokenClassification: the dropout before `score` when the config sets
# neither classifier_dropout nor hidden_dropout.
TOKEN_CLS_DROPOUT = 0.1
DTYPES = ("auto", "bfloat16", "float16", "float32")
QUANT_METHODS = ("bitsandbytes", "gptq", "awq")
VLLM_MODES = ("colocate", "server")
# TRL 1.16 trainers the planner plans beyond supervised training (the `trainer` knob). PAIR_TRAINERS collate chosen +
# rejected into one batch (dpo_trainer.py / reward_trainer.py DataCollatorForPreference, experimental orpo / cpo
# `concatenated_inputs`); REF_TRAINERS keep a frozen reference model (dpo_trainer.py; experimental kto).
TRAINERS = ("sft", "dpo", "orpo", "cpo", "reward", "kto", "gkd", "ppo")
PAIR_TRAINERS = ("dpo", "orpo", "cpo", "reward")
# PPO keeps the policy's frozen copy as its reference (TRL PPOTrainer: none for a PEFT policy; OpenRLHF's initial_model)
REF_TRAINERS = ("dpo", "kto", "ppo")
FUSED_HEAD_TRAINERS = ("dpo", "kto")  # trl/trainer/{dpo,kto}_trainer.py call add_fused_lm_head on policy and reference
REF_MODELS = ("copy", "none", "precomputed")
# TRL 1.16 grpo_config.py field defaults (tests/planner/test_knobs.py reads them from GRPOConfig).
VLLM_DEFAULTS = {"vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3, "vllm_enable_sleep_mode": False}
# transformers 5.23 BitsAndBytesConfig defaults (checked in the same test).
BNB_DEFAULTS = {"bnb_4bit_quant_type": "fp4", "bnb_4bit_use_double_quant": False, "bnb_4bit_quant_storage": "uint8"}


def fsdp_fields(fsdp: Any, config: dict[str, Any] | None, problems: Problems, file: str, key: str = "fsdp") -> dict[str, Any]:
    """Setup fields for `fsdp` / `fsdp_config` (TrainingArguments and accelerate spellings), {} when off."""
    config = dict(config or {})
    # TrainingArguments strips a leading "fsdp_" from fsdp_config keys; accelerate writes them with it.
    config = {k.removeprefix("fsdp_"): v for k, v in config.items()}
    if isinstance(fsdp, bool):
        options = ["full_shard"] if fsdp else []
    elif isinstance(fsdp, str):
        options = fsdp.replace(",", " ").split()
    elif isinstance(fsdp, (list, tuple)):
        options = [str(o) for o in fsdp]
    elif fsdp is None:
        options = []
    else:
        problems.add(file, key, f"{fsdp!r} is not an FSDP option string", f'write {key}="full_shard auto_wrap".')
        return {}
    options = [o.lower() for o in options]
    version = config.get("version")
    if not options and version is None and "sharding_strategy" not in config and "reshard_after_forward" not in config:
        return {}
    bad = [o for o in options if o not in FSDP_OPTIONS]
    if bad:
        problems.add(
            file,
            key,
            f"unknown FSDP option '{bad[0]}' (transformers FSDPOption: {', '.join(FSDP_OPTIONS)})",
            f'write {key}="full_shard auto_wrap" (add offload for CPU offload).',
        )
        return {}
    modes = [o for o in options if o in SHARDING]
    strategy = config.get("sharding_strategy")
    if strategy is not None:
        strategy = ACCELERATE_SHARDING.get(str(strategy), str(strategy).lower())
        if strategy not in SHARDING:
            problems.add(
                file,
                f"{key}_config.sharding_strategy",
                f"unknown sharding strategy {config.get('sharding_strategy')!r}",
                f"use one of {', '.join(s.upper() for s in SHARDING)}.",
            )
            return {}
        modes.append(strategy)
    if len(set(modes)) > 1:
        problems.add(file, key, f"more than one sharding strategy ({', '.join(modes)})", "keep one of them.")
        return {}
    try:
        version = int(version or 1)
    except (TypeError, ValueError):
        version = 0
    if version not in (1, 2):
        problems.add(file, f"{key}_config.version", f"FSDP version {config.get('version')!r} is not 1 or 2", f"write {key}_config.version=2.")
        return {}
    sharding = modes[0] if modes else "full_shard"
    # FSDP2 (torch fully_shard) has no sharding strategy; `reshard_after_forward=False` is its
    # SHARD_GRAD_OP (accelerate maps FULL_SHARD -> True, SHARD_GRAD_OP -> False).
    reshard = config.get("reshard_after_forward")
    if reshard is not None:
        if str(reshard).lower() in ("false", "0", "shard_grad_op"):
            sharding = "shard_grad_op"
        elif str(reshard).lower() in ("full_shard",) or reshard is True:
            sharding = "full_shard"
    offload = "offload" in options or _truthy(config.get("offload_params")) or _truthy(config.get("cpu_offload"))
    return {"engine": "fsdp", "fsdp_sharding": sharding, "fsdp_version": version, "fsdp_offload": offload}


# huggingface/accelerate#3762 (commit ec92b1af7a5fbaf362da04401fc2576570368a1c, merged 2025-09-06, "model.set_requires_
# gradient_sync(False) should be called to turn off gradient synchronization in FSDP2"; `git tag --contains` names v1.11.0
# first, v1.10.1 does not contain it): since it, Accelerator.no_sync calls FSDP2's set_requires_gradient_sync(False).
# Before it no_sync was `getattr(model, "no_sync", contextlib.nullcontext)`, and an FSDP2 module has no `no_sync`:
# every accumulation micro-batch reduce-scattered its gradients (sharded, as with sync_each_batch).
FSDP2_NO_SYNC_SINCE = (1, 11, 0)


def accelerate_fields(values: dict[str, Any], problems: Problems, file: str) -> dict[str, Any]:
    """`accelerate_version`: the run's accelerate (unset: the installed one), checked to be a version."""
    release = _release(values, "accelerate_version", "1.10.1", problems, file)
    return {"accelerate_version": None if release is None else str(values["accelerate_version"])}


def fsdp2_reduces_each_batch(setup) -> bool:
    """Whether the run's accelerate (`accelerate_version` < 1.11.0, FSDP2_NO_SYNC_SINCE) leaves FSDP2 syncing through
    gradient accumulation: every micro-batch reduce-scatters its gradients."""
    if setup.engine != "fsdp" or setup.fsdp_version != 2 or not setup.accelerate_version:
        return False
    from packaging.version import InvalidVersion, Version

    try:
        return Version(setup.accelerate_version).release[:3] < FSDP2_NO_SYNC_SINCE
    except InvalidVersion:
        return False


def fsdp2_accumulation_note(setup) -> str | None:
    """Which accelerate reading planned FSDP2's gradient accumulation (states.fsdp_accumulated_gradients)."""
    if setup.engine != "fsdp" or setup.fsdp_version != 2 or setup.gradient_accumulation_steps <= 1 or setup.fsdp_sync_each_batch:
        return None
    if setup.accelerate_version is None:
        import accelerate

        which = f"the installed accelerate {accelerate.__version__} (accelerate_version not given)"
    else:
        which = f"accelerate {setup.accelerate_version}"
    since = ".".join(map(str, FSDP2_NO_SYNC_SINCE))
    if fsdp2_reduces_each_batch(setup):
        return (
            f"FSDP2 gradient accumulation planned under {which}: before {since} (huggingface/accelerate#3762) no_sync left "
            "FSDP2 syncing, so every micro-batch reduce-scatters its gradients and they stay sharded"
        )
    return (
        f"FSDP2 gradient accumulation planned under {which}: from {since} (huggingface/accelerate#3762) no_sync calls "
        "set_requires_gradient_sync(False) and the unsharded gradients are kept; accelerate_version=1.10.1 plans a run before it"
    )


def fsdp_accumulation_fields(values: dict[str, Any], fsdp: dict[str, Any], config: dict[str, Any], problems: Problems, file: str) -> dict[str, Any]:
    """`fsdp_sync_each_batch` and `fsdp_lora_units` (states.py `fsdp_accumulated_gradients`, `fsdp_unit_frozen`).

    `sync_each_batch` is accelerate's GradientAccumulationPlugin field, given top-level or as
    TrainingArguments spells it (`accelerator_config.gradient_accumulation_kwargs.sync_each_batch`).
    `fsdp_lora_units=layer` needs FSDP1 with `use_orig_params=True`: FSDP1 refuses to flatten frozen and
    trainable parameters together otherwise ("Must flatten tensors with uniform `requires_grad` when
    `use_orig_params=False`", torch distributed/fsdp/_flat_param.py), and FSDP2 shards every parameter
    on its own, so an adapter never shares a flat parameter with a frozen weight."""
    accelerator = values.get("accelerator_config")
    kwargs = accelerator.get("gradient_accumulation_kwargs") if isinstance(accelerator, dict) else None
    sync = values.get("sync_each_batch", kwargs.get("sync_each_batch") if isinstance(kwargs, dict) else None)
    units = str(values.get("fsdp_lora_units") or "separate")
    if units not in ("separate", "layer"):
        problems.add(file, "fsdp_lora_units", f"{units!r} is not separate or layer", "write fsdp_lora_units=layer or drop it.")
        units = "separate"
    if units == "layer":
        if not fsdp:
            problems.add(
                file,
                "fsdp_lora_units",
                "fsdp_lora_units=layer describes FSDP units, and FSDP is off",
                'set fsdp="full_shard auto_wrap" or drop fsdp_lora_units.',
            )
        elif fsdp.get("fsdp_version") == 2:
            problems.add(
                file,
                "fsdp_lora_units",
                "FSDP2 shards each parameter on its own: a LoRA adapter never shares a unit with frozen weights (fsdp_config.version=2)",
                "drop fsdp_lora_units, or set fsdp_config.version=1.",
            )
        elif "use_orig_params" in config and not _truthy(config["use_orig_params"]):
            problems.add(
                file,
                "fsdp_lora_units",
                "FSDP1 with use_orig_params=false refuses frozen and trainable weights in one unit (fsdp_config.use_orig_params=false)",
                "drop fsdp_lora_units, or set fsdp_config.use_orig_params=true.",
            )
    return {"fsdp_lora_units": units, "fsdp_sync_each_batch": _truthy(sync)}


def precision_fields(values: dict[str, Any], grpo: bool, problems: Problems, file: str, prefix: str = "") -> dict[str, Any]:
    """`precision` and `master_fp32` from bf16 / fp16 (TrainingArguments; axolotl's `bf16: full`) and
    the load dtype (`dtype` / `torch_dtype`, transformers 5 renames the latter)."""
    dtype = values.get("dtype", values.get("torch_dtype"))
    if dtype is not None:
        dtype = str(dtype).replace("torch.", "")
        if dtype not in DTYPES:
            problems.add(file, f"{prefix}dtype", f"{dtype!r} is not a torch dtype the model can load in", f"use one of {', '.join(DTYPES)}.")
            dtype = None
    bf16, fp16 = values.get("bf16"), values.get("fp16")
    if isinstance(bf16, str) and bf16.lower() in ("full", "true-bf16"):
        return {"precision": "bf16-true", "master_fp32": False}  # axolotl: bf16 weights, no autocast
    if fp16:
        return {"precision": "fp16", "master_fp32": dtype == "float32"}
    if bf16 is None:
        bf16 = grpo  # GRPOConfig: bf16 defaults to True when fp16 is not set
    if bf16:
        return {"precision": "bf16", "master_fp32": dtype == "float32"}
    if dtype in ("bfloat16", "float16"):
        # Trainer without bf16/fp16 runs no autocast: the loaded 16-bit weights train as they are.
        return {"precision": "bf16-true", "master_fp32": False}
    return {"precision": "fp32", "master_fp32": False}


def quant_fields(values: dict[str, Any], method: str, config: dict[str, Any], problems: Problems, file: str) -> dict[str, Any]:
    """Quantization of the frozen base: bitsandbytes keys (BitsAndBytesConfig names), `quant_method`
    (gptq / awq), or the checkpoint's own config.json `quantization_config`."""
    qc = config.get("quantization_config") or {}
    method_q = values.get("quant_method") or (qc.get("quant_method") if qc else None)
    out: dict[str, Any] = {}
    if method_q is not None:
        method_q = str(method_q).lower()
        if method_q not in QUANT_METHODS and not values.get("quant_method"):
            # the checkpoint's own format (DeepSeek-V3's fp8 blocks, gpt-oss's mxfp4 experts): nothing to choose in a key
            problems.add(
                file,
                "quant_method",
                f"the checkpoint's quantization_config.quant_method {method_q!r} is not a quantization the planner models",
                f"plan its 16-bit layout (a copy of the config without quantization_config), or a 4-bit base with quant_method=bitsandbytes load_in_4bit=true "
                f"(one of {', '.join(QUANT_METHODS)}).",
            )
            return {}
        if method_q not in QUANT_METHODS:
            problems.add(file, "quant_method", f"{method_q!r} is not a quantization the planner models", f"use one of {', '.join(QUANT_METHODS)}.")
            return {}
    bits = 4 if values.get("load_in_4bit") else 8 if values.get("load_in_8bit") else None
    if method_q in ("gptq", "awq"):
        qbits = int(qc.get("bits", values.get("bits", 4)) or 4) if qc.get("quant_method") == method_q or not qc else 4
        if qbits != 4:
            problems.add(file, "quant_method", f"{method_q} with {qbits} bits is not modelled (4-bit only)", "use a 4-bit checkpoint.")
            return {}
        out["quantization"] = f"{method_q}-int4"
    elif bits is not None or method == "qlora" or method_q == "bitsandbytes":
        if method_q == "bitsandbytes" and bits is None and qc:
            bits = 4 if qc.get("load_in_4bit") else 8 if qc.get("load_in_8bit") else 4
        bits = bits or 4
        src = {**BNB_DEFAULTS, **{k: v for k, v in qc.items() if k in BNB_DEFAULTS}, **{k: values[k] for k in BNB_DEFAULTS if k in values}}
        if bits == 8:
            out["quantization"] = "int8"
        else:
            qtype = str(values.get("bnb_4bit_quant_type", "nf4" if method == "qlora" and "bnb_4bit_quant_type" not in qc else src["bnb_4bit_quant_type"]))
            if qtype not in ("nf4", "fp4"):
                problems.add(file, "bnb_4bit_quant_type", f"{qtype!r} is not nf4 or fp4", "write bnb_4bit_quant_type=nf4.")
                return {}
            storage = str(src["bnb_4bit_quant_storage"]).replace("torch.", "")
            if storage not in ("uint8", "bfloat16", "float16", "float32"):
                problems.add(
                    file,
                    "bnb_4bit_quant_storage",
                    f"{storage!r} is not a storage dtype bitsandbytes takes",
                    "write bnb_4bit_quant_storage=bfloat16 (or uint8).",
                )
                return {}
            out.update(quantization=qtype, quant_double=bool(src["bnb_4bit_use_double_quant"]), quant_storage_float=storage != "uint8")
    if out and method in ("full", "grpo") and not values.get("lora_r"):
        problems.add(
            file,
            "method",
            f"method {method} trains every weight, but the base is quantized ({out['quantization']})",
            "use method=qlora (LoRA on the quantized base) or drop the quantization keys.",
        )
        return {}
    return out


# bitsandbytes autograd/_functions.py MatMul4Bit.forward kept `ctx.tensors = (A, B)` - every 4-bit
# linear's 16-bit input, although backward only needs B - until commit 9e75374 ("fix QLoRA mem bug:
# delete useless buffered activation", bitsandbytes-foundation/bitsandbytes#1270, first in 0.43.2),
# which keeps `(None, B)`. The pinned bitsandbytes (pyproject.toml) is newer.
BNB_KEEPS_INPUT_BEFORE = (0, 43, 2)


def sequence_parallel_fields(values: dict[str, Any], problems: Problems, file: str) -> dict[str, Any]:
    """`sequence_parallel` (the planner's name; ms-swift spells it sequence_parallel_size): the ranks that split each
    sample's sequence (training.train_peak plans seq_len / N tokens per rank)."""
    value = values.get("sequence_parallel", values.get("sequence_parallel_size"))
    if value in (None, "", False):
        value = 1
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = 0
    if size < 1 or str(value).strip() not in (str(size), f"{size}.0"):
        problems.add(
            file,
            "sequence_parallel",
            f"must be a whole number of GPUs >= 1 (got {value!r})",
            "set sequence_parallel=1 (off) or the sequence-parallel group size, e.g. 4.",
        )
        return {}
    chunk = values.get("celoss_parallel_size")
    out: dict[str, Any] = {"sequence_parallel": size}
    if chunk not in (None, "", False, 0, "0"):
        if not str(chunk).strip().isdigit():
            problems.add(
                file,
                "celoss_parallel_size",
                f"must be a whole number of tokens (got {chunk!r})",
                "set celoss_parallel_size=2048 (ms-swift's examples) or 0 (off).",
            )
        else:
            out["celoss_parallel_size"] = int(str(chunk).strip())
    return out


def bnb_keeps_input(values: dict[str, Any], quantization: str | None, problems: Problems, file: str) -> bool:
    """Whether the run's bitsandbytes 4-bit linears keep their input for backward (`bitsandbytes_version`,
    a pip version; unset = the pinned release, which does not)."""
    release = _release(values, "bitsandbytes_version", "0.41.1", problems, file)
    return release is not None and quantization in ("nf4", "fp4") and release < BNB_KEEPS_INPUT_BEFORE


def _release(values: dict[str, Any], key: str, example: str, problems: Problems, file: str) -> tuple[int, int, int] | None:
    """A pip version named by `key` as (major, minor, patch), None when unset or unreadable (reported)."""
    raw = values.get(key)
    if raw is None:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        release = Version(str(raw)).release
    except InvalidVersion:
        problems.add(file, key, f"{raw!r} is not a version", f"write {key}={example} (as pip list shows it).")
        return None
    return tuple(release[:3]) + (0,) * (3 - len(release[:3]))  # type: ignore[return-value]


# torch 2.0 made `set_to_none=True` the default of nn.Module.zero_grad and Optimizer.zero_grad (before it,
# gradients were zeroed in place and stayed allocated): transformers' Trainer ends each step with
# `model.zero_grad()`, so on torch < 2.0 the next forward runs beside the whole gradients.
SET_TO_NONE_SINCE = (2, 0, 0)


# transformers training_args.py: `default_optim = "adamw_torch"`, "adamw_torch_fused" only when torch >= 2.8
# (huggingface/transformers#37358, 2025); before it every release defaulted to the multi-tensor adamw_torch.
FUSED_DEFAULT_SINCE = (2, 8, 0)


def default_optimizer(values: dict[str, Any], problems: Problems, file: str) -> str | None:
    """The Trainer's default optimizer under the run's torch (`torch_version`) when the files set none: adamw_torch
    before torch 2.8; None when unset (the installed library's default stands)."""
    if values.get("optim") is not None:
        return None
    release = _release(values, "torch_version", "2.5.1", problems, file)
    return "adamw_torch" if release is not None and release < FUSED_DEFAULT_SINCE else None


def torch_keeps_gradients(values: dict[str, Any], problems: Problems, file: str) -> bool:
    """Whether `zero_grad()` keeps the gradients allocated between steps (`torch_version` < 2.0)."""
    release = _release(values, "torch_version", "1.13.1", problems, file)
    return release is not None and release < SET_TO_NONE_SINCE


def loss_kernel(values: dict[str, Any], problems: Problems, file: str) -> str:
    kernel = values.get("loss_kernel")
    if values.get("cut_cross_entropy"):
        kernel = kernel or "cce"
    if kernel is None:
        return "liger" if values.get("use_liger_kernel") else "torch"
    if kernel not in LOSS_KERNELS:
        problems.add(file, "loss_kernel", f"{kernel!r} is not a loss the planner models", f"use one of {', '.join(LOSS_KERNELS)}.")
        return "torch"
    return str(kernel)


def mixer_kernels(values: dict[str, Any], problems: Problems, file: str) -> str:
    """Which code the sequence mixers run (planner/mixer_kernels.py): "fused", the kernels of mamba-ssm,
    causal-conv1d and flash-linear-attention, which transformers calls whenever they import (the default: transformers
    warns on every fallback call that it is "much slower" and tells the user to install them), or "torch", its
    reference PyTorch path. transformers 5.23 refuses packed sequences (`cu_seqlens` / `seq_idx`) on the torch path
    (hub_kernels.py `use_kernel_func_from_hub_with_fallback`), so a packed or padding-free run has the kernels."""
    value = values.get("mixer_kernels")
    if value is None:
        return "fused"
    if value not in MIXER_KERNELS:
        problems.add(file, "mixer_kernels", f"{value!r} is not a mixer path the planner models", f"use one of {', '.join(MIXER_KERNELS)}.")
        return "fused"
    if value == "torch" and (_truthy(values.get("packing")) or _truthy(values.get("padding_free"))):
        problems.add(
            file,
            "mixer_kernels",
            "packed or padding-free sequences cannot run on the torch path of the sequence mixers (transformers raises "
            "\"can't keep packed sequences apart without\" the kernels' package)",
            "drop mixer_kernels=torch (the run has the kernels), or packing / padding_free.",
        )
    return str(value)


def head_fields(values: dict[str, Any], config: dict[str, Any], problems: Problems, file: str) -> dict[str, Any]:
    """`head` (lm | seq_cls | token_cls | embedding | generative_reranker), or the task type naming it: PEFT's
    (CAUSAL_LM, SEQ_CLS, TOKEN_CLS) or ms-swift's (causal_lm, seq_cls, embedding, reranker, generative_reranker:
    heads.SWIFT_TASKS); `num_labels` (the call's, else the config's `num_labels` / `id2label`, else transformers' default
    of 2; ms-swift's reranker 1); and for an embedding or reranker task the sequences one sample brings into the forward
    (`negatives`, `positives`: heads.sequences_per_sample)."""
    from vramfit.planner import heads

    head = values.get("head")
    task = values.get("task_type")
    swift_task = None
    if task is not None:
        named = PEFT_TASK_HEADS.get(str(task).upper()) or heads.SWIFT_TASKS.get(str(task).lower())
        swift_task = str(task).lower() if str(task).lower() in heads.SWIFT_TASKS else None
        if named is None:
            choices = ", ".join((*PEFT_TASK_HEADS, *heads.SWIFT_TASKS))
            problems.add(file, "task_type", f"{task!r} is not a PEFT or ms-swift task type the planner models", f"use one of {choices}.")
            return {}
        head = named if head in (None, "lm") else head  # a recipe's `head` defaults to lm: the task names it
    head = "lm" if head is None else str(head).lower()
    if head not in HEADS:
        problems.add(file, "head", f"{head!r} is not a model head the planner models", f"use one of {', '.join(HEADS)}.")
        return {}
    labels = values.get("num_labels")
    if labels is None and swift_task == "reranker":
        labels = 1  # swift/model/model_meta.py: "Default to 1 for reranker tasks"
    if labels is None:
        labels = config.get("num_labels") or len(config.get("id2label") or {}) or DEFAULT_NUM_LABELS
    if isinstance(labels, bool) or not isinstance(labels, int) or labels < 1:
        problems.add(file, "num_labels", f"{labels!r} is not a positive whole number", "write num_labels=1 (a reward score) or the number of classes.")
        return {}
    # GenericForTokenClassification: nn.Dropout(classifier_dropout, else hidden_dropout, else 0.1) before the score
    dropout = 0.0
    if head == "token_cls":
        dropout = next((float(config[k]) for k in ("classifier_dropout", "hidden_dropout") if config.get(k) is not None), TOKEN_CLS_DROPOUT)
    out: dict[str, Any] = {"head": head, "num_labels": int(labels), "head_dropout": dropout}
    counts = {}
    for key, least in (("negatives", 0), ("positives", 1)):
        value = values.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            problems.add(file, key, f"{value!r} is not a whole number >= {least}", f"write {key}=N, the {key} one sample brings into the forward.")
            return {}
        counts[key] = value
    n, what = heads.sequences_per_sample(head, swift_task, counts["negatives"], counts["positives"])
    if n > 1 and not _truthy(values.get("packing")):  # packed: the group's sequences fill the packed rows of max_length
        out["sequences_per_sample"], out["sequences_what"] = n, what
    return out


def trainer_fields(values: dict[str, Any], lora: bool, problems: Problems, file: str) -> dict[str, Any]:
    """`trainer`, `ref_model` and `fused_lm_head`: what a TRL preference trainer holds beyond supervised training.

    The reference model defaults as TRL 1.16's DPOTrainer decides it (dpo_trainer.py, "Reference model"): none for a
    PEFT policy (the reference pass disables the adapter) or with `precompute_ref_log_probs` (under FSDP the copy is
    loaded for the precompute and freed before training), else a frozen copy of the base."""
    trainer = str(values.get("trainer") or "sft").lower()
    if trainer not in TRAINERS:
        problems.add(file, "trainer", f"{trainer!r} is not a trainer the planner models", f"use one of {', '.join(TRAINERS)}.")
        return {}
    ref = values.get("ref_model")
    if ref is None:
        if trainer not in REF_TRAINERS or lora:
            ref = "none"
        else:
            ref = "precomputed" if _truthy(values.get("precompute_ref_log_probs")) else "copy"
    ref = str(ref).lower()
    if ref not in REF_MODELS:
        problems.add(file, "ref_model", f"{ref!r} is not copy, none or precomputed", "write ref_model=copy (a frozen copy of the base) or ref_model=none.")
        return {}
    if ref != "none" and trainer not in REF_TRAINERS:
        problems.add(
            file,
            "ref_model",
            f"trainer={trainer} keeps no reference model (TRL's {trainer.upper()} trainer has none; ref_model={ref})",
            "drop ref_model, or set trainer=dpo or trainer=kto.",
        )
        return {}
    fused = values.get("fused_lm_head")
    fused = trainer in FUSED_HEAD_TRAINERS if fused is None else _truthy(fused)
    if fused and trainer not in FUSED_HEAD_TRAINERS:
        problems.add(
            file,
            "fused_lm_head",
            f"TRL's fused LM head is the DPO and KTO trainers' (dpo_trainer.py / kto_trainer.py add_fused_lm_head); trainer={trainer}",
            "drop fused_lm_head, or set trainer=dpo.",
        )
        return {}
    return {"trainer": trainer, "ref_model": ref, "fused_lm_head": fused, "sequences_per_sample": 2 if trainer in PAIR_TRAINERS else 1}


# TRL 1.16 trl/experimental/gkd/gkd_config.py GKDConfig defaults (tests/planner/test_gkd.py reads them from GKDConfig).
GKD_DEFAULTS = {"lmbda": 0.5, "beta": 0.5, "max_new_tokens": 128, "seq_kd": False}
# ms-swift --teacher_deepspeed presets (swift/llm/ds_config/*.json): name -> (ZeRO stage, offload_param)
SWIFT_TEACHER_DEEPSPEED = {
    "zero0": (0, False),
    "zero1": (1, False),
    "zero2": (2, False),
    "zero2_offload": (2, False),
    "zero3": (3, False),
    "zero3_offload": (3, True),
}
SWIFT_VLLM_UTILIZATION = 0.9  # ms-swift swift/rlhf_trainers/args_mixin.py vllm_gpu_memory_utilization default
GKD_KEYS = ("teacher_model", "teacher_model_name_or_path", "teacher_model_server", "lmbda", "seq_kd", "gkd_loss", "teacher_deepspeed", "offload_teacher_model")


def gkd_fields(values: dict[str, Any], trainer: str, problems: Problems, file: str, model_config=None, beside=None) -> dict[str, Any]:
    """GKD's Setup fields (planner/gkd.py): the teacher (a config file, a model id resolved through vramfit.models, a
    server, or none: TRL's teacher is then the policy's model again, ms-swift distils from the policy itself), the
    on-policy fraction, the divergence, the generated length and the loss's implementation."""
    if trainer != "gkd":
        given = [k for k in GKD_KEYS if values.get(k) not in (None, False, "") and not (k == "gkd_loss" and values.get(k) == "trl")]
        if given:
            problems.add(file, given[0], f"{given[0]} is a GKD setting, but trainer={trainer}", "set trainer=gkd, or drop it.")
        return {}
    from pathlib import Path

    loss = str(values.get("gkd_loss") or "trl").lower()
    if loss not in ("trl", "swift"):
        problems.add(file, "gkd_loss", f"{loss!r} is not trl or swift", "write gkd_loss=trl (TRL's GKDTrainer) or gkd_loss=swift (ms-swift's).")
        return {}
    out: dict[str, Any] = {"gkd_loss": loss}
    for key, lo, hi in (("lmbda", 0.0, 1.0), ("beta", 0.0, 1.0)):
        raw = values.get("gkd_beta") if key == "beta" and values.get("gkd_beta") is not None else values.get(key)
        value = GKD_DEFAULTS[key] if raw is None else raw
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= float(value) <= hi:
            problems.add(file, key, f"{value!r} is not in [0, 1] (GKDConfig refuses it)", f"write {key}=0.5.")
            return {}
        out["gkd_beta" if key == "beta" else key] = float(value)
    new = values.get("max_new_tokens") or values.get("max_completion_length") or GKD_DEFAULTS["max_new_tokens"]
    if isinstance(new, bool) or not isinstance(new, int) or new < 1:
        problems.add(file, "max_new_tokens", f"{new!r} is not a positive whole number", "write max_new_tokens=128.")
        return {}
    out["max_new_tokens"] = int(new)
    out["seq_kd"] = _truthy(values.get("seq_kd"))
    if values.get("gkd_vllm") is not None:  # ms-swift's rollout engine (recipe planner keys; args_mixin.py defaults)
        out.update(
            use_vllm=True,
            vllm_mode=str(values["gkd_vllm"]),
            vllm_gpu_memory_utilization=float(values.get("gkd_vllm_gpu_memory_utilization") or SWIFT_VLLM_UTILIZATION),
            vllm_sleep=_truthy(values.get("gkd_vllm_sleep")),
        )
    out["offload_teacher_model"] = _truthy(values.get("offload_teacher_model"))
    preset = values.get("teacher_deepspeed")
    if preset not in (None, ""):
        name = Path(str(preset)).name.removesuffix(".json")
        if name not in SWIFT_TEACHER_DEEPSPEED:
            problems.add(
                file,
                "teacher_deepspeed",
                f"{preset!r} is not an ms-swift DeepSpeed preset the planner knows",
                f"use one of {', '.join(SWIFT_TEACHER_DEEPSPEED)}.",
            )
            return {}
        out["teacher_stage"], out["teacher_offload"] = SWIFT_TEACHER_DEEPSPEED[name]
    server = values.get("teacher_model_server")
    if server not in (None, "", False) and str(server).lower() not in ("false", "none"):
        out["teacher_server"] = True
        return out
    teacher = values.get("teacher_model") or values.get("teacher_model_name_or_path")
    if teacher in (None, ""):
        if loss == "swift":
            out["teacher_self"] = True  # ms-swift: no teacher -> self-distillation through the policy (no extra weights)
        elif model_config is not None:
            out["teacher_config"] = Path(model_config)  # GKDConfig: "If None, the teacher model will be the same as the model being trained"
        return out
    text = str(teacher)
    candidate = Path(text).expanduser()
    if beside is not None and not candidate.is_absolute():
        candidate = Path(beside) / candidate
    if text.endswith(".json") and candidate.is_file():
        path = candidate
    else:
        from vramfit import models

        found = models.resolve(text, Path(beside) if beside is not None else None)
        if found.path is None:
            out["teacher_missing"] = f"no config.json found for the GKD teacher '{text}' (looked in {', '.join(found.looked)})"
            return out
        path = Path(found.path)
    from vramfit.checks.model_config import check as check_model_config

    before = len(problems.items)
    check_model_config(path, problems)  # the teacher's config passes the same input layer as the policy's
    if len(problems.items) > before:
        return {}
    if loss == "trl" and model_config is not None:
        from vramfit.planner import params

        student, teacher = params.summary(Path(model_config)).vocab, params.summary(path).vocab
        if student != teacher:  # gkd_trainer.py __init__ raises: GKD compares the full next-token distributions
            problems.add(
                file,
                "teacher_model",
                f"the teacher's vocabulary ({teacher:,}) is not the student's ({student:,}): TRL's GKDTrainer refuses the pair",
                "use a teacher with the student's vocab_size (or TRL's GOLD trainer for cross-tokenizer distillation).",
            )
            return {}
    out["teacher_config"] = path
    return out


PPO_KEYS = (
    "critic_model",
    "reward_model_path",
    "critic_update",
    "critic_micro_batch",
    "critic_gradient_checkpointing",
    "critic_offload_outside_update",
    "rollout_vllm",
    "rollout_vllm_gpu_memory_utilization",
    "rollout_micro_batch",
)
# OpenRLHF train_ppo_ray.py --vllm_gpu_memory_utilization default (v0.8.5)
OPENRLHF_VLLM_UTILIZATION = 0.95


def _model_config(text: str, beside, role: str) -> tuple[Any, str]:
    """(the config.json of a model named by a file or an id, resolved like the policy's through vramfit.models; or None
    and why)."""
    from pathlib import Path

    candidate = Path(text).expanduser()
    if beside is not None and not candidate.is_absolute():
        candidate = Path(beside) / candidate
    if text.endswith(".json") and candidate.is_file():
        return candidate, ""
    from vramfit import models

    found = models.resolve(text, Path(beside) if beside is not None else None)
    if found.path is None:
        return None, f"no config.json found for the {role} '{text}' (looked in {', '.join(found.looked)})"
    return Path(found.path), ""


def ppo_fields(values: dict[str, Any], trainer: str, method: str, problems: Problems, file: str, model_config=None, beside=None) -> dict[str, Any]:
    """PPO's Setup fields (planner/ppo.py): the critic (`critic_model`: a config file or a model id; default the reward
    model's, else the policy's config, as OpenRLHF's train_ppo defaults `critic_pretrain` to `reward_pretrain`;
    `critic_model=none` for none), the frozen reward model (`reward_model_path`; none where rewards come from a function
    or a server), how the critic trains (`critic_update`), its micro-batch, checkpointing and verl's offload between its
    updates. Taken with trainer=ppo, or with method=grpo for a run that adds a critic (verl's gae)."""
    given = [k for k in PPO_KEYS if values.get(k) not in (None, "")]
    if trainer != "ppo" and method != "grpo":
        if given:
            problems.add(file, given[0], f"{given[0]} is a PPO setting, but trainer={trainer}", "set trainer=ppo, or drop it.")
        return {}
    out: dict[str, Any] = {}
    update = str(values.get("critic_update") or "separate").lower()
    if update not in CRITIC_UPDATES:
        problems.add(
            file, "critic_update", f"{update!r} is not separate or joint", "write critic_update=separate (OpenRLHF, verl) or critic_update=joint (TRL)."
        )
        return {}
    out["critic_update"] = update
    micro = values.get("critic_micro_batch")
    if micro is not None:
        if isinstance(micro, bool) or not isinstance(micro, int) or micro < 1:
            problems.add(file, "critic_micro_batch", f"{micro!r} is not a positive whole number", "write critic_micro_batch=2.")
            return {}
        out["critic_micro_batch"] = micro
    for key in ("rollout_micro_batch", "max_new_tokens"):  # PPO's experience making (ppo.rollout_phases)
        n = values.get(key)
        if n is None or (key == "max_new_tokens" and trainer != "ppo"):
            continue
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            problems.add(file, key, f"{n!r} is not a positive whole number", f"write {key}=4.")
            return {}
        out[key] = n
    if values.get("critic_gradient_checkpointing") is not None:
        out["critic_gradient_checkpointing"] = _truthy(values.get("critic_gradient_checkpointing"))
    if values.get("rollout_vllm") not in (None, ""):  # PPO's rollout engine on these GPUs (OpenRLHF --colocate_all_models)
        out.update(
            use_vllm=True,
            vllm_mode=str(values["rollout_vllm"]),
            vllm_gpu_memory_utilization=float(values.get("rollout_vllm_gpu_memory_utilization") or OPENRLHF_VLLM_UTILIZATION),
            vllm_sleep=_truthy(values.get("rollout_vllm_sleep")),
        )
    away = values.get("critic_offload_outside_update")
    out["critic_offload_outside_update"] = offload_outside_update(away, problems, file) if away not in (None, "") else ()
    reward = values.get("reward_model_path")
    if reward not in (None, "") and str(reward).lower() != "none" and not _side_model(out, "reward", str(reward), "reward model", beside, problems):
        return {}
    critic = values.get("critic_model")
    if critic is None and trainer == "ppo":
        critic = reward if reward not in (None, "") and str(reward).lower() != "none" else (str(model_config) if model_config is not None else None)
    if critic in (None, "") or str(critic).lower() == "none":
        return out
    if str(critic).lower() == "policy":  # the policy's own model with a value head (verl: critic.model.path = the actor's)
        critic = str(model_config) if model_config is not None else None
        if critic is None:
            return out
    return out if _side_model(out, "critic", str(critic), "critic", beside, problems) else {}


def _side_model(out: dict, key: str, written: str, what: str, beside, problems: Problems) -> bool:
    """A PPO side model's config into out[f"{key}_config"], or why it is missing into out[f"{key}_missing"]; False when
    the config fails the policy's input checks (the problems say why)."""
    path, why = _model_config(written, beside, what)
    if path is None:
        out[f"{key}_missing"] = why
    elif _checked(path, problems):
        out[f"{key}_config"] = path
    else:
        return False
    return True


def _checked(path, problems: Problems) -> bool:
    """The config passes the same input layer as the policy's (vramfit.checks.model_config)."""
    from vramfit.checks.model_config import check as check_model_config

    before = len(problems.items)
    check_model_config(path, problems)
    return len(problems.items) == before


OUTSIDE_UPDATE = ("weights", "optimizer")


def offload_outside_update(value: Any, problems: Problems, file: str) -> tuple[str, ...]:
    """`offload_outside_update`: the model states held in host RAM outside the update ("weights", "optimizer")."""
    if value in (None, "", False):
        return ()
    parts = [p.strip() for p in (value.split(",") if isinstance(value, str) else list(value)) if str(p).strip()]
    bad = [p for p in parts if p not in OUTSIDE_UPDATE]
    if bad:
        problems.add(file, "offload_outside_update", f"{bad[0]!r} is not one of {', '.join(OUTSIDE_UPDATE)}", "write offload_outside_update=weights,optimizer.")
        return ()
    return tuple(dict.fromkeys(parts))


def vllm_fields(values: dict[str, Any], problems: Problems, file: str) -> dict[str, Any]:
    mode = str(values.get("vllm_mode", VLLM_DEFAULTS["vllm_mode"]))
    if mode not in VLLM_MODES:
        problems.add(file, "vllm_mode", f"{mode!r} is not colocate or server (TRL GRPOConfig.vllm_mode)", "write vllm_mode=colocate.")
        mode = "colocate"
    util = values.get("vllm_gpu_memory_utilization", VLLM_DEFAULTS["vllm_gpu_memory_utilization"])
    if not isinstance(util, (int, float)) or isinstance(util, bool) or not 0 < float(util) <= 1:
        problems.add(file, "vllm_gpu_memory_utilization", f"{util!r} is not a fraction in (0, 1]", "write vllm_gpu_memory_utilization=0.3.")
        util = VLLM_DEFAULTS["vllm_gpu_memory_utilization"]
    return {
        "use_vllm": bool(values.get("use_vllm", False)),
        "vllm_mode": mode,
        "vllm_gpu_memory_utilization": float(util),
        "vllm_sleep": bool(values.get("vllm_enable_sleep_mode", False)),
    }


def unfrozen_fields(values: dict[str, Any], lora: bool, problems: Problems, file: str) -> dict[str, tuple[str, ...]]:
    """`unfrozen_parameters`: the regexes of the only weights a full fine-tuning trains (a list, or one string
    joined with ';' as `plan --model-config` takes it). Each is Python's `re.match` over the parameter names, as
    philschmid's run_sft.py `setup_model_for_spectrum` applies a Spectrum YAML. With a LoRA adapter PEFT has frozen
    the base already (and axolotl freezes after PEFT, against the PeftModel's own names): refused."""
    value = values.get("unfrozen_parameters")
    if value in (None, "", [], ()):
        return {}
    items = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value).split(";")
    patterns = tuple(p.strip() for p in items if p.strip())
    if lora:
        problems.add(
            file,
            "unfrozen_parameters",
            "unfrozen_parameters lists the weights a full fine-tuning trains; with a LoRA adapter PEFT decides what trains",
            "drop unfrozen_parameters, or plan method=full.",
        )
        return {}
    import re

    for p in patterns:
        try:
            re.compile(p)
        except re.error as exc:
            problems.add(file, "unfrozen_parameters", f"'{p}' is not a regular expression ({exc})", "write it as Python's re module reads it.")
    return {"unfrozen_parameters": patterns}


def offloading(values: dict[str, Any]) -> bool:
    """TRL `activation_offloading`; axolotl `activation_offloading: true` or `gradient_checkpointing: offload`."""
    gc = values.get("gradient_checkpointing")
    return bool(values.get("activation_offloading")) or (isinstance(gc, str) and gc.lower() == "offload")


def compile_fields(values: dict[str, Any], kernel: str) -> dict[str, bool]:
    """torch.compile: transformers `torch_compile` compiles the whole model, its loss included (the
    loss runs inside `forward` when labels are passed); torchtune `compile` compiles each decoder layer
    (training/_compile.py `compile_model`) and, for CEWithChunkedOutputLoss, the per-chunk cross-entropy
    (`compile_loss` patches `compute_cross_entropy` in place; other losses are returned compiled but the
    recipes discard the return value, so they run eagerly)."""
    hf, tune = bool(values.get("torch_compile")), bool(values.get("compile"))
    # planner `compile_loss=true`: the chunked loss alone compiled (axolotl `chunked_cross_entropy`: monkeypatch/loss/
    # chunked.py `_build_chunked_ce_loss_fn` wraps `compute_cross_entropy` in torch.compile, whatever torch_compile says)
    alone = _truthy(values.get("compile_loss", False)) and kernel == "chunked"
    return {"compile_layers": hf or tune, "compile_loss": hf or (tune and kernel == "chunked") or alone}


def loss_chunks(values: dict[str, Any], problems: Problems, file: str) -> int:
    """Chunks of the chunked cross-entropy (planner `loss_chunks`; default 8, torchtune CEWithChunkedOutputLoss's and
    axolotl's `num_output_chunks`)."""
    return _count(values, "loss_chunks", 8, "a chunk count", "loss_chunks", "write loss_chunks: 8 (or another count of 1 or more).", problems, file)


def audio_output_fields(values: dict[str, Any], model_config, problems: Problems, file: str) -> dict[str, Any]:
    """`audio_output=true`: the checkpoint's speech-output modules (Qwen2.5-Omni's Talker and token2wav vocoder) are
    loaded beside the model planned, frozen and unused by training (params.AUDIO_OUTPUT_MODULES): ms-swift loads
    Qwen2_5OmniForConditionalGeneration, which builds them while `config.enable_audio_output` (the published default,
    ENABLE_AUDIO_OUTPUT overrides it: swift/model/models/qwen.py Qwen2_5OmniLoader.get_config). Their weights stay in the
    dtype from_pretrained loads them in: transformers casts the vocoder to fp32 only to generate audio
    (modeling_qwen2_5_omni.py `generate`: `if self.token2wav.dtype != torch.float: self.token2wav.float()`)."""
    if not _truthy(values.get("audio_output", False)) or model_config is None:
        return {}
    from vramfit import models
    from vramfit.planner import params

    published = models.published_for(model_config)
    config = params.read_config(published)
    counts = params.audio_output_params(config)
    if not counts:
        problems.add(
            file,
            "audio_output",
            f"{published.name} ({config.get('model_type')}) has no speech-output modules the installed transformers builds",
            "drop audio_output (it is for Qwen2.5-Omni's Talker and vocoder).",
        )
        return {}
    said = " + ".join(f"{name} {n / 1e9:.2f}B" for name, n in counts.items())
    return {"resident_frozen": sum(counts.values()), "resident_frozen_what": f"speech output loaded, not trained: {said}"}


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1", "yes")


def device_map_gpus(values: dict[str, Any], problems, file: str) -> int:
    """GPUs one training process spreads its model over with device_map (planner `device_map_gpus`; device_map.py)."""
    return _count(values, "device_map_gpus", 1, "a GPU count", "planner.device_map_gpus", "write planner.device_map_gpus: 2 (or more).", problems, file)


def _count(values: dict[str, Any], key: str, default: int, what: str, said: str, fix: str, problems: Problems, file: str) -> int:
    """A knob that counts something (1 or more): `default` where it is not given, or where it is not such a count (said)."""
    n = values.get(key)
    if n is None:
        return default
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        problems.add(file, said, f"{n!r} is not {what}", fix)
        return default
    return n


def device_map_fields(values: dict[str, Any], problems, file: str) -> dict[str, Any]:
    """How accelerate fills the device_map GPUs (planner `device_map_policy`: balanced | sequential) and the max_memory cap
    from_pretrained gives each (planner `device_map_max_memory_gib`); device_map.py."""
    out: dict[str, Any] = {}
    policy = values.get("device_map_policy")
    if policy is not None:
        if policy not in ("balanced", "sequential"):
            problems.add(file, "planner.device_map_policy", f"{policy!r} is not balanced or sequential", "write planner.device_map_policy: balanced.")
        else:
            out["device_map_policy"] = policy
    cap = values.get("device_map_max_memory_gib")
    if cap is not None:
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0:
            problems.add(file, "planner.device_map_max_memory_gib", f"{cap!r} is not a size in GiB", "write planner.device_map_max_memory_gib: 20.")
        else:
            out["device_map_max_memory_gib"] = float(cap)
    return out
