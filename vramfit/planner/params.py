"""Parameter counts and layer shapes, read off the architecture built on the meta device.

The model is instantiated from its config with transformers on the `meta` device (no weights, no
memory), exactly as `model_configs/README.md` describes, and summarised into plain numbers: every
`nn.Linear` with its full module name and shape (what LoRA targets and quantization act on), the
parameters of each group (vision tower, projector, input embeddings, lm_head, the rest of the
LLM), the parameters of every transformer layer, and the per-stack dimensions the activation
model needs (hidden, FFN width, heads, KV heads, head dim, gated MLP, norm kind, dropout).

The summary is cached by a hash of the config text and the transformers version: in memory, and
on disk under the user cache dir (`$VRAMFIT_CACHE_DIR`, else `$XDG_CACHE_HOME/vramfit`, else
`~/.cache/vramfit`), so planning after the first time imports neither torch nor transformers.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramfit.libraries import cache_dir, store_json

SCHEMA = 21  # bump when the summary format changes; part of the cache key
# Remote-code VLMs whose own code runs the vision tower with eager attention unless the model is loaded
# with flash_attention_2 (MiniCPM-V 2.6 / o's modeling_minicpmv.py `init_vision_module`: "# not suport sdpa",
# `vision_config._attn_implementation = 'eager'`; MiniCPM-Llama3-V 2.5's builds transformers'
# Idefics2VisionTransformer, whose IDEFICS_VISION_ATTENTION_CLASSES in 4.40 has only eager and
# flash_attention_2); their shapes-only stand-ins name the upstream id in `_model`.
EAGER_VISION_REMOTE_CODE = ("openbmb/MiniCPM-Llama3-V", "openbmb/MiniCPM-V-2", "openbmb/MiniCPM-o-2")
PROJECTOR_NAMES = {"multi_modal_projector", "merger", "mm_projector", "resampler", "connector", "mlp1"}
VISION_NAMES = {
    "vision_tower",
    "visual",
    "vision_model",
    "vpm",
    "image_encoder",
    "image_tower",
    "video_tower",
    "vision_encoder",
    "vqmodel",
    "vision_embed_tokens",
    "visual_tokenizer",
}
# `encoder.layer.N` is BERT / ViT / InternViT's spelling of a layer stack.
STACK_RE = re.compile(r"(?:^|\.)(layers|layer|h|block|blocks)\.(\d+)(?:\.|$)")


@dataclass(frozen=True)
class Linear:
    name: str
    in_features: int
    out_features: int
    group: str  # "llm" | "vision" | "projector"
    stack: str  # "text" | "encoder" | "decoder" | "vision" | "" (outside the layer stacks)
    layer: int  # index within its stack, -1 outside


@dataclass(frozen=True)
class Stack:
    """One stack of identical transformer layers and the shapes that size its activations."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    gated: bool
    norm: str  # "rms" (fp32 upcast as in HF RMSNorm / T5LayerNorm) | "layer" (nn.LayerNorm)
    norms_per_layer: int
    cross_attention: bool
    attn_dropout: float
    hidden_dropout: float
    act_saves: float  # input-sized tensors the MLP activation keeps for backward (measured, see `_act_saves`)
    layer_params: tuple[int, ...]
    # Bytes per element the layer's own norm keeps for backward on 16-bit input, its weight trained /
    # frozen (measured, see `_norm_saves`; 0: not measured, the RMSNorm rule of activations.py applies).
    norm_saves: tuple[float, float] = (0.0, 0.0)
    # T5-style relative position bias (`relative_attention_bias`), added to the attention scores as an
    # SDPA mask (transformers integrations/sdpa_attention.py `create_position_bias_mask`).
    position_bias: bool = False
    # A dropout inside the FFN, between its activation and its output projection (modeling_t5.py
    # T5DenseActDense / T5DenseGatedActDense `self.dropout`): a bool mask per FFN element.
    ffn_dropout: bool = False
    # Mixture of experts (transformers integrations/moe.py `use_experts_implementation`: experts
    # stored as 3-D parameters, `gate_up_proj` [E, 2F, H] / `down_proj` [E, H, F]): experts per
    # layer, experts each token is routed to, one expert's FFN width, gated; `dense_ffn` is False when
    # the layer has no FFN made of nn.Linear besides the experts (Mixtral, Qwen3-MoE), True with a
    # shared expert (Qwen2-MoE) whose width is `ffn`.
    # How the attention hands grouped key/value heads to SDPA (see `_kv_repeat`): "interface"
    # (transformers' attention interface: repeat_kv unless use_gqa_in_sdpa), "always" (the model's own
    # code calls repeat_kv / repeat_interleave), "never" (its own code passes the grouped heads as they are).
    kv_repeat: str = "interface"
    head_norm_elems: int = 0  # elements a token of the per-head q / k norms (see `_stack`)
    act_saves_output: bool = False  # what the activation keeps is its output (ReLU; see `_act_saves`)
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    expert_gated: bool = True
    dense_ffn: bool = True
    # Sequence mixers in the layers that are not attention (see `_mixers`): the activation formulas of
    # activations.py are an attention block's, so an Arch with any is planned from the trace.
    mixers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Arch:
    model_type: str
    text_model_type: str
    architecture: str
    total: int
    groups: dict[str, int]  # vision, projector, embed, lm_head, llm, audio when present (sums to total)
    linears: tuple[Linear, ...]
    stacks: dict[str, Stack]
    vocab: int
    tied_embeddings: bool
    largest_module: int  # params owned by the largest single module (DeepSpeed's "largest layer")
    small_params: dict[int, int]  # numel -> count, for parameters up to SMALL (ZeRO-3 persistence)
    image: dict[str, Any]  # `_image_tokens` of the config file, plus vision image/patch size
    encoder_decoder: bool
    # What the summary could not read off the architecture (joined stacks, ...); stated in the plan.
    notes: tuple[str, ...] = ()
    # The model class has an SDPA path (`_supports_sdpa`); without one transformers runs it eager
    # (modeling_utils `_check_and_adjust_attn_implementation`: sdpa only "if available").
    sdpa: bool = True
    # The model's own loss upcasts the logits to fp32 (transformers loss/loss_utils.py ForCausalLMLoss /
    # ForMaskedLMLoss: `logits = logits.float()`, reached through `self.loss_function`); False for the
    # classes that call nn.CrossEntropyLoss on the 16-bit logits (see `_loss_upcast`).
    loss_upcast: bool = True
    # Every parameter as model.named_parameters() yields it (tied weights once): (name, numel, group); the
    # names `unfrozen_parameters` regexes are matched against (see `unfrozen`).
    parameters: tuple[tuple[str, int, str], ...] = ()
    # Elements of each parameter of 3 or more dimensions with "expert" in its name: the fused MoE expert tensors of
    # transformers v5 (integrations/moe.py, `gate_up_proj` [E, 2F, H] / `down_proj` [E, H, F]), which bitsandbytes
    # skips (it replaces nn.Linear only) and axolotl's `quantize_moe_experts` quantizes as they load
    # (monkeypatch/moe_quant.py: `param_value.ndim >= 3` and "expert" in the name).
    expert_tensors: tuple[int, ...] = ()

    @property
    def text(self) -> Stack:
        return self.stacks.get("text") or self.stacks["decoder"]

    @property
    def analytic_gap(self) -> str | None:
        """Why the analytic activation model cannot plan this architecture (None when it can)."""
        if self.encoder_decoder:
            missing = [s for s in ("encoder", "decoder") if s not in self.stacks]
            if missing:
                return f"no {' or '.join(missing)} layer stack found in {self.architecture}"
        elif "text" not in self.stacks:
            return f"no language-model layer stack found in {self.architecture}"
        for stack in self.stacks.values():
            if stack.mixers:
                return (
                    f"the {stack.name} layers of {self.architecture} mix the sequence with {', '.join(stack.mixers)}, "
                    "not attention, and the analytic activation model sizes attention blocks"
                )
        if self.groups.get("vision") and "vision" not in self.stacks:
            return f"the vision tower of {self.architecture} has no layer stack the planner recognises"
        return None


