"""LitGPT fine-tuning configs (`litgpt finetune_full|finetune_lora|finetune_adapter --config FILE`, the YAMLs of
litgpt's config_hub/finetune/), read as the run LitGPT starts from them.

Every fact below is read from litgpt at 26857050 (2026-06-29), the newest published commit:
- the keys: the `setup()` arguments of litgpt/finetune/full.py, lora.py, adapter.py, adapter_v2.py (jsonargparse builds
  the command line from them) and the fields of litgpt/args.py TrainArgs / EvalArgs / LogArgs, with the TrainArgs
  fields older versions had (learning_rate, weight_decay, beta1, beta2: before March 2024);
- the defaults: each script's `setup()` signature (`train=TrainArgs(global_batch_size=16, micro_batch_size=1,
  epochs=5, ...)`), `precision=None` -> utils.get_default_supported_precision(training=True): "bf16-mixed" on a GPU
  with bf16, else "16-mixed";
- what runs: `devices * num_nodes > 1` -> full.py and adapter.py use FSDPStrategy(auto_wrap_policy={Block},
  activation_checkpointing_policy={Block}, state_dict_type="full", cpu_offload=False): FSDP1 full shard per Block
  with activation checkpointing; lora.py (since 5ac69b06, August 2025) uses ModelParallelStrategy with its
  parallelize_fn: FSDP2 `fully_shard` per Block and trainable Linear, each Block wrapped by checkpoint_wrapper;
- the batch: TrainArgs.batch_size = global_batch_size // (devices * num_nodes) per rank, gradient_accumulation_iters
  = that // micro_batch_size (both asserted > 0); every micro-batch but the last of a step runs under
  `fabric.no_backward_sync` (FSDP's no_sync: the unsharded gradients are kept);
- the loss: lora.py / adapter.py run lm_head in 128-token chunks (`model(input_ids, lm_head_chunk_size=128)`), full.py
  computes the whole logits and chunks only the cross-entropy (utils.chunked_cross_entropy);
- the batch's length: litgpt/data/base.py `_sft_collate_fn` pads each batch to its longest sample and truncates it to
  train.max_seq_length;
- quantization: lora.py / adapter.py `quantize: bnb.nf4|bnb.nf4-dq|bnb.fp4|bnb.fp4-dq|bnb.int8-training`
  (Lightning's BitsandbytesPrecision), one device only, with bitsandbytes' PagedAdamW (utils.instantiate_bnb_optimizer,
  AdamW only);
- LoRA: `lora_query/key/value/projection/mlp/head` pick the linears (defaults: query and value), r 8, alpha 16,
  dropout 0.05;
- fit() binds `logits = model(...)`: the last step's logits live until the next forward returns (planner knob
  keeps_previous_output);
- the model is litgpt/model.py's GPT, not transformers' class: its own lm_head (convert_hf_checkpoint copies a tied
  embedding into it), no dropout module, `F.gelu(approximate=...)` (mapping.py `_litgpt_model_config` rewrites the config);
- not planned: a quantized run swaps the embedding for bitsandbytes' StableEmbedding after building the optimizer
  (finetune/lora.py since ae798aba, 2024-10-04): the old embedding stays referenced (`old_embedding`, and the
  optimizer's parameter list) and the new one trains outside the optimizer, its dense 16-bit gradient never freed -
  two more vocabulary matrices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit.problems import ConfigError, Problems, did_you_mean

COMMIT = "litgpt 26857050"
# litgpt/finetune/*.py setup() arguments, every version since March 2024.
COMMON = ("checkpoint_dir", "out_dir", "precision", "devices", "num_nodes", "resume", "data", "train", "eval", "log", "optimizer")
COMMON += ("logger_name", "seed", "access_token")
LORA_SWITCHES = ("lora_query", "lora_key", "lora_value", "lora_projection", "lora_mlp", "lora_head")
LORA_KEYS = ("lora_r", "lora_alpha", "lora_dropout", *LORA_SWITCHES)
TOP_KEYS = frozenset(COMMON + ("quantize",) + LORA_KEYS)
# litgpt/args.py TrainArgs (and the fields it had before March 2024), EvalArgs, LogArgs.
TRAIN_KEYS = frozenset(
    "save_interval log_interval global_batch_size micro_batch_size lr_warmup_steps lr_warmup_fraction epochs max_tokens "
    "max_steps max_time max_seq_length tie_embeddings max_norm min_lr learning_rate weight_decay beta1 beta2".split()
)
EVAL_KEYS = frozenset("interval max_new_tokens max_iters initial_validation final_validation evaluate_example".split())
LOG_KEYS = frozenset("project run group teamspace metadata log_model save_logs checkpoint_name".split())
# finetune/*.py validate_args: TrainArgs fields the fine-tuning scripts refuse when set (ValueError at start).
UNSUPPORTED = ("max_tokens", "max_norm", "tie_embeddings", "lr_warmup_fraction")
# each script's setup() default TrainArgs (full.py, lora.py, adapter.py alike at 26857050)
TRAIN_DEFAULTS = {"global_batch_size": 16, "micro_batch_size": 1, "epochs": 5, "max_seq_length": None}
LORA_DEFAULTS = {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.05, "lora_query": True, "lora_key": False}
LORA_DEFAULTS |= {"lora_value": True, "lora_projection": False, "lora_mlp": False, "lora_head": False}
# lightning/fabric/connector.py _PRECISION_INPUT (its legacy spellings as Fabric maps them) -> (planner dtype, AMP flag)
PRECISION = {
    "bf16-true": ("bfloat16", None),
    "bf16-mixed": ("float32", "bf16"),
    "bf16": ("float32", "bf16"),
    "16-true": ("float16", None),
    "16-mixed": ("float32", "fp16"),
    "16": ("float32", "fp16"),
    "32-true": ("float32", None),
    "32": ("float32", None),
    # taken by Fabric, not planned as such: TransformerEngine (FP8 matmuls on top of bf16 / fp16 mixed) planned as its
    # mixed precision, an upper bound; fp64 planned as fp32, a lower bound (said in the review)
    "transformer-engine": ("float32", "bf16"),
    "transformer-engine-float16": ("float32", "fp16"),
    "64-true": ("float32", None),
    "64": ("float32", None),
}
NOT_PLANNED_PRECISION = {
    "transformer-engine": "TransformerEngine's FP8 matmuls planned as bf16-mixed, an upper bound",
    "transformer-engine-float16": "TransformerEngine's FP8 matmuls planned as 16-mixed, an upper bound",
    "64-true": "fp64 planned as 32-true: every weight, gradient and state takes twice that, so the plan is a lower bound",
    "64": "fp64 planned as 32-true: every weight, gradient and state takes twice that, so the plan is a lower bound",
}
DEFAULT_PRECISION = "bf16-mixed"
# lora.py setup(): quantize Literal -> (bits, bitsandbytes quant type, double quantization)
QUANTIZE = {
    "bnb.nf4": (4, "nf4", False),
    "bnb.nf4-dq": (4, "nf4", True),
    "bnb.fp4": (4, "fp4", False),
    "bnb.fp4-dq": (4, "fp4", True),
    "bnb.int8-training": (8, None, False),
}
# torch / bitsandbytes optimizer classes -> the Trainer's optim name with the same states
OPTIMIZERS = {
    "AdamW": "adamw_torch",
    "Adam": "adamw_torch",
    "SGD": "sgd",
    "Adafactor": "adafactor",
    "AdamW8bit": "adamw_bnb_8bit",
    "PagedAdamW8bit": "paged_adamw_8bit",
    "PagedAdamW": "paged_adamw_32bit",
    "PagedAdamW32bit": "paged_adamw_32bit",
}
# LitGPT's lora_* switches as the Hugging Face module names of the model's linears (litgpt/lora.py: the fused qkv
# linear's query / key / value parts, attn.proj, the MLP's linears, lm_head). Fused qkv models take the fused linear,
# an upper bound when only some of its parts are adapted.
_LLAMA = {"query": ["q_proj"], "key": ["k_proj"], "value": ["v_proj"], "projection": ["o_proj"], "mlp": ["gate_proj", "up_proj", "down_proj"]}
_NEOX = {"query": ["query_key_value"], "key": ["query_key_value"], "value": ["query_key_value"], "projection": ["dense"]}
_NEOX["mlp"] = ["dense_h_to_4h", "dense_4h_to_h"]
LORA_MODULES = {
    "phi": {"query": ["q_proj"], "key": ["k_proj"], "value": ["v_proj"], "projection": ["dense"], "mlp": ["fc1", "fc2"]},
    "phi3": {"query": ["qkv_proj"], "key": ["qkv_proj"], "value": ["qkv_proj"], "projection": ["o_proj"], "mlp": ["gate_up_proj", "down_proj"]},
    "gpt_neox": _NEOX,
    "falcon": _NEOX,
}


def is_config(document: dict) -> bool:
    """A LitGPT fine-tuning config: checkpoint_dir (a top-level key of no other format vramfit reads) beside a train: or
    eval: section, or two more of LitGPT's setup() arguments."""
    if "checkpoint_dir" not in document:
        return False
    return (
        bool({"train", "eval"} & set(document))
        or len({"out_dir", "precision", "devices", "num_nodes", "logger_name", "quantize", "lora_r"} & set(document)) >= 2
    )


