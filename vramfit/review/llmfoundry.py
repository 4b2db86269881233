"""llm-foundry training YAMLs (scripts/train/yamls/**.yaml, `composer scripts/train/train.py YAML`), read as the run
llm-foundry and Composer make of them.

Every fact below is read from mosaicml/llm-foundry at 8bcf6446 (2023-05-05; setup.py pins torch 1.13.1, Composer 0.14):
- the file: OmegaConf (`${max_seq_len}` interpolations resolved against the file's own keys);
- the model: llmfoundry/models/model_registry.py COMPOSER_MODEL_REGISTRY - `mpt_causal_lm` (ComposerMPTCausalLM, its
  architecture written inline: d_model, n_heads, n_layers, expansion_ratio, max_seq_len, vocab_size, attn_config, ...
  with llmfoundry/models/mpt/configuration_mpt.py MPTConfig's defaults; transformers' MptConfig reads the same names),
  `hf_causal_lm` / `hf_prefix_lm` / `hf_t5` (a Hub model, `pretrained_model_name_or_path`);
- the batch: llmfoundry/utils/config_utils.py calculate_batch_size_info - global_train_batch_size must divide by the
  world size (ValueError), device batch = global / world, a micro-batch over it is cut to it, accumulation
  ceil(device batch / micro-batch); device_train_microbatch_size 'auto': Composer searches the largest micro-batch
  that fits (halving on OOM);
- precision: Composer's Precision - amp_bf16 / amp_fp16 (fp32 weights, autocast), fp32 (amp_fp8 later versions);
- FSDP: Composer's fsdp_config (composer/trainer/dist_strategy.py at v0.14.1): sharding_strategy FULL_SHARD (default) /
  SHARD_GRAD_OP / NO_SHARD (HYBRID_SHARD in later versions); mixed_precision DEFAULT (default: bf16 params, fp32
  reduce), PURE (bf16 params, reduce and buffers), FULL (fp32: refused with sharding under torch 1.13);
  activation_checkpointing (default false) wraps each block; activation_cpu_offload moves the checkpoints to the host;
  cpu_offload: Composer 0.14 raises 'FSDP CPU Offload not supported yet.' (mosaic_fsdp.get_cpu_offload), later
  versions offload the parameters (planned so); every micro-batch of a step syncs its gradients under FSDP
  (dist_strategy.ddp_sync_context uses no_sync for DDP only);
- the optimizer: llmfoundry/utils/builders.py build_optimizer - decoupled_adamw (AdamW's two states), decoupled_lionw,
  clip_lion, adalr_lion (Lion's one state).
"""

from __future__ import annotations

import math
import re
from typing import Any

from vramfit.problems import ConfigError, Problems, did_you_mean

