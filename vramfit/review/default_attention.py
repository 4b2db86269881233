"""The attention `from_pretrained` picks, without `attn_implementation`, under the transformers release a repository
pins: eager (the B x heads x T x T scores materialised, softmaxed in fp32) or SDPA.

transformers 4.36 made SDPA the default where a model class supports it (`_autoset_attn_implementation` ->
`_check_and_enable_sdpa`: `config._attn_implementation = "sdpa"` when `cls._supports_sdpa` and torch >= 2.1.1;
huggingface/transformers#26572, announced in #28005). Before 4.36 no release dispatches to SDPA (4.31.0, 4.34.0 and
4.35.2's modeling_utils.py never name it), and after it each model type got `_supports_sdpa = True` in its own release.

Every entry was read off the published wheels (`pip download transformers==X --no-deps`, then
`src/transformers/models/<type>/modeling_<type>.py` in the wheel: `_supports_sdpa = True` on the type's
PreTrainedModel, or absent / False), at the .0 release of each minor version named, and is tied to the pull request
that made the change. A range is only what was read: a release outside `eager` and below `sdpa` is unknown, and so is
a model type not listed (then the review plans with the installed transformers' default, as before).

Not listed, on purpose: BLOOM (no `_supports_sdpa` in any release read, 4.31.0 to 5.23.0: the planner already plans it
eager); Gemma 2 (SDPA in 4.42-4.44 and 4.48-5.0, eager by default in 4.45-4.47 through its own `_check_and_enable_sdpa`,
and `_supports_sdpa = False` in 5.23: the planner already plans it eager); Falcon (its attention called
F.scaled_dot_product_attention itself before 4.36); models run by their repository's own code (`auto_map`)."""

from __future__ import annotations

from dataclasses import dataclass

WHEELS = "the transformers wheels on PyPI, models/{t}/modeling_{t}.py"


@dataclass(frozen=True)
class Default:
    model_type: str
    eager: tuple[str, str] | None  # (first, last) minor releases read that run it eager by default; None: never eager
    sdpa: str  # the first release read that picks SDPA by default
    source: str
    name: str = ""  # how findings name the model type

    @property
    def label(self) -> str:
        return self.name or self.model_type


_BEFORE_436 = "no release before 4.36 dispatches to SDPA (4.31.0, 4.34.0, 4.35.2 wheels' modeling_utils.py)"

TABLE: dict[str, Default] = {
    d.model_type: d
    for d in (
        Default(
            "llama",
            ("4.31", "4.35"),
            "4.36",
            f"huggingface/transformers#26572 (4.36.0: SDPA the default where supported); {_BEFORE_436}; 4.36.0 wheel: "
            "LlamaPreTrainedModel `_supports_sdpa = True`",
            "Llama",
        ),
        Default(
            "opt",
            ("4.31", "4.45"),
            "4.46",
            "huggingface/transformers#33298 (add sdpa to OPT); wheels: no `_supports_sdpa` in modeling_opt.py up to 4.45.0, "
            "OPTPreTrainedModel `_supports_sdpa = True` in 4.46.0",
            "OPT",
        ),
        Default(
            "gpt2",
            ("4.31", "4.41"),
            "4.42",
            "huggingface/transformers#31172 ([GPT2] Add SDPA support); wheels: absent in 4.41.0, GPT2PreTrainedModel `_supports_sdpa = True` in 4.42.0",
            "GPT-2",
        ),
        Default(
            "gpt_neox",
            ("4.31", "4.41"),
            "4.42",
            "huggingface/transformers#31031 (GPT-NeoX SDPA, 'added now in v4.42.0' in EleutherAI/sparsify#1); wheels: absent "
            "in 4.41.0, GPTNeoXPreTrainedModel `_supports_sdpa = True` in 4.42.0",
            "GPT-NeoX",
        ),
        Default(
            "bert",
            ("4.31", "4.40"),
            "4.41",
            "huggingface/transformers#28802 ([BERT] Add support for sdpa); wheels: absent in 4.40.0, BertPreTrainedModel `_supports_sdpa = True` in 4.41.0",
            "BERT",
        ),
        Default(
            "mistral",
            ("4.34", "4.36"),
            "4.37",
            "huggingface/transformers#28133 ([Mixtral & Mistral] Add support for sdpa); wheels: modeling_mistral.py in 4.34.0 "
            "(its first release read), no `_supports_sdpa` up to 4.36.0, `_supports_sdpa = True` in 4.37.0",
            "Mistral",
        ),
        Default(
            "mixtral",
            ("4.36", "4.36"),
            "4.37",
            "huggingface/transformers#28133; wheels: modeling_mixtral.py first in 4.36.0 without `_supports_sdpa`, `_supports_sdpa = True` in 4.37.0",
            "Mixtral",
        ),
        Default(
            "phi",
            ("4.36", "4.38"),
            "4.39",
            "huggingface/transformers#29108 ([Phi] Add support for sdpa); wheels: modeling_phi.py first in 4.36.0, no "
            "`_supports_sdpa` up to 4.38.0, `_supports_sdpa = True` in 4.39.0",
            "Phi",
        ),
        Default(
            "phi3",
            ("4.41", "4.44"),
            "4.45",
            "huggingface/transformers#32457 (Change Phi3 `_supports_sdpa` to True); wheels: Phi3PreTrainedModel "
            "`_supports_sdpa = False` in 4.41.0 to 4.44.0, True in 4.45.0",
            "Phi-3",
        ),
        Default(
            "t5",
            ("4.31", "5.0"),
            "5.23",
            "wheels: no `_supports_sdpa` in modeling_t5.py from 4.31.0 to 5.0.0; T5PreTrainedModel `_supports_sdpa = True` in "
            "5.23.0 (the first 5.x release with it is not established: 5.1-5.22 unknown)",
            "T5",
        ),
        Default(
            "mt5",
            ("4.31", "5.0"),
            "5.23",
            "wheels: no `_supports_sdpa` in modeling_mt5.py from 4.31.0 to 5.0.0; MT5PreTrainedModel `_supports_sdpa = True` in 5.23.0 (5.1-5.22 unknown)",
            "mT5",
        ),
        # SDPA from the type's first release: never eager by default
        Default("qwen2", None, "4.37", "wheels: modeling_qwen2.py first in 4.37.0, with `_supports_sdpa = True`", "Qwen2"),
        Default("gemma", None, "4.38", "wheels: modeling_gemma.py first in 4.38.0, with `_supports_sdpa = True`", "Gemma"),
        Default("qwen2_vl", None, "4.45", "wheels: modeling_qwen2_vl.py first in 4.45.0, with `_supports_sdpa = True`", "Qwen2-VL"),
        Default("olmo2", None, "4.47", "wheels: modeling_olmo2.py first in 4.47.0, with `_supports_sdpa = True`", "OLMo 2"),
    )
}


