"""Find a model's config.json the way the libraries do: vramfit's shipped table (model_configs/ and
model_configs/hub/, each file with its `_source`), a local folder holding config.json, the local
Hugging Face cache, and, where the network allows, the Hub (config.json only, through huggingface_hub).

`resolve(model_id)` never raises: it returns where the config came from, or None and the places it
looked, so a caller can say what it could not compute instead of stopping.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from vramfit.paths import PACKAGE_ROOT

TABLE_DIRS = (PACKAGE_ROOT / "model_configs", PACKAGE_ROOT / "model_configs" / "hub")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass
class Resolved:
    path: Path | None  # a config.json (or a table file in its format)
    how: str  # "vramfit's table (model_configs/x.json)", "local folder", "Hugging Face cache", "Hugging Face Hub"
    looked: list[str] = field(default_factory=list)  # where it looked, for the message when nothing was found


def table_files() -> list[Path]:
    return [p for d in TABLE_DIRS for p in sorted(d.glob("*.json"))]


def table_names() -> dict[str, Path]:
    """Every model name a table file stands for (from its `_model`), lowercased -> file."""
    out: dict[str, Path] = {}
    for path in table_files():
        try:
            described = str(json.loads(path.read_text()).get("_model", ""))
        except (OSError, json.JSONDecodeError):
            continue
        for word in re.findall(r"[A-Za-z0-9][\w.\-]*(?:/[\w.\-]+)?", described):
            if re.search(r"\d", word) and len(word) >= 5:
                out.setdefault(word.rsplit("/", 1)[-1].lower(), path)
    return out


def in_table(model_id: str) -> Path | None:
    """The table file for a model id or local path: same name, or that name plus a suffix (-Instruct, -hf)."""
    name = model_id.rstrip("/").rsplit("/", 1)[-1].lower()
    matches = [(len(c), p) for c, p in table_names().items() if name == c or (name.startswith(c) and name[len(c)] in "-_.")]
    return max(matches, key=lambda m: m[0])[1] if matches else None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or os.environ.get("VRAMFIT_OFFLINE", "") == "1"


def resolve(model_id: str | None, beside: Path | None = None) -> Resolved:
    looked: list[str] = []
    if not model_id:
        return Resolved(None, "", ["the files name no model"])
    model_id = str(model_id)
    found = in_table(model_id)
    looked.append("vramfit's table (model_configs/, model_configs/hub/)")
    if found is not None:
        return Resolved(found, f"vramfit's table ({found.relative_to(PACKAGE_ROOT).as_posix()})", looked)
    folder = Path(os.path.expanduser(model_id))
    for candidate in [folder] + ([beside / folder] if beside is not None and not folder.is_absolute() else []):
        if (candidate / "config.json").is_file():
            return Resolved(candidate / "config.json", f"local folder {candidate}", looked)
    looked.append("a local folder of that name")
    if not HUB_ID.match(model_id):
        return Resolved(None, "", looked)
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
        return Resolved(None, "", looked)
    try:
        from huggingface_hub import hf_hub_download

        os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
        os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
        path = hf_hub_download(model_id, "config.json")
        return Resolved(Path(path), "Hugging Face Hub (config.json only)", looked + ["the Hub"])
    except Exception as exc:  # no network, a gated or missing repository: said, not raised
        looked.append(f"the Hub ({exc.__class__.__name__})")
        return Resolved(None, "", looked)