SMALL = 1_000_000  # ZeRO-3 persistence thresholds are 10 x hidden (~1e5); 1e6 leaves room


class ArchitectureError(ValueError):
    """transformers cannot build a model from this config (raised by `build`)."""


class MissingLibraryError(ArchitectureError):
    """The model's code needs a library this environment lacks (transformers' requires_backends)."""

    def __init__(self, message: str, library: str):
        super().__init__(message)
        self.library = library


def read_config(path: Path) -> dict[str, Any]:
    """The config as a dict, read through the input layer (regular file, bounded, no duplicate keys); a file
    that is not a JSON object with a 'model_type' string is a ConfigError (exit 2)."""
    from vramfit import inputs
    from vramfit.problems import ConfigError, Problem, Problems

    data = inputs.load_json(path, "model-config")
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ConfigError(
            Problems(
                [
                    Problem(
                        str(path),
                        "model_type",
                        "a model config is a JSON object with a 'model_type' string",
                        "pass a config.json as transformers writes it (save_pretrained).",
                    )
                ]
            )
        )
    return data


def _transformers_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:  # pragma: no cover - transformers is a pinned dependency
        return "none"


def config_key(text: str) -> str:
    return hashlib.sha256(f"{SCHEMA}|{_transformers_version()}|{text}".encode()).hexdigest()[:24]


@functools.lru_cache(maxsize=64)
def _summary_for(key: str, text: str) -> Arch:
    disk = cache_dir() / "planner" / f"{key}.json"
    if disk.is_file():
        try:
            return _from_json(json.loads(disk.read_text()))
        except (ValueError, KeyError, TypeError):
            pass  # a stale or damaged cache file: rebuild it
    data = build(json.loads(text))
    store_json(disk, data)  # a read-only home: the in-memory cache still serves this process
    return _from_json(data)


def summary(path: Path) -> Arch:
    """The architecture summary of a model config file (cached). A config transformers cannot build a
    model from is a ConfigError naming the file and transformers' own reason (exit 2)."""
    from vramfit import inputs
    from vramfit.problems import ConfigError, Problem, Problems

    text = inputs.read_text(path, "model-config")
    inputs.parse_json(text, path, infinity=True)  # duplicate keys, depth, NaN: refused before the cache sees it
    read_config(path)  # not a model config: reported, not raised
    try:
        return _summary_for(config_key(text), text)
    except ArchitectureError as exc:
        fix = (
            f"pip install {exc.library} into this environment, then plan again."
            if isinstance(exc, MissingLibraryError)
            else "pass a config that transformers' from_config builds (a checkpoint's own config.json)."
        )
        raise ConfigError(Problems([Problem(str(path), "model_type", str(exc), fix)])) from None


def _from_json(data: dict[str, Any]) -> Arch:
    return Arch(
        model_type=data["model_type"],
        text_model_type=data["text_model_type"],
        architecture=data["architecture"],
        total=data["total"],
        groups=data["groups"],
        linears=tuple(Linear(*row) for row in data["linears"]),
        stacks={
            k: Stack(
                **{**v, "layer_params": tuple(v["layer_params"]), "norm_saves": tuple(v.get("norm_saves", (0.0, 0.0))), "mixers": tuple(v.get("mixers", ()))}
            )
            for k, v in data["stacks"].items()
        },
        vocab=data["vocab"],
        tied_embeddings=data["tied_embeddings"],
        largest_module=data["largest_module"],
        small_params={int(k): v for k, v in data["small_params"].items()},
        image=data["image"],
        encoder_decoder=data["encoder_decoder"],
        notes=tuple(data.get("notes", ())),
        sdpa=bool(data.get("sdpa", True)),
        loss_upcast=bool(data.get("loss_upcast", True)),
        parameters=tuple((str(n), int(k), str(g)) for n, k, g in data.get("parameters", ())),
        expert_tensors=tuple(int(k) for k in data.get("expert_tensors", ())),
    )


# ----------------------------------------------------------------------------------------------
# Building (cold path: imports torch and transformers)
# ----------------------------------------------------------------------------------------------


def _is_vision(part: str) -> bool:
    return part in VISION_NAMES or "vision" in part or "visual" in part or part.endswith(("image_tower", "video_tower"))


def _group(name: str, head_names: set[str], embed_names: set[str]) -> str:
    parts = name.split(".")
    if any(p in PROJECTOR_NAMES for p in parts):
        return "projector"
    # The tower is named above the layer lists (`model.vision_tower.`), not inside a layer
    # (Ernie-VL's `layers.3.mlp.vision_experts` are LLM weights).
    top = parts[: next((i for i, p in enumerate(parts) if p.isdigit()), len(parts) - 1)]
    if any(_is_vision(p) for p in top):
        return "vision"
    if any("audio" in p for p in top):
        return "audio"
    module = name.rsplit(".", 1)[0]
    if module in head_names:
        return "lm_head"
    if module in embed_names:
        return "embed"
    return "llm"


def _stack_of(name: str, group: str, encoder_decoder: bool = False) -> tuple[str, str, int]:
    """(stack, the stack's module path, layer index) of a parameter or module name."""
    match = STACK_RE.search(name)
    if not match:
        return "", "", -1
    prefix, idx = name[: match.end(1)], int(match.group(2))
    if group == "vision":
        return "vision", prefix, idx
    if group != "llm":
        return "", "", -1
    if encoder_decoder:  # the outermost of encoder / decoder names the side (`decoder.bert.encoder.layer`)
        dotted = "." + name
        sides = [(dotted.find(f".{side}."), side) for side in ("encoder", "decoder") if f".{side}." in dotted]
        if sides:
            return min(sides)[1], prefix, idx
    return "text", prefix, idx


def config_object(cfg_dict: dict[str, Any]):
    """The transformers config object of a config dict (ArchitectureError when it has none)."""
    from transformers import AutoConfig, PreTrainedConfig

    # transformers 5 writes a non-finite float as {"__float__": "Infinity"} and decodes it on load
    # (configuration_utils `_dict_from_json_file`); older writers left a bare Infinity (json accepts it)
    clean = PreTrainedConfig._decode_special_floats({k: v for k, v in cfg_dict.items() if not k.startswith("_")})
    model_type = clean.pop("model_type", None)
    try:
        return AutoConfig.for_model(model_type, **clean)
    except Exception as exc:  # noqa: BLE001 - any failure of the library's own parser is the config's fault
        raise ArchitectureError(
            f"transformers {_transformers_version()} builds no config for model_type '{model_type}' ({type(exc).__name__}: {_short(exc)})"
        ) from None