# transformers 4.36-4.48 utils/import_utils.py `is_torch_sdpa_available`: SDPA needs torch >= 2.1.1 on CUDA ("the
# `scale` argument ... memory-efficient attention with an arbitrary mask ... pytorch#112577"); below it every model loads
# eager (torch.nn.functional.scaled_dot_product_attention itself arrived in torch 2.0).
SDPA_TORCH = (2, 1, 1)
SDPA_TORCH_SOURCE = "transformers 4.36-4.48 utils/import_utils.py is_torch_sdpa_available: torch >= 2.1.1"


def torch_without_sdpa(version: str | None) -> bool:
    """True where the run's torch is older than any transformers accepts for SDPA."""
    if not version:
        return False
    parts = []
    for part in str(version).split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return bool(parts) and tuple(parts + [0] * (3 - len(parts))) < SDPA_TORCH


def _minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def reading(model_type: str, pin) -> str | None:
    """'eager' where every release the pin allows that has the model type runs it eager by default, 'both' where the
    pin allows releases of both kinds, 'sdpa' where it allows only SDPA ones; None where nothing is pinned, the type
    is not in the table, or the pinned release is one the table does not cover."""
    entry = TABLE.get(model_type)
    if entry is None or pin is None:
        return None
    v = _minor(pin.version)
    if v is None:
        return None
    sdpa = _minor(entry.sdpa)
    first, last = (_minor(entry.eager[0]), _minor(entry.eager[1])) if entry.eager else (None, None)
    exact = pin.op == "==" or (pin.op == "~=" and pin.version.count(".") >= 2)
    if exact:
        if first is not None and first <= v <= last:
            return "eager"
        return "sdpa" if v >= sdpa else None
    if pin.op in (">=", "~="):  # ~=X.Y: X.Y and later releases of X (major releases keep the defaults read above)
        upper = _minor(pin.upper[1]) if getattr(pin, "upper", None) else None
        # an upper bound (">=4.31,<4.36") allows an SDPA release only above the type's SDPA release
        sdpa_allowed = upper is None or (sdpa < upper if pin.upper[0] == "<" else sdpa <= upper)
        if first is not None and v <= last:
            return "both" if sdpa_allowed else "eager"
        return "sdpa" if sdpa_allowed else None
    if pin.op == "<=":
        if v >= sdpa:
            return "both" if first is not None else "sdpa"
        if first is not None and v >= first:
            return "eager"
    return None


def text_model_type(config: dict) -> str | None:
    """The model type whose attention a run's text stack uses: a VLM's text_config's (LLaVA's Llama, ...), else the
    config's own; None for a model run by its repository's code (`auto_map`)."""
    if not isinstance(config, dict) or config.get("auto_map"):
        return None
    text = config.get("text_config")
    if isinstance(text, dict) and text.get("model_type"):
        return str(text["model_type"])
    return str(config["model_type"]) if config.get("model_type") else None
