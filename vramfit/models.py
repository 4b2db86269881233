"""Find a model's config.json the way the libraries do: vramfit's shipped table, a local folder holding
config.json, the local Hugging Face cache, and, where the network allows, the Hub (config.json only,
through huggingface_hub).

The table (docs/model-table.md lists it):
- model_configs/hub/NAME.json: a model's config.json as published, and beside it NAME.source.json, the
  sidecar: `hub_id`, `aliases`, the URL of the config at a revision, the page it was read from, any edit,
  and the published parameter count with its source. Where transformers has no class for the published
  config (remote-code models), the sidecar's `planner_config` names a stand-in written by vramfit with the
  same shapes in a native class (model_configs/hub/stand-ins/), and that is what the planner builds.
- model_configs/*.json: the recipes' own configs, provenance in their `_` keys (`_model`, `_source`).

`resolve(model_id)` never raises: it returns where the config came from, or None and the places it
looked, so a caller can say what it could not compute instead of stopping.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from vramfit.paths import PACKAGE_ROOT

TABLE_DIRS = (PACKAGE_ROOT / "model_configs", PACKAGE_ROOT / "model_configs" / "hub")
HUB_DIR = PACKAGE_ROOT / "model_configs" / "hub"
SIDECAR = ".source.json"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
# A table name followed by a separator still names that model (-Instruct, -hf, -chat, -2507, a local
# checkpoint's -sft / -lora), unless what follows is another size or variant (gpt2 -> gpt2-medium, -70b), a
# distillation into another model (DeepSeek-R1 -> DeepSeek-R1-Distill-Qwen-14B), or names, further on, a size the
# table name does not have (DeepSeek-R1 -> DeepSeek-R1-0528-Qwen3-8B; ShareGPT4V-7B -> ..._vicuna-7b-v1.5 is kept).
SUFFIX = re.compile(r"^[-_.](?!\d+(?:\.\d+)?[bmk]\b|(?:medium|large|xl|xxl|small|mini|tiny|base|nano|micro|vision|vl|moe|distill|a\d)\b)", re.I)
SIZE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?b)\b", re.I)


def _same_model(short: str, rest: str) -> bool:
    """`rest` (what follows a table name `short` in an id) keeps naming that model (see SUFFIX)."""
    return bool(SUFFIX.match(rest)) and not set(SIZE.findall(rest.lower())) - set(SIZE.findall(short.lower()))


@dataclass
class Resolved:
    path: Path | None  # a config.json (or a table file in its format)
    how: str  # "vramfit's table (model_configs/x.json)", "local folder", "Hugging Face cache", "Hugging Face Hub"
    looked: list[str] = field(default_factory=list)  # where it looked, for the message when nothing was found
    # a local path not on this machine, planned as the table model its folder's name names: that model's id (the plan
    # rests on the folder holding it); empty when the config was found by id, in a folder, the cache or the Hub
    by_name: str = ""


@dataclass(frozen=True)
class Entry:
    """One model of the shipped table."""

    hub_id: str  # the Hub id the config belongs to ("" for a recipe config that names several)
    names: tuple[str, ...]  # every id and alias it answers to, lowercased
    config: Path  # the config file as published (or the recipe's config)
    planner: Path  # what the planner builds: the config, or a stand-in for a remote-code model
    sidecar: Path | None  # NAME.source.json (None for a recipe config: its provenance is in its `_` keys)
    published_params: float | None
    published_params_source: str
    tolerance: float  # relative, for the parameter-count check


def _is_config(path: Path) -> bool:
    return not path.name.endswith(SIDECAR)


def table_files() -> list[Path]:
    """Every config file of the table that a planner can be given (sidecars excluded; stand-ins included)."""
    return [p for d in (*TABLE_DIRS, HUB_DIR / "stand-ins") for p in sorted(d.glob("*.json")) if _is_config(p)]


@functools.lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    """The table: the recipes' own configs first (they won name clashes before the sidecar layout and still
    do: a recipe plans the file it ships), then every sidecar of model_configs/hub/."""
    return (*_recipe_entries(), *_sidecar_entries())


def _sidecar_entries() -> list[Entry]:
    out: list[Entry] = []
    for sidecar in sorted(HUB_DIR.glob(f"*{SIDECAR}")):
        try:
            meta = json.loads(sidecar.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        published = sidecar.with_name(sidecar.name[: -len(SIDECAR)] + ".json")
        planner = HUB_DIR / meta["planner_config"] if meta.get("planner_config") else published
        ids = [meta["hub_id"], *meta.get("aliases", [])]
        out.append(
            Entry(
                meta["hub_id"],
                tuple(i.lower() for i in ids),
                published if published.is_file() else planner,  # remote-code models: only the stand-in is shipped
                planner,
                sidecar,
                meta.get("published_params"),
                str(meta.get("published_params_source", "")),
                float(meta.get("tolerance", 0.03)),
            )
        )
    return out


def _recipe_entries() -> list[Entry]:
    """model_configs/*.json: the recipes' configs, their provenance in `_` keys (`_model` names the model)."""
    out: list[Entry] = []
    for path in sorted(TABLE_DIRS[0].glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        described = str(data.get("_model", ""))
        words = [w for w in re.findall(r"[A-Za-z0-9][\w.\-]*(?:/[\w.\-]+)?", described) if re.search(r"\d", w) and len(w) >= 5]
        out.append(
            Entry(
                next((w for w in words if "/" in w), ""),
                tuple(w.lower() for w in words),
                path,
                path,
                None,
                data.get("_published_params"),
                str(data.get("_published_params_source", "")),
                0.03,
            )
        )
    return out


def table_names() -> dict[str, Path]:
    """Every name a table entry answers to (its Hub id, its repository name, its aliases), lowercased -> the
    file the planner builds. Sidecar entries first: an id in a sidecar wins over a recipe config's words."""
    out: dict[str, Path] = {}
    for entry in entries():
        for name in entry.names:
            out.setdefault(name, entry.planner)
            out.setdefault(name.rsplit("/", 1)[-1], entry.planner)
    return out


def stand_in_for(path) -> Path | None:
    """The stand-in the table plans for this published config file (a remote-code or quantized checkpoint), or None."""
    try:
        target = Path(path).resolve()
    except (OSError, RuntimeError):
        return None
    for entry in entries():
        if entry.planner != entry.config and entry.config.resolve() == target:
            return entry.planner
    return None


def published_for(path) -> Path:
    """The published config file the table plans through this stand-in (the inverse of `stand_in_for`), else `path`."""
    try:
        target = Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(path)
    for entry in entries():
        if entry.planner != entry.config and entry.planner.resolve() == target and entry.config.is_file():
            return entry.config
    return Path(path)


def entry_for(model_id: str) -> Entry | None:
    """The table entry of a model id or local path: its Hub id or an alias exactly; else the repository name
    exactly (a local folder named like the model); else the longest table name it starts with followed by
    a separator (-Instruct, -hf, -chat, -sft, ...)."""
    found = _ranked(model_id)
    return found[1] if found else None


def _ranked(model_id: str) -> tuple[int, Entry] | None:
    """(3: the id or an alias exactly, 2: the repository name, 1: a table name and a suffix; the entry) for entry_for.
    A folder named after a Hub id (`models--org--name`, `org__name`) is compared by its repository name."""
    wanted = model_id.strip().rstrip("/").lower()
    names = _name_forms(folder_name(wanted))
    best: tuple[int, int, Entry] | None = None
    for entry in entries():
        for candidate in entry.names:
            short = candidate.rsplit("/", 1)[-1]
            if wanted == candidate:
                rank = (3, len(candidate))
            elif short in names:
                rank = (2, len(short))
            elif any(name.startswith(short) and _same_model(short, name[len(short) :]) for name in names):
                rank = (1, len(short))
            else:
                continue
            if best is None or rank > best[:2]:
                best = (*rank, entry)
    return (best[0], best[2]) if best else None


def is_path(model_id: str) -> bool:
    """A model named by a local path (`/data/qwen-1.5-7B/`, `~/Qwen2-72B-Instruct`, `./ckpt/x`, `C:\\models\\x`), not
    a Hub id (`org/name`) or a bare name (`gpt2`), which the Hub or the table answer for by id."""
    text = model_id.strip()
    return text.startswith(("/", "~", ".")) or "\\" in text or ("/" in text.rstrip("/") and not HUB_ID.match(text.rstrip("/")))


# A folder's name, compared with the table's names after a conservative normalisation: lowercased, split into its runs
# of letters and of digits (so '-', '_', '.' and their absence do not count: qwen-1.5-7B = Qwen1.5-7B, and ModelScope's
# Qwen2___5-7B = Qwen2.5-7B, while Qwen2-57B stays another model than Qwen2.5-7B: its digits run 57), a trailing
# -hf dropped, and the model's own organisation in front (HF cache folders `models--Qwen--Qwen2-72B`, `Qwen_Qwen2-72B`) dropped.
SIZE_IN_NAME = re.compile(r"\d+(?:\.\d+)?[bmk](?![a-z])", re.I)  # 7B, 1.5b, 135M, 8x7b; 7b_instruct too


# A folder a cache or a download tool named after a Hub id `org/name`: huggingface_hub's cache `models--org--name`, or the
# flattened `org__name` (cpatonn-mirror__Qwen3-30B-A3B-Thinking-2507-AWQ in modelscope/ms-swift#6405). Two underscores
# exactly: ModelScope writes '.' as three (Qwen2___5-7B), which stays part of the name.
REPO_FOLDER = re.compile(r"^(?:models--)?[^/]+?--(?P<cache>.+)$|^[A-Za-z0-9][\w.\-]*?(?<!_)__(?!_)(?P<flat>.+)$")
# A checkpoint quantized from its base and named after it, the quantization written last: Qwen's -AWQ, -GPTQ-Int4 /
# -GPTQ-Int8, -Int4 / -Int8, -FP8; unsloth's -bnb-4bit and -unsloth-bnb-4bit (its dynamic quants); -FP8-Dynamic.
# Quantizing keeps every shape of the base (same layers, widths, vocabulary): only the bytes per weight change, which the
# review takes from the name (`name_quantization`) where the table holds the base's 16-bit config.
QUANT_TAIL = re.compile(
    r"[-_.](?P<fmt>(?:unsloth[-_.])?bnb[-_.]?(?:4|8)bit|awq(?:[-_.]4bit)?|gptq(?:[-_.](?:int(?:4|8)|(?:4|8)bit))?|int(?:4|8)|fp8(?:[-_.]dynamic)?)$",
    re.I,
)
# The same formats anywhere in a name (Qwen1.5-7B-Chat-GPTQ-Int4, Qwen-VL-Chat-Int4): -> (method, bits) the planner takes,
# None for one it does not model (8-bit GPTQ, fp8: planned at 16 bits, an upper bound, said by the review).
# NVFP4 / MXFP4 / FP4 (NVIDIA ModelOpt / compressed-tensors: 4-bit e2m1 values with an fp8 or e8m0 scale per block, e.g.
# nvidia/Qwen3-Next-80B-A3B-Instruct-NVFP4 of axolotl's qwen3-next example) are named, not modelled: planned at 16 bits.
QUANT_IN_NAME = re.compile(
    r"(?<![a-z0-9])((?:unsloth[-_.])?bnb[-_.]?(?:4|8)bit|awq(?:[-_.]4bit)?|gptq(?:[-_.](?:int(?:4|8)|(?:4|8)bit))?|int4|int8|fp8|nvfp4|mxfp4|fp4)(?![a-z0-9])",
    re.I,
)


def repository_name(folder: str) -> str:
    """The repository name a cache folder's name holds (`models--Qwen--Qwen3-8B`, `Qwen__Qwen3-8B` -> Qwen3-8B), else the
    name as it is."""
    found = REPO_FOLDER.match(folder)
    return (found.group("cache") or found.group("flat")) if found else folder


SNAPSHOT = re.compile(r"^[0-9a-f]{40}$")


def folder_name(model_id: str) -> str:
    """The name of the folder a model path names: its last part, or for a Hugging Face cache snapshot
    (`.../models--Qwen--Qwen3-8B/snapshots/<40-hex commit>`) the cache folder whose snapshot it is."""
    parts = model_id.strip().rstrip("/\\").replace("\\", "/").split("/")
    if len(parts) >= 3 and parts[-2] == "snapshots" and SNAPSHOT.match(parts[-1].lower()) and parts[-3].startswith("models--"):
        return parts[-3]
    return parts[-1]


def _name_forms(folder: str) -> tuple[str, ...]:
    """A folder's name as it is, then the repository name it holds when it is a cache folder's (`repository_name`): an
    `org__name` reading never hides the name itself (Qwen2__5_32B_Instruct is ModelScope's Qwen2.5-32B-Instruct)."""
    repository = repository_name(folder)
    return (folder,) if repository == folder else (folder, repository)


def unquantized_name(name: str) -> str | None:
    """The base model's name of a quantized checkpoint's (Qwen3-8B-AWQ, qwen3_8b_awq, Llama-3.2-3B-Instruct-bnb-4bit ->
    the name without the quantization; QUANT_TAIL), or None when the name ends in no quantization."""
    found = QUANT_TAIL.search(name)
    return name[: found.start()] if found and found.start() > 0 else None


@dataclass(frozen=True)
class NamedQuantization:
    """The quantization a checkpoint's name says it carries (`name_quantization`)."""

    written: str  # as the name writes it: AWQ, GPTQ-Int4, bnb-4bit, FP8
    method: str | None  # what the planner plans it as: awq, gptq, bitsandbytes; None: not modelled (8-bit GPTQ, fp8)
    bits: int | None


def name_quantization(model_id: str) -> NamedQuantization | None:
    """The quantization a model id or path's last name carries (QUANT_IN_NAME), or None. AutoAWQ and GPTQ checkpoints
    named without bits (-AWQ, -GPTQ) are 4-bit, the only width AutoAWQ writes and the one GPTQ checkpoints are published at
    under a bare -GPTQ; Qwen's bare -Int4 / -Int8 checkpoints are GPTQ (Qwen-7B-Chat-Int4's quantization_config)."""
    name = repository_name(folder_name(model_id))
    found = QUANT_IN_NAME.search(name)
    if not found:
        return None
    written = found.group(1)
    fmt = re.sub(r"[-_.]", "", written.lower())
    if "bnb" in fmt:
        return NamedQuantization(written, "bitsandbytes", int(fmt[fmt.index("bnb") + 3]))
    if fmt.startswith("awq"):
        return NamedQuantization(written, "awq", 4)
    if fmt in ("gptq", "gptqint4", "gptq4bit", "int4"):
        return NamedQuantization(written, "gptq", 4)
    if fmt.endswith("fp4"):
        return NamedQuantization(written, None, 4)  # NVFP4 / MXFP4: no format the planner models
    return NamedQuantization(written, None, 8)  # 8-bit GPTQ (-GPTQ-Int8, -Int8), fp8


def _tokens(name: str) -> tuple[str, ...]:
    words = tuple(re.findall(r"[a-z]+|\d+", name.lower()))
    return words[:-1] if words[-1:] == ("hf",) else words


def folder_entry(model_id: str) -> Entry | None:
    """The one table entry a local folder's name names after the normalisation above, or None: no name equal, or names
    of several models equal (ambiguous), or a folder name without a size where the table name has one (Qwen2-Instruct
    names no one model). Only for paths (`is_path`): a Hub id is found by id, never by a normalised name."""
    for name in _name_forms(folder_name(model_id)):  # models--Qwen--Qwen2-72B, Qwen__Qwen2-72B: the folder of Qwen/Qwen2-72B
        found = _folder_match(name)
        base = unquantized_name(name)  # Qwen2___5-7B-Instruct-AWQ, qwen3_8b_awq: the base's folder name, quantized
        found = found if found is not None or base is None else _folder_match(base)
        if found is not None:
            return found
    return None


def _folder_match(name: str) -> Entry | None:
    wanted = _tokens(name)
    if not wanted:
        return None
    found: dict[str, Entry] = {}
    for entry in entries():
        for candidate in entry.names:
            org, _, short = candidate.rpartition("/")
            # the name alone, or written after its own organisation (Qwen_Qwen2.5-7B-Instruct, meta-llama-Llama-2-7b-hf)
            forms = (_tokens(short), _tokens(org) + _tokens(short)) if org else (_tokens(short),)
            if wanted in forms and (SIZE_IN_NAME.search(name) or not SIZE_IN_NAME.search(short)):
                found.setdefault((entry.hub_id or str(entry.planner)).lower(), entry)
    if len({e.planner.resolve() for e in found.values()}) != 1:
        return None
    return next(iter(found.values()))


# The instruction-tuned siblings a table entry may be named after; the base model's config has the same shapes
# (the tuned model is the base model trained further: same architecture, widths and vocabulary). The same holds the
# other way: a pre-trained checkpoint named with -Base / -pt (Qwen/Qwen3-8B-Base, google/gemma-2-27b-pt) has the
# shapes of the post-trained model the table holds under the plain or tuned name (Qwen/Qwen3-8B).
TUNED = ("-instruct", "-chat", "-it", "-chat-hf")
PRETRAINED = ("-base", "-pt")


def sibling_for(model_id: str) -> Entry | None:
    """The table entry of a model's sibling before or after instruction tuning, for a model the table lacks: a base
    model's tuned sibling (Qwen/Qwen2-VL-2B -> Qwen2-VL-2B-Instruct), or a -Base / -pt checkpoint's post-trained one
    (Qwen/Qwen3-8B-Base -> Qwen3-8B). Its shapes are the sibling's."""
    name = model_id.strip().rstrip("/").lower().rsplit("/", 1)[-1]
    stem = next((name[: -len(end)] for end in PRETRAINED if name.endswith(end) and len(name) > len(end)), None)
    for entry in entries():
        for candidate in entry.names:
            short = candidate.rsplit("/", 1)[-1]
            if short.startswith(name) and short[len(name) :] in TUNED:
                return entry
            if stem is not None and short.startswith(stem) and short[len(stem) :] in ("", *TUNED):
                return entry
    return None


def in_table(model_id: str) -> Path | None:
    """The file the planner builds for a model id or local path (see entry_for), or None."""
    entry = entry_for(model_id)
    return entry.planner if entry is not None else None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or os.environ.get("VRAMFIT_OFFLINE", "") == "1"


def resolve(model_id: str | None, beside: Path | None = None) -> Resolved:
    looked: list[str] = []
    if not model_id:
        return Resolved(None, "", ["the files name no model"])
    model_id = str(model_id)
    path = is_path(model_id)
    if path:  # a local folder that is there is what the run loads (transformers looks there first), whatever its name
        found = _folder(model_id, beside)
        if found is not None:
            return found
    ranked = _ranked(model_id)
    looked.append("vramfit's table (model_configs/, model_configs/hub/)")
    if ranked is not None:
        found = ranked[1].planner
        return Resolved(found, _table_how(found), looked, by_name=_id(ranked[1]) if path or ranked[0] < 3 and not HUB_ID.match(model_id) else "")
    if not path:
        found = _folder(model_id, beside)
        if found is not None:
            return found
    looked.append("a local folder of that name")
    if path:
        entry = folder_entry(model_id)
        if entry is not None:
            return Resolved(entry.planner, _table_how(entry.planner), looked, by_name=_id(entry))
    if not HUB_ID.match(model_id):
        return _sibling(model_id, looked, by_name=path)
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model_id, "config.json")
    except Exception:  # a malformed id or an unreadable cache: treated as not cached
        cached = None
    looked.append("the Hugging Face cache")
    if isinstance(cached, str) and Path(cached).is_file():
        return Resolved(Path(cached), "Hugging Face cache", looked)
    if _offline():
        looked.append("not the Hub (HF_HUB_OFFLINE)")
        return _sibling(model_id, looked)
    try:
        from huggingface_hub import hf_hub_download

        os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
        os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
        path = hf_hub_download(model_id, "config.json")
        return Resolved(Path(path), "Hugging Face Hub (config.json only)", looked + ["the Hub"])
    except Exception as exc:  # no network, a gated or missing repository: said, not raised
        looked.append(f"the Hub ({exc.__class__.__name__})")
        return _sibling(model_id, looked)


def _id(entry: Entry) -> str:
    return entry.hub_id or entry.names[0]


def _table_how(found: Path) -> str:
    return f"vramfit's table ({found.relative_to(PACKAGE_ROOT).as_posix()})"


def _folder(model_id: str, beside: Path | None) -> Resolved | None:
    """A local folder holding config.json: the id as a path, or beside the files that name it."""
    folder = Path(os.path.expanduser(model_id))
    for candidate in [folder] + ([beside / folder] if beside is not None and not folder.is_absolute() else []):
        try:
            if (candidate / "config.json").is_file():
                return Resolved(candidate / "config.json", f"local folder {candidate}", [])
        except OSError:  # a name too long for the file system, a folder it may not read: not there
            continue
    return None


def _sibling(model_id: str, looked: list[str], by_name: bool = False) -> Resolved:
    """Last: the table's sibling, before or after instruction tuning, of a model found nowhere else (said as such)."""
    entry = sibling_for(model_id)
    if entry is None:
        return Resolved(None, "", looked)
    return Resolved(
        entry.planner,
        f"vramfit's table ({entry.planner.relative_to(PACKAGE_ROOT).as_posix()}): the config of {entry.hub_id or entry.names[0]}, "
        f"its {'post-trained' if model_id.lower().rstrip('/').endswith(PRETRAINED) else 'instruction-tuned'} sibling, whose shapes it shares",
        looked,
        by_name=_id(entry) if by_name else "",
    )


DOC = PACKAGE_ROOT / "docs" / "model-table.md"


def table_markdown() -> str:
    """docs/model-table.md: the shipped table, one row per entry, from the sidecars and the recipes' `_` keys
    (`python -m vramfit.models` rewrites it; a test checks it is current)."""
    rows = []
    for e in entries():
        meta = json.loads(e.sidecar.read_text()) if e.sidecar else {}
        config = json.loads(e.planner.read_text())
        kind = (
            "stand-in (remote code / not plannable as published)"
            if meta.get("planner_config")
            else "recipe config (`_` keys)"
            if e.sidecar is None
            else re.split(r"[:(]| by ", meta.get("bytes", ""))[0].strip()
        )
        where = meta.get("read_from") or str(config.get("_source", ""))
        where = f"[page]({where})" if where.startswith("https://") else where
        aliases = ", ".join(meta.get("aliases", []))
        params = f"{e.published_params / 1e9:.3g}B" if e.published_params else "?"
        rows.append(
            f"| `{e.hub_id or '-'}` | {aliases} | `{e.config.relative_to(PACKAGE_ROOT).as_posix()}` | {config.get('model_type', '?')} | {kind} | "
            f"{params}: {e.published_params_source} | {where} |"
        )
    ids = {e.hub_id.lower() for e in entries() if e.hub_id}
    return "\n".join(
        [
            "# vramfit's model table",
            "",
            "Generated by `python -m vramfit.models` from `model_configs/` (do not edit by hand). A model named in a",
            "script is looked up here by its Hub id or an alias first (then a local folder, the Hugging Face cache, the",
            "Hub; last, for a model found nowhere, its sibling here before or after instruction tuning (Qwen2-VL-2B and",
            "Qwen2-VL-2B-Instruct, Qwen3-8B-Base and Qwen3-8B), whose shapes it shares).",
            "A local path is read from its folder where that holds a config.json; a folder this machine does not have is",
            "planned as the one model here its name names (case, '-', '_', '.', a trailing -hf and the model's own",
            "organisation in front aside; a cache folder `models--org--name` or `org__name` by its repository name;",
            "`models.folder_entry`), and the review says the plan rests on that name. A quantized checkpoint named after",
            "its base (-AWQ, -GPTQ-Int4, -bnb-4bit, -FP8, ...) is planned with its base's config here and the quantization",
            "its name carries (`models.name_quantization`; 8-bit GPTQ and fp8 at 16 bits, an upper bound), said.",
            "Each `model_configs/hub/NAME.json` is a config.json as published, with `NAME.source.json` beside it:",
            "the Hub id, the page it was read from, any edit, and the published parameter count with its source.",
            "`tests/review/test_models.py` builds every entry on the meta device and checks that count (3%).",
            "",
            "Kinds: *byte-exact* (the page gives a size and the file has it), *re-serialized* (values and key order",
            "as the page shows them, written as transformers writes a config), *transcribed* (copied by an earlier",
            "session before the sidecar layout; see the sidecar), *stand-in* (the published file cannot be planned:",
            "a native class with the same shapes, written by vramfit and saying why), *recipe config*.",
            "",
            f"{len(ids)} distinct Hub ids, {len(entries())} files.",
            "",
            "| Hub id | aliases | file | model_type | kind | published parameters | read from |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    DOC.write_text(table_markdown())
    print(f"wrote {DOC.relative_to(PACKAGE_ROOT)}")