def _short(exc: Exception, limit: int = 160) -> str:
    """The first line of a library error, cut (transformers lists every model type it knows)."""
    line = (str(exc).strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[:limit] + " ..."


def auto_classes(config) -> list:
    """The transformers auto classes that map this config, in the order the planner tries them:
    image-text-to-text, causal LM, seq2seq LM, masked LM (first for encoder-only models), then the
    bare model (no head)."""
    import transformers as tf

    order = [tf.AutoModelForImageTextToText, tf.AutoModelForCausalLM, tf.AutoModelForSeq2SeqLM, tf.AutoModelForMaskedLM]
    if getattr(config, "is_encoder_decoder", False):
        # BART / mBART / Marian / PLBart also map to a *ForCausalLM (their decoder alone, for
        # speculative decoding or as a decoder in EncoderDecoderModel): the model trained is the seq2seq one
        order = [tf.AutoModelForSeq2SeqLM, *[c for c in order if c is not tf.AutoModelForSeq2SeqLM]]
    masked = tf.AutoModelForMaskedLM
    if (
        type(config) in masked._model_mapping
        and not getattr(config, "is_encoder_decoder", False)
        and not getattr(config, "is_decoder", False)
        and type(config) not in tf.AutoModelForImageTextToText._model_mapping
    ):
        order = [masked, *[c for c in order if c is not masked]]
    return [c for c in [*order, tf.AutoModel] if type(config) in c._model_mapping]


def _instantiate(cfg_dict: dict[str, Any]):
    import torch

    config = config_object(cfg_dict)
    classes = auto_classes(config)
    errors = []
    missing = set()
    for auto in classes:
        try:
            with torch.device("meta"):
                return config, auto.from_config(config)
        except Exception as exc:  # noqa: BLE001 - the library's own constructor refused this config
            errors.append(f"{auto.__name__}: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}")
            if isinstance(exc, ImportError):  # transformers' requires_backends: "X requires the timm library but it was not found"
                found = re.search(r"requires the (\S+) library", str(exc))
                missing.add(found.group(1) if found else (getattr(exc, "name", None) or "a library"))
    if len(missing) == 1 and all("ImportError" in e for e in errors):
        library = missing.pop()
        raise MissingLibraryError(
            f"transformers {_transformers_version()} needs the {library} library to build model_type '{config.model_type}', "
            "and it is not installed here (the config itself is fine)",
            library,
        )
    why = "; ".join(errors) if errors else "no auto class maps it"
    raise ArchitectureError(f"transformers {_transformers_version()} builds no model for model_type '{config.model_type}' ({why})")


def _dropouts(cfg) -> tuple[float, float]:
    def first(*names):
        for n in names:
            try:
                v = getattr(cfg, n, None)
            except Exception:  # noqa: BLE001 - per-layer configs refuse global attribute reads
                v = None
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
        return 0.0

    return (
        first("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob", "dropout_rate"),
        # `dropout`: OPT / BART / DistilBERT name their residual dropout so (modeling_opt.py
        # OPTDecoderLayer: `nn.functional.dropout(hidden_states, p=self.dropout)` after attention and fc2)
        first("resid_pdrop", "hidden_dropout", "hidden_dropout_prob", "dropout_rate", "dropout"),
    )


def _linear_shape(m) -> tuple[int, int] | None:
    """(in, out) of an nn.Linear or of transformers' GPT-2 style Conv1D (weight stored [in, out])."""
    import torch
    from transformers.pytorch_utils import Conv1D

    if isinstance(m, torch.nn.Linear):
        return int(m.in_features), int(m.out_features)
    if isinstance(m, Conv1D):
        return int(m.weight.shape[0]), int(m.nf)
    return None


def _first_int(value, default=None):
    """A geometry value that a config may write as an int or as [h, w] (InternVL's image_size)."""
    if isinstance(value, (list, tuple)):
        value = max(value) if value and all(isinstance(v, (int, float)) for v in value) else None
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def build(cfg_dict: dict[str, Any]) -> dict[str, Any]:
    """Instantiate on the meta device and summarise (see module docstring)."""
    config, model = _instantiate(cfg_dict)
    try:
        return _summarise(cfg_dict, config, model)
    except ArchitectureError:
        raise
    except Exception as exc:  # noqa: BLE001 - a model layout the summary cannot read: say so, do not crash
        raise ArchitectureError(f"{type(model).__name__}: the planner cannot read its layout ({type(exc).__name__}: {exc})") from None


def _summarise(cfg_dict, config, model) -> dict[str, Any]:
    text_cfg = config.get_text_config()
    head = model.get_output_embeddings() if _has_output_embeddings(model) else None
    try:
        embed = model.get_input_embeddings()
    except Exception:  # noqa: BLE001 - some bare models do not implement it
        embed = None
    modules = dict(model.named_modules())
    head_names = {n for n, m in modules.items() if m is head and head is not None}
    embed_names = {n for n, m in modules.items() if m is embed and embed is not None}
    enc_dec = bool(getattr(config, "is_encoder_decoder", False))

    groups = {"vision": 0, "projector": 0, "embed": 0, "lm_head": 0, "llm": 0, "audio": 0}
    notes: list[str] = []
    by_prefix: dict[tuple[str, str], dict[int, int]] = {}
    small: dict[int, int] = {}
    parameters: list[list] = []
    expert_tensors: list[int] = []
    for name, p in model.named_parameters():  # tied weights are yielded once
        g = _group(name, head_names, embed_names)
        groups[g] += p.numel()
        parameters.append([name, p.numel(), g])
        if p.ndim >= 3 and "expert" in name:
            expert_tensors.append(p.numel())
        stack, prefix, idx = _stack_of(name, g, enc_dec)
        if idx >= 0:
            layers = by_prefix.setdefault((stack, prefix), {})
            layers[idx] = layers.get(idx, 0) + p.numel()
        if p.numel() <= SMALL:
            small[p.numel()] = small.get(p.numel(), 0) + 1

    if groups["audio"]:
        notes.append(f"the audio tower ({groups['audio']:,} parameters) is counted as frozen and its activations are not modelled")
    else:
        del groups["audio"]
    # One stack may be spread over several module lists (Mllama's vision `transformer.layers` and
    # `global_transformer.layers`, BLIP-2's Q-Former next to its OPT): the largest list first (its
    # widths size the activations), the others after it, and a note says so.
    offsets: dict[tuple[str, str], int] = {}
    layer_params: dict[tuple[str, int], int] = {}
    for stack in sorted({s for s, _ in by_prefix}):
        prefixes = sorted((k for k in by_prefix if k[0] == stack), key=lambda k: -sum(by_prefix[k].values()))
        offset = 0
        for key in prefixes:
            offsets[key] = offset
            for idx, n in by_prefix[key].items():
                layer_params[(stack, offset + idx)] = n
            offset += max(by_prefix[key]) + 1
        if len(prefixes) > 1:
            notes.append(
                f"the {stack} stack joins {len(prefixes)} layer lists ({', '.join(k[1] for k in prefixes)}); "
                f"its activations are sized with the widths of {prefixes[0][1]}"
            )

    # T5/mT5: transformers 5.23 ties lm_head to the embedding whatever the config says, but the
    # T0_3B / mt0-xxl checkpoints store their own (model_configs/README.md, "lm_head of T5/mT5").
    tied = head is not None and embed is not None and getattr(head, "weight", None) is getattr(embed, "weight", 0)
    wants_untied = cfg_dict.get("tie_word_embeddings") is False or (cfg_dict.get("text_config") or {}).get("tie_word_embeddings") is False
    if tied and wants_untied:
        groups["lm_head"] += head.weight.numel()
        parameters += [[f"{n}.weight", head.weight.numel(), "lm_head"] for n in sorted(head_names)[:1]]
        tied = False

    linears = []
    for name, m in modules.items():
        shape = _linear_shape(m)
        if shape is not None and name not in head_names:
            g = _group(name + ".weight", head_names, embed_names)
            stack, prefix, idx = _stack_of(name + ".", g, enc_dec)
            if idx >= 0:
                idx += offsets.get((stack, prefix), 0)
            linears.append([name, shape[0], shape[1], g, stack, idx])

    largest_module = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in modules.values())
    if not tied and groups["lm_head"] and head is not None:
        largest_module = max(largest_module, head.weight.numel())

    vision_cfg = getattr(config, "vision_config", None)
    stacks = {}
    for stack_name in sorted({s for s, _ in layer_params}):
        cfg = vision_cfg if stack_name == "vision" and vision_cfg is not None else text_cfg
        first = min((k for k in offsets if k[0] == stack_name), key=lambda k: offsets[k])
        row = _stack(stack_name, first[1], cfg, modules, linears, layer_params)
        if row is None:
            notes.append(f"the {stack_name} stack ({first[1]}) has no linear layers the planner reads")
            continue
        stacks[stack_name] = row
    if groups["vision"] and "vision" not in stacks:
        notes.append(f"the vision tower ({groups['vision']:,} parameters) has no layer stack the planner recognises")

    image = dict(cfg_dict.get("_image_tokens") or {})
    if str(cfg_dict.get("_model", "")).startswith(EAGER_VISION_REMOTE_CODE) and vision_cfg is not None:
        image["vision_eager"] = True
    if vision_cfg is not None:
        image.setdefault("image_size", _first_int(getattr(vision_cfg, "image_size", None)))
        image.setdefault("patch_size", _first_int(getattr(vision_cfg, "patch_size", None)))
        image.setdefault("spatial_merge_size", _first_int(getattr(vision_cfg, "spatial_merge_size", None)))
        strategy = getattr(config, "vision_feature_select_strategy", None)
        image.setdefault("select_strategy", strategy if isinstance(strategy, str) else None)
        # Idefics3 / SmolVLM (modeling_idefics3.py Idefics3Connector.pixel_shuffle): the connector folds
        # scale_factor^2 patches into one token, (side / scale_factor)^2 LLM tokens per crop (the
        # processor's `image_seq_len`); a stock config names no crops: one
        shuffle = next((m for m in modules.values() if callable(getattr(m, "pixel_shuffle", None)) and _first_int(getattr(m, "scale_factor", None))), None)
        side = (image.get("image_size") or 0) // (image.get("patch_size") or 1)
        if shuffle is not None and side and "per_image" not in image:
            image["per_image"] = (side // _first_int(shuffle.scale_factor)) ** 2

    vocab = _first_int(getattr(text_cfg, "vocab_size", None), 0)
    if not vocab and embed is not None and getattr(embed, "weight", None) is not None:
        vocab = int(embed.weight.shape[0])
    return {
        "model_type": config.model_type,
        "text_model_type": text_cfg.model_type,
        "architecture": type(model).__name__,
        "total": sum(groups.values()),
        "groups": groups,
        "linears": linears,
        "stacks": stacks,
        "vocab": int(vocab),
        "tied_embeddings": bool(tied),
        "largest_module": int(largest_module),
        "small_params": {str(k): v for k, v in sorted(small.items())},
        "image": image,
        "encoder_decoder": enc_dec,
        "notes": notes,
        "sdpa": bool(getattr(model, "_supports_sdpa", True)),
        "loss_upcast": _loss_upcast(model),
        "parameters": parameters,
        "expert_tensors": expert_tensors,
    }


def _loss_upcast(model) -> bool:
    """Whether the model's forward computes its loss on fp32 logits. transformers' shared losses
    (`self.loss_function`: loss_utils.py ForCausalLMLoss / ForMaskedLMLoss, `logits.float()`) upcast;
    the classes that build `nn.CrossEntropyLoss()` themselves and call it on the 16-bit logits do
    not (modeling_bert.py BertForMaskedLM.forward `loss_fct(prediction_scores.view(...), ...)`,
    modeling_t5.py T5ForConditionalGeneration.forward, modeling_bart.py
    BartForConditionalGeneration.forward, modeling_distilbert.py DistilBertForMaskedLM.forward
    `self.mlm_loss_fct(...)`): there cross_entropy's log_softmax output and both gradients are
    16-bit."""
    import inspect

    try:
        src = inspect.getsource(type(model).forward)
    except (OSError, TypeError):
        return True
    return "loss_function(" in src or not re.search(r"loss_fct\w*\(", src)


def _has_output_embeddings(model) -> bool:
    try:
        return model.get_output_embeddings() is not None
    except Exception:  # noqa: BLE001 - bare models raise NotImplementedError
        return False


ACTIVATION_HINTS = ("act", "gelu", "silu", "relu", "swish", "tanh")


def _act_saves(layer_modules) -> tuple[float, bool]:
    """Run the layer's own MLP activation module on a small CPU tensor and count what autograd
    keeps, in input-sized tensors: 1 for torch kernels (silu, gelu, gelu tanh), 2 for QuickGELU,
    4 for the Python `gelu_new` of Phi / T5 (its intermediates are kept); and whether what it keeps
    is its own output (ReLU: derivatives.yaml `threshold_backward(grad, result, 0)`), the tensor the
    next linear keeps as its input too."""
    import torch

    acts = [
        m
        for m in layer_modules
        if not list(m.parameters(recurse=False)) and not list(m.children()) and any(h in type(m).__name__.lower() for h in ACTIVATION_HINTS)
    ]
    if not acts:
        return 1.0, False
    x = torch.randn(16, 8, requires_grad=True)
    kept: dict[int, int] = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    acts[0].train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = acts[0](x)
    return sum(kept.values()) / x.untyped_storage().nbytes(), out.untyped_storage().data_ptr() in kept


def _cfg_int(cfg, *names) -> int:
    for n in names:
        try:
            v = getattr(cfg, n, None)
        except Exception:  # noqa: BLE001 - per-layer configs (Gemma 4) refuse global reads
            v = None
        v = _first_int(v)
        if v:
            return v
    return 0


def _stack(name, prefix, cfg, modules, linears, layer_params) -> dict[str, Any] | None:
    layer0 = prefix + ".0."
    rows = [r for r in linears if r[0].startswith(layer0) or r[0] + "." == layer0]
    if not rows:
        return None
    in_widths = [r[1] for r in rows]
    hidden = _cfg_int(cfg, "hidden_size", "embed_dim", "d_model", "n_embd", "width")
    if not hidden or hidden not in in_widths + [r[2] for r in rows]:
        hidden = max(set(in_widths), key=in_widths.count)  # the width most layer linears read
    heads = _cfg_int(cfg, "num_attention_heads", "num_heads", "n_head", "encoder_attention_heads") or max(1, hidden // 64)
    kv_heads = _cfg_int(cfg, "num_key_value_heads") or heads
    # the attention module's own count where the config's is not what it runs (modeling_falcon.py
    # FalconAttention: `num_kv_heads = config.num_kv_heads if new_decoder_architecture or not
    # multi_query else 1`)
    for n, m in modules.items():
        own = getattr(m, "num_kv_heads", None) if n.startswith(layer0) and "Attention" in type(m).__name__ else None
        if isinstance(own, int) and not isinstance(own, bool) and 0 < own <= heads:
            kv_heads = own
            break
    head_dim = _cfg_int(cfg, "head_dim", "d_kv") or hidden // heads
    # The FFN width from the shapes: the widest input of a layer linear that writes the hidden size.
    ffn = max([r[1] for r in rows if r[2] == hidden] or [4 * hidden])
    gated = sum(1 for r in rows if r[1] == hidden and r[2] == ffn) >= 2
    norm_modules = {n: m for n, m in modules.items() if n.startswith(layer0) and "Norm" in type(m).__name__}
    # Per-head norms (Qwen3 / Gemma 3 / OLMo-2 `q_norm`, `k_norm`: a weight of head_dim, applied to
    # every head) normalise heads x head_dim elements a token, not the hidden size.
    head_norm_elems = 0
    for n, m in list(norm_modules.items()):
        w = getattr(m, "weight", None)
        if w is not None and w.dim() == 1 and w.shape[0] == head_dim and head_dim != hidden:
            leaf = n.rsplit(".", 1)[-1]
            head_norm_elems += (kv_heads if leaf.startswith("k") else heads) * head_dim
            del norm_modules[n]
    norm_classes = [type(m).__name__ for m in norm_modules.values()]
    norm = "layer" if norm_classes and all(c == "LayerNorm" for c in norm_classes) else "rms"
    layer_modules = [m for n, m in modules.items() if n.startswith(layer0)]
    attn_p, hidden_p = _dropouts(cfg)
    count = max(i for s, i in layer_params if s == name) + 1
    act_saves, act_saves_output = _act_saves(layer_modules)
    moe = _experts(modules, layer0, cfg, hidden, rows, heads * head_dim)
    if moe and not moe["dense_ffn"]:
        ffn, gated = moe["expert_ffn"], moe["expert_gated"]  # no nn.Linear FFN: the experts' width
    return {
        "name": name,
        "layers": count,
        "hidden": hidden,
        "ffn": ffn,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "gated": gated,
        "norm": norm,
        "norms_per_layer": len(norm_classes),
        "head_norm_elems": head_norm_elems,
        "cross_attention": any(".EncDecAttention." in r[0] or ".encoder_attn." in r[0] for r in rows),
        "attn_dropout": attn_p,
        "hidden_dropout": hidden_p,
        "act_saves": act_saves,
        "act_saves_output": act_saves_output,
        "layer_params": [layer_params.get((name, i), 0) for i in range(count)],
        "norm_saves": _norm_saves(modules, layer0) if norm == "rms" else (0.0, 0.0),
        "position_bias": any(n.startswith(layer0) and n.endswith(".relative_attention_bias") for n in modules),
        "ffn_dropout": _ffn_dropout(modules, layer0, ffn),
        **moe,
        "kv_repeat": _kv_repeat(modules, layer0),
        "mixers": _mixers(modules, prefix),
    }


# Sequence mixers that are not attention, by class-name part: state-space layers (Mamba / Mamba-2 in
# Jamba, Bamba, Falcon-H1, Zamba, NemotronH, Granite-4 hybrids: `*Mixer`), linear attention / delta
# rules (Qwen3-Next GatedDeltaNet), short convolutions (LFM2), RWKV and RecurrentGemma's recurrent block.
MIXER_PARTS = ("Mamba", "Mixer", "SSM", "DeltaNet", "LinearAttention", "ShortConv", "Rwkv", "RWKV", "Recurrent")


def _mixers(modules, prefix: str) -> list[str]:
    """Class names of the non-attention sequence mixers in any layer of the stack at `prefix`."""
    found = []
    for n, m in modules.items():
        if n.startswith(prefix + ".") and n.count(".") == prefix.count(".") + 2:  # a layer's direct child
            cls = type(m).__name__
            if any(part in cls for part in MIXER_PARTS) and "Norm" not in cls and cls not in found:
                found.append(cls)
    return found


def _kv_repeat(modules, layer0: str) -> str:
    """Read off the source of the layer's attention module: one that dispatches through
    `ALL_ATTENTION_FUNCTIONS` (integrations/sdpa_attention.py: `repeat_kv` unless `use_gqa_in_sdpa`)
    follows the interface's rule; one that repeats itself always copies; one that does neither
    (modeling_falcon.py FalconAttention.forward passes the single key/value head to
    F.scaled_dot_product_attention, which broadcasts it) never copies."""
    import inspect

    for name, m in modules.items():
        if not name.startswith(layer0) or "Attention" not in type(m).__name__:
            continue
        try:
            src = inspect.getsource(type(m).forward)
        except (OSError, TypeError):
            return "interface"
        if "ALL_ATTENTION_FUNCTIONS" in src or "attention_interface" in src:
            return "interface"
        if "repeat_kv(" in src or "repeat_interleave(" in src:
            return "always"
        if "scaled_dot_product_attention(" in src:
            return "never"
        # a wrapper (BertAttention -> BertSelfAttention): read the module it delegates to
    return "interface"


def _experts(modules, layer0: str, cfg, hidden: int, rows, attn_width: int) -> dict[str, Any]:
    """The MoE shape of a layer (see Stack.experts): read off its 3-D expert parameters and the
    config's routing width (num_experts_per_tok / top_k / moe_top_k)."""
    for name, m in modules.items():
        if not name.startswith(layer0):
            continue
        own = dict(m.named_parameters(recurse=False))
        down = own.get("down_proj")
        up = own.get("gate_up_proj", own.get("up_proj"))
        if down is None or up is None or down.dim() != 3:
            continue
        dims = [d for d in down.shape[1:] if d != hidden] or [down.shape[-1]]
        k = _cfg_int(cfg, "num_experts_per_tok", "top_k", "moe_top_k", "num_experts_per_token", "moe_k") or 1
        dense = any(r[2] == hidden and r[1] not in (hidden, attn_width) for r in rows)
        return {"experts": int(down.shape[0]), "top_k": k, "expert_ffn": int(dims[0]), "expert_gated": "gate_up_proj" in own, "dense_ffn": dense}
    return {}


def _ffn_dropout(modules, layer0: str, ffn: int) -> bool:
    """A Dropout module that is a sibling of the FFN's input projection (one writing `ffn` features)
    and that the FFN's own code calls before its output projection (one reading `ffn` features):
    T5DenseActDense drops between the activation and `wo`; DistilBERT's FFN.ff_chunk drops after
    `lin2`, on the hidden-sized output (the residual dropout, not a mask of `ffn` elements)."""
    import inspect

    import torch

    parents = {n.rsplit(".", 1)[0] for n, m in modules.items() if n.startswith(layer0) and (_linear_shape(m) or (0, 0))[1] == ffn}
    for n, m in modules.items():
        parent, _, leaf = n.rpartition(".")
        if not (n.startswith(layer0) and isinstance(m, torch.nn.Dropout) and parent in parents and m.p > 0):
            continue
        outs = [c.rpartition(".")[2] for c, x in modules.items() if c.rpartition(".")[0] == parent and (_linear_shape(x) or (0, 0))[0] == ffn]
        try:
            src = inspect.getsource(type(modules[parent]))
        except (OSError, TypeError, KeyError):
            return True
        drop_at = src.find(f"self.{leaf}(")
        out_at = min((src.find(f"self.{o}(") for o in outs if src.find(f"self.{o}(") >= 0), default=-1)
        if drop_at < 0 or out_at < 0 or drop_at < out_at:
            return True
    return False


def _norm_saves(modules, layer0: str) -> tuple[float, float]:
    """Run the layer's own RMS-style norm (a copy on the CPU, real tensors) on a small 16-bit input and
    count what autograd keeps, in bytes per input element, with its weight trained and frozen. The
    variants keep different tensors: Llama's RMSNorm keeps the fp32 upcast and, for its weight, the
    16-bit normalised copy (6 / 4 B); T5LayerNorm multiplies the 16-bit input itself by the fp32 rsqrt
    (modeling_t5.py T5LayerNorm.forward), keeping that input too (8 / 6 B); Gemma's `(1 + weight)`
    norm keeps two fp32 tensors when its weight trains (8 / 4 B)."""
    import copy

    import torch

    norm = next((m for n, m in modules.items() if n.startswith(layer0) and "Norm" in type(m).__name__ and list(m.parameters(recurse=False))), None)
    if norm is None:
        return (0.0, 0.0)
    out = []
    for trains in (True, False):
        try:
            m = copy.deepcopy(norm).to_empty(device="cpu").to(torch.bfloat16)
            with torch.no_grad():
                for p in m.parameters():
                    p.fill_(1.0)
            for p in m.parameters():
                p.requires_grad_(trains)
            x = torch.randn(4, 16, next(m.parameters()).shape[-1], dtype=torch.bfloat16, requires_grad=True)
            own = {p.untyped_storage().data_ptr() for p in m.parameters()}
            kept: dict[int, int] = {}

            def pack(t, own=own, kept=kept, x=x):
                ptr = t.untyped_storage().data_ptr()
                if ptr not in own and t.numel() >= x.numel():  # per-token statistics are not counted
                    kept[ptr] = t.untyped_storage().nbytes()
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                m(x)
            out.append(sum(kept.values()) / x.numel())
        except Exception:  # noqa: BLE001 - a norm that cannot run alone: the analytic rule applies
            return (0.0, 0.0)
    return (out[0], out[1])


# ----------------------------------------------------------------------------------------------
# Trainable versus frozen, per the recipe
# ----------------------------------------------------------------------------------------------

# Scenario LoRA targets are written in Hugging Face Llama names (calibration README); these are
# the same projections in models that name them differently. Used only when a name matches nothing.
LLAMA_ALIASES = {
    "t5": {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "wi_0", "up_proj": "wi_1", "down_proj": "wo"},
    "bloom": {
        "q_proj": "query_key_value",
        "k_proj": "query_key_value",
        "v_proj": "query_key_value",
        "o_proj": "dense",
        "up_proj": "dense_h_to_4h",
        "down_proj": "dense_4h_to_h",
    },
}
LLAMA_ALIASES["mt5"] = LLAMA_ALIASES["t5"]
QKV = ("q_proj", "k_proj", "v_proj")
ATTN_OUT = {"o_proj", "o", "dense", "out_proj", "proj"}
# modules_to_save names and the parameter group they copy.
SAVE_GROUPS = {
    "embed_tokens": "embed",
    "wte": "embed",
    "word_embeddings": "embed",
    "shared": "embed",
    "lm_head": "lm_head",
    "resampler": "projector",
    "multi_modal_projector": "projector",
}


@dataclass(frozen=True)
class Adapted:
    """A LoRA-adapted input inside one transformer layer (for the activation model)."""

    stack: str
    role: str  # attn_in | attn_out | mlp_in | mlp_out
    in_features: int
    per_layer: float  # adapters on this input per layer of the stack (fused QKV counts once)


@dataclass(frozen=True)
class Counts:
    total: int  # parameters of the model itself
    trainable_base: int  # model parameters trained in place
    lora: int  # LoRA A/B parameters (extra, trainable)
    copies: int  # modules_to_save copies (extra, trainable)
    quantized: int  # frozen linear weights stored quantized
    largest_quantized: int  # the widest quantized linear (dequantized whole for its matmul)
    lm_head_trainable: bool
    vision_grad_layers: int  # vision layers whose activations are kept for backward
    vision_full: bool  # the vision layers' own weights train
    text_trainable: bool  # the LLM layers' own weights train in full
    adapted: tuple[Adapted, ...]
    largest_layer: int  # parameters of the largest transformer layer (ZeRO-3 / FSDP gather unit)
    # Elements per layer of each MoE parameter LoRA wraps whole (PEFT's ParamWrapper, see
    # `_expert_lora`), in the order the layer's forward reads them: each is merged with its adapter
    # into a full-size copy per forward (activations.py `expert_merge_bytes`).
    expert_merge: tuple[int, ...] = ()
    # LoRA parameters held in A / B tensors below bitsandbytes' paging size (states.PAGED_MIN_NUMEL):
    # a paged optimizer keeps their states in ordinary device memory (states.paged_share).
    lora_small: int = 0

    @property
    def adapters(self) -> int:
        return self.lora + self.copies

    @property
    def trainable(self) -> int:
        return self.trainable_base + self.adapters

    @property
    def frozen(self) -> int:
        """Frozen, not quantized."""
        return self.total - self.trainable_base - self.quantized


def role(linear: Linear, stack: Stack) -> str:
    leaf = linear.name.rsplit(".", 1)[-1]
    if leaf in ATTN_OUT and linear.in_features == stack.heads * stack.head_dim and linear.out_features == stack.hidden:
        return "attn_out"
    if linear.in_features == stack.ffn and linear.out_features == stack.hidden:
        return "mlp_out"
    if linear.out_features == stack.ffn:
        return "mlp_in"
    return "attn_in"


def _matches(name: str, targets, aliases: dict[str, str], present: set[str]) -> list[str]:
    """PEFT's rule (peft/tuners/tuners_utils.py check_target_module_exists): a string is a regex
    matched in full against the module name, a list matches names equal to or ending in '.'+item."""
    if isinstance(targets, str):
        return [targets] if re.fullmatch(targets, name) else []
    hits = []
    for t in targets:
        real = t if t in present else aliases.get(t, t)
        if name == real or name.endswith("." + real):
            hits.append(t)
    return hits


def unfrozen(arch: Arch, patterns) -> list[tuple[str, int, str]]:
    """The parameters (name, numel, group) a "train only the listed weights" run leaves trainable: every name of
    model.named_parameters() that one of the regexes matches at its start (`re.match`), the others requires_grad=False
    (TRL / philschmid run_sft.py `setup_model_for_spectrum`; axolotl utils/freeze.py `freeze_layers_except`, whose
    patterns the review translates first: review/mapping.py `axolotl_unfrozen`)."""
    compiled = [re.compile(p) for p in patterns]
    return [row for row in arch.parameters if any(c.match(row[0]) for c in compiled)]


def count(arch: Arch, setup) -> Counts:
    """Trainable / frozen / quantized parameters and the LoRA-adapted inputs."""
    g = arch.groups
    lora = setup.lora_r is not None
    vision_from = _vision_from(arch, setup.train_vision)
    vision_layers = arch.stacks["vision"].layers if "vision" in arch.stacks else 0
    vision_base = 0
    if vision_from is not None:
        vision_base = g["vision"] if vision_from == 0 else sum(arch.stacks["vision"].layer_params[vision_from:])
    llm_full = setup.train_llm and not lora
    base = (g["embed"] + g["lm_head"] + g["llm"] if llm_full else 0) + (g["projector"] if setup.train_projector else 0) + vision_base
    lm_head_trainable = llm_full
    listed = getattr(setup, "unfrozen_parameters", ()) if not lora else ()
    if listed:
        # Only the listed weights train: their gradients, master copies and optimizer states are all there is.
        # The activations stay full fine-tuning's (text_trainable; the vision tower's if one of its weights is
        # listed): autograd keeps what the backward to the earliest trainable weight needs, which this over-counts
        # for frozen first layers (the plan's note says so).
        rows = unfrozen(arch, listed)
        trained = {grp for _, _, grp in rows}
        base = sum(n for _, n, _ in rows)
        lm_head_trainable = "lm_head" in trained or ("embed" in trained and arch.tied_embeddings)
        llm_full = bool(trained & {"llm", "embed", "lm_head"})
        vision_from = 0 if "vision" in trained and "vision" in arch.stacks else None

    lora_params, copies, adapted, vision_lora, expert_merge, lora_small = 0, 0, [], False, (), 0
    if lora:
        lora_params, adapted, vision_lora, lora_small = _lora(arch, setup)
        expert_params, expert_merge = _expert_lora(arch, setup)
        lora_params += expert_params
        for name in setup.modules_to_save:
            group = SAVE_GROUPS.get(name)
            if group is None or not g.get(group):
                continue
            if setup.modules_to_save_copies:
                copies += g[group]
            else:
                base += g[group]
            lm_head_trainable = lm_head_trainable or group == "lm_head" or (group == "embed" and arch.tied_embeddings)

    quantized = largest_quantized = 0
    if setup.quantization:
        trained_groups = {"projector"} if setup.train_projector else set()
        if vision_from is not None:
            trained_groups.add("vision")
        sizes = [lin.in_features * lin.out_features for lin in arch.linears if lin.group not in trained_groups]
        if getattr(setup, "quantize_lm_head", False) and not arch.tied_embeddings and not lm_head_trainable:
            sizes.append(g["lm_head"])  # Lightning's BitsandbytesPrecision swaps every nn.Linear, lm_head included (LitGPT)
        if getattr(setup, "quantize_moe_experts", False):
            # axolotl's quantize_moe_experts: the fused 3-D expert tensors quantized too (bitsandbytes parametrize
            # replace_parameter_4bit / axolotl's int8 parametrization), each dequantized whole when its layer reads it
            sizes += list(arch.expert_tensors)
        quantized, largest_quantized = sum(sizes), max(sizes, default=0)
    grad_layers = vision_layers - vision_from if vision_from is not None else (vision_layers if vision_lora else 0)
    largest = max((max(s.layer_params) for s in arch.stacks.values()), default=0)
    return Counts(
        total=arch.total,
        trainable_base=base,
        lora=lora_params,
        copies=copies,
        quantized=quantized,
        largest_quantized=largest_quantized,
        lm_head_trainable=bool(lm_head_trainable),
        vision_grad_layers=grad_layers,
        vision_full=vision_from is not None,
        text_trainable=llm_full,
        adapted=tuple(adapted),
        largest_layer=largest,
        expert_merge=expert_merge,
        lora_small=lora_small,
    )


def _vision_from(arch: Arch, train_vision) -> int | None:
    """First trained vision layer (0 = the whole tower), None when the tower is frozen."""
    if "vision" not in arch.stacks or train_vision is False:
        return None
    if train_vision is True:
        return 0
    return min(int(train_vision), arch.stacks["vision"].layers)


# bitsandbytes optim/optimizer.py `get_state_buffer` (0.39.1 .. 0.50.2): a paged optimizer pages a state only
# when its parameter has at least 1e5 elements (`if not self.is_paged or p.numel() < 1e5: torch.zeros_like(...)`).
PAGED_MIN_NUMEL = 100_000


def _small(*numels: int) -> int:
    """Elements of the given tensors that sit below bitsandbytes' paging size."""
    return sum(n for n in numels if n < PAGED_MIN_NUMEL)


def _lora(arch: Arch, setup) -> tuple[int, list[Adapted], bool, int]:
    """(LoRA parameters, adapted inputs, whether the vision tower is adapted, parameters in A / B tensors
    below bitsandbytes' paging size)."""
    r = setup.lora_r
    targets = setup.lora_targets
    aliases = LLAMA_ALIASES.get(arch.text_model_type, {})
    present = {lin.name.rsplit(".", 1)[-1] for lin in arch.linears}
    total, per_stack, vision, small = 0, {}, False, 0
    fused_groups: dict[tuple[str, int], list[Linear]] = {}
    for lin in arch.linears:
        if targets == "all-linear":
            hits = ["all"]
        else:
            hits = _matches(lin.name, targets, aliases, present)
        if not hits:
            continue
        leaf = lin.name.rsplit(".", 1)[-1]
        if setup.lora_fused_qkv and leaf in QKV:
            fused_groups.setdefault((lin.stack, lin.layer), []).append(lin)  # one A/B pair for q, k, v
            continue
        if setup.lora_fused_qkv and isinstance(targets, (list, tuple)) and set(hits) <= set(QKV) and len(hits) >= 1 and leaf not in QKV:
            # a real fused QKV module (BLOOM query_key_value): LoRA on the named thirds only
            params = len(hits) * r * (lin.in_features + lin.out_features // 3)
            small += len(hits) * _small(r * lin.in_features, r * (lin.out_features // 3))
        else:
            params = r * (lin.in_features + lin.out_features)
            small += _small(r * lin.in_features, r * lin.out_features)
        total += params
        vision = vision or lin.stack == "vision"
        if lin.stack:
            key = (lin.stack, role(lin, arch.stacks[lin.stack]), lin.in_features)
            per_stack[key] = per_stack.get(key, 0) + 1
    for (stack, _), group in fused_groups.items():
        lin = group[0]
        total += r * (lin.in_features + sum(x.out_features for x in group))
        small += _small(r * lin.in_features, r * sum(x.out_features for x in group))
        if stack:
            key = (stack, "attn_in", lin.in_features)
            per_stack[key] = per_stack.get(key, 0) + 1
            vision = vision or stack == "vision"
    adapted = [Adapted(s, rl, i, n / arch.stacks[s].layers) for (s, rl, i), n in sorted(per_stack.items())]
    return total, adapted, vision, small


def peft_moe_conversion() -> dict:
    """PEFT's tables for transformers v5's fused MoE experts (utils/transformers_weight_conversion.py):
    `pattern` (_MODEL_TO_CONVERSION_PATTERN: model type -> base pattern), `mapping` (_MOE_TARGET_MODULE_MAPPING:
    v4 target name -> fused parameter), `fused` (_MOE_FUSED_TARGETS) and `converted` (the pattern's model types
    transformers' get_checkpoint_conversion_mapping converts). Read once per set of installed library versions
    (libraries.cached): importing PEFT costs seconds, and every LoRA plan asks. Empty tables with an older PEFT."""
    from vramfit import libraries

    def read() -> dict:
        try:
            from peft.utils.transformers_weight_conversion import (
                _MODEL_TO_CONVERSION_PATTERN,
                _MOE_FUSED_TARGETS,
                _MOE_TARGET_MODULE_MAPPING,
                get_checkpoint_conversion_mapping,
            )
        except ImportError:  # an older PEFT or transformers: no conversion
            return {"pattern": {}, "mapping": {}, "fused": {}, "converted": []}
        return {
            "pattern": dict(_MODEL_TO_CONVERSION_PATTERN),
            "mapping": {k: dict(v) for k, v in _MOE_TARGET_MODULE_MAPPING.items()},
            "fused": {k: {n: list(v) for n, v in d.items()} for k, d in _MOE_FUSED_TARGETS.items()},
            "converted": sorted(t for t in _MODEL_TO_CONVERSION_PATTERN if get_checkpoint_conversion_mapping(t) is not None),
        }

    return libraries.cached("peft-moe-conversion", read)


def peft_refused_modules(model_type: str, names) -> tuple[str, ...]:
    """The module names among `names` that PEFT refuses to adapt with LoRA on a model of this `config.model_type`,
    as PEFT itself decides: each name is put to LoraModel's own `_check_target_module_compatiblity` (PEFT 0.21
    tuners_utils.py -> `_check_lora_target_modules_mamba`: Mamba-family models refuse `out_proj` and `conv1d`,
    "Please remove it from `target_modules`"), which `inject_adapter` runs on every matched module's leaf name, an
    `all-linear` resolution included. Read once per set of installed library versions (importing PEFT costs
    seconds); none with a PEFT without the check."""
    import hashlib
    import json

    from vramfit import libraries

    names = sorted({str(n) for n in names})

    def read() -> list[str]:
        from types import SimpleNamespace

        try:
            from peft import LoraConfig
            from peft.tuners.lora import LoraModel
        except ImportError:
            return []
        check = getattr(LoraModel, "_check_target_module_compatiblity", None)
        if check is None:  # a PEFT before the check: it adapts every module it is given
            return []
        model = SimpleNamespace(config=SimpleNamespace(model_type=model_type))
        tuner = object.__new__(LoraModel)  # the check reads the config and the model, not the tuner
        refused = []
        for name in names:
            try:
                check(tuner, LoraConfig(), model, name)
            except ValueError:
                refused.append(name)
            except Exception:  # noqa: BLE001 - a check that needs more than it is given: nothing said refused
                continue
        return refused

    key = hashlib.sha256(json.dumps([model_type, names]).encode()).hexdigest()[:12]
    return tuple(libraries.cached(f"peft-refused-{key}", read))


def peft_parameter_targets(arch: Arch, targets) -> tuple[str, ...] | None:
    """The parameters PEFT adapts through lora.ParamWrapper for these `target_modules`, as PEFT itself decides.

    PEFT 0.21 tuners_utils.py `inject_adapter` -> utils/transformers_weight_conversion.py
    `convert_peft_config_for_transformers`: for a model whose `config.model_type` transformers v5 converts
    (`get_checkpoint_conversion_mapping`) and whose pattern has fused MoE targets (`_MODEL_TO_CONVERSION_PATTERN`
    -> `_MOE_TARGET_MODULE_MAPPING` / `_MOE_FUSED_TARGETS`), the v4 names (`all-linear` resolves to every one,
    a list entry matches when equal or ending in `.name`) become `target_parameters` (the experts' fused
    `gate_up_proj` / `down_proj`, the router's `gate.weight`). Empty when none; None for a regex, which PEFT
    probes against the built model (the trace meets PEFT's own answer)."""
    tables = peft_moe_conversion()
    if targets is None or arch.model_type not in tables["converted"]:
        return ()
    base = tables["pattern"].get(arch.model_type)
    mapping = tables["mapping"].get(base or "")
    if not mapping or not tables["fused"].get(base):
        return ()
    if isinstance(targets, str) and targets.lower() == "all-linear":
        old = set(mapping)
    elif isinstance(targets, (list, tuple)):
        old = {o for o in mapping for t in targets if str(t) == o or str(t).endswith(f".{o}")}
    else:
        return None
    return tuple(sorted({mapping[o] for o in old}))


# The parameters whose lora.ParamWrapper shapes the planner knows (`_expert_lora`): the router and the fused experts
PARAMETER_SHAPES = ("gate.weight", "gate_up_proj", "down_proj")


def named_parameter_targets(arch: Arch, targets) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """An explicit `target_parameters` list (PEFT LoraConfig / axolotl `lora_target_parameters`) matched as PEFT 0.21
    tuners_utils.py `_inject_parameters` matches it: a parameter's full name equals an entry or ends in ".<entry>".
    Returns ({known short name (PARAMETER_SHAPES): the full names it matched}, full names matched whose LoRA shape the
    planner does not know, entries that match no parameter: PEFT warns and adapts none)."""
    known: dict[str, list[str]] = {}
    unknown, unmatched = [], []
    names = [name for name, _, _ in arch.parameters]
    for target in dict.fromkeys(str(t) for t in targets or ()):
        hits = [n for n in names if n == target or n.endswith(f".{target}")]
        if not hits:
            unmatched.append(target)
        for name in hits:
            short = next((s for s in PARAMETER_SHAPES if name == s or name.endswith(f".{s}")), None)
            if short is None or (short != "gate.weight" and ".experts." not in f".{name}"):
                unknown.append(name)
            elif name not in known.get(short, []):
                known.setdefault(short, []).append(name)
    return known, list(dict.fromkeys(unknown)), unmatched


def _expert_lora(arch: Arch, setup) -> tuple[int, tuple[int, ...]]:
    """(LoRA parameters, elements per layer of each wrapped parameter) of the MoE experts and router.

    PEFT 0.21 utils/transformers_weight_conversion.py `_convert_peft_config_moe`: for the model types
    transformers v5 fused (`_MODEL_TO_CONVERSION_PATTERN` -> `_MOE_TARGET_MODULE_MAPPING`), the v4
    target names (`all-linear` resolves to every one of them) become `target_parameters`: the router's
    `gate.weight` [E, H] and the 3-D `gate_up_proj` [E, 2F, H] / `down_proj` [E, H, F], the fused
    `gate_up_proj` at rank 2r when both of its v4 halves are targeted (`rank_pattern`). Each is wrapped
    by lora.ParamWrapper (tuners/lora/layer.py): lora_A = Linear(in, r * E), lora_B = Linear(r * E,
    out), E = 1 for the 2-D router; 3-D weights stored [E, out, in] (`is_transposed` False)."""
    stack = arch.stacks.get("text")
    if setup.lora_r is None or stack is None or not stack.experts or not stack.expert_gated:
        return 0, ()
    explicit, _, _ = named_parameter_targets(arch, getattr(setup, "lora_target_parameters", ()))
    tables = peft_moe_conversion()  # empty with an older PEFT: no conversion, the experts stay untargeted
    base = tables["pattern"].get(arch.text_model_type) or tables["pattern"].get(arch.model_type)
    mapping = tables["mapping"].get(base or "") or {}
    targets = setup.lora_targets
    if not mapping or not tables["fused"].get(base):
        old = set()
    elif targets == "all-linear":
        old = set(mapping)
    elif isinstance(targets, (list, tuple)):
        old = {t for t in targets if t in mapping}
    else:
        old = set()  # a regex: PEFT probes it against the v4 names; not modelled
    new = {mapping[o] for o in old}
    r, E, H, F = setup.lora_r, stack.experts, stack.hidden, stack.expert_ffn
    fused = tables["fused"].get(base or "", {}).get("gate_up_proj", [])
    shapes = {  # forward order: router, gate_up, down; (elements, lora parameters)
        "gate.weight": (E * H, r * (H + E)),
        "gate_up_proj": (E * 2 * F * H, r * (len(fused) if fused and set(fused) <= old else 1) * E * (H + 2 * F)),
        "down_proj": (E * H * F, r * E * (F + H)),
    }
    # the converted names wrap every layer's parameter; an explicit target_parameters list the parameters it names (a
    # converted one it also names is wrapped once: PEFT reuses the ParamWrapper of a parameter already wrapped)
    wrapped = [name for name in shapes if name in new or name in explicit]
    total = sum(shapes[n][1] * (stack.layers if n in new else len(explicit[n])) for n in wrapped)
    return total, tuple(shapes[n][0] for n in wrapped)


# ----------------------------------------------------------------------------------------------
# Modules a checkpoint loads beside the model the planner builds
# ----------------------------------------------------------------------------------------------

# The speech-output modules of an Omni checkpoint: (config key, transformers class). transformers 5.23
# modeling_qwen2_5_omni.py `Qwen2_5OmniForConditionalGeneration.__init__`: `if config.enable_audio_output:
# self.enable_talker()`, which builds `Qwen2_5OmniTalkerForConditionalGeneration(config.talker_config)` and
# `Qwen2_5OmniToken2WavModel(config.token2wav_config)` beside the Thinker. Training runs the Thinker alone, so they are
# frozen weights that take no part in forward or backward.
AUDIO_OUTPUT_MODULES = {
    "qwen2_5_omni": (
        "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni",
        "Qwen2_5OmniConfig",
        (("talker_config", "Qwen2_5OmniTalkerForConditionalGeneration"), ("token2wav_config", "Qwen2_5OmniToken2WavModel")),
    ),
}


def audio_output_params(config: dict[str, Any]) -> dict[str, int] | None:
    """Parameters of each speech-output module a published Omni config builds when its audio output is on (the Talker,
    the vocoder), counted on the meta device from transformers' own classes; None for a model that has none. Cached
    on disk by the config's text and the transformers version."""
    spec = AUDIO_OUTPUT_MODULES.get(str(config.get("model_type")))
    if spec is None:
        return None
    text = json.dumps(config, sort_keys=True)
    disk = cache_dir() / "planner" / f"audio-{config_key(text)}.json"
    if disk.is_file():
        try:
            return {str(k): int(v) for k, v in json.loads(disk.read_text()).items()}
        except (ValueError, TypeError, AttributeError):
            pass  # a damaged cache file: count again
    import importlib

    import torch

    module_path, config_class, parts = spec
    out = {}
    try:
        module = importlib.import_module(module_path)
        full = getattr(importlib.import_module("transformers"), config_class)(**{k: v for k, v in config.items() if not k.startswith("_")})
        with torch.device("meta"):
            for key, cls in parts:
                out[cls] = sum(p.numel() for p in getattr(module, cls)(getattr(full, key)).parameters())
    except (ImportError, AttributeError, TypeError, ValueError, KeyError):  # a transformers without these classes
        return None
    store_json(disk, out)
    return out
