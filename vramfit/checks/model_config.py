"""A model config.json given to the planner: read through the input layer, checked before anything is built.

Refused (exit 2, naming the file and key): what is not a JSON object; a config that names only its
model_type (transformers would fill every size from another model's defaults, and the plan would be
of that model); sizes that are not positive whole numbers (booleans are not numbers); sizes past any
published model's (MAX_SIZES: the planner builds the model on the meta device, layer by layer, so a
million-layer config would run for hours); and whatever transformers' own config class refuses for
the model_type (an unknown type, a field its validators reject: said with the validator's own reason,
also next to a missing size).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit import inputs
from vramfit.problems import ConfigError, Problems

# Upper bounds well above every published model (largest: ~160 layers, hidden 25600 (Megatron
# 530B: 20480), vocab 256k, 128 heads, 10M-token contexts); a value past them is a typo or an attack.
MAX_SIZES = {
    "num_hidden_layers": 1024,
    "num_layers": 1024,
    "n_layer": 1024,
    "num_decoder_layers": 1024,
    "depth": 1024,
    "hidden_size": 1 << 17,
    "d_model": 1 << 17,
    "n_embd": 1 << 17,
    "intermediate_size": 1 << 20,
    "d_ff": 1 << 20,
    "num_attention_heads": 4096,
    "n_head": 4096,
    "num_heads": 4096,
    "num_key_value_heads": 4096,
    "head_dim": 1 << 14,
    "d_kv": 1 << 14,
    "vocab_size": 1 << 24,
    "max_position_embeddings": 1 << 27,
    "n_positions": 1 << 27,
    "image_size": 1 << 15,
    "patch_size": 1 << 12,
    "num_experts": 1 << 14,
    "num_local_experts": 1 << 14,
}
WIDTH = ("hidden_size", "d_model", "n_embd")
DEPTH = ("num_hidden_layers", "num_layers", "n_layer")
STRUCTURE = WIDTH + DEPTH
# Other spellings of the depth in config classes whose attribute_map does not name them: encoder /
# decoder stacks (ProphetNet, T5), Funnel's block_sizes, Perceiver's blocks of self-attends, and the
# per-layer lists whose length is the depth (NemotronH's layers_block_type / hybrid_override_pattern,
# `layer_types`, which transformers checks against num_hidden_layers).
DEPTH_OTHER = (
    "num_encoder_layers",
    "encoder_layers",
    "num_decoder_layers",
    "decoder_layers",
    "n_layers",
    "block_sizes",
    "num_self_attends_per_block",
    "layers_block_type",
    "hybrid_override_pattern",
    "layer_types",
)


def _sections(data: dict[str, Any]):
    """The config and its sub-configs: `*_config` objects (VLMs) and nested configs that name their own
    model_type (EncoderDecoderConfig's encoder / decoder, MusicGen's decoder, T5Gemma's encoder)."""
    yield "", data
    for key, value in data.items():
        if isinstance(value, dict) and (key.endswith("_config") or isinstance(value.get("model_type"), str)):
            yield f"{key}.", value


def _whole(value: Any) -> int | None:
    """A size as a whole number: ints, and floats with nothing after the point (transformers keeps
    both: `max_position_embeddings: 1200.0`); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def check(path: Path | str, problems: Problems) -> dict[str, Any] | None:
    """Problems with a model config file, added to `problems`; the parsed config when it is usable."""
    label = str(path)
    try:
        data = inputs.load_json(path, "model-config")
    except ConfigError as error:
        problems.extend(error.problems)
        return None
    if not isinstance(data, dict):
        problems.add(
            label, "", f"must be a JSON object (a config.json), got {type(data).__name__}", "pass a model's config.json, e.g. model_configs/llama-3.2-3b.json."
        )
        return None
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        problems.add(
            label, "model_type", f"must name the model type as text, got {model_type!r}", "copy the model's config.json from its Hugging Face repository."
        )
        return None
    from transformers import CONFIG_MAPPING, __version__ as transformers_version

    if model_type not in CONFIG_MAPPING:
        from vramfit.models import stand_in_for

        stand_in = stand_in_for(path)
        if stand_in is not None or data.get("auto_map"):
            # remote code (auto_map: the model's own .py files): no transformers release has its class
            what = f"model_type {model_type!r} is remote code (auto_map: the model's own modeling files), which transformers {transformers_version} has no class for"
            fix = (
                f"plan vramfit's stand-in with the same shapes in a native class: --model-config {_shown(stand_in)}."
                if stand_in is not None
                else "plan a config of the same shapes in a native transformers class (the model's -hf conversion where there is one)."
            )
        else:
            what = f"transformers {transformers_version} builds no config for model_type {model_type!r} (a type it does not know)"
            fix = "copy the model's config.json as published; a model newer than this transformers needs a newer one."
        problems.add(label, "model_type", what, fix)
        return None
    before = len(problems.items)
    # A `*_config` key the class reads as a sub-config must be an object. A true/false flag the class does not read
    # is the publisher's own (SmolLM2's `is_llama_config: true`, from its nanotron export), kept as an attribute.
    nested = getattr(CONFIG_MAPPING[model_type], "sub_configs", {}) or {}
    for key, value in data.items():
        flag = isinstance(value, bool) and key not in nested
        if key.endswith("_config") and value is not None and not isinstance(value, dict) and key != "quantization_config" and not flag:
            problems.add(label, key, f"must be a JSON object (a nested config), got {type(value).__name__}", f"write {key} as published, or remove it.")
    if len(problems.items) > before:
        return None
    width = depth = False
    # The config class's own spelling of the standard names (PreTrainedConfig.attribute_map:
    # DistilBERT `dim` / `n_layers`, BART `d_model` / `encoder_layers`).
    aliases = getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) or {}
    width_keys = WIDTH + tuple(aliases[k] for k in WIDTH if k in aliases)
    depth_keys = DEPTH + DEPTH_OTHER + tuple(aliases[k] for k in DEPTH if k in aliases)
    for prefix, section in _sections(data):
        width = width or any(section.get(k) is not None for k in width_keys)
        depth = depth or any(section.get(k) is not None for k in depth_keys)
        for key, bound in MAX_SIZES.items():
            value = section.get(key)
            if value is None:  # absent, or left for the class to derive (GPT-Neo's intermediate_size: 4 x hidden)
                continue
            # A list holds one size per layer or stage (Gemma 3n's intermediate_size, Florence-2's
            # num_heads) or [height, width] (InternVL's image_size): each must be a size.
            values = value if isinstance(value, list) and value else [value]
            whole = [_whole(v) for v in values]
            if any(w is None for w in whole):
                problems.add(label, prefix + key, f"{value!r} is not a whole number", f"write {key} as a positive integer.")
            elif not all(1 <= w <= bound for w in whole):
                shown = value if len(values) == 1 else f"{min(whole)}..{max(whole)}"
                problems.add(label, prefix + key, f"{shown} is out of range (1..{bound:,}; no published model is past it)", f"write the model's real {key}.")
    if len(problems.items) > before:
        return None
    if not (width and depth):
        missing = "its width (one of " + ", ".join(WIDTH) + ")" if not width else "its depth (one of " + ", ".join(DEPTH) + ")"
        problems.add(
            label,
            "",
            f"does not state {missing}{' nor its depth' if not width and not depth else ''}; "
            f"transformers would fill it from the '{model_type}' class defaults, another model's size",
            "pass the model's full config.json (hidden_size, num_hidden_layers, ... as published).",
        )
    try:  # also when a size is missing: a config transformers refuses is said with the missing size
        from transformers import AutoConfig, PreTrainedConfig

        # {"__float__": "Infinity"} as transformers 5 writes it, decoded as its own loader does
        clean = PreTrainedConfig._decode_special_floats({k: v for k, v in data.items() if not k.startswith("_") and k != "model_type"})
        AutoConfig.for_model(model_type, **clean)
    except Exception as exc:  # noqa: BLE001 - whatever transformers' config class refuses is bad input
        problems.add(
            label,
            "",
            f"transformers {transformers_version} cannot build a {model_type!r} config from it ({_reason(exc)})",
            "pass the model's config.json as published (sizes as the model was trained with).",
        )
    if len(problems.items) > before:
        return None
    return data


def _reason(exc: BaseException) -> str:
    """The library's own reason, one line: the validator's cause (e.g. 'The hidden size (30) is not a
    multiple of the number of attention heads (7).') rather than its 'Class validation error' wrapper."""
    while exc.__cause__ is not None and exc.__cause__ is not exc:
        exc = exc.__cause__
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    line = lines[-1].rstrip(".") if lines else ""
    if not line.startswith(type(exc).__name__):
        line = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    return line if len(line) <= 300 else line[:300] + " ..."


def _shown(path: Path) -> str:
    """A path relative to the working directory where it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
