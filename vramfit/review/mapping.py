"""What the files say, as a vramfit recipe dict, with where each value was read.

Training arguments keep their Hugging Face / TRL names; a shell script's words are typed by
`transformers.HfArgumentParser` over `TrainingArguments` (or `trl.GRPOConfig` for a GRPO script),
as the upstream scripts' own parsers type them. Upstream script arguments that carry a recipe
setting (model_max_length, max_pixels, lora_enable, tune_vision, ...) and axolotl's key names are
translated by the tables below; arguments renamed or removed in the installed libraries are read
under their new name and reported. Everything else is reported as unknown, with a did-you-mean. A LitGPT
config is translated as LitGPT's scripts run it (_litgpt, litgpt_strategy; the facts in vramfit.review.litgpt).
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vramfit.paths import PACKAGE_ROOT
from vramfit.problems import ConfigError, Problems, did_you_mean
from vramfit.recipe import parse_value
from vramfit.review import one_process, program as program_mod, shell, trainers
from vramfit.review.findings import Finding
from vramfit.review.sources import LOADING_DTYPE, Setting, Source, launcher_options, locate

MODEL_CONFIGS = PACKAGE_ROOT / "model_configs"
STAND_IN = MODEL_CONFIGS / "llama-3.2-3b.json"  # for the checks that need no model, when the model's config is not found

# Upstream script arguments (LLaVA / ShareGPT4V / TinyChart / MiniCPM-V / VLM-R1 / TRL ModelConfig /
# LLaMA-Factory) that carry a recipe setting: name -> recipe key.
ALIASES = {
    "model_name_or_path": "model.id",
    "use_liger": "training.use_liger_kernel",  # TRL 0.x's name for it; Liger-Kernel's examples (AutoLigerKernelForCausalLM)
    "model_max_length": "data.max_length",
    "max_seq_length": "data.max_length",
    "cutoff_len": "data.max_length",
    "max_pixels": "data.max_pixels",
    "image_max_pixels": "data.max_pixels",
    "max_slice_nums": "data.max_slice_nums",
    # VLM-R1 grpo_jsonl.py: its InternVL module tiles each image up to max_anyres_num tiles and a thumbnail
    # (vlm_modules/internvl_module.py `_load_image(max_num=processing_class.max_anyres_num)`, dynamic_preprocess use_thumbnail)
    "max_anyres_num": "planner.max_tiles",
    "lora_r": "model.lora.r",
    "lora_rank": "model.lora.r",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
    "lora_target_modules": "model.lora.target_modules",
    "lora_target": "model.lora.target_modules",
    "lora_target_parameters": "model.lora.target_parameters",  # PEFT LoraConfig(target_parameters=...)
    "double_quant": "model.quantization.double_quant",
    "quant_type": "model.quantization.quant_type",
    "attn_implementation": "model.attn_implementation",
    "data_path": "data.train_file",
    "dataset_name": "data.train_file",
    "dataset": "data.train_file",
    "max_seq_len": "data.max_length",
    "lora_dim": "model.lora.r",  # DeepSpeed-Chat
    "model": "model.id",
    "model_id": "model.id",  # 2U1/Qwen2-VL-Finetune's ModelArguments (src/params.py), smollm's train.py
    "model_path": "model.id",  # DAMO-NLP-SG/VideoLLaMA2 videollama2/train.py ModelArguments.model_path: the LLM it builds on
    "target_modules": "model.lora.target_modules",  # ms-swift
    "modules_to_save": "model.lora.modules_to_save",  # ms-swift TunerArguments, PEFT LoraConfig: trained in full beside LoRA
    "attn_impl": "model.attn_implementation",  # ms-swift ModelArguments.attn_impl (swift/llm/model/utils.py AttnImpl)
    "eval_data_path": "data.eval_file",
    "image_folder": "data.image_folder",
    "image_root": "data.image_folder",
    # Megatron-style names (mPLUG-Owl / UReader / PaperOwl pipeline/train.py, Megatron-LM): --micro-batch-size, --seq-length
    "micro_batch_size": "training.per_device_train_batch_size",
    "seq_length": "data.max_length",
    # InternVL internvl_chat_finetune.py ModelArguments.grad_checkpoint (default True): the LLM's checkpointing
    "grad_checkpoint": "training.gradient_checkpointing",
}
# Switches that pick the method when on.
# TRL trainers the planner plans (planner knob `trainer`), and those whose extra terms it does not: the review of the
# latter says so and exits 3 (incomplete), since the plan of the policy alone understates the run
PREFERENCE_TRAINERS = ("dpo", "kto", "orpo", "cpo", "reward")
UNPLANNED_TRAINERS = {
    "online_dpo": "generation and its reward / judge model",
    "rloo": "on-policy generation",
}
METHOD_SWITCHES = {"lora_enable": "lora", "use_lora": "lora", "use_peft": "lora", "use_peft_lora": "lora", "q_lora": "qlora"}
# bitsandbytes loading switches of TRL's ModelConfig (load_in_4bit / load_in_8bit) and of PEFT's examples/sft/train.py
# ModelArguments (use_4bit_quantization / use_8bit_quantization): name -> bits when on.
QUANT_SWITCHES = {"load_in_4bit": 4, "load_in_8bit": 8, "use_4bit_quantization": 4, "use_8bit_quantization": 8}
# Their BitsAndBytesConfig fields: name -> (recipe model.quantization key, the values it takes). TRL's ModelConfig:
# bnb_4bit_quant_type, use_bnb_nested_quant, bnb_4bit_quant_storage; PEFT's example: bnb_4bit_compute_dtype,
# use_nested_quant, bnb_4bit_quant_type, bnb_4bit_quant_storage_dtype.
_DTYPES = frozenset({"bfloat16", "float16", "float32"})
QUANT_SETTINGS = {
    "bnb_4bit_quant_type": ("quant_type", frozenset({"nf4", "fp4"})),
    "use_bnb_nested_quant": ("double_quant", frozenset({True, False})),
    "bnb_4bit_use_double_quant": ("double_quant", frozenset({True, False})),  # BitsAndBytesConfig's own name
    "use_nested_quant": ("double_quant", frozenset({True, False})),
    "bnb_4bit_compute_dtype": ("compute_dtype", _DTYPES),
    "bnb_4bit_quant_storage": ("quant_storage", _DTYPES | {"uint8"}),
    "bnb_4bit_quant_storage_dtype": ("quant_storage", _DTYPES | {"uint8"}),
}
# Switches over what trains: name -> (model.train key, value when the switch is on).
TRAIN_SWITCHES = {
    "tune_vision": ("vision_tower", True),
    "tune_vision_tower": ("vision_tower", True),
    "tune_entire_model": ("vision_tower", True),
    "unfreeze_mm_vision_tower": ("vision_tower", True),
    "freeze_vision_modules": ("vision_tower", False),
    "freeze_vision_tower": ("vision_tower", False),
    "tune_llm": ("llm", True),
    "freeze_backbone": ("llm", False),  # LLaVA's backbone is the LLM; InternVL's (beside freeze_llm) is the ViT: see `upstream`
    # Qwen-VL's qwen-vl-finetune (train_qwen.py ModelArguments)
    "tune_mm_llm": ("llm", True),
    "tune_mm_vision": ("vision_tower", True),
    "tune_mm_mlp": ("projector", True),
    # InternVL's internvl_chat_finetune.py (ModelArguments)
    "freeze_llm": ("llm", False),
    "freeze_mlp": ("projector", False),
}
# Switches that say a part is frozen (true) where the recipe says it trains: a model.train.* value read from one is
# shown and edited as the switch's own value (`freeze_vit false` trains the ViT)
INVERTED_SWITCHES = frozenset({k for k, (_, on) in TRAIN_SWITCHES.items() if on is False} | {"freeze_vit", "freeze_aligner"})


def pixels_per_token(config: dict | None) -> int:
    """Image pixels per LLM token of a Qwen2-VL-family config: one token per (patch_size x spatial_merge_size)^2 px (28 x 28 for
    Qwen2-VL / Qwen2.5-VL, 32 x 32 for Qwen3-VL / Qwen3.5: patch 16); 784 where the config does not say."""
    vision = (config or {}).get("vision_config") or {}
    patch, merge = vision.get("patch_size"), vision.get("spatial_merge_size")
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    return int(patch) ** 2 * int(merge) ** 2 if isinstance(patch, int) and isinstance(merge, int) else 784


def as_written(origin_key: str | None, key: str, value: Any) -> Any:
    """A recipe value as the switch that set it spells it: a model.train.* boolean read from a freeze switch is inverted."""
    name = (origin_key or "").lstrip("-").replace("-", "_")
    if key.startswith("model.train.") and name in INVERTED_SWITCHES and isinstance(value, bool):
        return not value
    return value


# Upstream script arguments read but not modelled by the review (data handling, projector shape, ...).
NOT_MODELLED = {
    "version",
    "vision_tower",
    "mm_projector_type",
    "mm_vision_select_layer",
    "mm_use_im_start_end",
    "mm_use_im_patch_token",
    "image_aspect_ratio",
    "group_by_modality_length",
    "lazy_preprocess",
    "llm_type",
    "torch_dtype",
    "lora_task_type",
    "lora_bias",
    "lora_weight_path",
    "pretrain_mm_mlp_adapter",
    "freeze_mm_mlp_adapter",
    "mm_projector_lr",
    "reward_funcs",
    "min_pixels",
    "image_min_pixels",
    "template",
    "stage",
    "overwrite_cache",
    "preprocessing_num_workers",
    "max_samples",
    "plot_loss",
    "cache_dir",
    "mpt_attn_impl",
    # LLaMA-Factory's data and bookkeeping arguments (src/llamafactory/hparams/data_args.py, model_args.py,
    # finetuning_args.py) that do not change memory
    "dataset_dir",
    "eval_dataset",
    "media_dir",
    "val_size",
    "tokenized_path",
    "train_on_prompt",
    "mask_history",
    "streaming",
    "buffer_size",
    "mix_strategy",
    "interleave_probs",
    "default_system",
    "tool_format",
    "enable_thinking",
    "preprocessing_batch_size",
    "ignore_pad_token_for_loss",
    "eval_on_each_dataset",
    "adapter_name_or_path",
    "use_fast_tokenizer",
    "resize_vocab",
    "split_special_tokens",
    "model_revision",
    "print_param_status",
    "compute_accuracy",
    "disable_shuffling",
    "include_effective_tokens_per_second",
}
# OpenRLHF's own arguments (openrlhf/cli/train_sft.py, train_dpo.py, train_rm.py): the flat names of 0.8 and the dotted
# groups of 0.9+ (`--train.micro_batch_size`); read where the launched program is OpenRLHF's.
OPENRLHF = {
    "pretrain": "model.id",
    "model.model_name_or_path": "model.id",
    "max_len": "data.max_length",
    "data.max_len": "data.max_length",
    "micro_train_batch_size": "training.per_device_train_batch_size",
    "train.micro_batch_size": "training.per_device_train_batch_size",
    "model.gradient_checkpointing_enable": "training.gradient_checkpointing",
    "ds.attn_implementation": "model.attn_implementation",
    "ds.lora.rank": "model.lora.r",
    "ds.lora.alpha": "model.lora.alpha",
    "ds.lora.target_modules": "model.lora.target_modules",
    "ds.lora.dropout": "model.lora.dropout",
}
# OpenRLHF flags named like TrainingArguments fields that mean what the Trainer's do (bf16 / fp16 training, gradient
# checkpointing, the learning rate, the seed); its other such names are its own settings (save_steps, eval_steps,
# logging_steps: -1 means never, openrlhf/cli/train_sft.py).
OPENRLHF_AS_TRAINER = frozenset({"bf16", "fp16", "gradient_checkpointing", "learning_rate", "seed"})
# TrainingArguments fields that may name a JSON file the Trainer opens (read by vramfit from beside the script).
FILE_ARGUMENTS = ("fsdp_config", "accelerator_config")
# Programs whose sequence is the sum of two of their own arguments: (the program, the arguments, the fact). Each is read
# from the script, else from the program's own defaults beside it; planned as data.max_length where nothing else sets it.
SUMMED_LENGTHS: list[tuple[re.Pattern[str], tuple[str, str], str]] = [
    (
        re.compile(r"(^|/)qlora\.py$"),
        ("source_max_len", "target_max_len"),
        "artidoro/qlora's DataCollatorForCausalLM cuts each sample's source at source_max_len and its target at target_max_len and joins them (qlora.py)",
    ),
]
# Memory-bearing arguments a launched program defines itself: its default applies when the script does not pass them.
PROGRAM_TRAINING = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps", "gradient_checkpointing")
# TrainingArguments fields that took several values in transformers 4 (List[str]) and take one in 5.
TOOK_LISTS_IN_4 = frozenset({"report_to"})
# TRL fields that set the training sequence length.
TRL_LENGTHS = ("max_length", "max_seq_length")
# GRPOConfig fields the planner reads from the recipe's training section.
GRPO_KEEP = {
    "num_generations",
    "max_completion_length",
    "generation_batch_size",
    "steps_per_generation",
    "beta",
    "use_vllm",
    "vllm_mode",
    "vllm_gpu_memory_utilization",
    "vllm_enable_sleep_mode",
    "num_iterations",
    "max_prompt_length",
}
# ms-swift 2.x's SftArguments (swift/llm/utils/argument.py, 2.x): its names for fields ms-swift 3 calls --model and the
# Trainer's per-device batch sizes (handle_compatibility: per_device_train_batch_size -> batch_size); read for `swift sft|rlhf`
SWIFT2 = {
    "model_id_or_path": "model.id",
    "batch_size": "training.per_device_train_batch_size",
    "eval_batch_size": "training.per_device_eval_batch_size",
}
# names ms-swift 3.0 renamed (sft_type -> train_type, model_id_or_path -> model, batch_size -> per_device_train_batch_size):
# a launch that uses one runs ms-swift 2.x, whose defaults differ (max_length 2048)
SWIFT2_ONLY = {"sft_type", "model_id_or_path", "batch_size"}
# the image / video size variables ms-swift reads from the launch environment (docs/source_en/Instruction/
# Command-line-parameters.md; swift/llm/template/vision_utils.py logs each: "You can adjust this hyperparameter through the
# environment variable")
SWIFT_SIZE_VARIABLES = (
    "MAX_PIXELS",
    "MIN_PIXELS",
    "IMAGE_FACTOR",
    "MAX_RATIO",
    "VIDEO_MIN_PIXELS",
    "VIDEO_MAX_PIXELS",
    "VIDEO_TOTAL_PIXELS",
    "FRAME_FACTOR",
    "FPS_MIN_FRAMES",
    "FPS_MAX_FRAMES",
    "SIZE_FACTOR",
    "NFRAMES",
    "RESIZED_HEIGHT",
    "RESIZED_WIDTH",
    "IMAGE_MAX_TOKEN_NUM",
    "VIDEO_MAX_TOKEN_NUM",
)
# A model id's suffix that names a checkpoint quantized in a format its config.json defines (Qwen2.5-7B-Instruct-AWQ,
# -GPTQ-Int4, Qwen-7B-Chat-Int4, -Int8, -FP8), which the table's 16-bit config of its base lacks (see _quantized_checkpoint)
# keys only LLaMA-Factory's YAML has (its hparams: stage, finetuning_type, cutoff_len, template)
LLAMAFACTORY_KEYS = frozenset({"stage", "finetuning_type", "cutoff_len", "template"})
# ms-swift's tuner types the planner has no model of (swift/pipelines/train/tuner.py `prepare_adapter`): name -> (the nearest
# method planned, what the tuner trains). The adapter-style ones freeze the base and train small modules beside it.
SWIFT_TUNERS_NOT_MODELLED = {
    "adapter": ("lora", "trains bottleneck adapters beside frozen layers (swift.tuners.AdapterConfig)"),
    "vera": ("lora", "trains per-layer scaling vectors over shared frozen random matrices (peft VeraConfig)"),
    "boft": ("lora", "trains butterfly orthogonal factors of frozen weights (peft BOFTConfig)"),
    "fourierft": ("lora", "trains spectral coefficients of frozen weights (peft FourierFTConfig)"),
    "reft": ("lora", "trains interventions on frozen hidden states (pyreft)"),
    "bone": ("lora", "trains block-affine updates of frozen weights (peft BoneConfig)"),
    "llamapro": ("full", "adds new decoder blocks and trains those alone (swift.tuners.LLaMAProConfig)"),
}
# ms-swift TunerArguments' switches over a multimodal model's parts, with their defaults (swift/arguments/tuner_args.py)
SWIFT_FREEZE = {"freeze_llm": False, "freeze_vit": True, "freeze_aligner": True}
SWIFT_MAX_PIXELS = 16384 * 28 * 28  # ms-swift's MAX_PIXELS default for the Qwen2-VL family (Command-line-parameters.md)
# Upstream arguments with a rule of their own (see `_Builder.upstream`).
UPSTREAM_SPECIAL = {
    "dtype",
    "tune_mm_mlp_adapter",
    "bits",
    "finetuning_type",
    "tune_vit_from_layer",
    "tuner_type",
    "train_type",
    "sft_type",  # ms-swift 2.x's name of train_type
    "quant_bits",
    "quantization_bit",
    "use_llm_lora",  # InternVL: LoRA rank on the LLM (0: none)
    "use_backbone_lora",  # InternVL: LoRA rank on the ViT (0: none)
    "sleep_level",  # ms-swift GRPO: 1 / 2 put the colocated vLLM engine to sleep outside generation
    *QUANT_SWITCHES,
    *QUANT_SETTINGS,
    "mm_tunable_parts",  # LLaVA-NeXT: the parts that train, overriding its other switches
    "enable_liger_kernel",  # LLaMA-Factory: Liger's kernels, with its fused loss at stages pt / sft only
}
# Values of a TrainingArguments field that transformers 4 took and the installed transformers refuses: field -> {old value:
# (the value that does the same, why)}. `adamw_hf` was transformers' own AdamW, deleted for torch.optim.AdamW
# (huggingface/transformers#36177); the installed OptimizerNames has no ADAMW_HF. Both keep two fp32 moments per parameter.
REMOVED_VALUES = {
    "optim": {"adamw_hf": ("adamw_torch", "transformers' own AdamW was removed for torch.optim.AdamW, huggingface/transformers#36177")},
}
# The environment variables of the launch that change memory.
MEMORY_ENV = ("PYTORCH_CUDA_ALLOC_CONF",)
# Arguments the installed transformers / TRL renamed or removed: old name -> (new name or None, why).
RENAMED = {
    "evaluation_strategy": ("eval_strategy", "renamed eval_strategy; the old name is gone from the installed transformers"),
    "warmup_ratio": ("warmup_steps", "gone from the installed transformers, where warmup_steps below 1 is the fraction"),
    "no_cuda": ("use_cpu", "renamed use_cpu"),
    "per_gpu_train_batch_size": ("per_device_train_batch_size", "renamed per_device_train_batch_size"),
    "per_gpu_eval_batch_size": ("per_device_eval_batch_size", "renamed per_device_eval_batch_size"),
    "group_by_length": ("train_sampling_strategy", "replaced by train_sampling_strategy in the installed transformers"),
    "overwrite_output_dir": (None, "gone from the installed transformers (the Trainer writes into output_dir as it is)"),
    "logging_dir": (None, "gone from the installed transformers (logs go under output_dir)"),
    "max_prompt_length": (None, "not a {cls} argument in the installed TRL (the trainer no longer truncates prompts)"),
    # TrainingArguments fields of transformers 4 that the installed transformers 5 no longer has (none changes memory here;
    # the FSDP wrap settings live in fsdp_config, the batch dispatch ones in accelerator_config)
    **{
        name: (None, f"gone from transformers 5{why}")
        for name, why in (
            ("fsdp_transformer_layer_cls_to_wrap", " (fsdp_config's transformer_layer_cls_to_wrap names the layer class)"),
            ("fsdp_min_num_params", " (fsdp_config's min_num_params)"),
            ("dispatch_batches", " (accelerator_config's dispatch_batches)"),
            ("split_batches", " (accelerator_config's split_batches)"),
            ("include_inputs_for_metrics", " (include_for_metrics lists what to pass)"),
            ("save_safetensors", ""),
            ("include_tokens_per_second", ""),
            ("use_mps_device", ""),
            ("push_to_hub_token", " (hub_token)"),
            ("torchdynamo", " (torch_compile_backend)"),
            ("half_precision_backend", ""),
            ("fp16_backend", ""),
            ("jit_mode_eval", ""),
            ("use_ipex", ""),
            ("past_index", ""),
            ("ray_scope", ""),
            ("tpu_num_cores", ""),
            ("mp_parameters", ""),
            ("sharded_ddp", " (FSDP took its place)"),
            ("xpu_backend", ""),
        )
    },
}
# axolotl's names for recipe settings; axolotl keys that are TrainingArguments names pass through.
AXOLOTL = {
    "base_model": "model.id",
    "micro_batch_size": "training.per_device_train_batch_size",
    "eval_batch_size": "training.per_device_eval_batch_size",
    "num_epochs": "training.num_train_epochs",
    "lr_scheduler": "training.lr_scheduler_type",
    "optimizer": "training.optim",
    "sequence_len": "data.max_length",
    "lora_r": "model.lora.r",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
    "lora_target_modules": "model.lora.target_modules",
    "lora_target_parameters": "model.lora.target_parameters",  # PEFT LoraConfig.target_parameters (lora.ParamWrapper)
    "trust_remote_code": "model.trust_remote_code",
    "attn_implementation": "model.attn_implementation",  # axolotl's current spelling (flash_attention: true before it)
    "warmup_ratio": "training.warmup_steps",  # axolotl converts the ratio itself; transformers 5 takes a fraction there
}
# axolotl's deprecated attention switches -> the attn_implementation its config normalisation sets (utils/schemas/
# enums.py LEGACY_ATTN_FLAG_TO_IMPL, at 067b021c)
LEGACY_ATTENTION_FLAGS = {
    "xformers_attention": "xformers",
    "sage_attention": "sage",
    "flex_attention": "flex_attention",
    "flash_attention": "flash_attention_2",
    "sdp_attention": "sdpa",
    "eager_attention": "eager",
}
AXOLOTL_SPECIAL = {
    "adapter",
    "lora_target_linear",
    "load_in_4bit",
    "load_in_8bit",
    *LEGACY_ATTENTION_FLAGS,
    "plugins",
    "cut_cross_entropy",
    "chunked_cross_entropy",
    "chunked_cross_entropy_num_chunks",
    "quantize_moe_experts",
    "deepspeed",
    "bf16",
    "fp16",
    "tf32",
}
AXOLOTL_NOT_MODELLED = {
    "base_model_config",
    "model_type",
    "tokenizer_type",
    "tokenizer_config",
    "datasets",
    "test_datasets",
    "dataset_prepared_path",
    "val_set_size",
    "special_tokens",
    "tokens",
    "strict",
    "chat_template",
    "sample_packing",
    "eval_sample_packing",
    "pad_to_sequence_len",
    "train_on_inputs",
    "wandb_project",
    "wandb_entity",
    "wandb_watch",
    "wandb_name",
    "wandb_run_id",
    "wandb_log_model",
    "early_stopping_patience",
    "resume_from_checkpoint",
    "auto_resume_from_checkpoints",
    "local_rank",
    "hub_model_id",
    "evals_per_epoch",
    "saves_per_epoch",
    "eval_table_size",
    "eval_max_new_tokens",
    "debug",
    "fsdp",
    "fsdp_config",
    "dataset_processes",
    "unfrozen_parameters",
    "lora_modules_to_save",
    "lora_fan_in_fan_out",
    "peft_use_dora",
    "use_tensorboard",
    "gptq",
    "torch_dtype",
    "flash_attn_cross_entropy",
    "flash_attn_rms_norm",
    "flash_attn_fuse_qkv",
    "flash_attn_fuse_mlp",
    "s2_attention",
    "shuffle_merged_datasets",
    "save_safetensors",
    "group_by_length",
    "liger_rope",
    "liger_rms_norm",
    "liger_glu_activation",
    "liger_layer_norm",
    "liger_fused_linear_cross_entropy",
    "liger_cross_entropy",
    "lora_model_dir",
    "lora_on_cpu",
    "is_llama_derived_model",
    "is_mistral_derived_model",
    "is_qwen_derived_model",
    "rl",
    "default_system_message",
    "dataset_exact_deduplication",
}
LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"
# axolotl's Cut Cross-Entropy plugin: its args (integrations/cut_cross_entropy/args.py CutCrossEntropyArgs) default
# `cut_cross_entropy: True`, and pre_model_load patches the model's loss with cce's linear_cross_entropy when it is set
CCE_PLUGIN = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
SEQUENCE_DEFAULT = 2048  # tokens, when no file sets a sequence length
GRPO_PROMPT_DEFAULT = 512  # TRL's max_prompt_length default before it was removed
HOST_RAM_UNSTATED = 65536  # GiB, the schema's ceiling: with no --host-ram-gib the host verdict is not a comparison
# Switches TRL / axolotl / torchtune spell that the recipe's planner: section (vramfit/recipe.py Knobs) models.
PLANNER_SWITCHES = {
    "activation_offloading": "activation_offloading",
    "packing": "packing",
    "sample_packing": "packing",  # axolotl
    "padding_free": "padding_free",  # TRL SFTConfig, ms-swift --padding_free
    "data_flatten": "padding_free",  # Qwen-VL qwen-vl-finetune: the samples of a batch concatenated into one sequence
    "neat_packing": "packing",  # LLaMA-Factory (packing without cross-attention between the packed samples)
    "optimizer_in_bwd": "optimizer_in_bwd",  # torchtune
    "packing_samples": "padding_free",  # OpenRLHF: a micro-batch's samples concatenated into one sequence, no padding
    "ds.packing_samples": "padding_free",
}


def _experts_merged_on_load(model_type: str) -> bool:
    """transformers 5 loads this model type's per-expert linears (`experts.*.<proj>.weight`, the transformers 4 layout)
    merged into 3-D expert parameters (conversion_mapping.py: a WeightConverter with MergeModulelist onto an `experts`
    target, found directly or through the type it shares a pattern with, `_MODEL_TO_CONVERSION_PATTERN`)."""
    try:
        from transformers.conversion_mapping import _MODEL_TO_CONVERSION_PATTERN, get_checkpoint_conversion_mapping
        from transformers.core_model_loading import MergeModulelist
    except ImportError:  # a transformers without load-time conversions: the layout never changed
        return False
    converters = get_checkpoint_conversion_mapping(model_type) or get_checkpoint_conversion_mapping(_MODEL_TO_CONVERSION_PATTERN.get(model_type, "")) or []
    for converter in converters:
        targets = getattr(converter, "target_patterns", None) or []
        targets = [targets] if isinstance(targets, str) else targets
        if any(isinstance(op, MergeModulelist) for op in getattr(converter, "operations", None) or []) and any("expert" in str(t) for t in targets):
            return True
    return False


def _remote_code_only(model_id: str) -> bool:
    """A model only its repository's own code loads (transformers has no class for it): MiniCPM-V, and every model the
    table plans with a stand-in for its remote code (InternVL's internvl_chat, ...)."""
    from vramfit import models
    from vramfit.planner.params import EAGER_VISION_REMOTE_CODE

    entry = models.entry_for(model_id)
    return model_id.startswith(EAGER_VISION_REMOTE_CODE) or (entry is not None and entry.planner != entry.config)


# A program's own switches that load the model with flash-attn (FastChat train_lora.py `flash_attn`: its Llama patch,
# replace_llama_attn_with_flash_attn; peft examples/sft `use_flash_attn`; transformers 4.3x's `use_flash_attention_2`).
FLASH_SWITCHES = frozenset({"flash_attn", "use_flash_attn", "use_flash_attention_2"})
# LLaMA-Factory's `flash_attn` (ModelArguments; extras/constants.py AttentionFunction) -> the attn_implementation that
# model/model_utils/attention.py configure_attn_implementation requests; "auto" requests none (transformers' default).
LLAMAFACTORY_ATTENTION = {"disabled": "eager", "sdpa": "sdpa", "fa2": "flash_attention_2", "fa3": "flash_attention_3"}
# Programs that patch flash-attn in before training, with the model types the patch covers (None: every model):
# FastChat's train_mem.py ("monkey patching the LLaMA model with FlashAttn": replace_llama_attn_with_flash_attn(),
# lm-sys/FastChat fastchat/train/train_mem.py) and LLaVA's (replace_llama_attn_with_flash_attn() in the transformers 4.31
# releases, train(attn_implementation="flash_attention_2") since, haotian-liu/LLaVA llava/train/train_mem.py; LLaVA-NeXT
# keeps the path): both Llama's attention.
FLASH_PROGRAMS: dict[str, tuple[str, ...] | None] = {"fastchat/train/train_mem.py": ("llama",), "llava/train/train_mem.py": ("llama",)}
FLASH_PATCH = re.compile(r"^\s*replace_\w*attn\w*flash\w*\(|^\s*train\(\s*attn_implementation\s*=\s*['\"]flash_attention_2", re.MULTILINE)


def attention_class(value: str) -> str:
    """The attention the planner models for a transformers `attn_implementation` value: the three it
    knows as they are; FlashAttention 3, flex attention and Hub kernels of a flash kernel
    (`kernels-community/vllm-flash-attn3`, transformers' `kernels` integration) keep no seq x seq
    matrix, like flash_attention_2; `paged|X` (continuous batching) is X."""
    v = value.strip()
    if v.startswith("paged|"):
        v = v.removeprefix("paged|")
    if v in ("flash_attention_2", "sdpa", "eager"):
        return v
    if v == "flash_attn":  # ms-swift's name: AttnImpl.update_attn_impl sets attn_implementation flash_attention_2
        return "flash_attention_2"
    if v in ("flash_attention_3", "flex_attention") or ("/" in v and "flash" in v.lower()):
        return "flash_attention_2"
    if v in ("xformers", "sage"):
        # axolotl's canonical names (utils/schemas/enums.py CANONICAL_ATTN_IMPLS, at 067b021c): monkeypatch/attention/
        # xformers.py calls xformers.ops.fmha.memory_efficient_attention, sage_attn.py SageAttention's fused kernel;
        # neither keeps a seq x seq matrix
        return "flash_attention_2"
    if v == "fp8":
        # axolotl monkeypatch/attention/fp8_attn.py `patch_fp8_attention`: torchao's low-precision attention replaces
        # F.scaled_dot_product_attention under the model's "sdpa" attention
        return "sdpa"
    return value


@dataclass
class Origin:
    file: str
    key: str  # as written there
    line: int | None = None


@dataclass
class Mapped:
    recipe: dict[str, Any]
    origins: dict[str, Origin]  # recipe key path -> where it was read
    primary: Source  # the launch file (else the first settings file): findings about the run as a whole name it
    settings: Source  # where training settings live (an axolotl / TrainingArguments file, else the launch file)
    sources: list[Source] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    script_ranks: int | None = None  # ranks the files state
    deepspeed: Source | None = None  # the file holding the DeepSpeed settings (a JSON, or an accelerate config)
    deepspeed_label: str = ""  # how findings name the DeepSpeed settings' file
    stated: dict[str, str] = field(default_factory=dict)  # hardware key -> the flag that stated it
    not_modelled: list[str] = field(default_factory=list)
    terms_missing: list[str] = field(default_factory=list)  # what the run's trainer adds that the plan leaves out: exit 3
    model_missing: str = ""  # why the memory could not be planned (no config for the model); empty when it was
    model_how: str = ""  # where the model's config came from
    # (the local path the files name, the table model its folder's name was matched to): the plan rests on that name
    model_by_name: tuple[str, str] | None = None
    # planner settings the files ask for that the recipe schema cannot say (engine fsdp, FSDP offload, activation
    # offloading, ...): the reviewer applies those planner.Setup has and names the rest as not planned yet
    planner_settings: dict[str, Any] = field(default_factory=dict)
    planner_origins: dict[str, Origin] = field(default_factory=dict)
    accelerate_pin: Any = None  # the accelerate version the repository pins (vramfit.review.versions.Pin), else None
    trl_pin: Any = None  # the TRL version the repository pins (vramfit.review.versions.Pin), else None
    transformers_pin: Any = None  # the transformers version the repository pins (or --transformers-version), else None
    # where the files choose the attention themselves (attn_implementation, a flash-attn switch, a program that patches
    # flash-attn in): the pinned release's default attention (review/default_attention.py) does not apply
    attention_chosen: Origin | None = None
    attention_chosen_for: tuple[str, ...] | None = None  # the model types a flash-attn patch covers (None: every model)
    image_assumed: bool = False  # image tokens planned at the maximum the files allow: the data's size is not known
    # planned at the data's longest sample, batches being padded to their longest sample (review/lengths.py): the cap the
    # files set, planned beside by the reviewer, and whether no sample can exceed what was planned (a published bound)
    length_cap: int | None = None
    length_bound: bool = False
    # batches padded to their longest sample, the data's lengths not known: planned at the cap the files set (where)
    longest_unknown: Origin | None = None
    # an update scheme the planner does not model (GaLore, APOLLO, BAdam, LISA, LOMO, Adam-mini): (what, where); its
    # optimizer states and gradients are planned as AdamW's over every trainable weight, an upper bound
    optimizer_assumed: tuple[str, Origin] | None = None
    # model / sequence sharding besides data parallelism that the planner does not model: (what, where); the plan holds
    # every weight and every token of a sample on each GPU of its data-parallel group, an upper bound
    sharding_assumed: tuple[str, Origin] | None = None
    # a Python file's model load that spreads the model over GPUs with device_map (review/device_map.py Launch): what it
    # does depends on the launch and the GPUs, settled with the hardware (fill_hardware)
    python_device_map: Any = None
    # `python train.py` with no launcher: one process, whatever the node has (review/one_process.py OneProcess)
    one_process: Any = None
    # padding-free batches (no packing) of unknown length: the step is planned at its worst case, every sample of a
    # micro-batch at the cap; where the flag was read (the reviewer says the verdict is the worst case's)
    padding_free_worst_case: Origin | None = None
    # a TrainingArguments / TRL settings file reviewed alone, naming no DeepSpeed JSON nor FSDP: how the run is sharded is
    # its launcher's (`accelerate launch --config_file zero3.yaml train.py recipe.yaml`), which the review was not given
    launch_unknown: Origin | None = None
    # a DeepSpeed JSON named but not found, planned from its file name (sources.zero_from_name): (its name, where named,
    # whether the name says an offload); planned without offload, the plan is an upper bound (offload only lowers it)
    deepspeed_from_name: tuple[str, Origin, bool] | None = None
    switches: frozenset = frozenset()  # the launched program's bare flags (argparse store_true): an edit turning one on writes it bare
    litgpt: Source | None = None  # a LitGPT config: its strategy and accumulation follow the GPUs reviewed (litgpt_strategy)
    verl: Source | None = None  # a verl launch (vramfit.review.verl): its own batch rules, not TRL's
    llmfoundry: Source | None = None  # an llm-foundry YAML: its accumulation and sharding follow the GPUs (llmfoundry_strategy)

    def edit(self, key: str, value: Any) -> str:
        """The edit, in the file that set `key` under the name it uses (unless renamed since), else in the settings file."""
        o = self.origins.get(key)
        if self.settings.kind == "verl":  # verl's own key for the setting (a global micro-batch is written per GPU)
            return edit("verl", key, value)
        source = next((s for s in self.sources if o is not None and s.label == o.file and s.kind in ("shell", "axolotl", "training_args", "llmfoundry")), None)
        own = source is not None and o.key and not o.key.startswith("(") and o.key.lstrip("-").replace("-", "_") not in RENAMED
        own = own or (source is None and o is not None and o.key.startswith("--") and self.settings.kind == "shell")  # a program's default
        written = edit((source or self.settings).kind, key, as_written(o.key, key, value) if own else value, o.key if own else None)
        flag = written.split(" ", 1)[0]
        return flag if value is True and flag in self.switches else written

    def origin(self, key: str) -> Origin:
        """Where `key` was read; the settings file (with the key spelled for it) when no file set it."""
        if key in self.origins:
            return self.origins[key]
        return Origin(self.settings.label, spelled(self.settings.kind, key), None)


# the dropout keys of Hugging Face configs that LitGPT's GPT has no module for (litgpt/model.py)
LITGPT_NO_DROPOUT = ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "hidden_dropout", "hidden_dropout_prob")
LITGPT_NO_DROPOUT += ("attention_probs_dropout_prob", "embed_dropout", "dropout")
# recipe keys as a LitGPT config writes them (vramfit.review.litgpt); the rest have no LitGPT key
LITGPT_SPELLING = {
    "training.per_device_train_batch_size": "train.micro_batch_size",
    "data.max_length": "train.max_seq_length",
    "training.num_train_epochs": "train.epochs",
    "training.max_steps": "train.max_steps",
    "model.id": "checkpoint_dir",
    "global_batch_size": "train.global_batch_size",
    "model.lora.r": "lora_r",
    "model.lora.alpha": "lora_alpha",
    "model.lora.dropout": "lora_dropout",
    "hardware.gpus_per_node": "devices",
    "hardware.nodes": "num_nodes",
    "hardware.gpu": "--gpu",
    "hardware.host_ram_gib": "--host-ram-gib",
}