COMMIT = "llm-foundry 8bcf6446 (Composer 0.14)"
MODELS = ("mpt_causal_lm", "hf_causal_lm", "hf_prefix_lm", "hf_t5")
# llmfoundry/models/mpt/configuration_mpt.py MPTConfig.__init__ defaults (those that change memory)
MPT_DEFAULTS = {
    "d_model": 2048,
    "n_heads": 16,
    "n_layers": 24,
    "expansion_ratio": 4,
    "max_seq_len": 2048,
    "vocab_size": 50368,
    "resid_pdrop": 0.0,
    "emb_pdrop": 0.0,
    "learned_pos_emb": True,
    "no_bias": False,
    "norm_type": "low_precision_layernorm",
    "logit_scale": None,
}
MPT_ATTN_DEFAULTS = {"attn_impl": "triton", "attn_pdrop": 0.0, "alibi": False, "qk_ln": False, "clip_qkv": None, "prefix_lm": False}
MPT_KEYS = frozenset(MPT_DEFAULTS) | {"attn_config", "init_config", "init_device", "verbose", "embedding_fraction", "use_cache", "name"}
MPT_KEYS |= {"loss_fn", "ffn_config", "fc_type", "tie_word_embeddings", "pretrained", "pretrained_model_name_or_path"}
# attn_impl -> the attention class the planner models (torch: MPT's own scaled_multihead_dot_product_attention keeps
# the seq x seq scores; triton / flash: fused kernels that keep none)
ATTENTION = {"torch": "eager", "triton": "flash_attention_2", "flash": "flash_attention_2"}
# Composer's Precision -> (planner dtype, AMP flag)
PRECISION = {"amp_bf16": ("float32", "bf16"), "amp_fp16": ("float32", "fp16"), "fp32": ("float32", None), "amp_fp8": ("float32", "bf16")}
SHARDING = {"FULL_SHARD": "full_shard auto_wrap", "SHARD_GRAD_OP": "shard_grad_op auto_wrap", "NO_SHARD": None, "HYBRID_SHARD": "hybrid_shard auto_wrap"}
MIXED = ("PURE", "DEFAULT", "FULL")
# build_optimizer names -> the Trainer optim whose states match
OPTIMIZERS = {
    "decoupled_adamw": "adamw_torch",
    "adamw": "adamw_torch",
    "decoupled_lionw": "lion_32bit",
    "clip_lion": "lion_32bit",
    "adalr_lion": "lion_32bit",
    "decoupled_lionw_8b": "lion_8bit",
}
# top-level keys scripts/train/train.py reads (at 8bcf6446 and the keys later versions added); others are logged only
TOP_KEYS = frozenset(
    "max_seq_len global_seed run_name model tokenizer train_loader eval_loader scheduler optimizer algorithms max_duration "
    "eval_interval eval_first eval_subset_num_batches global_train_batch_size seed device_eval_batch_size "
    "device_train_microbatch_size precision fsdp_config progress_bar log_to_console console_log_interval callbacks loggers "
    "save_interval save_num_checkpoints_to_keep save_folder save_filename save_latest_filename save_overwrite save_weights_only "
    "load_path load_weights_only load_ignore_keys autoresume icl_tasks eval_gauntlet icl_subset_num_batches icl_seq_len "
    "dist_timeout python_log_level data_local data_remote variables n_gpus device_train_batch_size device_train_grad_accum "
    "compile_config metadata code_paths".split()
)
FSDP_KEYS = frozenset(
    "sharding_strategy mixed_precision activation_checkpointing activation_checkpointing_reentrant activation_cpu_offload "
    "limit_all_gathers verbose cpu_offload forward_prefetch backward_prefetch sync_module_states use_orig_params state_dict_type "
    "load_monolith_rank0_only ignored_modules keep_low_precision_grads".split()
)
_REF = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


def is_config(document: dict) -> bool:
    """An llm-foundry training YAML: a `model: {name: ...}` mapping beside train_loader: and Composer's batch / duration keys."""
    model = document.get("model")
    keys = set(document)
    return (
        isinstance(model, dict)
        and "name" in model
        and "train_loader" in keys
        and bool(keys & {"device_train_microbatch_size", "global_train_batch_size", "max_duration"})
    )