def is_pretrain(document: dict) -> bool:
    """A LitGPT pretraining config (config_hub/pretrain/*.yaml, `litgpt pretrain --config`): litgpt/pretrain.py setup()'s
    model_name / model_config / initial_checkpoint_dir / tokenizer_dir beside a train: section of TrainArgs keys."""
    train = document.get("train")
    own = {"model_name", "model_config", "initial_checkpoint_dir", "tokenizer_dir"} & set(document)
    return "checkpoint_dir" not in document and len(own) >= 2 and isinstance(train, dict) and bool(TRAIN_KEYS & set(train))


def script(document: dict, path: Path) -> str:
    """Which fine-tuning script the config is for: `lora_*` keys are finetune_lora's only; a `quantize` key without them
    is finetune_lora's or finetune_adapter's (the file's name tells which); neither: finetune_full (which takes neither)."""
    if any(k in document for k in LORA_KEYS):
        return "lora"
    name = path.stem.lower()
    if "quantize" in document or "lora" in name or "adapter" in name:
        return "adapter" if "adapter" in name else "lora"
    return "full"


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check(document: dict, file: str) -> Problems:
    """What LitGPT's command line (jsonargparse over setup()'s types) or its setup refuses before training: exit 2."""
    problems = Problems()
    if not isinstance(document.get("checkpoint_dir"), str) or not document["checkpoint_dir"].strip():
        problems.add(
            file,
            "checkpoint_dir",
            f"must name the model's checkpoint folder or Hub id, got {document.get('checkpoint_dir')!r} (LitGPT's fine-tuning scripts require it)",
            "write checkpoint_dir: checkpoints/<org>/<model> (LitGPT downloads a Hub id there).",
        )
    for section in ("train", "eval", "log"):
        if section in document and document[section] is not None and not isinstance(document[section], dict):
            problems.add(
                file,
                section,
                f"must be a mapping of {section} settings, got {type(document[section]).__name__}",
                f"write {section}: followed by indented keys.",
            )
    train = document.get("train") if isinstance(document.get("train"), dict) else {}
    for key in ("global_batch_size", "micro_batch_size"):
        if key in train and not _positive(train[key]):
            problems.add(file, f"train.{key}", f"must be a positive integer, got {train[key]!r}", f"write train.{key}: {TRAIN_DEFAULTS[key]}.")
    for key in ("max_seq_length", "epochs", "max_steps"):
        if train.get(key) is not None and not _positive(train[key]):
            problems.add(
                file, f"train.{key}", f"must be a positive integer or empty, got {train[key]!r}", f"write a positive number or leave train.{key} empty."
            )
    devices = document.get("devices", 1)
    if not (_positive(devices) or devices in (-1, "auto")):
        problems.add(
            file,
            "devices",
            f"must be a positive integer, -1 or 'auto' (litgpt/utils.py parse_devices), got {devices!r}",
            "write devices: 1 (or the GPUs per node).",
        )
    nodes = document.get("num_nodes", 1)
    if not _positive(nodes):
        problems.add(file, "num_nodes", f"must be a positive integer, got {nodes!r}", "write num_nodes: 1.")
    precision = document.get("precision")
    if precision is not None and str(precision) not in PRECISION:
        problems.add(
            file,
            "precision",
            f"{precision!r} is not a precision Lightning Fabric takes{did_you_mean(str(precision), list(PRECISION))}",
            "write precision: bf16-true (bf16 weights and optimizer states), bf16-mixed or 32-true.",
        )
    quantize = document.get("quantize")
    if quantize is not None and quantize not in QUANTIZE:
        problems.add(
            file,
            "quantize",
            f"{quantize!r} is not one of LitGPT's quantize values ({', '.join(QUANTIZE)}){did_you_mean(str(quantize), list(QUANTIZE))}",
            "write quantize: bnb.nf4, or leave it empty.",
        )
    if quantize is not None and precision is not None and "mixed" in str(precision):
        problems.add(
            file,
            "quantize",
            f"LitGPT refuses quantization with precision {precision} ('Quantization and mixed precision is not supported')",
            "write precision: bf16-true.",
        )
    if quantize is not None and ((_positive(devices) and devices > 1) or (_positive(nodes) and nodes > 1)):
        problems.add(
            file,
            "quantize",
            f"LitGPT quantizes on one device only (devices {devices}, num_nodes {nodes}: 'Quantization is currently not supported for multi-GPU training')",
            "write devices: 1 and num_nodes: 1, or leave quantize empty.",
        )
    for key in ("lora_r", "lora_alpha"):
        if key in document and not _positive(document[key]):
            problems.add(file, key, f"must be a positive integer, got {document[key]!r}", f"write {key}: {LORA_DEFAULTS[key]}.")
    dropout = document.get("lora_dropout", 0.05)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        problems.add(file, "lora_dropout", f"must be a number from 0 up to 1, got {dropout!r}", "write lora_dropout: 0.05.")
    for key in LORA_SWITCHES:
        if key in document and not isinstance(document[key], bool):
            problems.add(file, key, f"must be true or false, got {document[key]!r}", f"write {key}: {str(LORA_DEFAULTS[key]).lower()}.")
    return problems