# recipe keys as an llm-foundry YAML writes them (vramfit.review.llmfoundry)
LLMFOUNDRY_SPELLING = {
    "training.per_device_train_batch_size": "device_train_microbatch_size",
    "data.max_length": "max_seq_len",
    "training.gradient_checkpointing": "fsdp_config.activation_checkpointing",
    "model.id": "model.pretrained_model_name_or_path",
    "global_batch_size": "global_train_batch_size",
    "training.per_device_eval_batch_size": "device_eval_batch_size",
    "hardware.gpu": "--gpu",
    "hardware.gpus_per_node": "--gpus",
    "hardware.nodes": "--nodes",
    "hardware.host_ram_gib": "--host-ram-gib",
}


# recipe keys as a verl launch writes them (Hydra overrides; vramfit.review.verl); the rest have no verl key
VERL_SPELLING = {
    "training.per_device_train_batch_size": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "training.max_completion_length": "data.max_response_length",
    "data.max_length": "data.max_prompt_length",
    "training.gradient_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "training.vllm_gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "training.num_generations": "actor_rollout_ref.rollout.n",
    "model.id": "actor_rollout_ref.model.path",
    "model.lora.r": "actor_rollout_ref.model.lora_rank",
    "model.lora.alpha": "actor_rollout_ref.model.lora_alpha",
    "model.lora.target_modules": "actor_rollout_ref.model.target_modules",
    "hardware.gpus_per_node": "trainer.n_gpus_per_node",
    "hardware.nodes": "trainer.nnodes",
    "hardware.gpu": "--gpu",
    "hardware.host_ram_gib": "--host-ram-gib",
}


def spelled(kind: str, key: str) -> str:
    """A recipe key as the user's kind of file writes it."""
    name = key.split(".", 1)[1] if key.startswith(("training.", "data.", "model.")) else key
    if kind == "verl":
        return VERL_SPELLING.get(key, f"({name.split('.')[-1]}: no verl key)")
    if kind == "litgpt":
        return LITGPT_SPELLING.get(key, f"({name.split('.')[-1]}: no LitGPT key)")
    if kind == "llmfoundry":
        return LLMFOUNDRY_SPELLING.get(key, f"({name.split('.')[-1]}: no llm-foundry key)")
    if kind == "axolotl":
        reverse = {v: k for k, v in AXOLOTL.items()}
        if key == "training.use_liger_kernel":
            return "liger_fused_linear_cross_entropy"
        return reverse.get(key, name.split(".")[-1])
    reverse = {
        "data.max_length": "model_max_length",
        "data.max_pixels": "max_pixels",
        "data.max_slice_nums": "max_slice_nums",
        "model.id": "model_name_or_path",
        "model.lora.r": "lora_r",
        "model.lora.alpha": "lora_alpha",
        "model.lora.dropout": "lora_dropout",
        "model.lora.target_modules": "lora_target_modules",
        "model.lora.target_parameters": "lora_target_parameters",
        "model.attn_implementation": "attn_implementation",
        "hardware.gpus_per_node": "gpus",
        "hardware.nodes": "nodes",
        "hardware.gpu": "gpu",
        "hardware.host_ram_gib": "host-ram-gib",
    }
    word = reverse.get(key, name.split(".")[-1])
    return f"--{word}" if kind == "shell" or key.startswith("hardware.") else word


def edit(kind: str, key: str, value: Any, word: str | None = None) -> str:
    """`key = value` as the user's kind of file writes it (`word`: the name the file already uses)."""
    if kind == "axolotl" and key == "training.use_liger_kernel":
        return f"plugins: [{LIGER_PLUGIN}] with liger_fused_linear_cross_entropy: true" if value else "liger_fused_linear_cross_entropy: false"
    word = word or spelled(kind, key)
    text = json.dumps(value) if isinstance(value, (bool, dict, list)) or value is None else str(value)
    if kind == "verl" and not word.startswith("-"):  # a Hydra override
        return f"{word}={text}"
    return f"{word} {shlex.quote(text)}" if word.startswith("--") else f"{word}: {text}"


# ------------------------------------------------------------------------------------------------ model

# ------------------------------------------------------------------------------------------------ build