def resolve(document: Any, root: dict | None = None, depth: int = 0) -> Any:
    """OmegaConf's `${a.b}` interpolations, resolved against the file's own keys (a whole-value reference keeps its type)."""
    root = document if root is None else root
    if isinstance(document, dict):
        return {k: resolve(v, root, depth) for k, v in document.items()}
    if isinstance(document, list):
        return [resolve(v, root, depth) for v in document]
    if isinstance(document, str) and "${" in document and depth < 8:

        def look(path: str) -> Any:
            node: Any = root
            for part in path.split("."):
                if not isinstance(node, dict) or part not in node:
                    return None
                node = node[part]
            return resolve(node, root, depth + 1)

        whole = _REF.fullmatch(document)
        if whole:
            return look(whole.group(1))
        return _REF.sub(lambda m: str(look(m.group(1))), document)
    return document


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check(document: dict, file: str) -> Problems:
    """What llm-foundry's train.py or Composer refuses before training (exit 2)."""
    problems = Problems()
    model = document["model"]
    name = model.get("name")
    if name not in MODELS:
        problems.add(
            file,
            "model.name",
            f"{name!r} is not a model llm-foundry builds (COMPOSER_MODEL_REGISTRY: {', '.join(MODELS)}){did_you_mean(str(name), list(MODELS))}",
            "write model.name: mpt_causal_lm (an MPT written inline) or hf_causal_lm (with pretrained_model_name_or_path).",
        )
    if name == "mpt_causal_lm":
        for key in ("d_model", "n_heads", "n_layers", "expansion_ratio", "max_seq_len", "vocab_size"):
            if key in model and not _positive(model[key]):
                problems.add(file, f"model.{key}", f"must be a positive integer, got {model[key]!r}", f"write model.{key}: {MPT_DEFAULTS[key]}.")
        d, h = model.get("d_model", MPT_DEFAULTS["d_model"]), model.get("n_heads", MPT_DEFAULTS["n_heads"])
        if _positive(d) and _positive(h) and d % h:
            problems.add(file, "model.n_heads", f"d_model {d} is not divisible by n_heads {h} (MPTConfig asserts it)", "write an n_heads that divides d_model.")
        attn = model.get("attn_config") or {}
        if not isinstance(attn, dict):
            problems.add(file, "model.attn_config", f"must be a mapping, got {type(attn).__name__}", "write attn_config: {attn_impl: triton}.")
        elif attn.get("attn_impl", "triton") not in ATTENTION:
            impl = attn["attn_impl"]
            problems.add(
                file,
                "model.attn_config.attn_impl",
                f"{impl!r} is not one of MPT's attention implementations (torch, triton, flash){did_you_mean(str(impl), list(ATTENTION))}",
                "write attn_impl: triton (or flash, torch).",
            )
    elif name in MODELS and not isinstance(model.get("pretrained_model_name_or_path"), str):
        problems.add(
            file,
            "model.pretrained_model_name_or_path",
            f"{name} needs the Hugging Face model to build, got {model.get('pretrained_model_name_or_path')!r}",
            "write model.pretrained_model_name_or_path: <org>/<model>.",
        )
    micro = document.get("device_train_microbatch_size", "auto")
    if not (_positive(micro) or micro == "auto"):
        problems.add(
            file,
            "device_train_microbatch_size",
            f"must be a positive integer or 'auto' (config_utils.calculate_batch_size_info: 'Not sure how to parse'), got {micro!r}",
            "write device_train_microbatch_size: 4 (or auto).",
        )
    if "global_train_batch_size" not in document or not _positive(document["global_train_batch_size"]):
        problems.add(
            file,
            "global_train_batch_size",
            f"must be a positive integer (train.py reads it), got {document.get('global_train_batch_size')!r}",
            "write global_train_batch_size: 64 (samples per optimizer step over every GPU).",
        )
    if "max_seq_len" in document and not _positive(document["max_seq_len"]):
        problems.add(file, "max_seq_len", f"must be a positive integer, got {document['max_seq_len']!r}", "write max_seq_len: 2048.")
    precision = document.get("precision", "amp_bf16")
    if precision not in PRECISION:
        problems.add(
            file,
            "precision",
            f"{precision!r} is not one of Composer's precisions ({', '.join(PRECISION)}){did_you_mean(str(precision), list(PRECISION))}",
            "write precision: amp_bf16.",
        )
    fsdp = document.get("fsdp_config")
    if fsdp is not None and not isinstance(fsdp, dict):
        problems.add(file, "fsdp_config", f"must be a mapping, got {type(fsdp).__name__}", "write fsdp_config: followed by indented keys.")
    elif isinstance(fsdp, dict):
        strategy = fsdp.get("sharding_strategy", "FULL_SHARD")
        if strategy not in SHARDING:
            problems.add(
                file,
                "fsdp_config.sharding_strategy",
                f"{strategy!r} is not one of Composer's ({', '.join(SHARDING)}){did_you_mean(str(strategy), list(SHARDING))}",
                "write sharding_strategy: FULL_SHARD.",
            )
        mixed = fsdp.get("mixed_precision", "DEFAULT")
        if not (mixed in MIXED or isinstance(mixed, dict)):
            problems.add(
                file,
                "fsdp_config.mixed_precision",
                f"{mixed!r} is not one of Composer's (PURE, DEFAULT, FULL, or a mapping){did_you_mean(str(mixed), list(MIXED))}",
                "write mixed_precision: PURE.",
            )
    optimizer = document.get("optimizer")
    opt_name = optimizer.get("name") if isinstance(optimizer, dict) else None
    if optimizer is not None and opt_name not in OPTIMIZERS:
        problems.add(
            file,
            "optimizer.name",
            f"{opt_name!r} is not an optimizer llm-foundry builds (builders.build_optimizer: {', '.join(OPTIMIZERS)})"
            + did_you_mean(str(opt_name), list(OPTIMIZERS)),
            "write optimizer.name: decoupled_adamw.",
        )
    return problems