def batch(document: dict, ranks: int, file: str) -> tuple[int, int, int]:
    """(micro-batch, accumulation, samples per optimizer step) on `ranks` data-parallel ranks, as TrainArgs computes them;
    ConfigError where its asserts stop the run."""
    train = document.get("train") or {}
    global_batch = train.get("global_batch_size", TRAIN_DEFAULTS["global_batch_size"])
    micro = train.get("micro_batch_size", TRAIN_DEFAULTS["micro_batch_size"])
    per_rank = global_batch // ranks
    if per_rank < micro:
        problems = Problems()
        problems.add(
            file,
            "train.global_batch_size",
            f"{global_batch} samples over {ranks} ranks is {per_rank} per rank, fewer than train.micro_batch_size {micro}: LitGPT's "
            "TrainArgs asserts global_batch_size // (devices * num_nodes) // micro_batch_size > 0 and stops",
            f"write train.global_batch_size: {micro * ranks} (or more).",
        )
        raise ConfigError(problems)
    return micro, per_rank // micro, (per_rank // micro) * micro * ranks


def lora_modules(document: dict, model_type: str) -> tuple[list[str], bool]:
    """(the Hugging Face module names LitGPT's lora_* switches adapt in a model of `model_type`, whether the names are
    an upper bound: a fused qkv linear adapted whole where only some of its parts are)."""
    names = LORA_MODULES.get(model_type, _LLAMA)
    on = {k.removeprefix("lora_"): bool(document.get(k, LORA_DEFAULTS[k])) for k in LORA_SWITCHES}
    modules: list[str] = []
    for part in ("query", "key", "value", "projection", "mlp"):
        if on[part]:
            modules += [n for n in names[part] if n not in modules]
    if on["head"]:
        modules.append("lm_head")
    qkv = [on[p] for p in ("query", "key", "value")]
    fused = names["query"] == names["key"] and any(qkv) and not all(qkv)
    return modules, fused