class _Builder:
    def __init__(
        self,
        sources: list[Source],
        workdir: Path,
        transformers_version: str | None = None,
        image_tokens: int | None = None,
        sample_length: int | None = None,
        trl_version: str | None = None,
    ):
        self.sample_length = sample_length
        self.transformers_version = transformers_version
        self.trl_version = trl_version
        self.image_tokens = image_tokens
        self.sources = sources
        self.workdir = workdir
        self.primary = _first(
            sources, ("shell", "verl", "litgpt", "llmfoundry", "axolotl", "training_args", "accelerate", "deepspeed", "program", "verl_config")
        )
        self.settings = _first(
            sources, ("verl", "litgpt", "llmfoundry", "axolotl", "training_args", "shell", "accelerate", "deepspeed", "program", "verl_config")
        )
        self.recipe: dict[str, Any] = {"training": {}, "data": {}, "model": {}}
        self.origins: dict[str, Origin] = {}
        self.findings: list[Finding] = [n for s in sources for n in s.notes]
        self.not_modelled: list[str] = []
        self.terms_missing: list[str] = []  # what the trainer adds that the plan leaves out (UNPLANNED_TRAINERS)
        self.method: str | None = None
        self.method_origin: Origin | None = None
        self.lora_off = False  # a LoRA switch written false (--lora_enable False)
        self.prompt_text: int | None = None
        self.liger_plugin = False  # axolotl's plugins list names the Liger plugin
        self.cce_plugin: Setting | None = None  # axolotl's plugins list names the Cut Cross-Entropy plugin
        self.cce_setting: Setting | None = None  # axolotl's `cut_cross_entropy` (the plugin's switch, default true)
        self.model_name: Setting | None = None  # a `model_name` argument (the script's, else its program's default)
        programs = " ".join(s.program for s in sources)
        names = {s.key.lstrip("-").replace("-", "_") for src in sources for s in src.settings}
        # the launched program's source, where it lies beside the script (vramfit.review.program)
        self.program = None
        if self.primary.kind == "shell" and not _known_argument_set(self.primary.program or ""):
            self.program = program_mod.find(self.primary.program, self.primary.path, self.primary.cwd)
        given = next((s for s in sources if s.kind == "program"), None)  # the program given beside its config file
        if self.program is None and given is not None:
            self.program = program_mod.find(given.path.name, given.path)
        if self.program is not None and self.primary.kind == "shell" and given is None:  # `python train.py` with its settings in its code
            from vramfit.review.sources import program_code

            self.findings += program_code(self.primary, self.program.text, Path(self.program.path))
            names = {s.key.lstrip("-").replace("-", "_") for src in sources for s in src.settings}
        self.trainer = _trainer(sources, names) or (trainers.from_classes(self.program.parses) if self.program is not None else None)
        self.grpo = self.trainer == "grpo" or "grpo" in programs.lower() or "num_generations" in names
        if self.grpo:
            self.trainer = "grpo"
        self.parser = None
        self.model_missing: str = ""
        self.model_missing_origin: Origin | None = None
        self.model_how = ""
        self.model_by_name: tuple[str, str] | None = None
        self.image_assumed = False
        self.length_cap: int | None = None
        self.length_bound = False
        self.longest_unknown: Origin | None = None
        self.stage0_master: Origin | None = None  # DeepSpeed at ZeRO stage 0 (its optimizer wrapper keeps fp32 master weights)
        self.in_place_modules = False  # modules_to_save trained in place, not as PEFT copies (DeepSpeed-Chat without --only_optimize_lora)
        self.litgpt_optimizer: tuple[str, Origin] | None = None  # a LitGPT optimizer class the planner has no states for
        self.unfrozen_said: tuple[Setting, str] | None = None  # unfrozen_parameters / a Spectrum YAML read (_unfrozen)
        self.inline_model: str | None = None  # an llm-foundry YAML's inline MPT, written as a config.json (_llmfoundry)

    def _optimizer_not_modelled(self) -> tuple[str, Origin] | None:
        """A switch or optimizer name for an update scheme that keeps less than AdamW's states for every trainable
        weight (LLaMA-Factory's use_galore / use_apollo / use_badam / use_adam_mini, ms-swift's use_galore /
        lisa_activated_layers, TrainingArguments' optim galore_* / apollo_* / lomo / adalomo), which the planner does
        not model: (what, where)."""
        for source in self.sources:
            for setting in source.settings:
                name = setting.key.lstrip("-").replace("-", "_")
                value = setting.value[0] if isinstance(setting.value, list) and len(setting.value) == 1 else setting.value
                on = value is True or (isinstance(value, str) and value.lower() in ("true", "1")) or setting.value == []
                if name in NOT_MODELLED_SWITCHES and on:
                    return NOT_MODELLED_SWITCHES[name], Origin(setting.file, setting.key, setting.line)
                if (
                    name in ("spectrum_config_path", "unfrozen_parameters")
                    and setting.value not in (None, "", [])
                    and "unfrozen_parameters" not in (self.recipe.get("planner") or {})
                ):
                    # Spectrum (its YAML lists the weights to train) / axolotl's unfrozen_parameters: the others frozen
                    return "training only the weights it lists (the rest frozen)", Origin(setting.file, setting.key, setting.line)
                if name == "lisa_activated_layers" and str(value).isdigit() and int(value) > 0:
                    return "LISA (a few layers trained at a time)", Origin(setting.file, setting.key, setting.line)
                if name in ("optim", "optimizer") and isinstance(value, str) and re.match(r"(galore|apollo|lomo|adalomo)", value.lower()):
                    return value, Origin(setting.file, setting.key, setting.line)
                if source.kind == "axolotl" and name == "optimizer" and isinstance(value, str) and value not in _optimizer_names():
                    # axolotl builds optimizers transformers does not name (axolotl/core/builders: muon, dion, ao_adamw_*, ...)
                    return f"axolotl's optimizer {value}", Origin(setting.file, setting.key, setting.line)
                if name == "finetuning_type" and value == "oft":  # LLaMA-Factory: orthogonal fine-tuning adapters (PEFT OFT)
                    return "OFT (orthogonal adapters: the frozen weights keep no gradients or states)", Origin(setting.file, setting.key, setting.line)
        return None

    def _swift_defaults(self) -> None:
        """ms-swift's own argument classes change the Trainer's per-device batch of 8 to 1: 3.x's
        Seq2SeqTrainingOverrideArguments `per_device_train_batch_size: int = 1` (swift/llm/argument/train_args.py), 2.x's
        SftArguments `batch_size: int = 1` (swift/llm/utils/argument.py, which its handle_compatibility maps onto the
        Trainer's). For a `swift sft|rlhf` launch that passes neither."""
        t = self.recipe["training"]
        if not (self.primary.program or "").startswith("swift "):
            return
        where = Setting("(ms-swift default)", None, self.primary.label, self.primary.launch_line)
        if "per_device_train_batch_size" not in t:
            self.set("training.per_device_train_batch_size", 1, where)
        # 2.x's SftArguments `max_length: int = 2048`; 3.x's `max_length: Optional[int] = None`: the model's maximum
        # (_swift_length, once the model's config is read). A 2.x launch is told by the names 3.0 renamed.
        named = {s.key.lstrip("-").replace("-", "_") for s in self.primary.settings}
        if "data.max_length" not in self.origins and named & SWIFT2_ONLY:
            self.set("data.max_length", 2048, Setting("(ms-swift 2.x default)", None, self.primary.label, self.primary.launch_line))

    def _swift_length(self) -> None:
        """ms-swift 3 with no --max_length: TemplateArguments (swift/llm/argument/base_args/template_args.py,
        `max_length: Optional[int] = None`; __post_init__: `self.max_length = self.model_info.max_model_len`), so no
        sample is cut below the model's context: planned there, as LitGPT's unset max_seq_length is."""
        if not (self.primary.program or "").startswith("swift ") or not self.config:
            return
        named = {s.key.lstrip("-").replace("-", "_") for s in self.primary.settings}
        if named & SWIFT2_ONLY and self.config.get("model_type") in ("qwen2_vl", "qwen2_5_vl"):
            # ms-swift 2.x (swift/llm/utils/template.py at d2b45ec8, the last 2.x commit): Template._encode cuts the sample at
            # max_length ('delete' / 'truncation_left') while each image is one placeholder token; Qwen2VLTemplate._encode
            # expands the placeholders into the images' tokens afterwards, so the LLM sequence runs past max_length
            self.recipe.setdefault("planner", {})["images_past_max_length"] = True
            where = Setting(self.primary.program, None, self.primary.label, self.primary.launch_line)
            self.origins["planner.images_past_max_length"] = Origin(where.file, where.key, where.line)
            self.note(
                "info",
                where,
                "ms-swift 2.x cuts a sample at max_length before it expands each image into its tokens (Qwen2VLTemplate): "
                "planned with the image tokens on top of max_length",
            )
        if "data.max_length" in self.origins:
            return
        context = self.config.get("max_position_embeddings") or (self.config.get("text_config") or {}).get("max_position_embeddings")
        if not isinstance(context, int) or context <= 0:
            return
        where = Setting("--max_length", None, self.primary.label, self.primary.launch_line)
        self.set("data.max_length", context, where)
        self.swift_uncapped = True  # the cap is the model's context, not one the files chose (see _longest_sample)
        self.note(
            "info",
            where,
            f"not set: ms-swift 3 cuts no sample below the model's maximum length ({context:,} tokens, its max_model_len), "
            "so a batch can reach it; planned there",
            "set --max_length to the length you train at.",
        )

    def _swift_tuning(self) -> None:
        """What ms-swift trains of a multimodal model: TunerArguments' freeze_llm / freeze_vit / freeze_aligner (defaults False,
        True, True: swift/arguments/tuner_args.py). Full fine-tuning freezes each part they name (`_init_multimodal_full`); LoRA
        with target_modules all-linear adapts only the parts they leave unfrozen, the aligner never trained in full
        (swift/pipelines/train/tuner.py `get_target_modules` -> swift/utils/transformers_utils.py
        `get_multimodal_target_regex`). --tuner_type lora_llm is read where it is written (`upstream`)."""
        if not self.primary.program.startswith("swift ") or "vision_config" not in (self.config or {}):
            return
        if "planner.lora_vision_tower" in self.origins:  # lora_llm: the ViT and aligner in full, LoRA on the LLM
            return
        frozen: dict[str, tuple[bool, Setting | None]] = {}
        for name, default in SWIFT_FREEZE.items():
            written = [s for s in self.primary.settings if s.key.lstrip("-") == name]
            value = self.scalar(written[-1]) if written else default
            frozen[name] = (value if isinstance(value, bool) else default, written[-1] if written else None)
        method = self.recipe.get("method")
        if method == "grpo":  # GRPO of the whole model or of a LoRA adapter (ms-swift rlhf --tuner_type)
            method = self.method or "full"
        at = Setting(self.primary.program, None, self.primary.label, self.primary.launch_line)
        if method == "full":
            for name, part in (("freeze_llm", "llm"), ("freeze_vit", "vision_tower"), ("freeze_aligner", "projector")):
                if f"model.train.{part}" in self.origins and frozen[name][1] is None:
                    continue  # said otherwise by the files (a switch of the program's own)
                self.set(f"model.train.{part}", not frozen[name][0], frozen[name][1] or at)
        elif method in ("lora", "qlora"):
            self.set("model.train.projector", False, frozen["freeze_aligner"][1] or at)
            if self.get("model.lora.target_modules") in ("all-linear", ["all-linear"]):
                self.recipe.setdefault("planner", {})["lora_vision_tower"] = not frozen["freeze_vit"][0]
                o = frozen["freeze_vit"][1] or at
                self.origins["planner.lora_vision_tower"] = Origin(o.file, o.key, o.line)
        said = ", ".join(f"{k} {v[0]}" + ("" if v[1] else " (ms-swift's default)") for k, v in frozen.items())
        self.note("info", at, f"ms-swift trains the parts of the model its freeze switches leave: {said}")

    def _swift_environment(self) -> None:
        """ms-swift reads a VLM's image size from the launch's environment: MAX_PIXELS (ms-swift docs/source_en/Instruction/
        Command-line-parameters.md, "qwen2_vl, qvq, qwen2_5_vl, ...: MAX_PIXELS: Default is 16384 * 28 * 28"; Qwen3-VL maps
        it to IMAGE_MAX_TOKEN_NUM, swift/model/models/qwen.py). A --max_pixels on the command line wins."""
        if self.primary.launcher != "swift" or "data.max_pixels" in self.origins:
            return
        for name in self.primary.env:  # a near miss of a size variable is not read: ms-swift's default applies
            close = difflib.get_close_matches(name, SWIFT_SIZE_VARIABLES, n=1, cutoff=0.85)
            if close and name not in SWIFT_SIZE_VARIABLES and close[0] not in self.primary.env:
                self.note(
                    "warning",
                    Setting(name, [self.primary.env[name]], self.primary.label, self.primary.launch_line),
                    f"{name} is not a variable ms-swift reads (it reads {close[0]}): the setting is ignored and ms-swift's "
                    f"default applies"
                    + (f" (MAX_PIXELS: {SWIFT_MAX_PIXELS:,} px, {SWIFT_MAX_PIXELS // 784:,} tokens per image)" if close[0] == "MAX_PIXELS" else ""),
                    f"rename it {close[0]}={self.primary.env[name]}.",
                )
        vision = (self.config or {}).get("vision_config") or {}
        tokens = self.primary.env.get("IMAGE_MAX_TOKEN_NUM", "").strip()
        if tokens.isdigit() and int(tokens) > 0 and vision.get("spatial_merge_size"):
            # qwen_vl_utils >= 0.0.14 (Qwen2.5-VL, Qwen3-VL, Qwen3.5): merged tokens per image, one per (patch x merge)^2 px;
            # ms-swift's compat_qwen_vl_utils (swift/model/models/qwen.py) turns MAX_PIXELS into it only where it is unset
            side = int(vision.get("patch_size") or 14) * int(vision["spatial_merge_size"])
            self.set("data.max_pixels", int(tokens) * side * side, Setting("IMAGE_MAX_TOKEN_NUM", [tokens], self.primary.label, self.primary.launch_line))
            return
        value = self.primary.env.get("MAX_PIXELS", "").strip()
        if value.isdigit() and int(value) > 0:
            self.set("data.max_pixels", int(value), Setting("MAX_PIXELS", [value], self.primary.label, self.primary.launch_line))

    def _swift_audio_output(self) -> None:
        """ms-swift loads an Omni checkpoint whole (Qwen2_5OmniForConditionalGeneration: swift/model/models/qwen.py
        Qwen2_5OmniLoader.get_model), so its Talker and vocoder sit beside the Thinker whenever `config.enable_audio_output`
        is on: the published config's value unless the launch sets ENABLE_AUDIO_OUTPUT (`get_config`: get_env_args(...,
        bool, None), read with strtobool). The planner builds the Thinker: planner.audio_output adds their weights."""
        from vramfit import models
        from vramfit.planner import params

        if self.primary.launcher != "swift" or not (self.recipe.get("model") or {}).get("config"):
            return
        published = models.published_for(self.recipe["model"]["config"])
        try:
            config = params.read_config(published)
        except ConfigError:
            return
        if config.get("model_type") not in params.AUDIO_OUTPUT_MODULES:
            return
        raw = str(self.primary.env.get("ENABLE_AUDIO_OUTPUT", "")).strip().lower()
        on = {
            "y": True,
            "yes": True,
            "t": True,
            "true": True,
            "on": True,
            "1": True,
            "n": False,
            "no": False,
            "f": False,
            "false": False,
            "off": False,
            "0": False,
        }
        if raw in on:
            enabled, origin = on[raw], Origin(self.primary.label, "ENABLE_AUDIO_OUTPUT", self.primary.launch_line)
        else:
            enabled = bool(config.get("enable_audio_output", True))  # Qwen2_5OmniConfig's default: True
            origin = Origin(self.primary.label, "", self.primary.launch_line)
            where = "ENABLE_AUDIO_OUTPUT unset: the published config's enable_audio_output"
            self.note(
                "info",
                Setting("ENABLE_AUDIO_OUTPUT", [str(enabled)], origin.file, origin.line),
                f"{where} ({enabled}) decides whether ms-swift loads the Talker and vocoder",
            )
        if enabled:
            self.recipe.setdefault("planner", {})["audio_output"] = True
            self.origins["planner.audio_output"] = origin

    def _sharding_not_modelled(self) -> tuple[str, Origin] | None:
        """A setting that shards the model or the sequence over GPUs besides data parallelism (tensor / pipeline / context /
        sequence / expert parallelism, tiled MLP, KTransformers' CPU experts), which the planner does not model:
        (what, where)."""
        for source in self.sources:
            for setting in source.settings:
                name = setting.key.lstrip("-").replace("-", "_")
                if name not in SHARDING_NOT_MODELLED or _sequence_parallel_planned(source, name):
                    continue
                value = setting.value[0] if isinstance(setting.value, list) and len(setting.value) == 1 else setting.value
                text = str(value).strip().lower()
                if value is True or text == "true" or (text.isdigit() and int(text) > 1):
                    return f"{SHARDING_NOT_MODELLED[name]} ({setting.key} {value})", Origin(setting.file, setting.key, setting.line)
        return None

    def _device_map(self) -> tuple[str, Origin] | None:
        """One process that spreads its model over several GPUs with device_map (ms-swift without NPROC_PER_NODE, or fewer
        processes than visible GPUs): each GPU holds its share of the layers, planned with the planner's
        `device_map_gpus` (vramfit/planner/device_map.py: accelerate's balanced split, the busiest GPU). Beside a
        DeepSpeed JSON or FSDP (which accelerate refuses with a dispatched model) the one-GPU plan stays, said to be an
        upper bound (what, where)."""
        source = self.primary
        if not source.device_map_gpus:
            return None
        setting = Setting("CUDA_VISIBLE_DEVICES", [source.env.get("CUDA_VISIBLE_DEVICES", "")], source.label, source.launch_line)
        origin = Origin(source.label, "CUDA_VISIBLE_DEVICES", source.launch_line)
        sharded = any(
            st.key.lstrip("-").replace("-", "_") in ("deepspeed", "fsdp") and str(st.value).strip().lower() not in ("", "none", "false", "[]")
            for src in self.sources
            for st in src.settings
        )
        if sharded:
            self.note(
                "info",
                setting,
                f"each training process sees {source.device_map_gpus} GPUs and spreads the model's layers over them (device_map) "
                "beside DeepSpeed / FSDP: planned as one GPU holding the whole model, an upper bound of each GPU's share",
            )
            return f"the model spread over {source.device_map_gpus} GPUs per process (device_map)", origin
        self.note(
            "info",
            setting,
            f"each training process sees {source.device_map_gpus} GPUs and spreads the model's layers over them (device_map, "
            "accelerate's balanced split): planned per GPU of the split, the busiest one (the plan's note names it)",
        )
        self.recipe.setdefault("planner", {})["device_map_gpus"] = source.device_map_gpus
        self.origins["planner.device_map_gpus"] = origin
        return None

    def _python_file(self) -> Source | None:
        """The Python file the review reads: a .py, or a notebook read as its Python cells (not one read as its `!` commands)."""
        return next(
            (src for src in self.sources if src.path.suffix == ".py" or (src.path.suffix == ".ipynb" and src.kind in ("training_args", "program"))),
            None,
        )

    def _python_device_map(self):
        """The device_map (and max_memory) of the Python file the review reads or the launch runs (review/device_map.py):
        a spreading one is kept for fill_hardware, which knows the GPUs; one chosen when the script runs is said."""
        from vramfit.review import device_map

        read = device_map.found(self.sources, self.program, self.primary)
        if read is None or self.primary.device_map_gpus:  # ms-swift's own device_map: _device_map
            return None
        dm, file = read
        if dm.kind == "unknown":
            self.findings.append(
                Finding(
                    "info",
                    file,
                    "device_map",
                    f"device_map={dm.written} is chosen when the script runs: not read (planned with the whole model on each "
                    "process's GPU; a map that spreads it over several GPUs holds less on each)",
                    line=dm.line,
                )
            )
            return None
        if dm.kind == "one":
            return None
        sharded = next(
            (
                "FSDP" if name == "fsdp" else "DeepSpeed"
                for src in self.sources
                for st in src.settings
                if (name := st.key.lstrip("-").replace("-", "_")) in ("deepspeed", "fsdp")
                and str(st.value).strip().lower() not in ("", "none", "false", "[]", "['']")
            ),
            "",
        )
        seen = self.primary.seen_gpus if self.primary.launcher == "python" else self.primary.visible_gpus
        quantized = bool(((self.recipe.get("model") or {}).get("quantization") or {}).get("bits"))
        return device_map.Launch(dm, file, self.primary.launcher, seen, sharded, quantized)

    def _attention_chosen(self) -> tuple[Origin | None, tuple[str, ...] | None]:
        """(where the files choose the attention, the model types the choice covers - None: every model): attn_implementation
        (read into the recipe), a flash-attn switch of the program's own (FastChat's --flash_attn, peft's --use_flash_attn,
        the Trainer-era use_flash_attention_2), or a program that patches flash-attn in before training (FLASH_PROGRAMS, or
        a `replace_*attn*flash*()` / `train(attn_implementation="flash_attention_2")` call in the program's code)."""
        if "model.attn_implementation" in self.origins:
            return self.origins["model.attn_implementation"], None
        for source in self.sources:
            for setting in source.settings:
                name = setting.key.lstrip("-").replace("-", "_")
                if name in FLASH_SWITCHES and str(self.scalar(setting)).strip().lower() in ("true", "1"):
                    return Origin(setting.file, setting.key, setting.line), ("llama",) if name == "flash_attn" else None
        program = self.primary.program.replace("\\", "/")
        for path, types in FLASH_PROGRAMS.items():
            if program == path or program.endswith("/" + path):
                return Origin(self.primary.label, program, None), types
        if self.program is not None:
            try:
                code = Path(self.program.path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                code = ""
            found = FLASH_PATCH.search(code)
            if found:
                return Origin(self.primary.label, program, None), ("llama",) if "llama" in found.group(0) else None
        return None, None

    # ---- helpers
    def set(self, key: str, value: Any, setting: Setting) -> None:
        if key == "model.lora.target_parameters" and isinstance(value, str):  # axolotl: str | list[str]
            value = [m.strip() for m in value.split(",") if m.strip()]
        if key == "model.lora.target_modules" and isinstance(value, str):
            # the trainers' comma lists and 'all' (LLaMA-Factory's FinetuningArguments split_arg / find_all_linear_modules,
            # ms-swift 2.x's ALL): PEFT would read one string as a regex matching nothing
            value = "all-linear" if value.strip().lower() == "all" else [m.strip() for m in value.split(",") if m.strip()] if "," in value else value
        if key == "model.attn_implementation" and isinstance(value, str):
            planned = attention_class(value)
            if planned != value:
                self.note(
                    "info",
                    setting,
                    f"attention '{value}' reviewed as {planned} (the same memory class: "
                    + ("no seq x seq attention matrix is kept)" if planned == "flash_attention_2" else "what it pages is the kernel's input)"),
                )
                value = planned
        node = self.recipe
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        self.origins[key] = Origin(setting.file, setting.key, setting.line)

    def get(self, key: str, default: Any = None) -> Any:
        node = self.recipe
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def note(self, severity: str, setting: Setting, what: str, fix: str = "") -> None:
        self.findings.append(Finding(severity, setting.file, setting.key, what, fix, "validation", setting.line))

    def hf_parser(self):
        if self.parser is None:
            from transformers import HfArgumentParser

            self.parser = HfArgumentParser(trainers.config_class(self.trainer), allow_abbrev=False, exit_on_error=False)
        return self.parser

    @property
    def fields(self) -> list[str]:
        return list(trainers.fields(self.trainer))

    def cls_name(self) -> str:
        return trainers.config_class(self.trainer).__name__

    # ---- values
    def typed(self, name: str, setting: Setting) -> tuple[bool, Any]:
        """(ok, value) of a training argument; shell words typed by HfArgumentParser."""
        value = setting.value
        if not self._is_words(setting):
            return True, _json_dict(value)
        flag = f"--{name}"
        from argparse import ArgumentError

        attempts = [[flag, *value]] + ([[flag, "true"]] if not value else [])
        error = ""
        for words in attempts:
            try:
                ns, rest = self.hf_parser().parse_known_args(words)
            except ArgumentError as exc:
                error = str(exc)
                continue
            pin = self.pin(setting) if rest else None
            took_lists = name in TOOK_LISTS_IN_4 and self._older(pin)  # report_to wandb tensorboard: a list in transformers 4
            if rest and not (pin is not None and pin.major and pin.major < 5) and not took_lists and not self.primary.program.startswith("swift "):
                self.note(
                    "warning",
                    setting,
                    f"takes one value in the installed {self.cls_name()}; {' '.join(rest)!r} would be left over "
                    "(HfArgumentParser refuses arguments it does not use)",
                    f"keep one value: {setting.key} {value[0]}.",
                )
            if not hasattr(ns, name):  # not a field of this trainer's class (GKDConfig has no vllm_enable_sleep_mode)
                self.not_modelled.append(setting.key)
                return False, None
            return True, _json_dict(_whole(getattr(ns, name), value))
        if self.primary.program.startswith("swift ") and name in trainers.trl_only(self.trainer):
            # ms-swift parses its command line with its own argument classes, which share some names with TRL's configs
            # (loss_type 'infonce' / 'pointwise_reranker', vllm_server_port): its value is not TRL's to judge
            self.note("info", setting, f"{setting.key} {' '.join(value)} is ms-swift's own value, not one {self.cls_name()} takes: read, not reviewed")
            return False, None
        self.note("error", setting, f"{self.cls_name()} cannot read it ({error})", f"write a valid value for {setting.key}.")
        return False, None

    def _is_words(self, setting: Setting) -> bool:
        source = next((s for s in self.sources if s.label == setting.file), None)
        return source is not None and source.kind == "shell"

    def scalar(self, setting: Setting) -> Any:
        """An upstream argument's value: words read as YAML (2048 -> int, True -> bool); a bare flag is true."""
        value = setting.value
        if isinstance(value, list) and self._is_words(setting):
            return True if not value else parse_value(" ".join(value))
        return value

    def axolotl_value(self, setting: Setting) -> Setting:
        """axolotl's own loader reads "2e-5" as a number; YAML keeps it a string."""
        value = setting.value
        if not isinstance(value, str) or not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", value.strip()):
            return setting
        number = float(value)
        return Setting(setting.key, int(number) if re.fullmatch(r"[+-]?\d+", value.strip()) else number, setting.file, setting.line)

    # ---- one setting
    def training(self, name: str, setting: Setting) -> None:
        if name in REMOVED_VALUES:
            setting = self._removed_value(name, setting)
        ok, value = self.typed(name, setting)
        if not ok:
            return
        if name == "fsdp_config" and isinstance(value, dict):
            value = self._fsdp_checkpointing(value, setting, setting.key)
        if name == "fsdp" and isinstance(value, list) and all(isinstance(v, str) for v in value):
            # transformers 4's TrainingArguments.fsdp took a list of FSDPOption; 5's takes them space-separated in one string
            value = " ".join(value)
            self.note(
                "info",
                setting,
                f"a list of FSDP options, as transformers 4 took them: reviewed as {value!r}",
                f"write {setting.key}: {value} for transformers 5.",
            )
        if name == "max_steps" and value == -1:
            return  # the Hugging Face default: train for num_train_epochs
        if self.trainer and name in trainers.trl_only(self.trainer) and not (self.grpo and name in GRPO_KEEP):
            if name in TRL_LENGTHS and isinstance(value, int) and not self.grpo:
                self.set("data.max_length", value, setting)
            else:
                self.not_modelled.append(setting.key)
            return
        self.set(f"training.{name}", value, setting)

    def read(self, setting: Setting, axolotl: bool) -> None:
        name = setting.key.lstrip("-").replace("-", "_")
        value = setting.value
        if axolotl and value is None:
            return  # axolotl: an empty key is unset
        words = value if isinstance(value, list) and self._is_words(setting) else []
        if len(words) > 1 and any(w.endswith(",") for w in words):
            # `--lora_target_modules "q_proj", "v_proj"`: the shell passes 'q_proj,' (comma included), which names no module
            bad = [w for w in words if w.endswith(",")]
            fixed = [w.rstrip(",") for w in words if w.rstrip(",")]
            self.note(
                "warning",
                setting,
                f"{', '.join(repr(w) for w in bad)} ends in a comma: the shell passes the comma as part of the word, "
                f"so the script gets {bad[0]!r}, which names nothing ({bad[0].rstrip(',')!r} is silently left out); reviewed as "
                f"{' '.join(fixed)}",
                f"separate the values with spaces only: {setting.key} {' '.join(fixed)}.",
            )
            setting = Setting(setting.key, fixed, setting.file, setting.line)
            words, value = fixed, fixed
        if any(shell.UNRESOLVED.search(w) for w in words):
            self.note(
                "info",
                setting,
                f"its value {' '.join(words)!r} is set when the script runs (the script does not define it), so it was not reviewed",
                "write the value in the script, or define the variable above the command.",
            )
            return
        if self._openrlhf() and name in ("ds.zero_stage", "adam_offload", "ds.adam_offload"):
            return  # the ZeRO stage a flag names (_named_zero)
        if self._openrlhf() and (name in OPENRLHF or name in ("ds.param_dtype", "param_dtype", "lora_rank")):
            return self._openrlhf_argument(name, setting)
        if self._openrlhf() and name in self.fields and name not in OPENRLHF_AS_TRAINER:
            # OpenRLHF parses its own arguments (no TrainingArguments): a name they share means OpenRLHF's own
            # (`--save_steps -1`: never save, its default), read but not judged by the Trainer's rules
            return self.not_modelled.append(setting.key)
        if name in ("deepspeed", "local_rank", "zero_stage", "offload", "deepspeed_stage", "deepspeed_offload_param", "deepspeed_offload_optimizer") or (
            name == "config" and any(r.setting is setting for s in self.sources for r in s.references)
        ):
            return  # the DeepSpeed JSON and a --config file are read as files; the launcher sets local_rank
        if name == "model_name" and not axolotl and isinstance(self.scalar(setting), str):
            self.model_name = setting  # the model only where nothing else names it (_model_name)
            return
        if name in FILE_ARGUMENTS and not axolotl and isinstance(self.scalar(setting), str) and not str(self.scalar(setting)).lstrip().startswith("{"):
            return self._file_argument(name, str(self.scalar(setting)), setting)
        if (name == "unfrozen_parameters" and axolotl) or (name == "spectrum_config_path" and not axolotl):
            return self._unfrozen(name, setting)
        fields = self.fields
        if axolotl:
            setting = self.axolotl_value(setting)
            if name == "gradient_checkpointing" and setting.value in ("offload", "offload_disk"):
                # axolotl: checkpointing with the checkpoints offloaded (to host RAM, or disk), its activation offloading
                self.training("gradient_checkpointing", Setting(setting.key, True, setting.file, setting.line))
                self.recipe.setdefault("planner", {})["activation_offloading"] = True
                self.origins["planner.activation_offloading"] = Origin(setting.file, setting.key, setting.line)
                return
            if name == "optimizer" and isinstance(setting.value, str) and setting.value not in _optimizer_names():
                return  # axolotl's own optimizer (muon, dion, ao_adamw_8bit, ...): planned as AdamW's, said (_optimizer_not_modelled)
            if name in AXOLOTL:
                return self.alias(AXOLOTL[name].split(".", 1), setting)
            if name in AXOLOTL_SPECIAL:
                return self.axolotl_special(name, setting)
            if name in AXOLOTL_NOT_MODELLED:
                return self.not_modelled.append(setting.key)
        if name in fields or (name.startswith("no_") and name[3:] in fields):
            self.training(name if name in fields else name[3:], setting if name in fields else Setting(setting.key, ["false"], setting.file, setting.line))
        elif name in RENAMED:
            self.renamed(name, setting)
        elif name in SWIFT2 and (self.primary.program or "").startswith("swift "):
            self.alias(SWIFT2[name].split(".", 1), setting)
        elif name == "max_length" and (self.primary.program or "").startswith("swift ") and self._swift_max_length(setting):
            pass
        elif (name in ALIASES and not axolotl) or name in METHOD_SWITCHES or name in TRAIN_SWITCHES or name in UPSTREAM_SPECIAL:
            self.upstream(name, setting)
        elif name == "flash_attn" and str(self.scalar(setting)).strip().lower() in (*LLAMAFACTORY_ATTENTION, "auto"):
            chosen = str(self.scalar(setting)).strip().lower()  # LLaMA-Factory's choice of attention, not a program's switch
            if chosen != "auto":
                self.set("model.attn_implementation", LLAMAFACTORY_ATTENTION[chosen], setting)
        elif name in NOT_MODELLED:
            self.not_modelled.append(setting.key)
        else:
            self.unknown(setting, axolotl)

    def _swift_max_length(self, setting: Setting) -> bool:
        """ms-swift's --max_length belongs to TemplateArguments (swift/llm/argument/base_args/template_args.py), which
        SftArguments and RLHFArguments both inherit: the template cuts each sample there whatever TRL config the rlhf_type
        maps to (GRPOConfig, and PPO's TrainingArguments, have no max_length; the other configs' is read as a field). GRPO
        cuts the prompt there (rlhf_args.py _init_grpo: truncation_strategy 'left', "trimming the excessively long parts of
        a prompt"): planned as the prompt's text length. False for a value that is no length (then read as before)."""
        value = self.scalar(setting)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            return False
        if self.grpo:
            self.prompt_text = value
        self.set("data.max_length", value, setting)
        return True

    def alias(self, parts: list[str], setting: Setting) -> None:
        section, key = parts
        if section == "training":
            self.training(key, setting)
        else:
            self.set(f"{section}.{key}", self.scalar(setting), setting)

    def renamed(self, name: str, setting: Setting) -> None:
        new, why = RENAMED[name]
        if name == "max_prompt_length":
            self.prompt_text = int(self.scalar(setting))

            source = next((s for s in self.sources if s.label == setting.file), None)
            trl_pin = self.find_pin(source, "trl") if source is not None else None
            if trl_pin is None or trl_pin.major == 0:  # pinned before 1.x, or nothing pinned: the flag dates the script
                said = f"this repository pins {trl_pin}, whose" if trl_pin is not None else "nothing pins trl beside the script, and TRL 0.x's"
                cls = self.cls_name() if self.trainer else "GRPOConfig"
                self.note(
                    "info",
                    setting,
                    f"{said} {cls} truncates prompts to {setting.key}; the installed "
                    f"TRL {_installed('trl')} {why.format(cls='trl.' + cls)}; reviewed as the prompt's text length ({self.prompt_text} tokens)",
                    "drop it and filter overlong prompts from the data set when you upgrade.",
                )
                return
            self.note(
                "warning",
                setting,
                f"{setting.key} is {why.format(cls='trl.' + (self.cls_name() if self.trainer else 'GRPOConfig'))}; reviewed as the prompt's text length ({self.prompt_text} tokens)",
                "drop it and filter overlong prompts from the data set (TRL's advice).",
            )
            return
        pin = self.pin(setting)
        old = self._older(pin)
        where = (
            f"this repository pins {pin}, where {setting.key} is accepted"
            if pin is not None
            else f"nothing pins transformers beside the script, and {setting.key} dates it: transformers 4 accepts it"
        )
        if new is None:
            self.note(
                "info" if old else "warning",
                setting,
                f"{where}; the installed transformers {_installed('transformers')}: {setting.key} is {why}" if old else f"{setting.key} is {why}",
                f"drop {setting.key}" + (" when you upgrade." if old else "."),
            )
            return
        spelled_new = f"--{new}" if setting.key.startswith("--") else new
        if old and name not in ("max_prompt_length",):
            self.note(
                "info",
                setting,
                f"{where}; under the installed transformers {_installed('transformers')} it is {why}: reviewed as {spelled_new}",
                f"rename it {spelled_new} when you upgrade.",
            )
            if name == "group_by_length":
                self.set("training.train_sampling_strategy", "group_by_length" if self.scalar(setting) else "random", setting)
            else:
                self.training(new, setting)
            return
        if name == "group_by_length":
            strategy = "group_by_length" if self.scalar(setting) else "random"
            self.note("warning", setting, f"{setting.key} is {why}", f"write {spelled_new} {strategy}.")
            self.set("training.train_sampling_strategy", strategy, setting)
            return
        self.note("warning", setting, f"{setting.key} is {why}; reviewed as {spelled_new}", f"rename it {spelled_new}.")
        self.training(new, setting)

    def _removed_value(self, name: str, setting: Setting) -> Setting:
        """A value transformers 4 took that the installed transformers refuses (REMOVED_VALUES): reviewed as its
        replacement, said as a rename under the pinned version (info) or as a fix to make now (warning)."""
        value = self.scalar(setting)
        if not isinstance(value, str) or value not in REMOVED_VALUES[name]:
            return setting
        new, why = REMOVED_VALUES[name][value]
        if name == "optim" and value in _optimizer_names():
            return setting  # the installed transformers still takes it
        pin = self.pin(setting)
        old = self._older(pin)
        where = (
            f"this repository pins {pin}, where {setting.key} {value} is accepted"
            if pin is not None
            else f"nothing pins transformers beside the script, and {setting.key} {value} dates it: transformers 4 accepts it"
        )
        self.note(
            "info" if old else "warning",
            setting,
            f"{where}; the installed transformers {_installed('transformers')} refuses it ({why}): reviewed as {new}"
            if old
            else f"{setting.key} {value} is refused by the installed transformers {_installed('transformers')} ({why}): reviewed as {new}",
            f"write {setting.key} {new}" + (" when you upgrade." if old else "."),
        )
        return Setting(setting.key, [new] if isinstance(setting.value, list) else new, setting.file, setting.line)

    def _older(self, pin) -> bool:
        """The script is judged under transformers 4: its repository pins 4.x, or nothing pins a version (the user runs the
        script in their own environment, not vramfit's; a flag transformers 5 dropped says the script was written for 4)."""
        return pin is None or bool(pin.major and pin.major < 5)

    def pin(self, setting: Setting):
        """The transformers version the file's repository pins (or --transformers-version), else None."""
        from vramfit.review.versions import Pin

        if self.transformers_version:
            return Pin("transformers", "==", self.transformers_version, "--transformers-version")
        source = next((s for s in self.sources if s.label == setting.file), None)
        return self.find_pin(source) if source is not None else None

    def _transformers_pin(self):
        """The transformers version the run's repository pins (from the launch file), or --transformers-version."""
        from vramfit.review.versions import Pin

        if self.transformers_version:
            return Pin("transformers", "==", self.transformers_version, "--transformers-version")
        return self.find_pin(self.primary)

    def find_pin(self, source: Source, package: str = "transformers"):
        """The version the repository pins, looked for from where the launch runs: beside the program it runs (found),
        the folder a `cd` moved to, then beside the file."""
        from vramfit.review.versions import find_pin

        starts = [self.program.path] if self.program is not None and source is self.primary else []
        starts += [source.cwd / "launch"] if source.cwd is not None else []
        for start in [*starts, source.path]:
            pin = find_pin(start, package)
            if pin is not None:
                return pin
        return None

    def upstream(self, name: str, setting: Setting) -> None:
        value = self.scalar(setting)
        if name in METHOD_SWITCHES and isinstance(value, bool):
            if value:
                self.method, self.method_origin = METHOD_SWITCHES[name], Origin(setting.file, setting.key, setting.line)
            elif name != "q_lora":  # `--q_lora False` says "not quantized", not "no LoRA"
                self.lora_off = True
        elif name == "tune_mm_mlp_adapter" and value is True:  # LLaVA's projector-only pretrain: LLM and vision tower frozen
            self.set("model.train.projector", True, setting)
            self.set("model.train.llm", False, setting)
            self.set("model.train.vision_tower", False, setting)
        elif name == "mm_tunable_parts" and isinstance(value, str):
            # LLaVA-NeXT llava/train/train.py: every weight frozen, then each named part unfrozen (mm_mlp_adapter: the
            # projector, mm_vision_tower, mm_language_model: the LLM in full, or its LoRA adapters under lora_enable)
            parts = {p.strip() for p in value.split(",")}
            self.set("model.train.projector", "mm_mlp_adapter" in parts, setting)
            self.set("model.train.vision_tower", "mm_vision_tower" in parts, setting)
            if "mm_language_model" not in parts:
                self.set("model.train.llm", False, setting)
        elif name == "freeze_backbone" and isinstance(value, bool) and self._beside(setting, "freeze_llm"):
            self.set("model.train.vision_tower", not value, setting)  # InternVL: the backbone is the ViT, freeze_llm the LLM
        elif name in TRAIN_SWITCHES and isinstance(value, bool):
            part, on = TRAIN_SWITCHES[name]
            self.set(f"model.train.{part}", on if value else not on, setting)
        elif name == "use_llm_lora" and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            self.method, self.method_origin = "lora", Origin(setting.file, setting.key, setting.line)
            self.set("model.lora.r", value, setting)
        elif name == "use_backbone_lora" and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            self.not_modelled.append(setting.key)  # LoRA on the vision tower: not planned yet
        elif name in ("tuner_type", "train_type", "sft_type") and value == "lora_llm":  # ms-swift: LoRA on the LLM, the ViT and aligner in full
            self.method, self.method_origin = "lora", Origin(setting.file, setting.key, setting.line)
            self.set("model.train.vision_tower", True, setting)
            self.set("model.train.projector", True, setting)
            self.recipe.setdefault("planner", {})["lora_vision_tower"] = False
            self.origins["planner.lora_vision_tower"] = Origin(setting.file, setting.key, setting.line)
        elif name in ("tuner_type", "train_type", "sft_type") and value in SWIFT_TUNERS_NOT_MODELLED:
            # ms-swift's other tuners (swift/pipelines/train/tuner.py): planned as the nearest method the planner has, said, and
            # the review is incomplete (exit 3) - never silently planned as full fine-tuning of every weight
            nearest, what = SWIFT_TUNERS_NOT_MODELLED[value]
            self.method, self.method_origin = nearest, Origin(setting.file, setting.key, setting.line)
            self.terms_missing.append(f"ms-swift's {value} tuner ({what})")
            self.note(
                "info",
                setting,
                f"{setting.key} {value}: ms-swift's {value} tuner {what}; the planner has no model of it: planned as "
                + (
                    "LoRA of the same targets (the base frozen, small trainable modules: their own size and activations as LoRA's)"
                    if nearest == "lora"
                    else "full fine-tuning of every weight (an upper bound)"
                )
                + ", so the review is incomplete",
            )
        elif name in ("tuner_type", "train_type", "sft_type") and value in ("lora", "full", "qlora", "longlora", "adalora"):  # ms-swift
            self.method, self.method_origin = (
                ("full" if value == "full" else "qlora" if value == "qlora" else "lora"),
                Origin(setting.file, setting.key, setting.line),
            )
        elif name in QUANT_SWITCHES:
            if value is True:
                self.set("model.quantization.bits", QUANT_SWITCHES[name], setting)
        elif name in QUANT_SETTINGS:
            self._quant_setting(name, value, setting)
        elif name in ("quant_bits", "quantization_bit") and value in (4, 8):  # ms-swift, LLaMA-Factory
            self.set("model.quantization.bits", value, setting)
        elif name == "finetuning_type" and value in ("lora", "full", "freeze"):
            self.method, self.method_origin = ("lora" if value == "lora" else "full"), Origin(setting.file, setting.key, setting.line)
        elif name == "bits" and value in (4, 8):
            self.method, self.method_origin = "qlora", Origin(setting.file, setting.key, setting.line)
            self.set("model.quantization.bits", value, setting)
        elif name == "tune_vit_from_layer" and isinstance(value, int) and value >= 0:
            self.set("model.train.vision_tower", value, setting)
        elif name == "sleep_level" and isinstance(value, int) and not isinstance(value, bool):
            # ms-swift rlhf_args.sleep_level: vLLM's sleep mode (1: weights offloaded, KV cache dropped; 2: both dropped)
            # outside generation - TRL's vllm_enable_sleep_mode
            if value > 0:
                on = ["true"] if isinstance(setting.value, list) else True  # a shell word, or a YAML value
                self.training("vllm_enable_sleep_mode", Setting(setting.key, on, setting.file, setting.line))
        elif name == "enable_liger_kernel":
            self._llamafactory_liger(value, setting)
        elif name == "dtype" and value in ("fp16", "bf16"):  # DeepSpeed-Chat's --dtype: the training precision
            self.set(f"training.{value}", True, setting)
        elif name == "dtype":
            self.not_modelled.append(setting.key)
        elif name in ALIASES and ALIASES[name].startswith("training."):
            self.training(ALIASES[name].split(".", 1)[1], Setting(setting.key, setting.value, setting.file, setting.line))
        elif ALIASES.get(name) == "model.lora.modules_to_save" and isinstance(setting.value, list) and self._is_words(setting):
            # `--modules_to_save embed_tokens lm_head` (nargs='+'), or a comma list: module names, never one string
            self.set("model.lora.modules_to_save", [m for word in setting.value for m in str(word).split(",") if m], setting)
        elif name in ALIASES:
            self.set(ALIASES[name], value, setting)

    def _llamafactory_liger(self, value, setting: Setting) -> None:
        """LLaMA-Factory's `enable_liger_kernel` (ModelArguments). model/loader.py calls model_utils/liger_kernel.py's
        apply_liger_kernel with require_logits=(stage not in ["pt", "sft"]) (since 20ee1d2e, 2024-09-30), and with
        require_logits it passes fused_linear_cross_entropy=False: at pt / sft the model runs Liger's fused linear
        cross-entropy, which keeps no logits tensor (the Trainer's use_liger_kernel, planned for the model types Liger
        patches); at the other stages (dpo, kto, rm, ppo) the logits stay."""
        if str(value).strip().lower() not in ("true", "1"):
            return
        if self.trainer in (None, "sft"):
            on = ["true"] if isinstance(setting.value, list) else True  # a shell word, or a YAML value
            self.training("use_liger_kernel", Setting(setting.key, on, setting.file, setting.line))
        else:
            self.note(
                "info",
                setting,
                f"LLaMA-Factory applies Liger's kernels without the fused linear cross-entropy outside stages pt / sft "
                f"(model_utils/liger_kernel.py, require_logits): this {self.trainer} run keeps its logits, planned so",
            )

    def _openrlhf(self) -> bool:
        return (self.primary.program or "").removeprefix("-m ").replace("/", ".").startswith("openrlhf.")

    def _openrlhf_attention(self) -> None:
        """The attention OpenRLHF loads its models with when the files choose none. Up to 0.8.9 its own switch decides:
        openrlhf/models/actor.py `attn_implementation = "flash_attention_2" if use_flash_attention_2 else "eager"`,
        `use_flash_attention_2=args.flash_attn` (cli/train_*.py `--flash_attn`, default False), so a launch without it runs
        eager. 0.8.10 (c250c21a) replaced the switch with `--attn_implementation`, default flash_attention_2, which 0.9's
        dotted `--ds.attn_implementation` keeps. A launch with OpenRLHF's flat flags and neither is read as the former."""
        if not self._openrlhf() or "model.attn_implementation" in self.origins:
            return
        named = {s.key.lstrip("-").replace("-", "_"): s for s in self.primary.settings}
        switch = named.get("flash_attn")
        if switch is not None and str(self.scalar(switch)).strip().lower() in ("true", "1", "[]"):
            self.set("model.attn_implementation", "flash_attention_2", switch)
        elif any("." in name for name in named):  # 0.9's dotted groups: --ds.attn_implementation's default
            self.set("model.attn_implementation", "flash_attention_2", Setting("(OpenRLHF 0.9 default)", None, self.primary.label, self.primary.launch_line))
        else:
            where = Setting("--flash_attn", None, self.primary.label, self.primary.launch_line)
            self.set("model.attn_implementation", "eager", where)
            self.note(
                "info",
                where,
                "not passed: OpenRLHF up to 0.8.9 loads the model with eager attention without it (models/actor.py), which "
                "keeps every layer's seq x seq attention weights; planned eager (0.8.10 made flash_attention_2 the default)",
                "pass --flash_attn (OpenRLHF <= 0.8.9) or --attn_implementation flash_attention_2.",
            )

    def _ppo(self) -> None:
        """PPO's other models (planner knobs `trainer=ppo`, `critic_model`, `reward_model_path`, `ref_model`, `critic_update`:
        vramfit/planner/ppo.py) as the launched PPO runs them.

        - OpenRLHF's non-Ray `openrlhf.cli.train_ppo` (read at 3b116caf, 2024-11-13: cli/train_ppo.py `train`): every
          process builds the actor and, for the gae estimator (its default), the critic (`--critic_pretrain`, else
          `--reward_pretrain`, else with `--remote_rm_url` the actor's `--pretrain`), both trained with their own optimizer
          under the run's ZeRO stage (`strategy.prepare` -> `_ds_init_train_model`); the reward model (`--reward_pretrain`,
          none with `--remote_rm_url`) and the reference (`initial_model`, a second Actor of `--pretrain`) frozen under
          `get_ds_eval_config` (ZeRO-3 when the run is ZeRO-3, else stage 0: whole). ppo_trainer.py `ppo_train` steps the
          actor, then the critic (`training_step_actor`, `training_step_critic`): the critic trains apart. Each sequence
          is `--prompt_max_len` + `--generate_max_len` tokens (defaults 1024 + 1024).
        - ms-swift's `swift rlhf --rlhf_type ppo` (swift/llm/train/rlhf.py `_prepare_model_tokenizer`): the value model is
          `--reward_model` loaded again and prepared with the tuner (`prepare_model`: LoRA when the run is LoRA), the reward
          model frozen, the reference a copy unless the policy is a PEFT model; it runs TRL's PPOTrainer, whose
          PolicyAndValueWrapper trains policy and value model in one backward (critic_update=joint)."""
        from vramfit import models

        program = (self.primary.program or "").removeprefix("-m ").replace("/", ".")  # `python3 -m openrlhf.cli...`
        openrlhf = program.startswith("openrlhf.cli.train_ppo")
        swift = (self.primary.program or "").startswith("swift ") and self.trainer == "ppo"
        flags = {st.key.lstrip("-").replace("-", "_"): st for src in self.sources for st in src.settings}
        # TRL's examples/scripts/ppo/ppo.py (PPOConfig, gone from the pinned TRL): the policy and its reference from
        # --sft_model_path, the value and reward models from --reward_model_path, PPOTrainer's PolicyAndValueWrapper
        trl = program.endswith(".py") and "ppo" in program.rsplit("/", 1)[-1] and "reward_model_path" in flags
        if not (openrlhf or swift or trl):
            if self.trainer == "ppo":  # a PPO stage of another runner (LLaMA-Factory `stage: ppo`, ...): said, not guessed
                what = "PPO's reference, reward and value models (this runner's are not modelled)"
                self.terms_missing.append(what)
                where = Setting(self.primary.program or "", None, self.primary.label, self.primary.launch_line)
                self.note("info", where, f"{what}: the plan holds the policy's training only, so the review is incomplete")
            return
        planner = self.recipe.setdefault("planner", {})
        origin = Origin(self.primary.label, self.primary.program or "", self.primary.launch_line)
        planner["trainer"] = "ppo"
        self.origins["planner.trainer"] = origin
        used: list[Setting] = []

        def text(name: str) -> str | None:
            st = flags.get(name)
            if st is None:
                return None
            used.append(st)
            value = self.scalar(st)
            return None if value in (None, "", [], True) else str(value)

        def resolved(name: str, role: str, setting: Setting | None) -> str | None:
            """The config.json of a model named in the launch, or None (said: the review is then incomplete)."""
            found = models.resolve(name, self.primary.path.parent)
            if found.path is not None:
                return str(Path(found.path).resolve())
            what = f"the {role} '{name}' (no config.json found: looked in {', '.join(found.looked)})"
            self.terms_missing.append(f"PPO's {what}")
            where = setting or Setting(self.primary.program or "", None, self.primary.label, self.primary.launch_line)
            self.note(
                "info",
                where,
                f"PPO: {what} is not planned, so the review is incomplete (a 'fits' would understate the run)",
                "pass its config.json as a local folder beside the script, or run where the Hub can be reached.",
            )
            return None

        parts = []
        origin_setting = Setting(self.primary.program or "", None, self.primary.label, self.primary.launch_line)
        if openrlhf:
            prompt, generate = text("prompt_max_len"), text("generate_max_len")
            try:
                total = int(prompt or 1024) + int(generate or 1024)  # cli/train_ppo.py defaults: 1024 + 1024
            except ValueError:
                total = None
            if total is not None:
                where = (
                    flags.get("generate_max_len")
                    or flags.get("prompt_max_len")
                    or Setting("(--prompt_max_len + --generate_max_len: OpenRLHF's defaults 1024 + 1024)", None, self.primary.label, self.primary.launch_line)
                )
                self.set("data.max_length", total, where)
                parts.append(f"each sequence {prompt or 1024} prompt + {generate or 1024} generated tokens")
            remote = text("remote_rm_url")
            reward = None if remote else text("reward_pretrain")
            gae = (text("advantage_estimator") or "gae") == "gae"
            critic = text("critic_pretrain") or (reward if not remote else text("pretrain")) if gae else None
            ray = program.startswith("openrlhf.cli.train_ppo_ray")
            everything = ray and self._switch(flags, "colocate_all_models", "train.colocate_all")
            if ray:
                try:  # train_ppo_ray.py: the actor's DeepSpeed group is actor_num_nodes x actor_num_gpus_per_node (8 x 1 default)
                    group = int(text("actor_num_nodes") or text("actor.num_nodes") or 1) * int(
                        text("actor_num_gpus_per_node") or text("actor.num_gpus_per_node") or 8
                    )
                except ValueError:
                    group = None
                if group:
                    where = flags.get("actor_num_gpus_per_node") or flags.get("actor.num_gpus_per_node") or origin_setting
                    self.note(
                        "info",
                        where,
                        f"the actor's Ray group is {group} GPUs: the plan is one of them, with ZeRO sharding over the GPUs the "
                        "review is given (--gpus / --nodes)",
                        f"pass --gpus {group} (and --nodes) to plan the actor's group as OpenRLHF shards it.",
                    )
            if ray and not everything:
                # train_ppo_ray.py: each model its own Ray actor group on its own GPUs unless colocated; the plan is the
                # actor's GPUs with what the colocation flags put beside it
                apart = [what for what, there in (("the critic", critic), ("the reward model", reward)) if there]
                reward = critic = None
                if apart:
                    what = " and ".join(apart)
                    self.terms_missing.append(f"OpenRLHF's {what} on GPUs of their own (no --colocate_all_models)")
                    parts.append(f"{what} on GPUs of their own (not planned here: only --colocate_all_models puts them on the actor's)")
            if reward:
                path = resolved(reward, "reward model", flags.get("reward_pretrain"))
                if path:
                    planner["reward_model_path"] = path
                    parts.append(f"a frozen reward model, {reward}")
            elif remote:
                parts.append("rewards from --remote_rm_url: no reward model on these GPUs")
            if critic:
                path = resolved(critic, "critic", flags.get("critic_pretrain") or flags.get("reward_pretrain"))
                planner["critic_model"] = path or "none"
                if path:
                    parts.append(f"a critic ({critic} with a value head) trained apart, with its own optimizer")
            else:
                planner["critic_model"] = "none"
                if not gae:
                    parts.append("no critic (advantage_estimator is not gae)")
            try:
                kl = float(text("init_kl_coef") or 0.01)  # cli/train_ppo_ray.py default 0.01
            except ValueError:
                kl = 0.01
            # the reference: non-Ray train_ppo always builds initial_model (3b116caf); train_ppo_ray only for
            # init_kl_coef > 0 (v0.8.5 `if args.init_kl_coef <= 0: ref_model = None`), on the actor's GPUs with
            # --colocate_actor_ref / --colocate_all_models
            beside = not ray or everything or self._switch(flags, "colocate_actor_ref", "train.colocate_actor_ref")
            if beside and (not ray or kl > 0):
                planner["ref_model"] = "copy"  # a second Actor of --pretrain, whatever the LoRA settings
                parts.append("a frozen reference copy of the actor")
            else:
                planner["ref_model"] = "none"
                parts.append("no reference model on the actor's GPUs" + (" (init_kl_coef 0)" if kl <= 0 else " (its own GPUs)"))
            # experience making: micro_rollout_batch_size sequences per generate / no-grad forward (3b116caf default 8)
            rollout, generate = text("micro_rollout_batch_size"), text("generate_max_len")
            try:
                planner["rollout_micro_batch"] = int(rollout or 8)
                planner["max_new_tokens"] = int(generate or 1024)
            except ValueError:
                pass
            engines = text("vllm_num_engines") or text("vllm.num_engines")
            if ray and not everything and engines not in (None, "0"):
                planner["rollout_vllm"] = "server"  # the vLLM engines on GPUs of their own: no generation on the actor's
            if ray and everything and engines not in (None, "0"):
                # --colocate_all_models puts the vLLM engines on the actor's GPUs at vllm_gpu_memory_utilization (default
                # 0.95 at v0.8.5), asleep outside generation with --vllm_enable_sleep
                util = text("vllm_gpu_memory_utilization") or text("vllm.gpu_memory_utilization") or "0.95"
                where = flags.get("colocate_all_models") or flags.get("train.colocate_all")
                planner["rollout_vllm"] = "colocate"
                planner["rollout_vllm_gpu_memory_utilization"] = float(util)
                planner["rollout_vllm_sleep"] = self._switch(flags, "vllm_enable_sleep", "vllm.enable_sleep")
                self.origins["planner.rollout_vllm"] = Origin(where.file, where.key, where.line)
                if self._switch(flags, "deepspeed_enable_sleep", "ds.enable_sleep"):
                    # --deepspeed_enable_sleep: the DeepSpeed models' states in host RAM while the engines generate
                    planner["offload_outside_update"] = "weights,optimizer"
                    if planner.get("critic_model") not in (None, "none"):
                        planner["critic_offload_outside_update"] = "weights,optimizer"
                parts.append(f"the vLLM engines on the same GPUs ({float(util):g} of each)")
            planner["critic_update"] = "separate"
        elif trl:
            reward = text("reward_model_path")
            if reward:
                path = resolved(reward, "reward model", flags.get("reward_model_path"))
                planner["reward_model_path"] = path or "none"
                planner["critic_model"] = path or "none"  # ppo.py: value_model from reward_model_path (num_labels=1)
                if path:
                    parts.append(f"a frozen reward model and a value model trained from it, {reward}")
            planner["critic_update"] = "joint"
            parts.append("policy and value model trained in one backward (TRL's PPOTrainer); the reference a copy unless the policy is a PEFT model")
        else:
            # ms-swift's own argument defaults, which a PPO launch (TrainingArguments-based, no TRL config class here) keeps:
            # swift/trainers/arguments.py TrainArgumentsMixin `gradient_checkpointing: bool = True`; model_args.py
            # `_init_mixed_precision`: bf16 (fp16) from --torch_dtype bfloat16 (float16 / float32) where not set
            default = Setting("(ms-swift default)", None, self.primary.label, self.primary.launch_line)
            if "training.gradient_checkpointing" not in self.origins:
                self.set("training.gradient_checkpointing", True, default)
            dtype = text("torch_dtype")
            if dtype and "training.bf16" not in self.origins and "training.fp16" not in self.origins:
                self.set("training.bf16" if dtype == "bfloat16" else "training.fp16", True, flags["torch_dtype"])
            reward = text("reward_model")
            if reward:
                path = resolved(reward, "reward model", flags.get("reward_model"))
                if path:
                    planner["reward_model_path"] = path
                    planner["critic_model"] = path  # the value model: --reward_model loaded again (rlhf.py)
                    parts.append(f"a frozen reward model and a value model trained from it, {reward}")
                else:
                    planner["critic_model"] = "none"
            planner["critic_update"] = "joint"
            parts.append("policy and value model trained in one backward (TRL's PPOTrainer)")
        keys = {st.key for st in used}
        self.not_modelled = [k for k in self.not_modelled if k not in keys]
        self.findings = [f for f in self.findings if not (f.key in keys and "own argument" in f.what)]
        self.findings.append(Finding("info", origin.file, origin.key, f"PPO: planned with its other models: {'; '.join(parts)}", line=origin.line))

    def _switch(self, flags: dict[str, Setting], *names: str) -> bool:
        """An argparse store_true switch (or a value that reads as true) any of `names` sets."""
        for name in names:
            st = flags.get(name)
            if st is not None and str(self.scalar(st)).strip().lower() in ("true", "1", "[]", "yes"):
                return True
        return False

    def _openrlhf_argument(self, name: str, setting: Setting) -> None:
        value = self.scalar(setting)
        if name in ("ds.param_dtype", "param_dtype"):
            if value in ("bf16", "fp16"):
                self.set(f"training.{value}", True, setting)
            return
        if name in ("lora_rank", "ds.lora.rank") and isinstance(value, int) and not isinstance(value, bool):
            if value > 0:  # OpenRLHF: LoRA where the rank is above 0 (its default, 0: none)
                self.method, self.method_origin = "lora", Origin(setting.file, setting.key, setting.line)
                self.set("model.lora.r", value, setting)
            return
        target = OPENRLHF[name]
        if target.startswith("training."):
            self.set(target, True if value == [] or value is True else value, setting) if isinstance(value, (bool, int)) else None
            return
        if target == "model.id" and not isinstance(value, str):
            return self.not_modelled.append(setting.key)
        self.set(target, value, setting)

    def _file_argument(self, name: str, written: str, setting: Setting) -> None:
        """A TrainingArguments field that names a JSON file (`--fsdp_config config/fsdp_config.json`): the file is read from
        beside the script, as the Trainer reads it from where the script runs, and its mapping is the value; never handed
        to transformers as a path it would open from vramfit's own folder."""
        source = next((s for s in self.sources if s.label == setting.file), self.primary)
        found = locate(written, source.path, source.cwd)
        document = None
        if found is not None:
            try:
                text = found.read_text(encoding="utf-8")
                document = json.loads(text) if found.suffix.lower() == ".json" else yaml.safe_load(text)
            except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError):
                document = None
        if not isinstance(document, dict):
            why = "is not beside the script" if found is None else "does not hold a mapping vramfit can read"
            self.note("info", setting, f"{written} {why}: its settings are not reviewed", f"pass {written} too, or write its settings in the script.")
            self.not_modelled.append(setting.key)
            return
        if name == "fsdp_config":
            document = self._fsdp_checkpointing(document, setting, written)
        self.set(f"training.{name}", document, setting)

    def _unfrozen(self, name: str, setting: Setting) -> None:
        """Training only the weights a list names, the rest frozen: axolotl's `unfrozen_parameters` (utils/freeze.py
        `freeze_layers_except`, applied by train.py after the model loads), or the Spectrum YAML a TRL script's
        `spectrum_config_path` names (philschmid run_sft.py `setup_model_for_spectrum`: each line starting '- ' is a
        regex, re.match against named_parameters). Planned as the planner's `unfrozen_parameters`; with a LoRA adapter
        (see `_unfrozen_with_adapter`) or a file that cannot be read, not modelled as before."""
        value = setting.value
        if name == "spectrum_config_path":
            written = str(self.scalar(setting) or "")
            source = next((s for s in self.sources if s.label == setting.file), self.primary)
            found = locate(written, source.path, source.cwd) if written else None
            patterns: list[str] = []
            if found is not None:
                try:
                    from vramfit import inputs

                    text = inputs.read_text(found, "spectrum config")
                    patterns = [line.split("- ")[1] for line in text.splitlines() if line.startswith("- ")]
                except (ConfigError, IndexError):
                    patterns = []
            if not patterns:
                why = "is not beside the script" if found is None else "lists no '- <regex>' lines"
                self.note("info", setting, f"{written} {why}: the weights it trains are not known", f"pass {written} too.")
                return self.not_modelled.append(setting.key)
            where = f"{written} lists {len(patterns)} regexes"
        else:
            items = value if isinstance(value, list) else [value]
            patterns = [axolotl_unfrozen(str(v)) for v in items if v not in (None, "")]
            if not patterns:
                return
            where = f"{len(patterns)} regexes"
        self.recipe.setdefault("planner", {})["unfrozen_parameters"] = patterns
        self.origins["planner.unfrozen_parameters"] = Origin(setting.file, setting.key, setting.line)
        self.unfrozen_said = (setting, where)  # said by _unfrozen_with_adapter, once the method is known

    def _unfrozen_with_adapter(self) -> None:
        """axolotl freezes after the adapter is applied (loaders/model.py ModelLoader.load -> `_load_adapters`, then
        train.py `freeze_layers_except(model, cfg.unfrozen_parameters)`): its regexes meet the PeftModel's names
        (base_model.model....), LoRA's A / B included, a trainable set the planner does not build; a TRL script's
        SFTTrainer applies PEFT after the Spectrum freezing, and PEFT freezes the base anyway. So with an adapter the
        list stays not modelled (and the review says its verdict is an upper bound, `_optimizer_not_modelled`)."""
        planner = self.recipe.get("planner") or {}
        if "unfrozen_parameters" not in planner or self.unfrozen_said is None:
            return
        setting, where = self.unfrozen_said
        if self.recipe.get("method") in ("lora", "qlora") or bool(self.recipe.get("model", {}).get("lora")):
            del planner["unfrozen_parameters"]
            self.not_modelled.append(self.origins.pop("planner.unfrozen_parameters").key)
            self.note(
                "info",
                setting,
                f"{where} of the weights that train, with a LoRA adapter: not modelled (the adapter's weights are planned as the "
                "trainable ones; axolotl matches the list against the PEFT model's names, base_model.model..., after the "
                "adapter is applied)",
            )
        else:
            self.note("info", setting, f"{where} of the weights that train (the rest frozen): planned as full fine-tuning of those weights")

    def _fsdp_checkpointing(self, fsdp: dict, setting: Setting, written: str) -> dict:
        """FSDP's own activation checkpointing (TrainingArguments fsdp_config `activation_checkpointing`, accelerate's and
        axolotl's `fsdp_activation_checkpointing`) checkpoints each wrapped layer, as gradient_checkpointing does: planned
        as gradient checkpointing. The config is returned without it, since transformers refuses the two together."""
        keys = [k for k in ("activation_checkpointing", "fsdp_activation_checkpointing") if fsdp.get(k) in (True, "true", "True")]
        # FSDP applies it to the wrapped layers whatever the Trainer's gradient_checkpointing says: a `false` there only turns
        # off the Trainer's own (the pairing accelerate and ms-swift's sft_args.py ask for: "use activation_checkpointing in
        # fsdp_config instead"), so it is planned on either way
        if keys and self.get("training.gradient_checkpointing") is not True:
            self.set("training.gradient_checkpointing", True, setting)
            self.note("info", setting, f"{written}: {keys[0]} true checkpoints each FSDP-wrapped layer: planned as gradient checkpointing")
        return {k: v for k, v in fsdp.items() if k not in keys}

    def _quant_setting(self, name: str, value: Any, setting: Setting) -> bool:
        """A BitsAndBytesConfig field (planned only when the model is quantized); True when it was taken."""
        key, allowed = QUANT_SETTINGS[name]
        if value == LOADING_DTYPE:  # the program sets it to the dtype the model loads in: the files' torch_dtype
            value = next((s.value for src in self.sources for s in src.settings if s.key.lstrip("-") in ("torch_dtype", "dtype")), None)
        if isinstance(value, str):
            value = value.removeprefix("torch.")
        if value in allowed and not (isinstance(value, int) and not isinstance(value, bool) and key != "double_quant"):
            self.set(f"model.quantization.{key}", value, setting)
            return True
        self.not_modelled.append(setting.key)
        return False

    def _beside(self, setting: Setting, name: str) -> bool:
        """The file that holds `setting` also sets `name` (either spelling)."""
        source = next((s for s in self.sources if s.label == setting.file), None)
        return source is not None and any(s.key.lstrip("-").replace("-", "_") == name for s in source.settings)

    def axolotl_special(self, name: str, setting: Setting) -> None:
        value = setting.value
        if name == "adapter" and value in ("lora", "qlora"):
            self.method, self.method_origin = value, Origin(setting.file, setting.key, setting.line)
        elif name == "lora_target_linear" and value is True:
            self.set("model.lora.target_modules", "all-linear", setting)
        elif name in ("load_in_4bit", "load_in_8bit") and value is True:
            self.set("model.quantization.bits", 4 if name == "load_in_4bit" else 8, setting)
        elif name in LEGACY_ATTENTION_FLAGS and value is True:
            impl = LEGACY_ATTENTION_FLAGS[name]
            self.set("model.attn_implementation", impl, setting)
        elif name == "plugins":
            self.liger_plugin = LIGER_PLUGIN in (value or [])
            self.cce_plugin = setting if CCE_PLUGIN in (value or []) else None
        elif name == "cut_cross_entropy":
            self.cce_setting = setting
        elif name == "chunked_cross_entropy" and value is True:
            # axolotl loaders/patch_manager.py `_apply_chunked_cross_entropy_patch` -> monkeypatch/loss/chunked.py (at
            # 130ef7c51): transformers' ForCausalLM loss replaced by a chunked cross-entropy over the whole 16-bit logits,
            # its per-chunk function compiled (`_build_chunked_ce_loss_fn`: torch.compile(..., backend="inductor"))
            planner = self.recipe.setdefault("planner", {})
            planner["loss_kernel"], planner["compile_loss"] = "chunked", True
            self.origins["planner.loss_kernel"] = self.origins["planner.compile_loss"] = Origin(setting.file, setting.key, setting.line)
        elif name == "chunked_cross_entropy_num_chunks" and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            self.recipe.setdefault("planner", {})["loss_chunks"] = value  # patch_chunked_ce_loss_fn(num_chunks); default 8
            self.origins["planner.loss_chunks"] = Origin(setting.file, setting.key, setting.line)
        elif name == "quantize_moe_experts" and value is True:
            # axolotl monkeypatch/moe_quant.py: the fused 3-D expert tensors quantized as they load (with load_in_4bit /
            # load_in_8bit; its schema refuses the key without them)
            self.recipe.setdefault("planner", {})["quantize_moe_experts"] = True
            self.origins["planner.quantize_moe_experts"] = Origin(setting.file, setting.key, setting.line)
        elif name in ("bf16", "fp16", "tf32"):
            self.set(f"training.{name}", value, setting)  # "auto" is resolved against the GPU later

    def unknown(self, setting: Setting, axolotl: bool) -> None:
        name = setting.key.lstrip("-")
        source = next(s for s in self.sources if s.label == setting.file)
        dashed = setting.key.startswith("--")
        if dashed and source.launcher and source.launcher != "python" and setting.key in launcher_options(_parser_of(source.launcher)):
            self.note(
                "warning",
                setting,
                f"{setting.key} is a {source.launcher} option, but it comes after the script, so the script gets it, not {source.launcher}",
                f"move {setting.key} before {source.program}.",
            )
            return
        # sets sorted: equally close names are offered in one order on every run (a set's order changes with the hash seed)
        known = [*self.fields, *ALIASES, *METHOD_SWITCHES, *TRAIN_SWITCHES, *sorted(UPSTREAM_SPECIAL), *sorted(NOT_MODELLED), *RENAMED]
        program = source.program or ""
        argparse_cli = program.startswith("swift ") or (_known_argument_set(program) and not program.startswith(("axolotl", "-m axolotl")))
        if dashed and not axolotl and source.kind == "shell" and argparse_cli:
            # HfArgumentParser is an argparse.ArgumentParser (allow_abbrev): an option that is the start of exactly one of
            # the parser's options is that option (ms-swift#5199's --max_pixel is --max_pixels)
            flat = name.replace("-", "_")
            whole = sorted({k for k in known if k.startswith(flat) and k != flat and "." not in k})
            if len(whole) == 1:
                self.note(
                    "info",
                    setting,
                    f"{setting.key} is not an argument of its own: the parser (argparse, which takes the start of an option for the "
                    f"option) reads it as --{whole[0]}; reviewed so",
                    f"write it in full: --{whole[0]}.",
                )
                return self.read(Setting(f"--{whole[0]}", setting.value, setting.file, setting.line), axolotl)
        if axolotl:
            known += [*AXOLOTL, *sorted(AXOLOTL_SPECIAL), *sorted(AXOLOTL_NOT_MODELLED)]
        hint = did_you_mean(setting.key if dashed else f"--{name}", [f"--{k}" for k in known])
        if not dashed:
            hint = hint.replace("'--", "'")
        what = "flag" if dashed else "key"
        cls = self.cls_name()
        kinds = f"an axolotl, {cls} key" if axolotl else f"a {cls} or launcher argument"
        own_parser = program.startswith("swift ") or source.kind == "training_args"  # ms-swift, LLaMA-Factory, open-r1: their own dataclasses
        declared = self.program is not None and source is self.primary and name.replace("-", "_") in self.program.declared
        # one slip from a field, unless the launched program declares the argument itself (fsdp_qlora's --use_gradient_checkpointing)
        # a dotted flag (`--eval.steps`: OpenRLHF's, jsonargparse's and tyro's argument groups) is never a slip of a flat field
        typo = not own_parser and not declared and "." not in name and difflib.get_close_matches(name.replace("-", "_"), self.fields, n=1, cutoff=0.9)
        if name.replace("-", "_") in PLANNER_SWITCHES:
            return  # planned by _planner_settings (packing / padding-free / offloading switches)
        if program.startswith("swift ") and name in SWIFT_FREEZE:
            return  # planned by _swift_tuning, once the method and the model are known
        if not axolotl and source.kind in ("shell", "training_args") and not _known_argument_set(program) and not typo:
            self.note("info", setting, f"{setting.key} is {program or 'the script'}'s own argument (not {kinds}): read, not reviewed")
            return
        if not axolotl and name in trl_script_fields():  # TrlParser's ScriptArguments / ModelConfig: data and model loading
            self.not_modelled.append(setting.key)
            return
        parsed_by, unknowable = (None, None) if axolotl else self._parsed_by(name.replace("-", "_"))
        if parsed_by is not None:
            # a field of the argument classes the program's own parser is built from (TRL's experimental trainers' configs:
            # NashMDConfig's reward_model_path, GKD's teacher_model_name_or_path, ...): a real argument, not planned
            self.note("info", setting, f"{setting.key} is an argument of {parsed_by}'s parser classes: read, not reviewed")
            return
        if unknowable is not None and not typo:  # one slip from a TrainingArguments field is still a slip
            self.note(
                "info",
                setting,
                f"{setting.key} was not checked: the program's parser takes {unknowable}, which the installed libraries do not "
                "have (a newer release's), so its arguments are not known here",
            )
            return
        if axolotl and name in axolotl_schema():
            self.not_modelled.append(setting.key)
            return
        if axolotl and name in axolotl_removed():  # a key of earlier releases: the config dates from one of them
            self.note(
                "info",
                setting,
                f"{setting.key} is an axolotl key up to {axolotl_removed()[name]}, gone from the schema of today's axolotl: "
                "read as written for that release, not reviewed",
                f"drop {setting.key} when you move to a current axolotl.",
            )
            return
        plugins = (source.document or {}).get("plugins") if axolotl and isinstance(source.document, dict) else None
        if plugins and isinstance(plugins, list):
            # axolotl's plugins add config keys of their own (BasePlugin.get_input_args), which its schema does not list
            self.note(
                "info",
                setting,
                f"{setting.key} is not in axolotl's schema: read as an argument of the plugins the config loads "
                f"({', '.join(str(p).rsplit('.', 1)[-1] for p in plugins)}), not reviewed",
            )
            return
        self.note("warning", setting, f"unknown {what} {setting.key}: not {kinds}.{hint}", f"remove {setting.key} or correct its name.")

    def _parsed_by(self, name: str) -> tuple[str | None, str | None]:
        """(the label of the launched Python program whose parser's argument classes have the field `name`, the parser class
        whose fields cannot be known here where none has it)."""
        programs = [src for src in self.sources if src.path.suffix == ".py"]
        if self.program is not None:
            programs.append(self.program)
        elif self.primary.kind == "shell" and self.primary.program:
            found = program_mod.find(self.primary.program, self.primary.path, self.primary.cwd)
            programs += [found] if found is not None else []
        for p in programs:
            fields, missing = program_mod.parser_fields(p.text)
            if name in fields:
                return p.label, None
            if missing is not None:
                return None, missing
        return None, None

    # ---- the whole recipe
    def build(self, model_config: str | None) -> Mapped:
        for source in self.sources:
            if source.kind in ("shell", "training_args", "axolotl", "program"):
                for setting in source.settings:
                    self.read(setting, source.kind == "axolotl")
            elif source.kind == "litgpt":
                self._litgpt(source)
            elif source.kind == "llmfoundry":
                self._llmfoundry(source)
            elif source.kind == "verl":
                self._verl(source)
        self._program_defaults()
        self._summed_length()
        self._swift_defaults()
        self._openrlhf_attention()
        self._ppo()
        self._model_name()
        self._liger()
        self._cce()
        self._trl_defaults()
        self._model(model_config or self.inline_model)
        if self.inline_model and not model_config:
            self.model_how = "llm-foundry's inline MPT"
        self._litgpt_model()
        self._swift_length()
        self._method()
        self._unfrozen_with_adapter()
        self._swift_tuning()
        self._swift_environment()
        self._swift_audio_output()
        self._data()
        self._longest_sample()
        self._precision()
        env = {k: v for k, v in self.primary.env.items() if k in MEMORY_ENV}
        if env:
            self.recipe["env"] = env
        if any(s.kind == "verl" for s in self.sources) and "PYTORCH_CUDA_ALLOC_CONF" not in env:
            # verl's actor trains with expandable segments: fsdp_workers.py rollout_mode ends with set_expandable_segments(True)
            self.recipe.setdefault("env", {})["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        mapped = Mapped(
            self.recipe,
            self.origins,
            self.primary,
            self.settings,
            self.sources,
            self.findings,
            not_modelled=self.not_modelled,
            terms_missing=self.terms_missing,
            model_missing=self.model_missing,
            model_how=self.model_how,
            model_by_name=self.model_by_name,
        )
        if self.model_missing:
            o = self.model_missing_origin
            mapped.findings.append(
                Finding(
                    "info",
                    o.file,
                    o.key,
                    self.model_missing,
                    "pass --model-config path/to/config.json (the model's config.json from its Hugging Face page), or run where the Hub can be reached.",
                    "planner",
                    o.line,
                )
            )
        mapped.trl_pin = self.find_pin(self.primary, "trl") if self.grpo else None
        mapped.transformers_pin = self._transformers_pin()
        mapped.accelerate_pin = self.find_pin(self.primary, "accelerate")
        self._linear_experts(mapped)
        self._sixteen_bit_experts(mapped)
        mapped.attention_chosen, mapped.attention_chosen_for = self._attention_chosen()
        mapped.image_assumed = self.image_assumed
        mapped.length_cap, mapped.length_bound, mapped.longest_unknown = self.length_cap, self.length_bound, self.longest_unknown
        mapped.optimizer_assumed = self._optimizer_not_modelled() or self.litgpt_optimizer
        mapped.litgpt = next((s for s in self.sources if s.kind == "litgpt"), None)
        mapped.llmfoundry = next((s for s in self.sources if s.kind == "llmfoundry"), None)
        mapped.verl = next((s for s in self.sources if s.kind == "verl"), None)
        split = self._device_map()
        mapped.sharding_assumed = self._sharding_not_modelled() or split
        mapped.python_device_map = self._python_device_map()
        mapped.one_process = one_process.found(self.primary, self.program.text if self.program is not None else None)
        mapped.switches = self.program.switches if self.program is not None else frozenset()
        self._deepspeed(mapped)
        self._launcher(mapped)
        self._planner_settings(mapped)
        self._head(mapped)
        return mapped

    def _linear_experts(self, mapped: Mapped) -> None:
        """A quantized base under a pinned transformers 4 release, of a MoE model type transformers 5 fused: its experts
        were nn.Linear modules then (transformers 5 merges those checkpoints' per-expert `experts.*.<proj>.weight` into
        3-D parameters as it loads them: conversion_mapping.py's WeightConverter with MergeModulelist), and bitsandbytes
        quantized them with every other linear: planned as the planner's `quantize_moe_experts`, said. The installed
        transformers builds the fused layout, which the plan keeps."""
        pin = mapped.transformers_pin
        quantized = ((self.recipe.get("model") or {}).get("quantization") or {}).get("bits")
        if pin is None or pin.major != 4 or pin.op not in ("==", "~=") or not quantized or not isinstance(getattr(self, "config", None), dict):
            return
        if (self.recipe.get("planner") or {}).get("quantize_moe_experts"):
            return
        # the checkpoint's layout decides, whichever code loads it (an `auto_map` model's own code too): a VLM's text model
        text = self.config.get("text_config")
        model_type = str((text if isinstance(text, dict) and text.get("model_type") else self.config).get("model_type") or "")
        if not model_type or not _experts_merged_on_load(model_type):
            return
        self.recipe.setdefault("planner", {})["quantize_moe_experts"] = True
        o = self.origins.get("model.quantization.bits") or Origin(self.settings.label, "", self.settings.launch_line)
        self.origins["planner.quantize_moe_experts"] = o
        mapped.findings.append(
            Finding(
                "info",
                o.file,
                o.key,
                f"planned with the MoE experts quantized: under {pin}, {model_type}'s experts are nn.Linear modules, which "
                f"bitsandbytes quantizes with the other linears (transformers 5 fuses them into 3-D parameters it skips)",
                source="planner",
                line=o.line,
            )
        )

    def _sixteen_bit_experts(self, mapped: Mapped) -> None:
        """A quantized base whose MoE experts the run's transformers keeps as fused 3-D parameters, which bitsandbytes
        skips (it replaces nn.Linear only: transformers quantizers/quantizer_bnb_4bit.py `param_needs_quantization`), with
        no `quantize_moe_experts`: the experts load in 16 bits and most of the weights are theirs. Said, with their size,
        so that a QLoRA plan's weights read as what they are (axolotl docs/expert_quantization.qmd: "all expert weights
        being loaded in full bf16 precision"); axolotl's own switch quantizes them as they load."""
        quantized = ((self.recipe.get("model") or {}).get("quantization") or {}).get("bits")
        if not quantized or (self.recipe.get("planner") or {}).get("quantize_moe_experts") or not (self.recipe.get("model") or {}).get("config"):
            return
        from vramfit.planner import params

        try:
            experts = sum(params.summary(Path(self.recipe["model"]["config"])).expert_tensors)
        except Exception:  # noqa: BLE001 - a config the library cannot build is said by the plan itself
            return
        if not experts:
            return
        o = self.origins.get("model.quantization.bits") or Origin(self.settings.label, "", self.settings.launch_line)
        axolotl = self.settings.kind == "axolotl"
        mapped.findings.append(
            Finding(
                "info",
                o.file,
                o.key,
                f"the MoE experts stay 16-bit: {experts / 1e9:.1f} B parameters ({experts * 2 / 2**30:.1f} GiB) in fused 3-D "
                "tensors, which bitsandbytes does not quantize (it replaces nn.Linear modules only); planned so",
                "quantize_moe_experts: true (axolotl quantizes them as they load; with lora_target_parameters, not "
                "lora_target_linear), or a pre-quantized checkpoint."
                if axolotl
                else "",
                source="planner",
                line=o.line,
            )
        )

    def _head(self, mapped: Mapped) -> None:
        """The model class's output layer, as the files select it: a reward model (TRL's RewardTrainer loads
        AutoModelForSequenceClassification with num_labels=1; axolotl `reward_model: true` likewise), a process reward
        model (TRL's PRMTrainer script, axolotl `process_reward_model: true`: AutoModelForTokenClassification, 2 labels),
        a script's own `AutoModelFor...Classification` call, PEFT's task type (`--lora_task_type SEQ_CLS`, `task_type`),
        ms-swift's `--task_type` (seq_cls, embedding, reranker, generative_reranker; `--num_labels` alone means seq_cls:
        swift/model/model_meta.py) and `--rlhf_type rm` (seq_cls with 1 label since ms-swift v3.0.2,
        swift/arguments/rlhf_args.py `_init_rm`). Planned with the head the task builds (planner knobs `head`,
        `task_type`, `num_labels`, `negatives`, `positives`: vramfit/planner/heads.py), no vocabulary-wide logits."""
        from vramfit.planner import heads

        head, labels, origin, task = None, None, None, None
        swift = (self.primary.program or "").startswith("swift ")
        for src in self.sources:
            for st in src.settings:
                key = st.key.lstrip("-").replace("-", "_")
                value = st.value[0] if isinstance(st.value, list) and st.value else st.value
                if key in ("reward_model", "process_reward_model") and value in (True, "true", "True"):
                    head, labels = ("seq_cls", 1) if key == "reward_model" else ("token_cls", 2)
                    origin = Origin(st.file, st.key, st.line)
                elif key in ("lora_task_type", "task_type") and str(value).upper() in ("SEQ_CLS", "TOKEN_CLS") and head is None:
                    head, origin = str(value).lower(), Origin(st.file, st.key, st.line)
                elif swift and key == "task_type" and str(value).lower() in heads.SWIFT_TASKS and str(value).lower() != "causal_lm":
                    task, head, origin = str(value).lower(), heads.SWIFT_TASKS[str(value).lower()], Origin(st.file, st.key, st.line)
                elif swift and key == "num_labels" and str(value).isdigit() and int(value) > 0:
                    labels = int(value)
                    if head is None:  # model_meta.py: no task_type, num_labels given -> seq_cls
                        head, origin = "seq_cls", Origin(st.file, st.key, st.line)
        if swift and any(
            st.key.lstrip("-") == "task_type" and str(st.value[0] if isinstance(st.value, list) and st.value else st.value).lower() == "causal_lm"
            for st in self.primary.settings
        ):
            head = None  # `--task_type causal_lm` said outright: the causal LM whatever num_labels says
        named = {st.key.lstrip("-").replace("-", "_") for src in self.sources for st in src.settings}
        rm = self.trainer == "reward" and swift and "rlhf_type" in named
        if rm and head is None and not named & SWIFT2_ONLY:
            head, labels = "seq_cls", labels or 1  # ms-swift >= 3.0.2 `_init_rm`: task_type seq_cls, num_labels 1
            origin = next(
                (Origin(st.file, st.key, st.line) for src in self.sources for st in src.settings if st.key.lstrip("-").replace("-", "_") == "rlhf_type"),
                Origin(self.primary.label, self.primary.program or "", self.primary.launch_line),
            )
        python = self._python_file() or self.program
        text = python.text if python is not None else ""
        # transformers' AutoModelFor...Classification, or a model class of that family (2U1/Qwen2-VL-Finetune's
        # src/train/train_cls.py loads Qwen2_5_VLForSequenceClassification, its num_labels from `--num_labels`)
        call = re.search(r"\b(\w*)For(Sequence|Token)Classification\.from_pretrained\((.{0,400}?)\)", text, re.S)
        if call:
            if head is None:
                head = "seq_cls" if call.group(2) == "Sequence" else "token_cls"
                origin = Origin(python.label, f"{call.group(1)}For{call.group(2)}Classification", text[: call.start()].count("\n") + 1)
            found = re.search(r"num_labels\s*=\s*(\d+)", call.group(3))
            given = next(
                (st.value for src in self.sources for st in src.settings if st.key.lstrip("-") == "num_labels"),
                None,
            )
            given = given[0] if isinstance(given, list) and len(given) == 1 else given
            labels = labels or (int(found.group(1)) if found else int(given) if str(given).isdigit() else None)
        # LLaMA-Factory's `stage: rm` (and ms-swift 2.x's `--rlhf_type rm`) wrap the causal LM in TRL's
        # AutoModelForCausalLMWithValueHead instead, whose forward still computes the lm_head's logits: planned as lm
        staged = any(st.key.lstrip("-").replace("-", "_") in ("stage", "rlhf_type") for src in self.sources for st in src.settings)
        if head is None and self.trainer == "reward" and not staged:
            head, labels = "seq_cls", 1  # trl RewardTrainer: model_init_kwargs["num_labels"] = 1
            origin = self.method_origin or Origin(self.primary.label, self.primary.program or "", self.primary.launch_line)
        if head is None:
            return
        if labels is None and (self.trainer == "reward" or task == "reranker"):
            labels = 1  # ms-swift model_meta.py: "Default to 1 for reranker tasks"
        planner = mapped.recipe.setdefault("planner", {})
        planner["head"] = head
        if task is not None:
            planner["task_type"] = task
        if labels is not None and head in ("seq_cls", "token_cls"):
            planner["num_labels"] = labels
        mapped.origins["planner.head"] = origin
        mapped.findings.append(Finding("info", origin.file, origin.key, self._task_counts(planner, task, head, labels), source="planner", line=origin.line))

    def _task_counts(self, planner: dict, task: str | None, head: str, labels: int | None) -> str:
        """Set the sequences of one embedding / reranker sample (ms-swift's MAX_POSITIVE_SAMPLES / MAX_NEGATIVE_SAMPLES, read
        from the launch's environment) and say what the head is planned as."""
        from vramfit.planner import heads

        if head in ("seq_cls", "token_cls") and task != "reranker":
            what = "sequence-classification" if head == "seq_cls" else "token-classification"
            outputs = f"{labels} output{'s' if labels != 1 else ''}" if labels else "the config's num_labels outputs"
            return (
                f"planned as a {what} model: a score head of {outputs} in place of lm_head, "
                "no vocabulary-wide logits (transformers GenericFor" + ("Sequence" if head == "seq_cls" else "Token") + "Classification)"
            )
        env = self.primary.env
        said = []
        for name, knob in (("MAX_POSITIVE_SAMPLES", "positives"), ("MAX_NEGATIVE_SAMPLES", "negatives")):
            value = str(env.get(name, "")).strip()
            if head != "embedding" and value.isdigit() and (int(value) > 0 or knob == "negatives"):
                planner[knob] = int(value)
                said.append(f"{name}={value}")
        n, what = heads.sequences_per_sample(head, task, planner.get("negatives"), planner.get("positives"))
        if head == "embedding":
            return (
                "planned as an embedding model (ms-swift --task_type embedding): lm_head returns the hidden states, the last "
                f"token's is pooled; no vocabulary-wide logits; {n} sequences per sample ({what}): the data's hard negatives "
                "are not known here, each adds one sequence per sample"
            )
        kind = "a generative reranker (lm_head's yes / no rows only)" if head == "generative_reranker" else "a reranker (a 1-output score head)"
        source = ", ".join(said) if said else "ms-swift's defaults MAX_POSITIVE_SAMPLES=1, MAX_NEGATIVE_SAMPLES=7"
        return f"planned as {kind}, no vocabulary-wide logits; {n} sequences per sample in one batch ({what}, {source}; fewer where the data has fewer)"

    def _litgpt(self, source: Source) -> None:
        """A LitGPT fine-tuning config as the run its script makes of it (vramfit.review.litgpt): the keys it sets, LitGPT's
        defaults for those it does not (said), its precision, quantization and LoRA switches; the keys that do not change
        memory are read, not reviewed; keys LitGPT does not take are warnings. The strategy and the accumulation wait for
        the GPU count (litgpt_strategy)."""
        from vramfit.review import litgpt

        doc, label, which = source.document, source.label, source.program.rsplit("_", 1)[-1]
        at = {s.key: s for s in source.settings}
        assumed: list[str] = []

        def origin_of(key: str, value: Any) -> Setting:
            """Where `key` is written; LitGPT's default (said) where it is not, or written empty for a setting whose empty
            value means the default (precision)."""
            if key in at and at[key].value is not None:
                return at[key]
            assumed.append(f"{key} {value}")
            if key in at:
                return at[key]
            section = key.split(".", 1)[0] if "." in key else ""
            return Setting(f"({key}: LitGPT's default)", value, label, source.line_of(section) if section else None)

        def value_of(key: str, default: Any) -> Any:
            section, _, leaf = key.rpartition(".")
            holder = doc.get(section) if section else doc
            return holder.get(leaf, default) if isinstance(holder, dict) else default

        # the model: LitGPT downloads a Hub id into checkpoints/<org>/<name> and reads it from there
        written = str(doc["checkpoint_dir"])
        parts = [p for p in Path(written).parts if p not in ("/", ".")]
        model_id = written
        if not (Path(written) / "config.json").is_file() and not (source.path.parent / written / "config.json").is_file():
            parts = parts[1:] if parts[:1] == ["checkpoints"] else parts
            model_id = "/".join(parts[-2:]) if len(parts) >= 2 else written
        self.set("model.id", model_id, at["checkpoint_dir"])
        if model_id != written:
            self.note("info", at["checkpoint_dir"], f"read as the Hugging Face model {model_id} (LitGPT downloads a Hub id into checkpoints/{model_id})")
        # precision: Fabric's; LitGPT's default where none is written
        precision = str(doc["precision"]) if doc.get("precision") is not None else litgpt.DEFAULT_PRECISION
        where = origin_of("precision", f"{precision} (16-mixed on a GPU without bf16)")
        dtype, amp = litgpt.PRECISION[precision]
        self.recipe.setdefault("planner", {})["dtype"] = dtype
        self.origins["planner.dtype"] = Origin(where.file, where.key, where.line)
        if amp is not None:
            self.set(f"training.{amp}", True, where)
        if precision in litgpt.NOT_PLANNED_PRECISION:
            self.note("warning", where, f"precision {precision}: {litgpt.NOT_PLANNED_PRECISION[precision]}")
        # fit() binds `logits = model(input_ids, ...)`: the previous step's output lives until the next forward returns
        self.recipe["planner"]["keeps_previous_output"] = True
        self.origins["planner.keeps_previous_output"] = Origin(label, f"(finetune_{which}: fit's `logits = model(...)`)", None)
        # method: LoRA (its switches, LitGPT's defaults), quantized where quantize says
        quantize = doc.get("quantize")
        if which == "lora":
            first = next((k for k in litgpt.LORA_KEYS if k in at), "quantize" if "quantize" in at else "checkpoint_dir")
            self.method, self.method_origin = "lora", Origin(label, first, at[first].line)
            self.set("model.lora.r", value_of("lora_r", litgpt.LORA_DEFAULTS["lora_r"]), origin_of("lora_r", litgpt.LORA_DEFAULTS["lora_r"]))
            self.set("model.lora.alpha", value_of("lora_alpha", 16), origin_of("lora_alpha", 16))
            self.set("model.lora.dropout", value_of("lora_dropout", 0.05), origin_of("lora_dropout", 0.05))
            for key in litgpt.LORA_SWITCHES:
                if key not in at:
                    origin_of(key, str(litgpt.LORA_DEFAULTS[key]).lower())
            self.recipe.setdefault("planner", {})["loss_kernel"] = "chunked"  # lm_head in 128-token chunks
            self.origins["planner.loss_kernel"] = Origin(label, "(finetune_lora: lm_head_chunk_size=128)", None)
        else:
            self.method, self.method_origin = "full", Origin(label, "checkpoint_dir", at["checkpoint_dir"].line)
        if quantize is not None:
            bits, kind, double = litgpt.QUANTIZE[quantize]
            self.set("model.quantization.bits", bits, at["quantize"])
            if kind is not None:
                self.set("model.quantization.quant_type", kind, at["quantize"])
                self.set("model.quantization.double_quant", double, at["quantize"])
            self.set("model.quantization.compute_dtype", dtype, at["quantize"])  # BitsandbytesPrecision(mode, dtype of precision)
            self.recipe["planner"]["quantize_lm_head"] = True
            self.origins["planner.quantize_lm_head"] = Origin(at["quantize"].file, at["quantize"].key, at["quantize"].line)
            self.note("info", at["quantize"], f"{quantize}: Lightning's BitsandbytesPrecision quantizes every nn.Linear, lm_head included")
        # the batch and its length; the accumulation follows the ranks (litgpt_strategy)
        micro = value_of("train.micro_batch_size", litgpt.TRAIN_DEFAULTS["micro_batch_size"])
        self.set("training.per_device_train_batch_size", micro, origin_of("train.micro_batch_size", micro))
        origin_of("train.global_batch_size", litgpt.TRAIN_DEFAULTS["global_batch_size"])
        epochs = value_of("train.epochs", litgpt.TRAIN_DEFAULTS["epochs"])
        if epochs is not None:
            self.set("training.num_train_epochs", epochs, origin_of("train.epochs", epochs))
        if value_of("train.max_steps", None) is not None:
            self.set("training.max_steps", doc["train"]["max_steps"], at["train.max_steps"])
        length = value_of("train.max_seq_length", None)
        if length is not None:
            self.set("data.max_length", length, at["train.max_seq_length"])
        # the optimizer: a class name or {class_path, init_args}
        optimizer = doc.get("optimizer", "AdamW")
        name = str((optimizer.get("class_path") if isinstance(optimizer, dict) else optimizer) or "AdamW").rsplit(".", 1)[-1]
        where = at.get("optimizer") or origin_of("optimizer", "AdamW")
        if quantize is not None:
            if "AdamW" not in name:
                self.note(
                    "error",
                    where,
                    f"LitGPT quantized training takes AdamW only (utils.instantiate_bnb_optimizer: 'The chosen quantization format only supports the AdamW optimizer'), got {name}",
                    "write optimizer: AdamW.",
                )
            self.set("training.optim", "paged_adamw_32bit", where)  # bitsandbytes' PagedAdamW
        elif name in litgpt.OPTIMIZERS:
            self.set("training.optim", litgpt.OPTIMIZERS[name], where)
        else:
            self.set("training.optim", "adamw_torch", where)
            self.litgpt_optimizer = (f"the optimizer {name}", Origin(where.file, where.key, where.line))
        # what LitGPT refuses at start (finetune/*.py validate_args)
        train = doc.get("train") or {}
        for key in litgpt.UNSUPPORTED:
            if train.get(key) is not None:
                self.note(
                    "error",
                    at[f"train.{key}"],
                    f"litgpt finetune_{which} refuses it at start (validate_args: 'doesn't support the {key!r} argument')",
                    f"leave train.{key} empty.",
                )
        for section, key in (("train", "epochs"), ("eval", "max_new_tokens")):
            if isinstance(doc.get(section), dict) and key in doc[section] and doc[section][key] is None:
                self.note(
                    "error",
                    at[f"{section}.{key}"],
                    f"litgpt finetune_{which} requires it (validate_args: 'requires the {key!r} argument')",
                    f"write {section}.{key}: {5 if key == 'epochs' else 100}.",
                )
        # the rest: read, not reviewed; keys LitGPT does not take: warnings
        used = {"checkpoint_dir", "precision", "quantize", "devices", "num_nodes", "optimizer", *litgpt.LORA_KEYS}
        used |= {"train.micro_batch_size", "train.global_batch_size", "train.epochs", "train.max_steps", "train.max_seq_length"}
        used |= {f"train.{k}" for k in litgpt.UNSUPPORTED}
        takes = litgpt.TOP_KEYS - (set(litgpt.LORA_KEYS) | {"quantize"} if which == "full" else set())
        sections = {"train": litgpt.TRAIN_KEYS, "eval": litgpt.EVAL_KEYS, "log": litgpt.LOG_KEYS}
        for setting in source.settings:
            section, _, leaf = setting.key.rpartition(".")
            known = sections[section] if section in sections else takes
            if (leaf if section else setting.key) not in known:
                self.note(
                    "warning",
                    setting,
                    f"litgpt finetune_{which} takes no such key (its setup() arguments and litgpt/args.py; its command line refuses unknown keys)"
                    + did_you_mean(leaf or setting.key, sorted(known)),
                    f"remove {setting.key}, or correct its name.",
                )
            elif setting.key not in used and setting.value is not None:
                self.not_modelled.append(setting.key)
        self._read_as(label, f"litgpt finetune_{which} --config {source.path.name}", litgpt.COMMIT, "LitGPT", assumed)

    def _llmfoundry(self, source: Source) -> None:
        """An llm-foundry (Composer) YAML as the run train.py makes of it (vramfit.review.llmfoundry): the model (an MPT
        written inline, built as transformers' MptConfig, or a Hub id), the precision, FSDP's sharding and checkpointing,
        the micro-batch, the length and the optimizer, llm-foundry's / Composer's defaults for what it leaves out (said);
        the rest read, not reviewed (a note each). The accumulation and the sharding wait for the GPUs (llmfoundry_strategy)."""
        from transformers import MptConfig

        from vramfit.review import llmfoundry

        doc, label = source.document, source.label
        at = {s.key: s for s in source.settings}
        assumed: list[str] = []

        def where(key: str, default: Any = None) -> Setting:
            """Where `key` is written; else the default llm-foundry / Composer takes (said), pointed at its section."""
            if key in at:
                return at[key]
            assumed.append(f"{key} {default}")
            section = key.split(".", 1)[0] if "." in key else ""
            return Setting(f"({key}: llm-foundry's default)", default, label, source.line_of(section) if section else None)

        used = {"model.name", "max_seq_len", "precision", "device_train_microbatch_size", "global_train_batch_size", "optimizer.name"}
        model = doc["model"]
        # the model: an inline MPT as transformers' MptConfig (the same names), or the Hugging Face model named
        if model["name"] == "mpt_causal_lm":
            args, defaults = llmfoundry.mpt_config(model)
            assumed += [f"model.{d}" for d in defaults]
            folder = self.workdir / "llmfoundry"
            folder.mkdir(exist_ok=True)
            path = folder / "config.json"
            try:
                path.write_text(MptConfig(**args).to_json_string())
            except (TypeError, ValueError) as exc:  # transformers' strict fields: a value of the wrong type
                problems = Problems()
                problems.add(
                    label,
                    "model",
                    f"transformers' MptConfig refuses the inline MPT ({str(exc).splitlines()[0]})",
                    "write each model key as a number of its type (d_model: 4096).",
                )
                raise ConfigError(problems) from None
            self.inline_model = str(path.resolve())
            self.set("model.id", "mpt (inline)", at["model.name"])
            shape = ", ".join(f"{k} {args[k]}" for k in ("d_model", "n_heads", "n_layers", "expansion_ratio", "vocab_size"))
            said = f"an MPT written inline ({shape}): planned as transformers' MptConfig builds it"
            if args["learned_pos_emb"] and not args["attn_config"].get("alibi"):
                # llm-foundry's MPT: a learned position embedding unless alibi; transformers' MptModel always uses ALiBi
                said += f" (its learned position embedding, {args['max_seq_len']:,} x {args['d_model']:,} weights, left out: transformers' MPT has none)"
            self.note("info", at["model.name"], said)
            impl = args["attn_config"]["attn_impl"]
            self.set("model.attn_implementation", llmfoundry.ATTENTION[impl], where("model.attn_config.attn_impl", impl))
            used |= {f"model.{k}" for k in (*llmfoundry.MPT_DEFAULTS, "attn_config.attn_impl", "attn_config.alibi", "attn_config.attn_pdrop")}
        else:
            self.set("model.id", model["pretrained_model_name_or_path"], at["model.pretrained_model_name_or_path"])
            used.add("model.pretrained_model_name_or_path")
        self.method, self.method_origin = "full", Origin(label, "model.name", at["model.name"].line)
        # precision: Composer's; fp32 weights and optimizer states under autocast for amp_*
        precision = doc.get("precision", "amp_bf16")
        dtype, amp = llmfoundry.PRECISION[precision]
        origin = where("precision", precision)
        self.recipe.setdefault("planner", {})["dtype"] = dtype
        self.origins["planner.dtype"] = Origin(origin.file, origin.key, origin.line)
        if amp is not None:
            self.set(f"training.{amp}", True, origin)
        if precision == "amp_fp8":
            self.note("info", origin, "amp_fp8: TransformerEngine's FP8 matmuls planned as amp_bf16, an upper bound")
        # the batch and its length
        micro = doc.get("device_train_microbatch_size", "auto")
        if micro == "auto":
            self.note(
                "info",
                where("device_train_microbatch_size", "auto"),
                "'auto': Composer picks the micro-batch, starting from the whole device batch and halving it after each CUDA OOM; "
                "planned at 1, the last it tries: the run fails only where that does not fit",
                "write device_train_microbatch_size: N to review a micro-batch of your choice.",
            )
        else:
            self.set("training.per_device_train_batch_size", micro, at["device_train_microbatch_size"])
        self.origins["global_batch_size"] = Origin(label, "global_train_batch_size", at["global_train_batch_size"].line)
        length = doc.get("max_seq_len")
        loader = doc.get("train_loader") if isinstance(doc.get("train_loader"), dict) else {}
        dataset = loader.get("dataset") if isinstance(loader.get("dataset"), dict) else {}
        length = dataset.get("max_seq_len", length)
        if isinstance(length, int) and length > 0:
            self.set("data.max_length", length, at.get("max_seq_len") or Setting("train_loader", length, label, source.line_of("train_loader")))
        elif model["name"] == "mpt_causal_lm":
            self.set("data.max_length", llmfoundry.MPT_DEFAULTS["max_seq_len"], where("max_seq_len", llmfoundry.MPT_DEFAULTS["max_seq_len"]))
        # FSDP: Composer's fsdp_config (the sharding itself follows the GPUs: llmfoundry_strategy)
        fsdp = doc.get("fsdp_config")
        if isinstance(fsdp, dict):
            used |= {f"fsdp_config.{k}" for k in ("sharding_strategy", "mixed_precision", "activation_checkpointing", "activation_cpu_offload", "cpu_offload")}
            strategy = fsdp.get("sharding_strategy", "FULL_SHARD")
            where("fsdp_config.sharding_strategy", strategy)
            mixed = fsdp.get("mixed_precision", "DEFAULT")
            mp = where("fsdp_config.mixed_precision", mixed)
            if mixed == "FULL" or isinstance(mixed, dict):
                self.note(
                    "info",
                    mp,
                    f"mixed_precision {'FULL' if mixed == 'FULL' else 'given as a mapping'}: planned as PURE (bf16 parameters gathered and "
                    "reduced); fp32 ones take twice the gathered weights and gradients, so the plan is a lower bound",
                )
            checkpointing = fsdp.get("activation_checkpointing", False) is True
            self.set("training.gradient_checkpointing", checkpointing, where("fsdp_config.activation_checkpointing", False))
            if fsdp.get("cpu_offload") is True:
                self.note(
                    "warning",
                    at["fsdp_config.cpu_offload"],
                    "Composer 0.14 (llm-foundry of May 2023) refuses it at start ('FSDP CPU Offload not supported yet.'); later "
                    "Composer versions offload the parameters to the host, as planned here",
                    "check your Composer version, or write cpu_offload: false.",
                )
            if fsdp.get("activation_cpu_offload") is True:
                self.recipe.setdefault("planner", {})["activation_offloading"] = True
                s = at["fsdp_config.activation_cpu_offload"]
                self.origins["planner.activation_offloading"] = Origin(s.file, s.key, s.line)
        else:
            self.set("training.gradient_checkpointing", False, Setting("(fsdp_config: none)", None, label, None))
            assumed.append("no fsdp_config (Composer's DDP, no activation checkpointing)")
        # the optimizer
        optimizer = doc.get("optimizer") if isinstance(doc.get("optimizer"), dict) else {"name": "decoupled_adamw"}
        self.set("training.optim", llmfoundry.OPTIMIZERS[optimizer["name"]], at.get("optimizer.name") or where("optimizer.name", "decoupled_adamw"))
        # evaluation: Composer's evaluators compute the loss and metrics per batch and keep no logits
        if isinstance(doc.get("eval_loader"), dict):
            eval_batch = doc.get("device_eval_batch_size", micro if micro != "auto" else 1)
            if isinstance(eval_batch, int) and eval_batch > 0:
                self.set("training.per_device_eval_batch_size", eval_batch, where("device_eval_batch_size", eval_batch))
                self.set("training.eval_strategy", "steps", Setting("eval_loader", None, label, source.line_of("eval_loader")))
                self.set("training.prediction_loss_only", True, Setting("eval_loader", None, label, source.line_of("eval_loader")))
                used.add("device_eval_batch_size")
        # the rest: read, not reviewed; keys train.py does not read: a note
        sections = {"fsdp_config": llmfoundry.FSDP_KEYS, "model": llmfoundry.MPT_KEYS}
        for setting in source.settings:
            section, _, leaf = setting.key.partition(".")
            known = sections.get(section) if section in sections and leaf else None
            if (known is not None and leaf.split(".")[0] not in known and model["name"] == "mpt_causal_lm") or (
                not leaf and setting.key not in llmfoundry.TOP_KEYS
            ):
                self.note(
                    "info",
                    setting,
                    f"not a key {llmfoundry.COMMIT} reads for the run's memory" + did_you_mean(leaf or setting.key, sorted(known or llmfoundry.TOP_KEYS)),
                )
            elif setting.key not in used and setting.value is not None and setting.key in ("fsdp_config.limit_all_gathers", "fsdp_config.forward_prefetch"):
                self.not_modelled.append(setting.key)
        self._read_as(label, f"composer scripts/train/train.py {source.path.name}", llmfoundry.COMMIT, "llm-foundry", assumed)

    def _verl(self, source: Source) -> None:
        """A verl launch as the run main_ppo makes of it (vramfit.review.verl): the actor under FSDP with its rollout engine
        colocated on every GPU. Each override that carries memory is planned, verl's defaults taken for those the script
        does not write (said); the rest read, not reviewed; keys verl's config lacks are notes."""
        from vramfit.review import verl

        cfg, label = source.document, source.label
        at = {s.key.lstrip("+"): s for s in source.settings if not s.key.startswith("~")}
        assumed: list[str] = []
        A, R, M = verl.ACTOR, verl.ROLLOUT, verl.MODEL

        def value(key: str) -> Any:
            return verl.get(cfg, key)

        def origin(key: str) -> Setting:
            if key in at:
                return at[key]
            assumed.append(f"{key}={value(key)}")
            return Setting(f"({key}: verl's default)", value(key), label, source.launch_line)

        self.grpo, self.trainer = True, "grpo"
        path = value(f"{M}.path")
        self.set("model.id", str(path), origin(f"{M}.path"))
        # the attention: fsdp_workers.py:331 `override_model_config.get("attn_implementation", "flash_attention_2")`
        override = value(f"{M}.override_config")
        attention = override.get("attn_implementation") if isinstance(override, dict) else None
        key = f"{M}.override_config.attn_implementation"
        self.set(
            "model.attn_implementation",
            str(attention or "flash_attention_2"),
            at.get(key) or Setting(f"({key}: verl's default)", None, label, source.launch_line),
        )
        # LoRA (model.lora_rank > 0: PEFT over target_modules, default all-linear)
        rank = value(f"{M}.lora_rank")
        if rank:
            self.method, self.method_origin = "lora", Origin(label, f"{M}.lora_rank", at[f"{M}.lora_rank"].line if f"{M}.lora_rank" in at else None)
            self.set("model.lora.r", int(rank), origin(f"{M}.lora_rank"))
            self.set("model.lora.alpha", value(f"{M}.lora_alpha"), origin(f"{M}.lora_alpha"))
            targets = value(f"{M}.target_modules")
            self.set("model.lora.target_modules", list(targets) if isinstance(targets, list) else str(targets), origin(f"{M}.target_modules"))
        # precision: fp32 master weights and AdamW states, bf16 compute (FSDP MixedPrecision), unless model_dtype says
        model_dtype = str(value(f"{A}.fsdp_config.model_dtype") or "fp32")
        compute = verl.DTYPES.get(str(value(f"{A}.fsdp_config.dtype") or "bf16"), "bfloat16")
        planner = self.recipe.setdefault("planner", {})
        where = origin(f"{A}.fsdp_config.model_dtype")
        planner["dtype"] = verl.DTYPES[model_dtype]
        self.origins["planner.dtype"] = Origin(where.file, where.key, where.line)
        if verl.DTYPES[model_dtype] == "float32" and compute != "float32":
            self.set("training.bf16" if compute == "bfloat16" else "training.fp16", True, origin(f"{A}.fsdp_config.dtype"))
        # FSDP over every GPU (one worker per GPU), FSDP2 with strategy fsdp2; offload_policy: FSDP2's CPUOffloadPolicy
        strategy = str(value(f"{A}.strategy"))
        reshard = value(f"{A}.fsdp_config.reshard_after_forward")
        options = ["full_shard" if reshard in (True, None) else "shard_grad_op", "auto_wrap"]
        if strategy == "fsdp2" and value(f"{A}.fsdp_config.offload_policy"):
            options.append("offload")
        self.set("training.fsdp", " ".join(options), origin(f"{A}.strategy"))
        if strategy == "fsdp2":
            self.set(
                "training.fsdp_config",
                {"version": 2, "reshard_after_forward": bool(reshard in (True, None))},
                at.get(f"{A}.strategy") or origin(f"{A}.strategy"),
            )
        away = [name for name, key in (("weights", "param_offload"), ("optimizer", "optimizer_offload")) if value(f"{A}.fsdp_config.{key}")]
        if away and "offload" not in options:
            first = at.get(f"{A}.fsdp_config.param_offload") or at.get(f"{A}.fsdp_config.optimizer_offload") or origin(f"{A}.fsdp_config.param_offload")
            planner["offload_outside_update"] = ",".join(away)
            self.origins["planner.offload_outside_update"] = Origin(first.file, first.key, first.line)
            self.note(
                "info",
                first,
                f"verl moves the actor's {' and '.join(away)} to host RAM outside the update and back to the GPU for it "
                "(fsdp_workers.py update_actor / rollout_mode): planned on the GPU for the update, in host RAM while generating",
            )
        # the batch: micro-batch per GPU, or the dynamic token budget
        sp = int(value(f"{A}.ulysses_sequence_parallel_size") or 1)
        if sp > 1:
            planner["sequence_parallel"] = sp
            w = origin(f"{A}.ulysses_sequence_parallel_size")
            self.origins["planner.sequence_parallel"] = Origin(w.file, w.key, w.line)
        prompt, response = int(value("data.max_prompt_length")), int(value("data.max_response_length"))
        self.prompt_text = prompt
        origin("data.max_prompt_length")
        self.set("training.max_completion_length", response, origin("data.max_response_length"))
        self.set("training.num_generations", int(value(f"{R}.n")), origin(f"{R}.n"))
        padding_free = bool(value(f"{M}.use_remove_padding"))
        if value(f"{A}.use_dynamic_bsz"):
            budget = int(value(f"{A}.ppo_max_token_len_per_gpu")) * sp
            # the micro-batches split each rank's mini-batch (ppo_mini_batch_size x n / data-parallel ranks sequences)
            ranks = int(value("trainer.n_gpus_per_node")) * int(value("trainer.nnodes"))
            mini = max(1, int(value(f"{A}.ppo_mini_batch_size")) * int(value(f"{R}.n")) // max(1, ranks // sp))
            micro = max(1, min(mini, budget // (prompt + response)))
            w = origin(f"{A}.ppo_max_token_len_per_gpu")
            self.set("training.per_device_train_batch_size", micro, w)
            self.note(
                "info",
                w,
                f"use_dynamic_bsz: each micro-batch packs up to {budget:,} tokens (ppo_max_token_len_per_gpu x ulysses size, "
                f"dp_actor.py) of the rank's {mini} sequences per mini-batch; planned as {micro} sequence(s) of {prompt + response:,} "
                "tokens (max_prompt_length + max_response_length)",
            )
        else:
            micro = verl.micro_per_gpu(cfg)
            key = f"{A}.ppo_micro_batch_size" if f"{A}.ppo_micro_batch_size" in at else f"{A}.ppo_micro_batch_size_per_gpu"
            if micro is None:
                self.note(
                    "info" if source.missing else "error",
                    origin(key),
                    "is not set and use_dynamic_bsz is off: verl has no micro-batch size for the actor's update "
                    "(ppo_micro_batch_size_per_gpu defaults to null) and stops",
                    f"set {A}.ppo_micro_batch_size_per_gpu=4 (or {A}.use_dynamic_bsz=True).",
                )
                micro = 1
            self.set("training.per_device_train_batch_size", micro, origin(key))
        if padding_free:  # a micro-batch holds its sequences' own tokens: planned at the cap (the data's lengths unknown)
            planner["padding_free"] = True
            w = origin(f"{M}.use_remove_padding")
            self.origins["planner.padding_free"] = Origin(w.file, w.key, w.line)
        self.set("training.gradient_checkpointing", bool(value(f"{M}.enable_gradient_checkpointing")), origin(f"{M}.enable_gradient_checkpointing"))
        if value(f"{M}.enable_activation_offload"):
            # fsdp_workers.py:568-569 enable_activation_offloading: the checkpointed layer inputs in host RAM
            planner["activation_offloading"] = True
            w = origin(f"{M}.enable_activation_offload")
            self.origins["planner.activation_offloading"] = Origin(w.file, w.key, w.line)
            self.note(
                "info", w, "verl's activation offload (utils/activation_offload.py) planned as TRL's activation offloading: the kept activations in host RAM"
            )
        if value(f"{M}.use_liger"):
            self.note(
                "info",
                origin(f"{M}.use_liger"),
                "Liger's kernels on the model's norms and MLPs are not planned (verl computes its log-probs from the whole logits, "
                "without Liger's fused cross-entropy): an upper bound",
            )
        # the loss: whole logits over the micro-batch (no fused head unless use_fused_kernels)
        if not value(f"{M}.use_fused_kernels"):
            planner["grpo_whole_logits"] = True
            self.origins["planner.grpo_whole_logits"] = Origin(label, "(verl dp_actor.py: log-probs from the whole logits)", None)
        else:
            self.note("info", origin(f"{M}.use_fused_kernels"), "verl's fused kernels compute the log-probs without whole logits: planned as TRL's fused head")
        if value(f"{A}.entropy_coeff") or value(f"{A}.calculate_entropy"):
            self.note(
                "info",
                origin(f"{A}.entropy_coeff"),
                "the entropy is computed from the whole logits too (dp_actor.py entropy_from_logits: a softmax over the "
                "vocabulary kept for backward): not planned",
            )
        # the rollout engine, colocated on every GPU; asleep outside generation with free_cache_engine
        name = value(f"{R}.name")
        if name in (None, "???"):
            self.note(
                "warning",
                origin(f"{R}.name"),
                f"not set: at {verl.COMMIT} rollout.name has no default ('???') and the run stops asking for it; verl's "
                "releases before that defaulted to vllm, which is what is planned",
                f"set {R}.name=vllm.",
            )
            name = "vllm"
        if name in ("vllm", "sglang", "trtllm"):
            self.set("training.use_vllm", True, origin(f"{R}.name"))
            self.set("training.vllm_mode", "colocate", origin(f"{R}.name"))
            self.set("training.vllm_gpu_memory_utilization", float(value(f"{R}.gpu_memory_utilization")), origin(f"{R}.gpu_memory_utilization"))
            self.set("training.vllm_enable_sleep_mode", bool(value(f"{R}.free_cache_engine")), origin(f"{R}.free_cache_engine"))
            if name != "vllm":
                self.note(
                    "info",
                    origin(f"{R}.name"),
                    f"{name}'s share planned as vLLM's: verl gives it rollout.gpu_memory_utilization of each GPU (SGLang's mem_fraction_static)",
                )
        else:  # hf: transformers' generate on the FSDP actor
            self.set("training.use_vllm", False, origin(f"{R}.name"))
        # the reference policy: FSDP with CPUOffload forced (fsdp_workers.py:524-526), or the actor without its adapter
        self.set("training.beta", 0.0, Setting("(verl: the reference policy's weights live in host RAM)", None, label, source.launch_line))
        if verl.needs_reference(cfg):
            w = at.get(f"{A}.use_kl_loss") or at.get("algorithm.use_kl_in_reward") or origin(f"{A}.use_kl_loss")
            self.note(
                "info",
                w,
                "the reference policy is planned off the GPU: verl forces CPUOffload on it (fsdp_workers.py), so its weights are "
                "gathered a unit at a time; its log-prob pass (and the actor's old log-prob pass) are forward-only phases at "
                "log_prob_micro_batch_size_per_gpu, not planned apart",
            )
        if verl.needs_critic(cfg):
            self._verl_critic(source, cfg, at, origin)
        # the rest: planned, read but not reviewed, or not a key of verl's config
        for setting in source.settings:
            if setting.key.startswith(("+", "~")):  # added or deleted on purpose (+key=value, ~key)
                self.not_modelled.append(setting.key)
            elif not verl.is_known(setting.key):
                self.note(
                    "info",
                    setting,
                    f"not a key of verl's ppo_trainer config at {verl.COMMIT}: Hydra refuses an override of a key the config "
                    "lacks (write +key=value to add one); another verl version may have it",
                )
            elif setting.key not in verl.PLANNED:
                self.not_modelled.append(setting.key)
        self._read_as(label, f"python3 -m {verl.ENTRY_MODULES[0]} (Hydra overrides over ppo_trainer.yaml)", verl.COMMIT, "verl", assumed)

    def _verl_critic(self, source: Source, cfg: dict, at: dict[str, Setting], origin) -> None:
        """verl's critic (algorithm.adv_estimator gae, or critic.enable): a CriticWorker on the same GPUs as the actor
        (main_ppo.py: Role.Critic on "global_pool", fused into one process per GPU by create_colocated_worker_cls),
        planned with the planner's critic knobs (vramfit/planner/ppo.py): critic.model.path with a one-output token
        classification head (fsdp_workers.py CriticWorker `_build_critic_model_optimizer`: num_labels = 1), fp32 states
        under FSDP as the actor's (model_dtype fp32, bf16 compute), its own micro-batch (critic.ppo_micro_batch_size_per_gpu,
        a global ppo_micro_batch_size // (world / ulysses size), or the dynamic budget critic.ppo_max_token_len_per_gpu)
        and checkpointing, trained apart (ray_trainer.py `fit`: update_critic, then update_actor), and with
        critic.model.fsdp_config.param_offload / optimizer_offload held in host RAM outside its update (CriticWorker
        update_critic / compute_values load them to the GPU and offload them after)."""
        from vramfit import models
        from vramfit.review import verl

        planner = self.recipe.setdefault("planner", {})
        C = "critic"
        w = at.get("algorithm.adv_estimator") or at.get("critic.enable") or origin("algorithm.adv_estimator")
        path = verl.get(cfg, f"{C}.model.path")
        written, actor = at.get(f"{C}.model.path"), at.get(f"{verl.MODEL}.path")
        if written is not None and actor is not None and written.value == actor.value:  # the actor's model, as written
            planner["critic_model"] = "policy"
            self.origins["planner.critic_model"] = Origin(written.file, written.key, written.line)
            path = actor.value
        found = models.resolve(str(path), source.path.parent) if planner.get("critic_model") != "policy" else None
        if found is not None and found.path is None:
            what = f"verl's critic '{path}' (no config.json found: looked in {', '.join(found.looked)})"
            self.terms_missing.append(what)
            self.note(
                "info",
                origin(f"{C}.model.path"),
                f"PPO with a critic (gae): {what}: its weights, gradients and optimizer states are not planned",
                "pass the critic's config.json as a local folder, or run where the Hub can be reached.",
            )
            planner["critic_model"] = "none"
            return
        if found is not None:
            planner["critic_model"] = str(Path(found.path).resolve())
            self.origins["planner.critic_model"] = Origin(w.file, w.key, w.line)
        planner["critic_update"] = "separate"
        world = int(verl.get(cfg, "trainer.n_gpus_per_node") or 1) * int(verl.get(cfg, "trainer.nnodes") or 1)
        sp = int(verl.get(cfg, f"{C}.ulysses_sequence_parallel_size") or 1)
        seq = int(verl.get(cfg, "data.max_prompt_length") or 512) + int(verl.get(cfg, "data.max_response_length") or 512)
        if verl.get(cfg, f"{C}.use_dynamic_bsz"):
            # dp_critic.py update_critic: prepare_dynamic_batch with max_token_len = ppo_max_token_len_per_gpu x ulysses size
            budget = int(verl.get(cfg, f"{C}.ppo_max_token_len_per_gpu") or 32768) * sp
            mini = max(1, int(verl.get(cfg, f"{C}.ppo_mini_batch_size") or 1) * int(verl.get(cfg, f"{C}.rollout_n") or 1) // max(1, world // sp))
            micro = max(1, min(mini, budget // max(1, seq)))
            key = f"{C}.ppo_max_token_len_per_gpu"
        else:
            glob = verl.get(cfg, f"{C}.ppo_micro_batch_size")
            per_gpu = verl.get(cfg, f"{C}.ppo_micro_batch_size_per_gpu")
            micro = glob // max(1, world // sp) if isinstance(glob, int) and glob > 0 else per_gpu if isinstance(per_gpu, int) and per_gpu > 0 else None
            key = f"{C}.ppo_micro_batch_size" if f"{C}.ppo_micro_batch_size" in at else f"{C}.ppo_micro_batch_size_per_gpu"
        if micro:
            planner["critic_micro_batch"] = max(1, int(micro))
            st = origin(key)
            self.origins["planner.critic_micro_batch"] = Origin(st.file, st.key, st.line)
        planner["critic_gradient_checkpointing"] = bool(verl.get(cfg, f"{C}.model.enable_gradient_checkpointing"))
        origin(f"{C}.model.enable_gradient_checkpointing")
        away = [n for n, k in (("weights", "param_offload"), ("optimizer", "optimizer_offload")) if verl.get(cfg, f"{C}.model.fsdp_config.{k}")]
        if away:
            planner["critic_offload_outside_update"] = ",".join(away)
        said = f"{', '.join(away)} in host RAM outside its update" if away else "its weights and optimizer states on the GPU throughout"
        self.note(
            "info",
            w,
            f"PPO with a critic (gae): verl trains {path} with a value head on the same GPUs, planned apart from the actor's update "
            f"(micro-batch {planner.get('critic_micro_batch', '?')}, {said}); fsdp_workers.py CriticWorker",
        )

    def _read_as(self, label: str, command: str, commit: str, library: str, assumed: list[str]) -> None:
        """The note saying how a framework's config file was read, and which of its defaults were taken."""
        taken = f"; {library}'s defaults taken for what the file does not set: {', '.join(assumed)}" if assumed else ""
        self.findings.append(Finding("info", label, "", f"read as `{command}` as {commit} runs it{taken}", line=None))

    def _litgpt_model(self) -> None:
        """What a LitGPT config's model decides: the Hugging Face names of the linears its lora_* switches adapt, and the
        length where train.max_seq_length is not set (samples are not truncated: the model's context)."""
        from vramfit.review import litgpt

        source = next((s for s in self.sources if s.kind == "litgpt"), None)
        if source is None:
            return
        self._litgpt_model_config(source)
        if self.method == "lora":
            modules, over = litgpt.lora_modules(source.document, str(self.config.get("model_type", "")))
            first = next((s for s in source.settings if s.key in litgpt.LORA_SWITCHES), None) or Setting(
                "lora_query", True, source.label, source.line_of("lora_r")
            )
            self.set("model.lora.target_modules", modules, first)
            if over:
                self.note("info", first, f"the model's query, key and value are one fused linear: LoRA planned on all of {modules[0]}, a little over")
        if "data.max_length" not in self.origins:
            context = self.config.get("max_position_embeddings") or self.config.get("n_positions") or SEQUENCE_DEFAULT
            where = next((s for s in source.settings if s.key == "train.max_seq_length"), None) or Setting(
                "train.max_seq_length", None, source.label, source.line_of("train")
            )
            self.set("data.max_length", int(context), where)
            self.note(
                "info",
                where,
                f"not set: LitGPT truncates no sample, so a batch can reach the model's context of {int(context):,} tokens; planned there",
                "set train.max_seq_length to the length you train at.",
            )

    def _litgpt_model_config(self, source: Source) -> None:
        """The Hugging Face config as LitGPT's own GPT (litgpt/model.py) builds the model, where it differs in memory:
        - its lm_head is its own nn.Linear, never tied; litgpt/scripts/convert_hf_checkpoint.py copies the embedding into
          it where the checkpoint ties them (`state_dict["lm_head.weight"] = state_dict["transformer.wte.weight"]`): a
          tied model (Gemma, Llama 3.2 1B / 3B) runs with two vocabulary matrices -> tie_word_embeddings false;
        - it has no dropout module (SDPA with dropout_p=0.0; only LoRA's lora_dropout): Phi-2's resid_pdrop 0.1 keeps no
          mask -> the config's dropouts 0;
        - its GELU is one torch kernel, `torch.nn.functional.gelu(x, approximate=config.gelu_approximate)` (Phi-2:
          "tanh"), not transformers' Python gelu_new whose intermediates autograd keeps -> gelu_pytorch_tanh."""
        config = self.config
        if not self.recipe["model"].get("config") or self.model_how == "stand-in":
            return
        from vramfit.planner.params import summary

        try:
            tied = summary(Path(self.recipe["model"]["config"])).tied_embeddings
        except Exception:  # noqa: BLE001 - the planner reports what it cannot build; nothing to rewrite here
            return
        litgpt = json.loads(json.dumps(config))
        said = []
        for c in (litgpt, litgpt.get("text_config")):
            if not isinstance(c, dict):
                continue
            if tied:
                c["tie_word_embeddings"] = False
            for key in LITGPT_NO_DROPOUT:
                if isinstance(c.get(key), (int, float)) and not isinstance(c.get(key), bool) and c[key] > 0:
                    said.append(f"{key} {c[key]} -> 0")
                    c[key] = 0.0
            for key in ("hidden_act", "hidden_activation"):
                if c.get(key) == "gelu_new":
                    said.append(f"{key} gelu_new -> gelu_pytorch_tanh")
                    c[key] = "gelu_pytorch_tanh"
        if tied:
            said.insert(0, "its own lm_head, a copy of the tied embedding (two vocabulary matrices)")
        if not said:
            return
        folder = self.workdir / "litgpt"
        folder.mkdir(exist_ok=True)
        path = folder / "config.json"
        path.write_text(json.dumps(litgpt))
        self.recipe["model"]["config"] = str(path.resolve())
        where = next((s for s in source.settings if s.key == "checkpoint_dir"), None)
        self.note("info", where, f"planned as LitGPT's GPT builds the model (litgpt/model.py): {'; '.join(said)}")

    def _planner_settings(self, mapped: Mapped) -> None:
        """FSDP from the Trainer's --fsdp, an accelerate config or axolotl's fsdp keys (when no DeepSpeed JSON is used), and
        the knobs the recipe schema has no key for, as planner settings."""
        out, where = mapped.planner_settings, mapped.planner_origins
        planned: set[str] = set()
        uses_deepspeed = mapped.recipe.get("deepspeed", "").endswith(("reviewed-none.json",)) is False
        for src in self.sources:
            for st in src.settings:
                key = st.key.lstrip("-").replace("-", "_")
                words = src.kind == "shell" and isinstance(st.value, list)
                value = (" ".join(str(w) for w in st.value) or True) if words else st.value
                text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
                if key == "fsdp_config" and not isinstance(value, dict) and isinstance(mapped.recipe["training"].get(key), dict):
                    value = mapped.recipe["training"][key]  # the file it names, read by _file_argument
                if key == "fsdp" and value not in (None, False, "", "false", "False", [], {}) and "shard_grad_op" not in text and not uses_deepspeed:
                    out["engine"] = "fsdp"
                    where["engine"] = Origin(st.file, st.key, st.line)
                    if "offload" in text:
                        out["offload"] = True
                elif key in ("fsdp_config", "fsdp_version") and isinstance(value, (dict, int)) and not uses_deepspeed:
                    out.setdefault("engine", "fsdp")
                    where.setdefault("engine", Origin(st.file, st.key, st.line))
                    version = value.get("fsdp_version", value.get("version")) if isinstance(value, dict) else value
                    if str(version) == "2":  # axolotl / accelerate: fsdp_version 2 (torch fully_shard)
                        out["fsdp_version"], where["fsdp_version"] = 2, Origin(st.file, st.key, st.line)
                    if isinstance(value, dict) and any(value.get(k) in (True, "true") for k in ("offload_params", "fsdp_offload_params", "cpu_offload")):
                        out["offload"] = True
                    if isinstance(value, dict):
                        self._fsdp_checkpointing(value, st, st.key)
                elif _sequence_parallel_planned(src, key) and str(value).strip().isdigit() and int(str(value).strip()) > 1:
                    # each rank holds max_length / N tokens of every sample (planner/knobs.py sequence_parallel_fields)
                    mapped.recipe.setdefault("planner", {})["sequence_parallel"] = int(str(value).strip())
                    mapped.origins["planner.sequence_parallel"] = Origin(st.file, st.key, st.line)
                    planned.add(st.key)
                elif key in PLANNER_SWITCHES and value in (True, "true", "True"):
                    # the recipe's planner: section says these (vramfit/recipe.py Knobs), so the plan and its fixes see them
                    knob = PLANNER_SWITCHES[key]
                    mapped.recipe.setdefault("planner", {})[knob] = True
                    mapped.origins[f"planner.{knob}"] = Origin(st.file, st.key, st.line)
                    planned.add(st.key)
            chunk = str(src.env.get("CELOSS_PARALLEL_SIZE", "")).strip() if (src.program or "").startswith("swift ") else ""
            if chunk.isdigit() and int(chunk) > 0:
                # ms-swift's sequence-parallel loss reads it (swift/trainers/utils.py per_token_loss_func_sp)
                mapped.recipe.setdefault("planner", {})["celoss_parallel_size"] = int(chunk)
                mapped.origins["planner.celoss_parallel_size"] = Origin(src.label, "CELOSS_PARALLEL_SIZE", src.launch_line)
            if src.accelerate.get("distributed_type") == "FSDP" and not uses_deepspeed:
                out["engine"] = "fsdp"
                where["engine"] = Origin(src.label, "distributed_type", src.line_of("distributed_type"))
                fsdp = (src.document or {}).get("fsdp_config") or {} if isinstance(src.document, dict) else {}
                if isinstance(fsdp, dict) and fsdp.get("fsdp_offload_params") in (True, "true"):
                    out["offload"] = True
                if isinstance(fsdp, dict) and str(fsdp.get("fsdp_version")) == "2":  # accelerate config: FSDP2
                    out["fsdp_version"], where["fsdp_version"] = 2, Origin(src.label, "fsdp_config.fsdp_version", src.line_of("fsdp_config"))
                if isinstance(fsdp, dict):
                    self._fsdp_checkpointing(fsdp, Setting("fsdp_config", fsdp, src.label, src.line_of("fsdp_config")), "fsdp_config")
        knobs = mapped.recipe.get("planner") or {}
        if knobs.get("padding_free") and not knobs.get("packing") and not self.sample_length and not knobs.get("typical_length"):
            # padding-free without packing: a micro-batch holds its samples' own tokens, which the data decides
            mapped.padding_free_worst_case = mapped.origins.get("planner.padding_free")
        mapped.not_modelled[:] = [k for k in mapped.not_modelled if k not in planned]  # planned after all: not "read but not reviewed"
        t = mapped.recipe["training"]
        if self.in_place_modules:  # DeepSpeed-Chat trains the unwrapped modules themselves, no copy
            out["modules_to_save_copies"] = False
            where["modules_to_save_copies"] = mapped.origins.get("method") or self.method_origin
        if self.stage0_master is not None and (t.get("fp16") is True or t.get("bf16") is True):
            out["master_fp32"] = True
            where["master_fp32"] = where.setdefault("engine", self.stage0_master)
        if out.get("engine") == "fsdp":  # not plain data parallel after all
            mapped.findings[:] = [f for f in mapped.findings if not f.what.startswith("no DeepSpeed JSON: reviewed as plain data parallel")]

    def _program_defaults(self) -> None:
        """The launched program's own defaults for the memory-bearing arguments the script does not pass (its argparse /
        dataclass defaults, read with ast from its source beside the script)."""
        if self.program is None:
            return
        passed = {s.key.lstrip("-").replace("-", "_") for src in self.sources for s in src.settings}
        used = []
        for name, (value, line) in self.program.defaults.items():
            if name in passed or value is False:
                continue
            setting = Setting(f"--{name}", value, self.program.label, line)
            if name in PROGRAM_TRAINING and isinstance(value, (int, bool)) and f"training.{name}" not in self.origins:
                self.set(f"training.{name}", value, setting)
            elif name == "optim" and "training.optim" not in self.origins and _optimizer_name(value):
                self.set("training.optim", value, setting)  # its TrainingArguments subclass's default (artidoro/qlora: paged_adamw_32bit)
            elif name == "dtype" and value in ("fp16", "bf16") and not {"training.fp16", "training.bf16"} & set(self.origins):
                self.set(f"training.{value}", True, setting)
            elif name == "model_name" and isinstance(value, str) and value and self.model_name is None:
                self.model_name = setting  # the program's default model (Liger-Kernel's training.py: Meta-Llama-3-8B)
                continue
            elif ALIASES.get(name) in ("data.max_length", "data.max_pixels") and isinstance(value, int) and ALIASES[name] not in self.origins:
                self.set(ALIASES[name], value, setting)
            elif ALIASES.get(name, "").removeprefix("training.") in PROGRAM_TRAINING and isinstance(value, (int, bool)) and ALIASES[name] not in self.origins:
                self.set(ALIASES[name], value, setting)  # the program's own name for a TrainingArguments field (InternVL's grad_checkpoint)
            elif str(ALIASES.get(name)).startswith("model.lora.") and isinstance(value, (int, float, str)) and ALIASES[name] not in self.origins:
                self.set(ALIASES[name], value, setting)  # the program's LoRA shape (a comma list split by set, as the program does)
            elif name in QUANT_SETTINGS and f"model.quantization.{QUANT_SETTINGS[name][0]}" not in self.origins:
                if not self._quant_setting(name, value, setting):  # used only where the model is quantized
                    continue
            else:
                continue
            used.append(f"--{name} {value}")
        if used:
            self.findings.append(
                Finding(
                    "info",
                    self.primary.label,
                    "",
                    f"read {self.program.label}'s own defaults for what the script does not pass: {', '.join(used)}",
                    source="validation",
                    line=self.primary.launch_line,
                )
            )

    def _summed_length(self) -> None:
        """A program whose sample is two parts, each cut at its own argument (SUMMED_LENGTHS): the sequence is their sum."""
        program = (self.primary.program or "").split(" ", 1)[0].replace("\\", "/") if self.primary.kind == "shell" else ""
        fact = next(((names, why) for pattern, names, why in SUMMED_LENGTHS if pattern.search(program)), None)
        if fact is None or "data.max_length" in self.origins:
            return
        names, why = fact
        passed = {s.key.lstrip("-").replace("-", "_"): s for src in self.sources for s in src.settings}
        parts: list[tuple[int, Setting]] = []
        for name in names:
            if name in passed:
                setting = passed[name]
                value = self.scalar(setting)
            elif self.program is not None and name in self.program.defaults:
                value, line = self.program.defaults[name]
                setting = Setting(f"--{name}", value, self.program.label, line)
            else:
                return  # a part not known: the length is left to the rest of the review
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                return
            parts.append((value, setting))
        total = sum(value for value, _ in parts)
        last = parts[-1][1]
        self.set("data.max_length", total, Setting(" + ".join(s.key for _, s in parts), total, last.file, last.line))
        said = " + ".join(f"{s.key} {value:,}" for value, s in parts)
        self.findings.append(Finding("info", last.file, "", f"sequence length {total:,} tokens ({said}): {why}", source="validation", line=last.line))

    def _trl_own(self) -> bool:
        """The launch runs one of TRL's own scripts (trl/scripts/*.py, examples/scripts/*.py, the `trl` CLI)."""
        program = (self.primary.program or "").replace("\\", "/")
        return "examples/scripts/" in program or program.startswith(("trl/", "trl ")) or "/trl/" in program

    def _trl_model_defaults(self, lora: dict) -> str | None:
        """For TRL's own scripts, TRL's ModelConfig LoRA defaults (lora_r 16, lora_alpha 32, lora_dropout 0.05, and
        lora_target_modules None: PEFT's default modules for the model type, peft/utils/constants.py
        TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING) set where the files leave them; what was taken, said. None
        for any other script."""
        if not self._trl_own() or not self.trainer:
            return None
        import dataclasses

        try:
            from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS
            from trl import ModelConfig
        except ImportError:
            return None
        d = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
        said = []
        for key, name in (("r", "lora_r"), ("alpha", "lora_alpha"), ("dropout", "lora_dropout")):
            if key not in lora and d.get(name) is not None:
                lora[key] = d[name]
                said.append(f"{name} {d[name]}")
        if "target_modules" not in lora and d.get("lora_target_modules") is None:
            try:
                config = json.loads(Path(self.recipe["model"]["config"]).read_text())
            except (KeyError, OSError, ValueError):
                config = {}
            text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
            model_type = str(config.get("model_type") or text.get("model_type") or "")
            targets = PEFT_TARGETS.get(model_type) or PEFT_TARGETS.get(str(text.get("model_type") or ""))
            if targets:
                lora["target_modules"] = list(targets)
                said.append(f"target_modules PEFT's default for {model_type} ({', '.join(targets)})")
        return ", ".join(said) or None

    def _trl_defaults(self) -> None:
        """The trainer's own defaults where TRL's class changes TrainingArguments' (SFTConfig: gradient checkpointing on,
        bf16 unless fp16, max_length 1024), for the settings no file sets. GRPO keeps the files' values: the upstream GRPO
        scripts pin TRL versions whose defaults differ."""
        t = self.recipe["training"]
        python = self._python_file() or self.program
        trl = bool(self.trainer) and not trainers.config_class(self.trainer).__module__.startswith("transformers")
        no_metrics = python is not None and "compute_metrics" not in python.text and "def prediction_step" not in python.text
        # axolotl builds its trainers without compute_metrics (none in its src/ at 067b021c; its bench / eval-table callbacks
        # call prediction_step per batch and keep nothing), and Trainer.evaluate passes prediction_loss_only=True then
        axolotl = self.settings.kind == "axolotl"
        if "prediction_loss_only" not in t and (axolotl or no_metrics or (trl and self.trainer in trainers.NO_EVAL_LOGITS | {"sft"})):
            why = (
                "axolotl passes the Trainer no compute_metrics"
                if axolotl
                else f"{python.label} passes the Trainer no compute_metrics"
                if no_metrics
                else f"TRL's {self.cls_name()} trainer evaluates the loss" + (" and log-probs / scores" if self.trainer != "sft" else "")
            )
            self.set(
                "training.prediction_loss_only",
                True,
                Setting(f"({why}: Trainer.evaluate keeps no logits)", None, self.settings.label, self.settings.launch_line),
            )
        program = (self.primary.program or "").replace("\\", "/")
        trl_own = self._trl_own()
        if not trl or (self.grpo and not trl_own):  # TRL's own GRPO script runs the TRL it ships with: its defaults apply
            return
        cls = self.cls_name()
        where = Setting(f"({cls} default)", None, self.settings.label, self.settings.launch_line)
        # a script's own program, not beside it, named like a TRL trainer (2U1/Qwen2-VL-Finetune's src/train/train_sft.py
        # parses its own TrainingArguments subclass, max_seq_length 32768): whether it runs TRL's class is not known, so
        # TRL's defaults (max_length, gradient_checkpointing, bf16) are not taken for its own
        guessed = (
            self.primary.kind == "shell"
            and self.program is None
            and program.endswith(".py")
            and not _known_argument_set(program)
            and _trainer(self.sources, set(), by_name=False) is None
        )
        if guessed:
            self.findings.append(
                Finding(
                    "info",
                    self.primary.label,
                    cls,
                    f"{program}'s source is not beside the script: its name suggests TRL's {cls}, but whether it parses it is not "
                    f"known, so {cls}'s defaults (max_length, gradient_checkpointing, bf16) are not assumed",
                    "pass the lengths and switches explicitly, or review the script beside its program.",
                    line=self.primary.launch_line,
                )
            )
        trl_pin = None
        if self.trl_version:
            from vramfit.review.versions import Pin

            trl_pin = Pin("trl", "==", self.trl_version, "--trl-version")
        elif self.trainer:
            trl_pin = self.find_pin(self.primary, "trl")
        for name, value in trainers.changed_defaults(self.trainer).items():
            if guessed:
                break
            if name == "bf16" and (t.get("fp16") is True or "bf16" in t):
                continue
            if name in t:
                continue
            if trainers.before_default(name, trl_pin):  # the run's TRL predates the new default: TrainingArguments' holds
                since, change = trainers.DEFAULT_SINCE[name]
                said = f"planned under {trl_pin} (--trl-version)" if trl_pin.file.startswith("--") else f"this repository pins {trl_pin}"
                self.findings.append(
                    Finding(
                        "info",
                        where.file,
                        where.key,
                        f"{said}, whose {cls} keeps TrainingArguments' {name}=False (TRL sets {name}=True from "
                        f"{since[0]}.{since[1]}, {change}): planned with {name} off",
                        f"set {name}=True explicitly to have it on every TRL release.",
                        line=where.line,
                    )
                )
                continue
            self.set(f"training.{name}", value, where)
        swift = program.startswith("swift ")  # ms-swift's own argument classes set its length (see _swift_defaults)
        if not guessed and not swift and "data.max_length" not in self.origins and isinstance(trainers.default(self.trainer, "max_length"), int):
            self.set("data.max_length", trainers.default(self.trainer, "max_length"), where)
        origin = self.method_origin or Origin(self.primary.label, self.primary.program or "", self.primary.launch_line)
        if self.trainer in PREFERENCE_TRAINERS:
            self._preference_trainer(cls, origin, trl_own)
        elif self.trainer == "gkd":
            self._gkd_trainer(cls, origin)
        elif self.trainer in UNPLANNED_TRAINERS:
            what = UNPLANNED_TRAINERS[self.trainer]
            self.terms_missing.append(f"{cls}'s {what}")
            self.findings.append(
                Finding(
                    "info",
                    origin.file,
                    origin.key,
                    f"{cls}: reviewed with the {cls} defaults; the plan holds the supervised training of the policy only: {what} "
                    "not planned, so the review is incomplete (a 'fits' would understate the run)",
                    line=origin.line,
                )
            )

    def _gkd_trainer(self, cls: str, origin: Origin) -> None:
        """Plan GKD as it runs (planner knobs, vramfit/planner/gkd.py): TRL's GKDConfig fields (teacher_model_name_or_path,
        lmbda, beta, max_new_tokens, seq_kd) or ms-swift's `swift rlhf --rlhf_type gkd` arguments (--teacher_model,
        --teacher_model_server, --lmbda, --beta, --max_completion_length, --teacher_deepspeed, --offload_teacher_model,
        --use_vllm / --vllm_mode / --vllm_gpu_memory_utilization / --sleep_level). The teacher's config is found the way
        the policy's is (vramfit.models); a teacher found nowhere leaves the review incomplete, as an unknown model does."""
        from vramfit import models

        planner = self.recipe.setdefault("planner", {})
        planner["trainer"] = "gkd"
        self.origins["planner.trainer"] = origin
        swift = self.primary.program.startswith("swift ")
        flags = {st.key.lstrip("-").replace("-", "_"): st for src in self.sources for st in src.settings}
        used: list[Setting] = []

        def take(name: str, key: str, kind=None) -> Any:
            st = flags.get(name)
            if st is None:
                return None
            value = self.scalar(st)
            if kind is not None:
                try:
                    value = kind(value)
                except (TypeError, ValueError):
                    return None
            planner[key] = value
            self.origins[f"planner.{key}"] = Origin(st.file, st.key, st.line)
            used.append(st)
            return value

        if swift:
            planner["gkd_loss"] = "swift"
        take("lmbda", "lmbda", float)
        take("beta", "gkd_beta", float)
        take("max_completion_length" if swift else "max_new_tokens", "max_new_tokens", int)
        take("seq_kd", "seq_kd", lambda v: v in (True, "true", "True", 1))
        take("teacher_deepspeed", "teacher_deepspeed", str)
        take("offload_teacher_model", "offload_teacher_model", lambda v: v in (True, "true", "True", 1))
        parts = []
        server = take("teacher_model_server", "teacher_model_server", str)
        named = flags.get("teacher_model" if swift else "teacher_model_name_or_path") or flags.get("teacher_model_name_or_path")
        if server:
            parts.append("the teacher served elsewhere (--teacher_model_server): nothing of it on these GPUs")
        elif named is not None:
            teacher = str(self.scalar(named))
            used.append(named)
            found = models.resolve(teacher, self.primary.path.parent)
            if found.path is None:
                what = f"the teacher model '{teacher}' (no config.json found: looked in {', '.join(found.looked)})"
                self.terms_missing.append(f"{cls}'s {what}")
                self.findings.append(
                    Finding(
                        "info",
                        named.file,
                        named.key,
                        f"{cls}: the plan holds the student's training and GKD's loss, but {what} is not planned, so the review is "
                        "incomplete (a 'fits' would understate the run)",
                        "pass the teacher's config.json as a local folder beside the script, or run where the Hub can be reached.",
                        line=named.line,
                    )
                )
                planner["teacher_model"] = None
                planner["teacher_model_server"] = None
            else:
                planner["teacher_model"] = str(Path(found.path).resolve())
                self.origins["planner.teacher_model"] = Origin(named.file, named.key, named.line)
                parts.append(f"a frozen teacher, {teacher} ({found.how})")
        else:
            parts.append(
                "no teacher named: ms-swift distils from the policy itself" if swift else "no teacher named: GKDConfig's teacher is the policy's model"
            )
        if swift:  # ms-swift's rollout arguments (swift/rlhf_trainers/args_mixin.py: vllm_mode None, utilization 0.9)
            if take("use_vllm", "gkd_vllm", lambda v: v in (True, "true", "True", 1)):
                mode = flags.get("vllm_mode")
                planner["gkd_vllm"] = str(self.scalar(mode)) if mode is not None else "colocate"
                take("vllm_gpu_memory_utilization", "gkd_vllm_gpu_memory_utilization", float)
                take("sleep_level", "gkd_vllm_sleep", lambda v: int(v) > 0)
                used.extend(st for st in (mode,) if st is not None)
            else:
                planner.pop("gkd_vllm", None)
        keys = {st.key for st in used}
        self.not_modelled = [k for k in self.not_modelled if k not in keys]
        self.findings = [f for f in self.findings if not (f.key in keys and "own argument" in f.what)]
        lmbda = planner.get("lmbda", 0.5)
        parts.append(f"{'on-policy generation for lmbda ' + format(lmbda, 'g') + ' of the steps' if lmbda else 'no on-policy generation (lmbda 0)'}")
        parts.append("the divergence over the student's and the teacher's full-vocabulary logits")
        self.findings.append(
            Finding(
                "info",
                origin.file,
                origin.key,
                f"{cls}: reviewed with the {cls} defaults and planned as GKD trains: {'; '.join(parts)}",
                line=origin.line,
            )
        )

    def _preference_trainer(self, cls: str, origin: Origin, trl_own: bool) -> None:
        """Plan TRL's preference trainers as they run (planner knobs `trainer`, `ref_model`, `fused_lm_head`,
        vramfit/planner/knobs.py trainer_fields): chosen + rejected in one batch, DPO / KTO's frozen reference copy
        (none for a PEFT policy or with precomputed reference log-probs), and, where the run uses the pinned TRL
        (its own scripts), DPO / KTO's fused log-prob head; another runner (an older pinned TRL, LLaMA-Factory,
        axolotl, ms-swift, OpenRLHF) is planned with the whole logits of its concatenated batch."""
        planner = self.recipe.setdefault("planner", {})
        planner["trainer"] = self.trainer
        self.origins["planner.trainer"] = origin
        ref_trainer = self.trainer in ("dpo", "kto")
        if ref_trainer and not trl_own:
            planner["fused_lm_head"] = False
        flags = {st.key.lstrip("-").replace("-", "_"): st for src in self.sources for st in src.settings}
        pre = flags.get("precompute_ref_log_probs")
        if ref_trainer and pre is not None and self.scalar(pre) in (True, "true", "True", 1):
            planner["ref_model"] = "precomputed"
            self.origins["planner.ref_model"] = Origin(pre.file, pre.key, pre.line)
        lora = self.recipe.get("method") in ("lora", "qlora") or bool(self.recipe.get("model", {}).get("lora"))
        parts = []
        if self.trainer != "kto":
            parts.append("chosen + rejected in one forward (2 x the micro-batch, each sequence up to the cap)")
        if ref_trainer:
            parts.append(
                "no reference model (reference log-probs precomputed)"
                if planner.get("ref_model") == "precomputed"
                else "no reference model (the PEFT adapter is disabled for the reference pass)"
                if lora
                else "a frozen reference copy of the base, sharded like the policy"
            )
            parts.append("log-probs through TRL's fused head" if trl_own else "whole logits (a runner other than the pinned TRL's scripts)")
        self.findings.append(
            Finding(
                "info",
                origin.file,
                origin.key,
                f"{cls}: reviewed with the {cls} defaults and planned as {cls.removesuffix('Config')} trains: {'; '.join(parts)}",
                line=origin.line,
            )
        )

    def _model_name(self) -> None:
        """`model_name` names the model (Liger-Kernel's examples, many scripts' own dataclasses) where nothing else does and the
        run's batch and lengths are arguments vramfit reads: the launched program parses TrainingArguments or a TRL config
        (HfArgumentParser). ms-swift's --model_name is the model's display name beside --model; fsdp_qlora's call_parse
        program has its own batch_size / context_length, so planning its model at TrainingArguments' defaults would
        misstate it: the model is left unnamed and the review incomplete."""
        setting = self.model_name
        if setting is None or "model.id" in self.origins:
            return
        parses = self.program.parses if self.program is not None else frozenset()
        known = {"TrainingArguments", "Seq2SeqTrainingArguments", *(cls for _, cls in trainers.CLASSES.values())}
        if parses & known:
            self.set("model.id", self.scalar(setting), setting)
            if setting.file == (self.program.label if self.program is not None else None):
                self.findings.append(
                    Finding("info", self.primary.label, "", f"read {setting.file}'s own default model: {self.scalar(setting)}", line=self.primary.launch_line)
                )
        else:
            self.note(
                "info",
                setting,
                f"{setting.key} is {self.primary.program or 'the script'}'s own argument: read, not taken as the model (its batch and lengths are its own arguments too)",
            )

    def _liger(self) -> None:
        axolotl = next((s for s in self.sources if s.kind == "axolotl"), None)
        if axolotl is None:
            return
        flce = next((s for s in axolotl.settings if s.key == "liger_fused_linear_cross_entropy"), None)
        keys = [s for s in axolotl.settings if s.key.startswith("liger_") and s.value]
        if keys and not self.liger_plugin:
            self.note("warning", keys[0], f"{', '.join(s.key for s in keys)} do nothing without the Liger plugin", f"add plugins: [{LIGER_PLUGIN}].")
        if self.liger_plugin and flce is not None and flce.value is True:
            self.set("training.use_liger_kernel", True, flce)

    def _cce(self) -> None:
        """axolotl's Cut Cross-Entropy plugin: planned as the planner's `loss_kernel: cce` (no [tokens x vocab] logits)
        unless `cut_cross_entropy: false` turns it off; the switch without the plugin does nothing (axolotl reads plugin
        args only for the plugins listed)."""
        switch = self.cce_setting
        if self.cce_plugin is None:
            if switch is not None and switch.value is True:
                self.note("warning", switch, "cut_cross_entropy does nothing without the Cut Cross-Entropy plugin", f"add plugins: [{CCE_PLUGIN}].")
            return
        if switch is not None and switch.value is not True:
            return
        origin = switch or self.cce_plugin
        self.recipe.setdefault("planner", {})["loss_kernel"] = "cce"
        self.origins["planner.loss_kernel"] = Origin(origin.file, origin.key, origin.line)

    def _model(self, model_config: str | None) -> None:
        """The model's config: --model-config, else found the way the libraries find it (vramfit.models);
        none found: a stand-in config for the checks that need no model, and the review says it is incomplete."""
        from vramfit import models

        problems = Problems()
        model_id = self.get("model.id")
        if model_config:
            path = Path(model_config)
            if not path.is_file():
                named = [p for p in models.table_files() if p.name == path.name]
                path = named[0] if named else path
            if not path.is_file():
                problems.add(
                    model_config,
                    "--model-config",
                    "no such file",
                    "pass a config.json (a Hugging Face model folder's), or one of vramfit's: "
                    f"{', '.join(p.relative_to(PACKAGE_ROOT).as_posix() for p in models.table_files())}.",
                )
                raise ConfigError(problems)
            how = "--model-config"
        else:
            resolved = models.resolve(None if model_id is None else str(model_id), self.primary.path.parent)
            path, how = resolved.path, resolved.how
            if resolved.by_name:
                self._model_by_name(str(model_id), resolved)
            if model_id is not None and self.get("model.trust_remote_code") is None and _remote_code_only(str(model_id)):
                self.recipe.setdefault("model", {})["trust_remote_code"] = True  # no transformers class: its own code runs
            if path is None:
                origin = self.origins.get("model.id")
                named = f"'{model_id}'" if model_id is not None else "no model (--model_name_or_path, base_model, model)"
                self.model_missing = (
                    f"memory not planned: no config.json found for {named} (looked in {', '.join(resolved.looked)}); everything that needs no model was checked"
                )
                self.model_missing_origin = origin or Origin(self.primary.label, "", self.primary.launch_line)
                path = STAND_IN
                how = "stand-in"
        from vramfit import inputs

        try:
            config = inputs.load_json(path, "model-config")  # a regular file, bounded, no duplicate keys
            if not isinstance(config, dict) or "model_type" not in config:
                problems.add(str(path), "", "is not a model config (no model_type)", "pass a model's config.json.")
        except ConfigError as error:
            problems.extend(error.problems)
        if problems:
            raise ConfigError(problems) from None
        self.config = config
        self.model_how = how
        self._quantized_checkpoint(model_id, how, config)
        model = self.recipe["model"]
        model.setdefault("id", str(config.get("_model", Path(path).stem)).split(" ", 1)[0])
        model["architecture"] = (config.get("architectures") or ["?"])[0]
        model["config"] = str(Path(path).resolve())

    def _quantized_checkpoint(self, model_id: Any, how: str, config: dict) -> None:
        """A checkpoint quantized from its base and named after it (Qwen's -AWQ, -GPTQ-Int4 / -Int4, -GPTQ-Int8 / -Int8,
        -FP8; unsloth's -bnb-4bit), answered by the table's 16-bit config of its base (models.name_quantization): planned
        with the checkpoint's stored bits where the planner models the format (AutoAWQ / GPTQ int4, bitsandbytes 4 / 8-bit),
        said; an 8-bit GPTQ or fp8 one stays 16-bit, an upper bound, said."""
        from vramfit import models

        found = models.name_quantization(str(model_id or ""))
        if not found or not how.startswith("vramfit's table") or config.get("quantization_config") or "model.quantization.bits" in self.origins:
            return
        at = self.origins.get("model.id") or Origin(self.primary.label, "", self.primary.launch_line)
        setting = Setting(at.key, [str(model_id)], at.file, at.line)
        if found.method in ("awq", "gptq"):
            self.set("model.quantization.bits", 4, setting)
            self.set("model.quantization.method", found.method, setting)
            said = f"planned with its 4-bit {found.method.upper()} weights (int4, groups of 128), as the name says"
        elif found.method == "bitsandbytes":
            self.set("model.quantization.bits", found.bits, setting)
            self.set("model.quantization.method", "bitsandbytes", setting)
            said = (
                "planned with its 4-bit bitsandbytes weights, as the name says (nf4, double quantization, uint8 storage: the "
                "planner's QLoRA defaults, since the name does not say them)"
                if found.bits == 4
                else "planned with its 8-bit bitsandbytes weights (int8), as the name says"
            )
            if found.written.lower().startswith("unsloth"):  # unsloth's dynamic quants: some modules left unquantized
                said += " (unsloth's dynamic quants keep some modules in 16 bits, listed in the checkpoint's llm_int8_skip_modules: a lower bound)"
        else:  # 8-bit GPTQ, fp8, and the 4-bit float formats (NVFP4 / MXFP4: ModelOpt / compressed-tensors) the planner has none of
            said = f"planned at 16 bits: its {found.written} layout is not modelled (an upper bound of the weights)"
        text = config.get("text_config")
        model_type = str((text if isinstance(text, dict) and text.get("model_type") else config).get("model_type") or "")
        if found.method is not None and model_type and _experts_merged_on_load(model_type):
            # the checkpoint stores every expert's linears quantized (they were nn.Linear modules when it was quantized):
            # its weights are at their stored bits whatever layout the installed transformers builds
            self.recipe.setdefault("planner", {})["quantize_moe_experts"] = True
            self.origins["planner.quantize_moe_experts"] = Origin(setting.file, setting.key, setting.line)
            said += f", its {model_type} experts included (stored quantized per expert)"
        fix = "pass --model-config with the checkpoint's own config.json to plan it as published." if found.method else ""
        self.note(
            "info",
            setting,
            f"'{model_id}' names a checkpoint quantized as {found.written}; {how} holds the 16-bit config of its base, without the "
            f"checkpoint's quantization_config: {said}",
            fix,
        )

    def _model_by_name(self, model_id: str, resolved) -> None:
        """A local path this machine does not have (or without a config.json), planned as the table model its folder's
        name names (vramfit.models.folder_entry): an assumption, said where the path is written, and on the verdict."""
        origin = self.origins.get("model.id") or Origin(self.primary.label, "", self.primary.launch_line)
        table = resolved.path.relative_to(PACKAGE_ROOT).as_posix()
        self.model_by_name = (model_id, resolved.by_name)
        try:
            there = Path(os.path.expanduser(model_id)).is_dir()  # os.path: a ~user that does not exist stays as written
        except (OSError, ValueError):  # a name too long, a NUL byte: not there
            there = False
        where = "a local folder without a config.json" if there else "a local folder this machine does not have"
        from vramfit import models

        name = models.folder_name(model_id)  # a cache snapshot's commit folder: the cache folder's name
        self.findings.append(
            Finding(
                "info",
                origin.file,
                origin.key,
                f"'{model_id}' is {where}: planned by its name, '{name}', with the config of {resolved.by_name} (vramfit's table, "
                f"{table}); every figure below assumes the folder holds the model its name names",
                "if the folder holds another model (another size, a merged or extended checkpoint), pass --model-config "
                "path/to/config.json (the folder's own config.json).",
                "planner",
                origin.line,
            )
        )

    def _method(self) -> None:
        rank = self.get("model.lora.r")
        # a rank the launch passes means LoRA; the program's own default rank (MiniCPM-o's LoraArguments.lora_r 64 beside
        # its use_lora False) is only the shape LoRA would take
        default = self.program is not None and "model.lora.r" in self.origins and self.origins["model.lora.r"].file == self.program.label
        if self.method is None and not self.lora_off and "model.lora.r" in self.origins and not default and not (isinstance(rank, int) and rank <= 0):
            self.method, self.method_origin = "lora", self.origins["model.lora.r"]  # a LoRA rank with no switch: LoRA
        elif isinstance(rank, int) and rank <= 0 and self.method in (None, "full"):
            self.recipe["model"].pop("lora", None)  # rank 0 (DeepSpeed-Chat's --lora_dim default): no LoRA
        passed = {s.key.lstrip("-").replace("-", "_") for src in self.sources for s in src.settings}
        if (
            self.method == "lora"
            and self.program is not None
            and self.program.defaults.get("only_optimize_lora", (None,))[0] is False
            and "only_optimize_lora" not in passed
        ):
            # DeepSpeed-Chat main.py: --lora_dim wraps the linears of --lora_module_name in LinearLayer_LoRA, which freezes
            # their weights (dschat/utils/module/lora.py: `self.weight.requires_grad = False`); without
            # --only_optimize_lora (only_optimize_lora_parameters) everything it does not wrap still trains: the embeddings
            # (and the lm_head tied to them), norms and biases - planned as the embeddings trained in place
            o = self.method_origin
            self.findings.append(
                Finding(
                    "info",
                    o.file,
                    o.key,
                    f"{self.program.label} freezes the weights its LoRA layers wrap, but without --only_optimize_lora (its default "
                    "is off) the embeddings, norms and biases train too: planned as LoRA with the embeddings trained "
                    "(norms and biases, a few million weights, left out)",
                    "pass --only_optimize_lora to train the adapters alone.",
                    line=o.line,
                )
            )
            self.set("model.lora.modules_to_save", ["embed_tokens"], Setting(o.key, None, o.file, o.line))
            self.in_place_modules = True
        swift = (self.primary.program or "").startswith("swift ")
        if swift and self.method is None and "model.lora.r" not in self.origins:
            # ms-swift's BaseArguments.tuner_type defaults to 'lora' (swift/arguments/base_args/base_args.py), not full
            self.method = "lora"
            self.method_origin = Origin(self.primary.label, "--tuner_type", self.primary.launch_line)
            self.findings.append(
                Finding("info", self.primary.label, "--tuner_type", "not set: ms-swift's default tuner_type lora", line=self.primary.launch_line)
            )
        method = "grpo" if self.grpo else (self.method or "full")
        if self.grpo and self.method in ("lora", "qlora"):
            self.findings.append(
                Finding(
                    "info",
                    self.method_origin.file,
                    self.method_origin.key,
                    "GRPO with LoRA: reviewed as GRPO with a LoRA adapter",
                    source="validation",
                    line=self.method_origin.line,
                )
            )
        if self.get("model.quantization.bits") and method in ("full", "lora"):
            method = "qlora"
        self.recipe["method"] = method
        origin = self.method_origin or Origin(self.primary.label, self.primary.program or "", self.primary.launch_line)
        self.origins["method"] = origin
        model = self.recipe["model"]
        if method in ("lora", "qlora") or (self.grpo and self.method in ("lora", "qlora")):
            lora = model.setdefault("lora", {})
            assumed = [k for k in ("r", "alpha", "target_modules") if k not in lora]
            trl = self._trl_model_defaults(lora) if assumed and not swift else None
            lora.setdefault("r", 8)
            lora.setdefault("alpha", 32 if swift else 8)  # ms-swift's TunerArguments: lora_rank 8, lora_alpha 32, all-linear
            lora.setdefault("target_modules", "all-linear")
            if trl is not None:  # TRL's own script: its ModelConfig's defaults, not an assumption
                self.findings.append(
                    Finding(
                        "info",
                        origin.file,
                        origin.key,
                        f"LoRA {', '.join(assumed)} not in the files: reviewed with TRL's ModelConfig defaults, {trl}",
                        line=origin.line,
                    )
                )
            elif assumed and not swift:  # under ms-swift these are its TunerArguments' own defaults, not an assumption
                self.findings.append(
                    Finding(
                        "info",
                        origin.file,
                        origin.key,
                        f"LoRA {', '.join(assumed)} not in the files: reviewed with r={lora['r']}, alpha={lora['alpha']} "
                        f"(PEFT's defaults), target_modules={lora['target_modules']}; your training script's own defaults may differ",
                        f"pass {', '.join(spelled(self.settings.kind, 'model.lora.' + k) for k in assumed)} explicitly.",
                        line=origin.line,
                    )
                )
            model.setdefault("train", {}).setdefault("llm", False)
        else:
            model.pop("lora", None)
        if method == "qlora":
            q = model.setdefault("quantization", {})
            q.setdefault("bits", 4)
            q.setdefault("compute_dtype", "float16" if self.get("training.fp16") is True else "bfloat16")
        else:
            model.pop("quantization", None)

    def _data(self) -> None:
        data = self.recipe["data"]
        vision = "vision_config" in self.config
        data["format"] = "rec_jsonl" if self.grpo else ("llava_json" if vision else "chat_jsonl")
        data.setdefault("train_file", "(not named in the files)")
        for key in ("train_file", "eval_file", "image_folder"):
            if key in data:  # a file that exists here is read (the planner counts the eval set)
                found = locate(str(data[key]), self.primary.path) if key != "image_folder" else None
                data[key] = str(found.resolve()) if found else str(data[key])
        data["images_per_sample"] = 1 if vision else 0
        images = self.config.get("_image_tokens") or {}
        ppt = pixels_per_token(self.config)
        if (
            vision
            and "default_max_pixels" not in images
            and self.primary.launcher == "swift"
            and (self.config.get("vision_config") or {}).get("spatial_merge_size")
        ):
            # a stock Qwen2-VL-family config under ms-swift: where the launch sets no MAX_PIXELS, ms-swift's own default
            # applies (docs/source_en/Instruction/Command-line-parameters.md: "MAX_PIXELS: Default is 16384 * 28 * 28"),
            # not the image processor class's
            # (qwen_vl_utils >= 0.0.14: IMAGE_MAX_TOKEN_NUM 16384 tokens, "IMAGE_MAX_TOKEN_NUM * 32 * 32" px for Qwen3-VL)
            images = {**images, "default_max_pixels": SWIFT_MAX_PIXELS // 784 * ppt, "default_of": "ms-swift's MAX_PIXELS default"}
        dynamic = vision and "default_max_pixels" in images  # Qwen2-VL style: one token per 28x28 px, up to max_pixels
        verl_run = next((s for s in self.sources if s.kind == "verl"), None)
        if dynamic and verl_run is not None and self.prompt_text and not data.get("max_pixels"):
            # verl counts an image's tokens in the prompt and filters prompts longer than max_prompt_length
            # (utils/dataset/rl_dataset.py:183-257 doc2len runs the processor over text and images): no image exceeds it
            cap = min(images["default_max_pixels"], self.prompt_text * ppt)
            if cap < images["default_max_pixels"]:
                data["max_pixels"] = cap
                where = next((s for s in verl_run.settings if s.key == "data.max_prompt_length"), None)
                self.origins["data.max_pixels"] = Origin(verl_run.label, "data.max_prompt_length", where.line if where else None)
                self.findings.append(
                    Finding(
                        "info",
                        verl_run.label,
                        "data.max_prompt_length",
                        f"image tokens planned at most {self.prompt_text:,} per image: verl counts them in the prompt and filters "
                        "prompts longer than max_prompt_length (rl_dataset.py)",
                        source="planner",
                        line=where.line if where else None,
                    )
                )
        if vision and self.image_tokens:
            if dynamic:
                cap = data.get("max_pixels") or images["default_max_pixels"]
                cap = cap if isinstance(cap, int) else images["default_max_pixels"]
                data["max_pixels"] = min(cap, self.image_tokens * ppt)
                self.origins["data.max_pixels"] = Origin(self.primary.label, "--image-tokens")
                self.findings.append(
                    Finding(
                        "info",
                        self.primary.label,
                        "--image-tokens",
                        f"image tokens planned at your data's size: {data['max_pixels'] // ppt:,} per image (the files allow up to {cap // ppt:,})",
                        source="planner",
                    )
                )
                return self._lengths(data, images)
            self.findings.append(
                Finding(
                    "info",
                    self.primary.label,
                    "--image-tokens",
                    "this model's processor gives every image the same number of tokens; --image-tokens is not used",
                    source="planner",
                )
            )
        elif dynamic:
            self.image_assumed = True
            cap = data.get("max_pixels") if isinstance(data.get("max_pixels"), int) else images["default_max_pixels"]
            self.findings.append(
                Finding(
                    "info",
                    self.primary.label,
                    "--image-tokens",
                    f"image tokens planned at the maximum the files allow ({cap // ppt:,} per image)",
                    f"pass --image-tokens N with your data's typical tokens per image (pixels / {ppt}) to plan at its size.",
                    source="planner",
                )
            )
        if dynamic and "max_pixels" not in data:
            data["max_pixels"] = images["default_max_pixels"]
            where = Origin(self.settings.label, spelled(self.settings.kind, "data.max_pixels"), self.settings.launch_line)
            self.origins["data.max_pixels"] = where
            self.findings.append(
                Finding(
                    "info",  # an assumption of the plan; the memory verdict says what it costs
                    where.file,
                    where.key,
                    f"not set: {images.get('default_of', 'the processor' + chr(39) + 's default')} {images['default_max_pixels']:,} px allows up to "
                    f"{images['default_max_pixels'] // ppt:,} image tokens per image (one per {math.isqrt(ppt)}x{math.isqrt(ppt)} px)",
                    f"set {'MAX_PIXELS=' + str(1280 * ppt) + ' in the launch environment' if 'default_of' in images else edit(self.settings.kind, 'data.max_pixels', 1280 * ppt)} "
                    "(1,280 tokens per image) unless the images need more.",
                    line=where.line,
                )
            )
        self._lengths(data, images)

    def _longest_sample(self) -> None:
        """A collator that pads each batch to its longest sample holds that sample, not the cap: where the data's longest
        sample is known (a sample of the training file, a published set's bound: review/lengths.py) the step is planned
        at it and the cap beside it (the reviewer); else at the cap, as before. Packing fills every sequence to the cap."""
        from vramfit.review import lengths

        self.length_cap, self.length_bound, self.longest_unknown = None, False, None
        data = self.recipe["data"]
        cap = data.get("max_length")
        settings = {
            s.key.lstrip("-"): (s.value[0] if isinstance(s.value, list) and len(s.value) == 1 else s.value) for src in self.sources for s in src.settings
        }
        switched = {PLANNER_SWITCHES[k] for k in PLANNER_SWITCHES if str(settings.get(k)).lower() == "true"}
        # padding-free without packing: a micro-batch holds its samples' own tokens, so the longest sample bounds it too
        flat = "padding_free" in switched and "packing" not in switched and bool(self.sample_length)
        if self.grpo or (switched & {"packing", "padding_free"} and not flat) or not isinstance(cap, int):
            return
        pads, why = (
            (True, "padding-free batches hold their samples' own tokens")
            if flat
            else lengths.pads_to_longest(self.primary.program if self.primary.kind in ("shell", "litgpt") else None, settings)
        )
        if pads is None and self.settings.kind == "axolotl":
            pads, why = lengths.axolotl_padding({k.replace("-", "_"): str(v).lower() for k, v in settings.items()})
        if pads is None and getattr(self, "swift_uncapped", False):
            # ms-swift's Template._data_collator: "padding_to ... if none, the batch will be padded to the `longest`"
            # (swift/llm/template/template/qwen.py); with no --max_length the cap is the model's context, which the data
            # need not reach: a non-fit there is said as the length that fits
            pads, why = True, "ms-swift pads each batch to its longest sample (Template._data_collator, padding_to None)"
        if not pads:
            if self.sample_length:
                how = why or f"how {self.primary.program or 'this run'} pads its batches is not known to vramfit"
                self.findings.append(
                    Finding("info", self.primary.label, "--sample-length", f"not used, planned at the cap of {cap:,}: {how}", source="planner")
                )
            return
        tower = next((v for k, v in settings.items() if k in ("vision_tower", "mm_vision_tower") and isinstance(v, str)), None)
        images = self.config.get("_image_tokens") or {}
        per_image = images.get("per_image") if "default_max_pixels" not in images else None
        if self.sample_length:
            found = lengths.Longest(self.sample_length, "--sample-length, the data's longest sample as given", True)
        else:
            found = lengths.longest(str(data.get("train_file", "")), lengths.image_tokens(tower, per_image))
            if found is None and why == lengths.LLAMAFACTORY_LONGEST and ("vision_config" not in self.config or per_image):
                # LLaMA-Factory's datasets by their dataset_info.json entries, where that lies here (dataset_dir, default
                # data, from where the run starts); a model whose image tokens vary with the image is left at the cap
                info = locate(f"{settings.get('dataset_dir') or 'data'}/dataset_info.json", self.primary.path, self.primary.cwd)
                found = lengths.llamafactory_longest(settings.get("dataset"), info, per_image)
        cap_at = self.origins.get("data.max_length") or Origin(self.settings.label, spelled(self.settings.kind, "data.max_length"), self.settings.launch_line)
        if found is None and why == lengths.LLAMAFACTORY_LONGEST:
            # LLaMA-Factory with data the review cannot read: cutoff_len is the verdict. Its users size cutoff_len to their
            # data (its examples set it), and the corpus's LLaMA-Factory OOM threads at an explicit cutoff_len outnumber its
            # sound runs above it (5 to 1: tests/review/test_review_world.py); said, with how to plan at the data's length
            self.findings.append(
                Finding(
                    "info",
                    cap_at.file,
                    cap_at.key,
                    f"planned at the cap of {cap:,} tokens, as a batch that reaches it holds: {why}, and the data's lengths "
                    "are not known here (no local file of its datasets is found through dataset_info.json); pass --sample-length N with "
                    "the data's longest sample to plan at it",
                    source="planner",
                    line=cap_at.line,
                )
            )
            return
        if found is None:  # the data's lengths are not known: planned at the cap, which the reviewer says
            self.longest_unknown = cap_at
            return
        if found.tokens >= cap:
            if found.tokens == lengths.REACHES:
                self.findings.append(
                    Finding(
                        "info",
                        cap_at.file,
                        cap_at.key,
                        f"planned at the cap of {cap:,} tokens, which batches reach: the data {found.how}",
                        source="planner",
                        line=cap_at.line,
                    )
                )
            return
        data["max_length"] = found.tokens
        self.length_cap, self.length_bound = cap, found.bound
        self.findings.append(
            Finding(
                "info",
                cap_at.file,
                cap_at.key,
                f"planned at the data's longest sample, {found.tokens:,} tokens ({found.how}), not at the cap of {cap:,}: {why}",
                source="planner",
                line=cap_at.line,
            )
        )

    def _lengths(self, data: dict, images: dict) -> None:
        if self.grpo:
            # max_pixels sizes a Qwen2-VL-family image (its vision_config's spatial_merge_size); InternVL's image is tiles of
            # image_seq_length tokens (VLM-R1 passes its Qwen default max_pixels to every module, which InternVL's ignores)
            vision = (self.config or {}).get("vision_config") or {}
            if data.get("max_pixels") and "spatial_merge_size" in vision:
                per_image = data["max_pixels"] // pixels_per_token(self.config)
            elif (self.config or {}).get("image_seq_length") and (self.config or {}).get("downsample_ratio"):
                from vramfit.planner import params
                from vramfit.planner.setup import image_geometry

                tiles = (self.recipe.get("planner") or {}).get("max_tiles")
                per_image = image_geometry(params.summary(Path(self.recipe["model"]["config"])), None, None, self.config, tiles)[0]
            elif data.get("max_pixels"):
                per_image = data["max_pixels"] // pixels_per_token(self.config)
            else:
                per_image = images.get("max_per_image", images.get("per_image", 0))
            text = self.prompt_text or GRPO_PROMPT_DEFAULT
            data["max_length"] = per_image + text  # the prompt: image tokens + text (no file sets it as such)
            if any(s.kind == "verl" for s in self.sources):  # verl's max_prompt_length counts the image tokens too
                data["max_length"] = text
        elif "max_length" not in data:
            data["max_length"] = SEQUENCE_DEFAULT
            own = not _known_argument_set(self.primary.program or "") and self.primary.kind == "shell"
            python = self._python_file() or self.program
            missing = _missing_trl_configs(python.text) if python is not None else []
            if missing:  # the script's own config class (and its max_length default) is not in the installed TRL
                own = True
                module, name = missing[0]
                self.findings.append(
                    Finding(
                        "info",
                        python.label,
                        name,
                        f"{python.label} parses {name} from {module}, which the installed TRL {_installed('trl')} does not have: "
                        "its defaults (max_length, ...) are not known here",
                        "review it where that TRL is installed, or pass the lengths explicitly.",
                    )
                )
            # a settings file the launch names was not found: the length may well be in it (the review is incomplete anyway)
            unread = any("settings) not found" in m or "set when the script runs" in m for src in self.sources for m in src.missing)
            self.findings.append(
                Finding(
                    "info" if own or unread or self.model_missing else "warning",  # no model: nothing is planned at it
                    self.settings.label,
                    spelled(self.settings.kind, "data.max_length"),
                    f"no sequence length in the files: reviewed at {SEQUENCE_DEFAULT} tokens",
                    f"set {edit(self.settings.kind, 'data.max_length', SEQUENCE_DEFAULT)} (or the length you train at) explicitly.",
                    line=self.settings.launch_line,
                )
            )

    def _precision(self) -> None:
        t = self.recipe["training"]
        accelerate = next((s for s in self.sources if s.accelerate.get("mixed_precision")), None)
        if accelerate and "bf16" not in t and "fp16" not in t and accelerate.accelerate["mixed_precision"] in ("bf16", "fp16"):
            mp = accelerate.accelerate["mixed_precision"]
            t[mp] = True
            self.origins[f"training.{mp}"] = Origin(accelerate.label, "mixed_precision", accelerate.line_of("mixed_precision"))

    def _deepspeed(self, mapped: Mapped) -> None:
        """The DeepSpeed settings the launch uses, written under the work folder's deepspeed_configs/
        (where the runner's checks expect a recipe's JSON)."""
        refs = [r for s in self.sources for r in s.references if r.role == "deepspeed" and r.source is not None]
        given = [s for s in self.sources if s.kind == "deepspeed"]
        inline = next((s for src in self.sources if src.kind != "shell" for s in src.settings if s.key == "deepspeed" and isinstance(s.value, dict)), None)
        accelerate = next((s for s in self.sources if s.accelerate.get("deepspeed_config")), None)
        named = [r for s in self.sources for r in s.references if r.role == "deepspeed" and r.source is None and r.named]
        if refs or given:
            chosen = refs[0].source if refs else given[0]
            mapped.deepspeed, mapped.deepspeed_label = chosen, chosen.label
            text, name = chosen.text, chosen.path.name
            if chosen.path.suffix.lower() in (".yaml", ".yml") and isinstance(chosen.document, dict):
                text = json.dumps(chosen.document, indent=2)  # a DeepSpeed config kept as YAML, written as the JSON DeepSpeed takes
            origin = Origin(refs[0].setting.file, refs[0].setting.key, refs[0].setting.line) if refs else Origin(chosen.label, "")
            for other in given:
                if other is not chosen:
                    self.findings.append(
                        Finding(
                            "warning",
                            other.label,
                            "",
                            f"is not the DeepSpeed JSON the launch uses ({chosen.label}); not reviewed",
                            f"pass only {chosen.label}, or point the script at {other.label}.",
                        )
                    )
        elif inline is not None:
            text, name, origin = json.dumps(inline.value, indent=2), "inline.json", Origin(inline.file, inline.key, inline.line)
        elif named:
            # a JSON named but not found whose file name says its ZeRO stage (sources.zero_from_name): that stage, the
            # launch's precision and batch ("auto", as the Trainer fills them), DeepSpeed's own defaults for the rest
            ref = named[0]
            stage, optimizer, params = ref.named
            zero: dict[str, Any] = {"stage": stage}
            if optimizer:
                zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
            if params:
                zero["offload_param"] = {"device": "cpu", "pin_memory": True}
            document = {
                "train_batch_size": "auto",
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "gradient_clipping": "auto",
                "bf16": {"enabled": "auto"},
                "fp16": {"enabled": "auto"},
                "zero_optimization": zero,
            }
            text, name = json.dumps(document, indent=2), "named.json"
            origin = Origin(ref.setting.file, ref.setting.key, ref.setting.line)
            mapped.deepspeed_label = f"{Path(ref.written).name} named in {origin.file}, not found: planned from its name"
            mapped.deepspeed_from_name = (Path(ref.written).name, origin, optimizer or params)
        elif self._named_zero() is not None:
            document, origin, how = self._named_zero()
            text, name = json.dumps(document, indent=2), "named.json"
            mapped.deepspeed_label = f"{origin.file} ({how})"
        elif accelerate is not None:
            from accelerate.utils import DeepSpeedPlugin

            ds = accelerate.accelerate["deepspeed_config"]
            plugin_args = {
                k: ds[k]
                for k in (
                    "zero_stage",
                    "offload_optimizer_device",
                    "offload_param_device",
                    "gradient_accumulation_steps",
                    "gradient_clipping",
                    "zero3_init_flag",
                )
                if k in ds
            }
            document = DeepSpeedPlugin(**plugin_args).deepspeed_config
            document.pop("steps_per_print", None)  # accelerate writes infinity; DeepSpeed's default is the same in effect
            document.setdefault("bf16", {"enabled": "auto"})
            document.setdefault("fp16", {"enabled": "auto"})
            text, name = json.dumps(document, indent=2), "accelerate.json"
            origin = Origin(accelerate.label, "deepspeed_config", accelerate.line_of("deepspeed_config"))
            mapped.deepspeed, mapped.deepspeed_label = accelerate, accelerate.label
        else:
            document = {
                "train_batch_size": "auto",
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "gradient_clipping": "auto",
                "bf16": {"enabled": "auto"},
                "fp16": {"enabled": "auto"},
                "zero_optimization": {"stage": 0},
            }
            text, name = json.dumps(document, indent=2), "none.json"
            origin = Origin(self.settings.label, spelled(self.settings.kind, "deepspeed"), self.settings.launch_line)
            # Lightning Fabric's / Composer's strategy: said by litgpt_strategy / llmfoundry_strategy
            litgpt_run = any(s.kind in ("litgpt", "llmfoundry", "verl") for s in self.sources)
            split = self.primary.device_map_gpus  # device_map: every rank holds its GPUs' share of the model (_device_map)
            held = (
                f"every rank spreads the model, its gradients and optimizer states over its {split} GPUs"
                if split
                else "every rank holds the whole model, its gradients and optimizer states"
            )
            if not litgpt_run and not split and all(s.kind == "training_args" for s in self.sources):
                document = self.primary.document if isinstance(self.primary.document, dict) else {}
                if not set(document) & LLAMAFACTORY_KEYS:  # LLaMA-Factory's YAML: llamafactory-cli launches it, its deepspeed key says ZeRO
                    # a TrainingArguments / TRL file reviewed alone: its sharding is the launcher's (an accelerate config)
                    mapped.launch_unknown = origin
            if not litgpt_run and not any("(deepspeed" in m for s in self.sources for m in s.missing):  # a JSON named but not found: said already
                self.findings.append(
                    Finding(
                        "info",
                        origin.file,
                        origin.key,
                        f"no DeepSpeed JSON: reviewed as plain data parallel ({held})",
                        line=origin.line,
                    )
                )
        folder = self.workdir / "deepspeed_configs"
        folder.mkdir(exist_ok=True)
        (folder / f"reviewed-{name}").write_text(text)
        self.recipe["deepspeed"] = f"deepspeed_configs/reviewed-{name}"
        self.origins["deepspeed"] = origin
        mapped.deepspeed_label = mapped.deepspeed_label or origin.file

    def _named_zero(self):
        """(DeepSpeed document, origin, how) for a ZeRO stage named by a flag, not a JSON: ms-swift's `--deepspeed zero2`
        presets, DeepSpeed-Chat's `--zero_stage N [--offload]`; None when no flag names one."""
        from vramfit.review.sources import DEEPSPEED_PRESET

        flags = {s.key: s for src in self.sources if src.kind == "shell" for s in src.settings}
        auto = {
            "train_batch_size": "auto",
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto",
            "bf16": {"enabled": "auto"},
            "fp16": {"enabled": "auto"},
        }
        ds = flags.get("--deepspeed")
        preset = DEEPSPEED_PRESET.fullmatch(ds.value[0]) if ds is not None and len(ds.value) == 1 else None
        if preset:
            stage, offload = int(preset.group(1)), bool(preset.group(2))
            zero = {"stage": stage}
            if offload:
                zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
                if stage == 3:
                    zero["offload_param"] = {"device": "cpu", "pin_memory": True}
            return {**auto, "zero_optimization": zero}, Origin(ds.file, ds.key, ds.line), f"ms-swift preset {ds.value[0]}"
        zs = flags.get("--zero_stage") or flags.get("--ds.zero_stage") or flags.get("--deepspeed_stage")
        if zs is not None and len(zs.value) == 1 and zs.value[0] in ("0", "1", "2", "3"):
            zero = {"stage": int(zs.value[0])}
            if zs.key == "--deepspeed_stage":
                # open-instruct (grpo_utils.py ExperimentConfig, utils.get_train_ds_config): its learners build the DeepSpeed
                # config from the stage and two switches, the parameters' and the optimizer's offload to the CPU
                on = {k for k in ("--deepspeed_offload_param", "--deepspeed_offload_optimizer") if k in flags and _switch_on(flags[k].value)}
                if "--deepspeed_offload_param" in on:
                    zero["offload_param"] = {"device": "cpu"}
                if "--deepspeed_offload_optimizer" in on:
                    zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
                if not (self.recipe.get("training") or {}).get("fp16"):  # its DeepSpeed config is bf16=True, whatever the flags
                    self.set("training.bf16", True, zs)
                return {**auto, "zero_optimization": zero}, Origin(zs.file, zs.key, zs.line), f"--deepspeed_stage {zs.value[0]}"
            if "--offload" in flags:  # DeepSpeed-Chat utils/ds_utils.py: --offload puts both on the CPU
                zero["offload_param"] = {"device": "cpu"}
                zero["offload_optimizer"] = {"device": "cpu"}
            if self._openrlhf() and {"--adam_offload", "--ds.adam_offload"} & set(flags):  # OpenRLHF utils/deepspeed: the optimizer only
                zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
            if zero["stage"] == 0:
                # DeepSpeed-Chat initialises DeepSpeed itself: at stage 0 its fp16 / bf16 optimizer wrapper still keeps fp32
                # master weights beside the 16-bit ones (deepspeed/runtime/fp16/fused_optimizer.py), not plain DDP's AMP
                self.stage0_master = Origin(zs.file, zs.key, zs.line)
            return {**auto, "zero_optimization": zero}, Origin(zs.file, zs.key, zs.line), f"--zero_stage {zs.value[0]}"
        return None

    def _launcher(self, mapped: Mapped) -> None:
        launcher = next((s.launcher for s in self.sources if s.launcher), None)
        if launcher is None and any(s.kind == "axolotl" for s in self.sources):
            launcher = "accelerate"
        self.recipe["launcher"] = {"deepspeed": "deepspeed", "accelerate": "accelerate", "axolotl": "accelerate"}.get(launcher, "torchrun")
        stated: dict[str, tuple[int, str, Source]] = {}
        for source in sorted(self.sources, key=lambda s: s.kind != "shell"):
            for key, (count, flag) in source.hardware.items():
                stated.setdefault(key, (count, flag, source))
        if "gpus_per_node" not in stated:  # nothing says it: as many ranks as the launch sees GPUs, where it lists them
            seen = next((s for s in self.sources if s.visible_gpus), None)
            if seen is not None:
                stated["gpus_per_node"] = (seen.visible_gpus, "CUDA_VISIBLE_DEVICES", seen)
        for key, (count, flag, source) in stated.items():
            self.recipe.setdefault("hardware", {})[key] = count
            line = source.line_of(flag, source.launch_line or 1) if flag.startswith("-") or source.kind == "litgpt" else None
            self.origins[f"hardware.{key}"] = Origin(source.label, flag, line)
            mapped.stated[key] = flag
        if "gpus_per_node" in stated:
            mapped.script_ranks = stated["gpus_per_node"][0] * (stated["nodes"][0] if "nodes" in stated else 1)


def _optimizer_name(value: Any) -> bool:
    """A TrainingArguments `optim` value (transformers OptimizerNames): a program's own default for it is the run's."""
    from transformers.training_args import OptimizerNames

    return isinstance(value, str) and value in {o.value for o in OptimizerNames}


def _installed(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


def _missing_trl_configs(text: str) -> list[tuple[str, str]]:
    """(module, class) of the `from trl... import XConfig` lines of a script (read with ast) that the installed TRL lacks."""
    import ast
    import importlib

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "trl":
            for alias in node.names:
                if alias.name.endswith("Config") and alias.name != "ModelConfig":
                    try:
                        found = hasattr(importlib.import_module(node.module), alias.name)
                    except ImportError:
                        found = False
                    if not found:
                        out.append((node.module, alias.name))
    return out


def _known_argument_set(program: str) -> bool:
    """Programs whose every argument vramfit knows (TRL's scripts and CLI, axolotl, LLaMA-Factory, ms-swift): an unknown flag
    there is a mistake. Any other script parses its own dataclasses: an argument vramfit does not know is the script's."""
    p = program.replace("\\", "/")
    return (
        p.startswith(("trl ", "axolotl", "llamafactory"))
        or "/trl/" in f"/{p}"
        or p.startswith("trl/")
        or "examples/scripts/" in p
        or p.startswith("-m trl")
        or p.startswith("-m axolotl")
    )


@functools.lru_cache(maxsize=None)
def trl_script_fields() -> frozenset[str]:
    """The fields of TRL's ScriptArguments and ModelConfig, which TRL's scripts parse beside the trainer's config."""
    import dataclasses

    try:
        import trl

        return frozenset(f.name for cls in (trl.ScriptArguments, trl.ModelConfig) for f in dataclasses.fields(cls))
    except (ImportError, AttributeError):
        return frozenset()


# Sharding of the model or of the sequence beyond data parallelism, which the planner does not model: a per-GPU plan
# without it holds more than the run does (name -> what it is; a size above 1, or a switch on, uses it).
def axolotl_unfrozen(pattern: str) -> str:
    """An axolotl `unfrozen_parameters` entry as the Python regex it matches with (utils/freeze.py LayerNamePattern:
    a trailing `[start:end]` range is cut off (the range's hook zeroes the rest of the gradient, whose tensor stays
    whole) and every '.' not followed by '+' is a literal dot)."""
    found = re.match(r"^(.+)\[([0-9]*)(?::([0-9]*))?\]$", pattern)
    base = found.group(1) if found else pattern
    return re.sub(r"\.(?!\+)", "\\.", base)


# Sequence-parallel settings the planner models (the `sequence_parallel` knob), by the reader whose implementation it
# follows. ms-swift (swift/sequence_parallel/sequence_parallel.py): Ulysses / ring attention over a (data, sequence) mesh,
# input_ids / labels split on the sequence dim, the loss on each rank's shard, DeepSpeed given no mpu (ZeRO over every
# rank). axolotl (utils/ctx_managers/sequence_parallel.py `apply_sequence_parallelism`): every batch key chunked on dim 1
# over the group, ring-flash-attn, the loss on the local chunk (outputs gathered only for GRPO / EBFT); FSDP2 shards over
# accelerate's dp_shard x cp mesh, DeepSpeed over the world. Other readers (verl's ulysses_sequence_parallel_size,
# LLaMA-Factory forks) stay in SHARDING_NOT_MODELLED.
SEQUENCE_PARALLEL_PLANNED = {
    "sequence_parallel_size": "swift",
    "context_parallel_size": "axolotl",
    "sequence_parallel_degree": "axolotl",  # axolotl's deprecated name for context_parallel_size
}


def _sequence_parallel_planned(source, name: str) -> bool:
    """`name` is a sequence-parallel size the planner models for the reader of `source`."""
    reader = SEQUENCE_PARALLEL_PLANNED.get(name.lstrip("-").replace("-", "_"))
    if reader == "swift":
        return (getattr(source, "program", "") or "").startswith("swift ")
    return reader == "axolotl" and getattr(source, "kind", "") == "axolotl"


SHARDING_NOT_MODELLED = {
    "tensor_parallel_size": "tensor parallelism",  # axolotl (ND parallelism), ms-swift Megatron
    "tensor_model_parallel_size": "tensor parallelism",  # Megatron / LLaMA-Factory mcore
    "tp_size": "tensor parallelism",
    "tensor_parallel_degree": "tensor parallelism",  # open-instruct's OLMo-core DPO (open_instruct/dpo_utils.py)
    "context_parallel_degree": "context parallelism",  # open-instruct's OLMo-core DPO
    "pipeline_model_parallel_size": "pipeline parallelism",
    "context_parallel_size": "context parallelism",  # axolotl, Megatron
    "sequence_parallel_size": "sequence parallelism",  # ms-swift (Ulysses / ring attention)
    "sequence_parallel_degree": "sequence parallelism",  # axolotl (ring attention)
    "ulysses_sequence_parallel_size": "sequence parallelism",
    "expert_parallel_size": "expert parallelism",  # axolotl's ExpertParallelPlugin
    "expert_model_parallel_size": "expert parallelism",
    "tiled_mlp": "tiled MLP (ALST: the MLP run in sequence tiles)",  # axolotl
    "use_kt": "KTransformers (MoE experts on the CPU)",  # LLaMA-Factory
}
# Switches for update schemes that keep less than AdamW's states (and often gradients) for every trainable weight.
NOT_MODELLED_SWITCHES = {
    "use_galore": "GaLore (low-rank projected optimizer states)",
    "use_apollo": "APOLLO (low-rank optimizer states)",
    "use_badam": "BAdam (one block of layers trained at a time)",
    "use_adam_mini": "Adam-mini (one second moment per block)",
}


def _switch_on(words: list[str]) -> bool:
    """A boolean flag of HfArgumentParser given as shell words: `--x` alone, or `--x true|True|1|yes`."""
    return not words or str(words[0]).lower() in ("true", "1", "yes", "y")


@functools.lru_cache(maxsize=None)
def _optimizer_names() -> frozenset[str]:
    """The optimizer names transformers' TrainingArguments.optim takes (OptimizerNames)."""
    from transformers.training_args import OptimizerNames

    return frozenset(o.value for o in OptimizerNames)


def axolotl_schema() -> frozenset[str]:
    """Every key of axolotl's config schema (read from its pydantic models; the list ships with its source commit)."""
    return _axolotl_keys()


@functools.lru_cache(maxsize=None)
def axolotl_removed() -> dict[str, str]:
    """Keys earlier axolotl releases read that its current schema no longer has, with the last release that had each
    (axolotl_schema.json "removed", read from the repository's history)."""
    try:
        return dict(json.loads(Path(__file__).with_name("axolotl_schema.json").read_text()).get("removed", {}))
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=None)
def _axolotl_keys() -> frozenset[str]:
    path = Path(__file__).with_name("axolotl_schema.json")
    try:
        return frozenset(json.loads(path.read_text())["keys"])
    except (OSError, ValueError, KeyError):
        return frozenset()


def _trainer(sources: list[Source], names: set[str], by_name: bool = True) -> str | None:
    """The trainer the launch runs: the file's own call, its stage / rlhf_type / rl setting, the entry point's name
    (`by_name`: False for what the files say without it)."""
    for source in sources:
        if source.trainer:
            return source.trainer
    for source in sources:
        for s in source.settings:
            key = s.key.lstrip("-").replace("-", "_")
            value = s.value[0] if isinstance(s.value, list) and s.value else s.value
            if key in ("stage", "rlhf_type", "rl") and isinstance(value, str) and value.lower() in trainers.STAGES:
                return trainers.STAGES[value.lower()]
    if not by_name:
        return None
    for source in sources:
        if source.kind == "training_args" and not source.trainer:
            found = trainers.from_entry(str(source.path.relative_to(source.path.parents[min(3, len(source.path.parents) - 1)])))
            if found:
                return found
    for source in sources:
        if source.program.startswith("swift "):
            return "sft" if source.program.endswith(("sft", "pt")) else None
        found = trainers.from_entry(source.program) if source.program else None
        if found:
            return found
    return None


def _first(sources: list[Source], kinds: tuple[str, ...]) -> Source:
    """The first source of the first kind in `kinds` that any source has."""
    return min(sources, key=lambda s: kinds.index(s.kind))


def _parser_of(launcher: str) -> str:
    return "accelerate" if launcher == "axolotl" else launcher


def _whole(parsed: Any, words: list[str]) -> Any:
    """An integral float written without a point stays an int (save_steps 500, not 500.0)."""
    if isinstance(parsed, float) and parsed.is_integer() and len(words) == 1 and re.fullmatch(r"[+-]?\d+", words[0]):
        return int(parsed)
    return parsed


def _json_dict(value: Any) -> Any:
    """A dict argument written as JSON text (gradient_checkpointing_kwargs '{"use_reentrant": false}')."""
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def build(
    sources: list[Source],
    workdir: Path,
    model_config: str | None = None,
    transformers_version: str | None = None,
    image_tokens: int | None = None,
    sample_length: int | None = None,
    trl_version: str | None = None,
) -> Mapped:
    """The recipe dict the files describe (hardware: only what the files state); an unknown model is said, not raised."""
    return _Builder(sources, workdir, transformers_version, image_tokens, sample_length, trl_version).build(model_config)


def fill_hardware(mapped: Mapped, gpu: str | None, gpus: int | None, nodes: int | None, host_ram_gib: float | None, reference) -> list[Finding]:
    """Hardware from the review's flags, else what the files state, else the closest recipe's (and said so);
    then what follows from it: the recipe name, the global batch, axolotl's `bf16: auto`."""
    from vramfit.hardware import CATALOGUE
    from vramfit.libraries import argument_default

    findings: list[Finding] = []
    hw = mapped.recipe.setdefault("hardware", {})
    if mapped.litgpt is not None and gpus is not None and "gpus_per_node" in mapped.litgpt.hardware:
        findings += _litgpt_devices(mapped, gpus)
        gpus = None  # LitGPT starts `devices` processes, whatever the node has
    for key, value, flag in (
        ("gpu", gpu, "--gpu"),
        ("gpus_per_node", gpus, "--gpus"),
        ("nodes", nodes, "--nodes"),
        ("host_ram_gib", host_ram_gib, "--host-ram-gib"),
    ):
        if value is None:
            continue
        split = (mapped.recipe.get("planner") or {}).get("device_map_gpus") or 1
        if key == "gpus_per_node" and split > 1:  # ms-swift's device_map: --gpus counts GPUs, each process spreads over `split`
            value = max(1, value // split)
        said = hw.get(key)
        if said is not None and said != value:
            o = mapped.origins[f"hardware.{key}"]
            findings.append(Finding("info", o.file, o.key, f"the script says {said}; reviewed with {flag} {value}", line=o.line))
        hw[key] = value
        mapped.origins[f"hardware.{key}"] = Origin(mapped.primary.label, flag)
        mapped.stated[key] = flag
    from vramfit.review import device_map

    as_finding = lambda severity, what, file, key, line, fix="": Finding(severity, file, key, what, fix, "validation", line)  # noqa: E731
    findings += one_process.apply(mapped, hw, as_finding, Origin)
    for key, flag, what in (("gpu", "--gpu", "which GPU"), ("gpus_per_node", "--gpus", "how many GPUs per node")):
        if key in hw:
            continue
        if reference is None:
            problems = Problems()
            problems.add(mapped.primary.label, flag, f"the files do not say {what} and there is no recipe to take it from", f"pass {flag}.")
            raise ConfigError(problems)
        hw[key] = getattr(reference.hardware, key)
        choices = f" (one of: {', '.join(CATALOGUE)})" if key == "gpu" else ""
        findings.append(
            Finding(
                "warning",
                mapped.primary.label,
                flag,
                f"the files do not say {what}: reviewed as {hw[key]}, the closest recipe's ({reference.name})",
                f"pass {flag} for your hardware{choices}.",
            )
        )
    hw.setdefault("nodes", 1)
    hw.setdefault("host_ram_gib", HOST_RAM_UNSTATED)
    findings += device_map.apply(mapped, hw, as_finding)
    t = mapped.recipe["training"]
    for key, on in (("bf16", CATALOGUE[hw["gpu"]].bf16), ("fp16", not CATALOGUE[hw["gpu"]].bf16 and t.get("bf16") is not True)):
        if t.get(key) == "auto":
            t[key] = on
    ranks = hw["gpus_per_node"] * hw["nodes"]
    if mapped.litgpt is not None:
        findings += litgpt_strategy(mapped, ranks)
    if mapped.llmfoundry is not None:
        findings += llmfoundry_strategy(mapped, ranks)
    micro = t.get("per_device_train_batch_size", argument_default(None, "per_device_train_batch_size"))
    accum = t.get("gradient_accumulation_steps", argument_default(None, "gradient_accumulation_steps"))
    numbers = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (micro, accum))
    mapped.recipe["global_batch_size"] = micro * accum * (mapped.script_ranks or ranks) if numbers else 1
    mapped.recipe["name"] = f"review-{ranks}x{hw['gpu']}"
    mapped.recipe["summary"] = f"review of {mapped.primary.label}"
    return findings


def _litgpt_devices(mapped: Mapped, gpus: int) -> list[Finding]:
    """A LitGPT config's `devices` is how many processes Lightning Fabric starts, one per GPU, whatever the node has (--gpus):
    the rest idle; fewer GPUs than devices and Lightning refuses to start."""
    source = mapped.litgpt
    devices = source.hardware["gpus_per_node"][0]
    where = Origin(source.label, "devices", source.line_of("devices"))
    if gpus >= devices:
        if gpus == devices:
            return []
        what = f"LitGPT starts {devices} process{'es' if devices > 1 else ''}, one per GPU: {gpus - devices} of the node's {gpus} GPUs (--gpus) stay idle; reviewed on {devices}"
        return [Finding("info", where.file, where.key, what, f"write devices: {gpus} to use them all.", line=where.line)]
    what = f"asks for {devices} GPUs and the node has {gpus} (--gpus): Lightning refuses to start (fewer devices than requested)"
    return [Finding("error", where.file, where.key, what, f"write devices: {gpus}.", line=where.line)]


def litgpt_strategy(mapped: Mapped, ranks: int) -> list[Finding]:
    """A LitGPT run on `ranks` GPUs (vramfit.review.litgpt): the accumulation TrainArgs derives from train.global_batch_size,
    and Lightning Fabric's strategy - one GPU: none; several: FSDP full shard per Block with activation checkpointing
    (finetune_full: FSDP1 FSDPStrategy; finetune_lora: FSDP2 through ModelParallelStrategy), every micro-batch but a step's
    last under no_backward_sync (the unsharded gradients are kept: the planner's default, sync_each_batch off)."""
    from vramfit.review import litgpt

    source = mapped.litgpt
    which = source.program.rsplit("_", 1)[-1]
    t = mapped.recipe["training"]
    micro, accum, samples = litgpt.batch(source.document, ranks, source.label)
    written = next((s for s in source.settings if s.key == "train.global_batch_size"), None)
    where = Origin(source.label, "train.global_batch_size", written.line if written else source.line_of("train"))
    t["gradient_accumulation_steps"] = accum
    mapped.origins["training.gradient_accumulation_steps"] = where
    mapped.script_ranks = None  # the files set samples per step, not per rank: the accumulation follows the GPUs reviewed
    global_batch = written.value if written else litgpt.TRAIN_DEFAULTS["global_batch_size"]
    findings = []
    if samples != global_batch:
        findings.append(
            Finding(
                "info",
                where.file,
                where.key,
                f"{global_batch} over {ranks} rank{'s' if ranks > 1 else ''} of {micro}: TrainArgs rounds down to {accum} micro-batches per step, "
                f"{samples} samples per optimizer step",
                f"write train.global_batch_size: {samples} to say what runs.",
                line=where.line,
            )
        )
    devices = Origin(source.label, "devices", source.line_of("devices"))
    if ranks > 1:
        t["fsdp"] = "full_shard auto_wrap"
        t["gradient_checkpointing"] = True
        if which == "lora":
            t["fsdp_config"] = {"version": 2}
        for key in ("training.fsdp", "training.gradient_checkpointing", "engine"):
            mapped.origins[key] = devices
        mapped.planner_settings["engine"] = "fsdp"
        mapped.planner_origins["engine"] = devices
        how = (
            "FSDP2 fully_shard per Block and trainable Linear, each Block checkpointed (finetune/lora.py ModelParallelStrategy, parallelize_fn)"
            if which == "lora"
            else "FSDP1 full shard per Block with activation checkpointing (finetune/full.py FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy={Block}))"
        )
        what = f"{ranks} GPUs: {how}; {accum} micro-batch{'es' if accum > 1 else ''} of {micro} per step"
        if accum > 1:
            what += ", all but the last under no_backward_sync, which keeps the unsharded gradients"
        if which == "lora" and accum > 1:
            # litgpt before 5ac69b06 (August 2025): finetune/lora.py FSDPStrategy(auto_wrap_policy={Block}), the frozen
            # weights in one flat parameter with the adapters (use_orig_params): they got gradients too (LIT-13..19)
            what += (
                "; litgpt before 5ac69b06 (August 2025) ran LoRA in FSDP1 Block units, where the frozen weights get unsharded "
                "gradients too: plan that with vramfit plan ... fsdp_lora_units=layer"
            )
    else:
        what = f"one GPU: no sharding and no activation checkpointing (Fabric's strategy 'auto'); {accum} micro-batch{'es' if accum > 1 else ''} of {micro} per step"
    findings.append(Finding("info", devices.file, devices.key, f"planned as LitGPT runs it on {what}", source="planner", line=devices.line))
    return findings


def llmfoundry_strategy(mapped: Mapped, ranks: int) -> list[Finding]:
    """An llm-foundry run on `ranks` GPUs (vramfit.review.llmfoundry): the micro-batch and accumulation
    calculate_batch_size_info derives from global_train_batch_size, and Composer's FSDP (fsdp_config: every MPTBlock / HF
    decoder layer its own unit) or DDP."""
    from vramfit.review import llmfoundry

    source = mapped.llmfoundry
    doc = source.document
    t = mapped.recipe["training"]
    micro, accum, device = llmfoundry.batch(doc, ranks, source.label)
    written = next(s for s in source.settings if s.key == "global_train_batch_size")
    where = Origin(source.label, "global_train_batch_size", written.line)
    mapped.script_ranks = None  # the file sets samples per step over every GPU: the accumulation follows the GPUs reviewed
    findings = []
    if micro is None:  # 'auto': planned at 1, the smallest micro-batch Composer's search tries (said in _llmfoundry)
        micro, accum = 1, device
        t["per_device_train_batch_size"] = 1
        mapped.origins["training.per_device_train_batch_size"] = Origin(
            source.label, "device_train_microbatch_size", source.line_of("device_train_microbatch_size")
        )
    elif micro != doc["device_train_microbatch_size"]:
        t["per_device_train_batch_size"] = micro
        findings.append(
            Finding(
                "info",
                where.file,
                "device_train_microbatch_size",
                f"{doc['device_train_microbatch_size']} is more than the {device} samples per GPU ({doc['global_train_batch_size']} over {ranks}): "
                f"llm-foundry cuts it to {micro}",
                f"write device_train_microbatch_size: {micro}.",
                line=source.line_of("device_train_microbatch_size"),
            )
        )
    t["gradient_accumulation_steps"] = accum
    mapped.origins["training.gradient_accumulation_steps"] = where
    fsdp = doc.get("fsdp_config")
    strategy = fsdp.get("sharding_strategy", "FULL_SHARD") if isinstance(fsdp, dict) else None
    line = source.line_of("fsdp_config")
    if strategy is not None and llmfoundry.SHARDING[strategy] is not None:
        t["fsdp"] = llmfoundry.SHARDING[strategy]
        mapped.origins["training.fsdp"] = Origin(source.label, "fsdp_config.sharding_strategy", source.line_of("sharding_strategy", line or 1) or line)
        mapped.planner_settings["engine"] = "fsdp"
        mapped.planner_origins["engine"] = mapped.origins["training.fsdp"]
        if fsdp.get("cpu_offload") is True:
            mapped.planner_settings["offload"] = True
        # Composer 0.14 trainer/dist_strategy.py ddp_sync_context: no_sync only where the model is DDP; under FSDP every
        # micro-batch reduce-scatters its gradients, no unsharded ones are kept across the accumulation
        mapped.planner_settings["fsdp_sync_each_batch"] = True
        mapped.planner_origins["fsdp_sync_each_batch"] = mapped.origins["training.fsdp"]
        how = f"Composer's FSDP {strategy} over {ranks} GPU{'s' if ranks > 1 else ''}, each block its own unit"
        how += ", checkpointed" if t.get("gradient_checkpointing") else ", no activation checkpointing"
        if accum > 1:
            how += ", every micro-batch's gradients reduce-scattered (Composer syncs each one under FSDP)"
    else:
        how = f"{'Composer DDP' if ranks > 1 else 'one GPU'}: no sharding" + (" (fsdp_config NO_SHARD)" if strategy == "NO_SHARD" else "")
    what = f"planned as llm-foundry runs it on {how}; {accum} micro-batch{'es' if accum > 1 else ''} of {micro} per step ({device} samples per GPU)"
    findings.append(Finding("info", source.label, "fsdp_config" if strategy else "global_train_batch_size", what, source="planner", line=line or where.line))
    return findings


@functools.lru_cache(maxsize=None)
def _known_keys() -> frozenset[str]:
    """Every argument name a config file's reader takes that the review knows: the fields of transformers'
    TrainingArguments and of the installed TRL's configs, TRL's ScriptArguments and ModelConfig, axolotl's schema, and the
    upstream arguments (LLaVA, LLaMA-Factory, ms-swift, OpenRLHF, ...) the review maps, reads or names as not modelled."""
    names: set[str] = set()
    for trainer in (None, *trainers.CLASSES):
        try:
            names.update(trainers.fields(trainer))
        except Exception:  # a TRL config this TRL release does not have: its fields are not known
            continue
    names |= trl_script_fields() | axolotl_schema()
    for table in (ALIASES, METHOD_SWITCHES, QUANT_SWITCHES, QUANT_SETTINGS, TRAIN_SWITCHES, OPENRLHF, SWIFT2, RENAMED, AXOLOTL):
        names.update(table)
    names |= NOT_MODELLED | UPSTREAM_SPECIAL | GRPO_KEEP | AXOLOTL_SPECIAL | AXOLOTL_NOT_MODELLED | set(PLANNER_SWITCHES)
    names |= set(SHARDING_NOT_MODELLED) | set(NOT_MODELLED_SWITCHES) | FLASH_SWITCHES
    return frozenset(n for n in names if "." not in n)


def known_key(name: str) -> bool:
    """A key a training config's reader takes (for sources.read_all's `known`: a YAML key written without its space)."""
    return name in _known_keys()
