"""Load the recipe's model and processor, and decide what trains.

- The checkpoint must be one the recipe's native class can load: `check_checkpoint` refuses a
  stand-in recipe whose model.id is remote code (DocOwl, TinyChart, MiniCPM-V), saying so.
- Liger kernels (`training.use_liger_kernel`) are liger-kernel's own patch of the model instance.
- qlora: bitsandbytes quantization from `model.quantization`; lora/qlora: PEFT adapters from
  `model.lora`, with the vision-language parts that `model.train` marks trainable saved whole
  (PEFT modules_to_save), as upstream MiniCPM-V does for its vision tower and resampler. The LLM's
  own weights stay frozen under LoRA whatever `model.train.llm` says: its adapters are what train.
- `model.train` (full method): llm / projector / vision_tower true or false; vision_tower N trains
  vision layers N.. and freezes the embeddings and layers 0..N-1.
"""

from __future__ import annotations

import re
from typing import Any

import torch

_PROJECTOR = re.compile(r"(^|\.)(multi_modal_projector|merger)(\.|$)")
_VISION = re.compile(r"(^|\.)(vision_tower|visual|vision_model)(\.|$)")
_VISION_LAYER = re.compile(r"(?:encoder\.layers|blocks)\.(\d+)\.")
_LORA = re.compile(r"\.lora_(A|B|embedding_A|embedding_B|magnitude_vector)\.")
PARTS = ("llm", "projector", "vision_tower", "lora")


class ModelError(Exception):
    """The recipe's model cannot be trained as asked; the entrypoint prints it and exits 2."""


def part_of(name: str) -> str:
    """Which part of the model a parameter or module name belongs to (PEFT wrappers included)."""
    if _LORA.search(name):
        return "lora"
    if _PROJECTOR.search(name):
        return "projector"
    if _VISION.search(name):
        return "vision_tower"
    return "llm"


def is_vision_language(config) -> bool:
    return getattr(config, "vision_config", None) is not None


def trains(name: str, train) -> bool:
    """Whether model.train wants the (non-adapter) parameter `name` to train."""
    part = part_of(name)
    if part == "llm":
        return train.llm
    if part == "projector":
        return train.projector
    if isinstance(train.vision_tower, bool):
        return train.vision_tower
    layer = _VISION_LAYER.search(name)
    return layer is not None and int(layer.group(1)) >= train.vision_tower


def architecture_class(recipe):
    import transformers

    return getattr(transformers, recipe.model.architecture)


def model_path(recipe) -> str:
    """model.id as a local folder (absolute, or relative to the repository) when it is one, else a Hub id."""
    local = recipe.path(recipe.model.id)
    return str(local) if local.is_dir() else recipe.model.id


def check_checkpoint(recipe) -> None:
    """Refuse a checkpoint whose config.json is not the recipe's native architecture (remote code)."""
    from transformers import PretrainedConfig

    cls = architecture_class(recipe)
    try:
        config, _ = PretrainedConfig.get_config_dict(model_path(recipe))
    except OSError as exc:
        raise ModelError(f"model.id {recipe.model.id}: cannot read its config.json ({exc})") from None
    found, native = config.get("model_type"), cls.config_class.model_type
    if found == native:
        return
    remote = f" (remote code: {config['auto_map']})" if config.get("auto_map") else ""
    stand_in = f" The recipe trains a native stand-in: {recipe.model.stand_in}." if recipe.model.stand_in else ""
    raise ModelError(
        f"model.id {recipe.model.id} is a '{found}' checkpoint{remote}, which {recipe.model.architecture} "
        f"('{native}') cannot load.{stand_in} A real run needs {recipe.model.architecture} weights: set model.id to a "
        f"checkpoint converted to that class. `vramfit run {recipe.name} --smoke` trains the stand-in from random weights."
    )


def load_processing(recipe):
    """The processor (vision-language model) or tokenizer saved with the checkpoint."""
    from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

    from vramfit.train import cpu_shims

    path = model_path(recipe)
    config = AutoConfig.from_pretrained(path, trust_remote_code=recipe.model.trust_remote_code)
    if not is_vision_language(config):
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=recipe.model.trust_remote_code)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer
    processor = cpu_shims.processor_class(config.model_type).from_pretrained(path, trust_remote_code=recipe.model.trust_remote_code)
    if recipe.data.max_pixels and config.model_type.startswith("qwen2"):
        # Qwen2-VL family: one LLM token per 28x28 px; larger images are resized down to max_pixels.
        processor.image_processor = AutoImageProcessor.from_pretrained(path, max_pixels=recipe.data.max_pixels)
    if processor.tokenizer.pad_token is None:
        processor.tokenizer.pad_token = processor.tokenizer.eos_token
    return processor