def batch(document: dict, ranks: int, file: str) -> tuple[int | None, int | None, int]:
    """(micro-batch, accumulation, device batch) on `ranks` GPUs as calculate_batch_size_info computes them; None, None for
    'auto' (Composer picks the micro-batch); ConfigError where the global batch does not divide by the GPUs."""
    global_batch = document["global_train_batch_size"]
    if global_batch % ranks:
        problems = Problems()
        down, up = global_batch // ranks * ranks, math.ceil(global_batch / ranks) * ranks
        problems.add(
            file,
            "global_train_batch_size",
            f"{global_batch} is not divisible by the {ranks} GPUs: llm-foundry's calculate_batch_size_info raises ValueError at start",
            f"write global_train_batch_size: {up if down == 0 else down} (a multiple of {ranks}).",
        )
        raise ConfigError(problems)
    device = global_batch // ranks
    micro = document.get("device_train_microbatch_size", "auto")
    if micro == "auto":
        return None, None, device
    micro = min(micro, device)
    return micro, math.ceil(device / micro), device


def mpt_config(model: dict) -> tuple[dict, list[str]]:
    """transformers' MptConfig arguments for an inline `mpt_causal_lm` (the names are llm-foundry MPTConfig's), and the
    MPTConfig defaults taken for what the file leaves out."""
    assumed = [f"{k} {v}" for k, v in MPT_DEFAULTS.items() if k not in model and k in ("d_model", "n_heads", "n_layers", "vocab_size", "max_seq_len")]
    args = {k: model.get(k, v) for k, v in MPT_DEFAULTS.items() if k not in ("learned_pos_emb", "norm_type", "logit_scale")}
    attn = dict(MPT_ATTN_DEFAULTS) | dict(model.get("attn_config") or {})
    if "attn_config" not in model or "attn_impl" not in (model.get("attn_config") or {}):
        assumed.append(f"attn_config.attn_impl {attn['attn_impl']}")
    # attn_pdrop left out: transformers' MptAttentionConfig types it int and refuses 0.1 (its default 0 is taken; MPT's
    # fused triton / flash kernels keep no dropout mask either way)
    args["attn_config"] = {k: attn[k] for k in ("attn_impl", "alibi", "qk_ln", "clip_qkv", "prefix_lm") if k in attn}
    for key in ("resid_pdrop", "emb_pdrop"):
        args[key] = float(args[key]) if isinstance(args[key], (int, float)) and not isinstance(args[key], bool) else args[key]
    args["learned_pos_emb"] = model.get("learned_pos_emb", True)
    args["logit_scale"] = model.get("logit_scale")
    args["use_cache"] = False
    args["architectures"] = ["MptForCausalLM"]
    return args, assumed
