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


def _sections(data: dict[str, Any]):
    yield "", data
    for key, value in data.items():
        if key.endswith("_config") and isinstance(value, dict):
            yield f"{key}.", value


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
        problems.add(
            label,
            "model_type",
            f"transformers {transformers_version} builds no config for model_type {model_type!r} (a type it does not know)",
            "copy the model's config.json as published; a model newer than this transformers needs a newer one.",
        )
        return None
    before = len(problems.items)
    for key, value in data.items():
        if key.endswith("_config") and value is not None and not isinstance(value, dict) and key != "quantization_config":
            problems.add(label, key, f"must be a JSON object (a nested config), got {type(value).__name__}", f"write {key} as published, or remove it.")
    if len(problems.items) > before:
        return None
    width = depth = False
    # The config class's own spelling of the standard names (PreTrainedConfig.attribute_map:
    # DistilBERT `dim` / `n_layers`, BART `d_model` / `encoder_layers`).
    aliases = getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) or {}
    width_keys = WIDTH + tuple(aliases[k] for k in WIDTH if k in aliases)
    depth_keys = DEPTH + tuple(aliases[k] for k in DEPTH if k in aliases)
    for prefix, section in _sections(data):
        width = width or any(k in section for k in width_keys)
        depth = depth or any(k in section for k in depth_keys)
        for key, bound in MAX_SIZES.items():
            if key not in section:
                continue
            value = section[key]
            if value is None and key in ("num_key_value_heads", "head_dim"):
                continue
            if key in ("image_size", "patch_size") and isinstance(value, list) and len(value) == 2:
                value = max(value) if all(isinstance(v, int) and not isinstance(v, bool) for v in value) else value  # [height, width] (InternVL)
            if isinstance(value, bool) or not isinstance(value, int):
                problems.add(label, prefix + key, f"{value!r} is not a whole number", f"write {key} as a positive integer.")
            elif not 1 <= value <= bound:
                problems.add(label, prefix + key, f"{value} is out of range (1..{bound:,}; no published model is past it)", f"write the model's real {key}.")
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
        from transformers import AutoConfig

        clean = {k: v for k, v in data.items() if not k.startswith("_") and k != "model_type"}
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