def quantization_config(recipe):
    from transformers import BitsAndBytesConfig

    q = recipe.model.quantization
    return BitsAndBytesConfig(
        load_in_4bit=q.bits == 4,
        load_in_8bit=q.bits == 8,
        bnb_4bit_quant_type=q.quant_type,
        bnb_4bit_use_double_quant=q.double_quant,
        bnb_4bit_compute_dtype=getattr(torch, q.compute_dtype),
        bnb_4bit_quant_storage=getattr(torch, q.quant_storage),
    )


def apply_liger(model, kernel_config: dict[str, Any] | None) -> None:
    """liger-kernel's own instance patch (RMSNorm, RoPE, SwiGLU, fused linear cross-entropy, ...)."""
    from liger_kernel.transformers import _apply_liger_kernel_to_instance
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    model_type = model.config.model_type
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        raise ModelError(f"training.use_liger_kernel: liger-kernel has no kernels for model type '{model_type}'; set use_liger_kernel: false.")
    _apply_liger_kernel_to_instance(model=model, **(kernel_config or {}))


def _roots(model) -> dict[str, str]:
    """The outermost module name of each vision-language part (e.g. model.vision_tower)."""
    roots: dict[str, str] = {}
    for name, _ in model.named_modules():
        part = part_of(name) if name else "llm"
        if part in ("projector", "vision_tower") and part not in roots:
            roots[part] = name
    return roots


def add_lora(model, recipe):
    from peft import LoraConfig, get_peft_model

    lora, train = recipe.model.lora, recipe.model.train
    modules_to_save = list(lora.modules_to_save)
    if is_vision_language(model.config):
        roots = _roots(model)
        vision = roots.get("vision_tower")
        if train.vision_tower is not False and vision:
            modules_to_save.append(vision.split(".")[-1])
        projector = roots.get("projector")
        if train.projector and projector and not (vision and train.vision_tower is not False and projector.startswith(vision + ".")):
            modules_to_save.append(projector.split(".")[-1])
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        modules_to_save=modules_to_save or None,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, config)
    # A saved vision tower trains as model.train says (layers N.. only; a nested projector only if asked).
    for name, param in model.named_parameters():
        if ".modules_to_save." in name and part_of(name) in ("projector", "vision_tower"):
            param.requires_grad = trains(name, train)
    return model


def freeze(model, train) -> None:
    for name, param in model.named_parameters():
        param.requires_grad = trains(name, train)


def load_model(recipe, args):
    """The model, ready for the Trainer. Build `args` first: under ZeRO-3 it makes loading shard the weights."""
    dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": recipe.model.attn_implementation, "trust_remote_code": recipe.model.trust_remote_code}
    if recipe.model.quantization is not None:
        kwargs["quantization_config"] = quantization_config(recipe)
    model = architecture_class(recipe).from_pretrained(model_path(recipe), **kwargs)
    # GRPO: TRL handles use_liger_kernel itself (its Liger GRPO loss); supervised runs get the model patch.
    if recipe.method != "grpo" and args.use_liger_kernel:
        apply_liger(model, args.liger_kernel_config)
    if recipe.model.quantization is not None:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=args.gradient_checkpointing, gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs
        )
    if recipe.model.lora is not None:
        return add_lora(model, recipe)
    freeze(model, recipe.model.train)
    return model


def trainable_summary(model) -> str:
    """'llm 0/1.2M, lora 12.3k/12.3k, ...': trainable / total parameters per part."""
    totals = {part: [0, 0] for part in PARTS}
    for name, param in model.named_parameters():
        count = param.ds_numel if hasattr(param, "ds_numel") else param.numel()
        totals[part_of(name)][1] += count
        totals[part_of(name)][0] += count if param.requires_grad else 0
    return ", ".join(f"{part} {_short(t)}/{_short(n)}" for part, (t, n) in totals.items() if n)


def _short(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)
