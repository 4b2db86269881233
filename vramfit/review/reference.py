"""The closest tested recipe, and how the reviewed setup differs from it, with the recipe's reasons.

A recipe's reasons are the `# ...` comments on its keys' lines (or the comment lines right above a
key), read by a small line reader keyed by YAML key path.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from vramfit import recipe as recipe_mod
from vramfit.paths import all_recipe_files, find_recipe
from vramfit.problems import ConfigError, Problems, did_you_mean
from vramfit.review.findings import Finding
from vramfit.review.mapping import Mapped, as_written

# Keys that name where results go or how they are logged: not a difference worth a reviewer's line.
BOOKKEEPING = {"logging_steps", "report_to", "seed", "output_dir", "logging_dir", "run_name", "save_total_limit"}
_KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][\w.-]*)\s*:(.*)$")


def key_comments(path: Path) -> dict[str, str]:
    """{dotted key path: its comment} for a recipe.yaml."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    above: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = _KEY_LINE.match(line)
        if not match:
            above = []
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        comment = _trailing_comment(rest) or " ".join(a for a in above if a and not set(a) <= {"=", "-"})
        if comment:
            out[dotted] = comment
        above = []
        stack.append((indent, key))
    return out


def _trailing_comment(rest: str) -> str:
    quote = None
    for i, c in enumerate(rest):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or rest[i - 1] in " \t"):
            return rest[i + 1 :].strip()
    return ""


def _recipes() -> list[recipe_mod.Recipe]:
    out = []
    for path in all_recipe_files():
        try:
            out.append(recipe_mod.load(path))
        except ConfigError:
            continue  # `vramfit validate` reports a broken recipe; a review compares with the sound ones
    return out


def closest(recipe: dict[str, Any], against: str | None, gpu: str | None, model_known: bool = True) -> tuple[recipe_mod.Recipe | None, str]:
    """(recipe, why it was chosen): `--against NAME`, else the best match on model, method and hardware."""
    if against:
        path = find_recipe(against)
        if not path.is_file():
            names = [p.parent.name for p in all_recipe_files()]
            problems = Problems()
            problems.add("--against", against, f"no such recipe.{did_you_mean(against, names)}", f"use one of: {', '.join(names)}.")
            raise ConfigError(problems)
        return recipe_mod.load(path), "named with --against"
    config = Path(recipe["model"]["config"]).resolve()
    hardware = recipe.get("hardware", {})
    best, best_score, best_why = None, -1.0, ""
    for candidate in _recipes():
        why = []
        score = 0.0
        if not model_known:
            pass  # the model's config was not found: only method and hardware compare
        elif candidate.path(candidate.model.config) == config:
            score, why = score + 4, why + ["same model"]
        elif candidate.model.architecture == recipe["model"]["architecture"]:
            score, why = score + 2, why + ["same architecture"]
        if candidate.method == recipe["method"]:
            score, why = score + 2, why + ["same method"]
        elif {candidate.method, recipe["method"]} <= {"lora", "qlora"}:
            score, why = score + 1, why + ["LoRA"]
        if gpu and candidate.hardware.gpu == gpu:
            score, why = score + 1, why + ["same GPU"]
        if hardware.get("gpus_per_node") == candidate.hardware.gpus_per_node and hardware.get("nodes", 1) == candidate.hardware.nodes:
            score, why = score + 0.5, why + ["same GPU count"]
        if score > best_score:
            best, best_score, best_why = candidate, score, ", ".join(why) or "nothing in common; the first recipe"
    return best, best_why


def comparable(why: str) -> bool:
    """Whether a recipe's settings are worth comparing with the reviewed ones, judged by `closest`'s reasons: one
    named with --against, or one of the same model or architecture. Another model's length, batch or checkpointing
    were chosen for that model; a difference from them is no advice."""
    return why == "named with --against" or "same model" in why or "same architecture" in why


def zero_label(document: dict[str, Any]) -> str:
    zero = document.get("zero_optimization") or {}
    offload = [part for part in ("optimizer", "param") if (zero.get(f"offload_{part}") or {}).get("device", "none") not in (None, "none")]
    stage = zero.get("stage", 0)
    return (f"ZeRO-{stage}" if stage else "no ZeRO") + (f" + offload {'/'.join(offload)}" if offload else "")


def _zero_fix(mapped: Mapped, origin, path: str, document: dict[str, Any]) -> str:
    """The edit to the recipe's ZeRO setup: a stage flag takes the stage (DeepSpeed-Chat's, OpenRLHF's --zero_stage N),
    a JSON flag the recipe's JSON."""
    if origin.key.lstrip("-") in ("zero_stage", "ds.zero_stage", "deepspeed_stage"):
        return f"{origin.key} {(document.get('zero_optimization') or {}).get('stage', 0)} (as {path} does)"
    return f"use {mapped.edit('deepspeed', path)} (vramfit's preset, in this repository)"


def _defaults(method: str) -> dict[str, Any]:
    from vramfit.checks.training_args import config_class

    out = {}
    for f in dataclasses.fields(config_class(method)):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _same(a: Any, b: Any) -> bool:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return abs(float(a) - float(b)) <= 1e-12 * max(abs(float(a)), abs(float(b)), 1) if numbers else a == b


def _get(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def differences(mapped: Mapped, ours: recipe_mod.Recipe, ref: recipe_mod.Recipe, deepspeed: dict, ref_deepspeed: dict) -> list[Finding]:
    """One info finding per setting where the reviewed setup and the recipe differ, with the recipe's reason."""
    comments = key_comments(ref.source)
    mine, theirs = ours.resolved_dict(), ref.resolved_dict()
    if mapped.length_cap:  # planned at the data's longest sample (review/lengths.py); the files set the cap
        mine.setdefault("data", {})["max_length"] = mapped.length_cap
    defaults = _defaults(ours.method)
    keys = ["method", "hardware.gpu", "hardware.gpus_per_node", "hardware.nodes", "global_batch_size"]
    keys += [
        k
        for k in (
            "hardware.host_ram_gib",
            "data.max_length",
            "data.max_pixels",
            "data.max_slice_nums",
            "model.lora.r",
            "model.lora.alpha",
            "model.lora.target_modules",
            "model.attn_implementation",
            "model.train.llm",
            "model.train.projector",
            "model.train.vision_tower",
        )
        if k in mapped.origins or k.removeprefix("hardware.") in mapped.stated
    ]  # what the files (or flags) set, not what was assumed
    keys += [f"training.{k}" for k in ref.training if k not in BOOKKEEPING]
    findings = []
    # a program with its own argument parser and no TrainingArguments (OpenRLHF's openrlhf.cli.*): a Trainer setting
    # its files do not write has no value "here", and its flag would not exist there
    own_parser = (mapped.primary.program or "").removeprefix("-m ").replace("/", ".").startswith("openrlhf.")
    for key in keys:
        a, b = _get(mine, key), _get(theirs, key)
        if own_parser and key.startswith("training.") and key not in mapped.origins:
            continue
        if key.startswith("training.") and a is None:
            a = defaults.get(key.split(".", 1)[1])
        if a is None and b is None or _same(a, b):
            continue
        origin = mapped.origin("training.per_device_train_batch_size" if key == "global_batch_size" else key)
        shown = [as_written(origin.key, key, v) for v in (a, b)]  # a freeze switch shows its own value: freeze_vit false trains the ViT
        why = comments.get(key, "")
        what = (
            ("global batch " if key == "global_batch_size" else "")
            + f"{_show(shown[0])} here, {_show(shown[1])} in recipe {ref.name}"
            + (f": {why}" if why else "")
        )
        findings.append(Finding("info", origin.file, origin.key, what, _fix(mapped, key, b, ref), "recipe-diff", origin.line))
    ds_a, ds_b = zero_label(deepspeed), zero_label(ref_deepspeed)
    if ds_a != ds_b:
        origin = mapped.origin("deepspeed")
        why = comments.get("deepspeed", "")
        findings.append(
            Finding(
                "info",
                origin.file,
                origin.key,
                f"{ds_a} here, {ds_b} in recipe {ref.name} ({ref.deepspeed})" + (f": {why}" if why else ""),
                _zero_fix(mapped, origin, ref.deepspeed, ref_deepspeed),
                "recipe-diff",
                origin.line,
            )
        )
    return findings


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)


def _fix(mapped: Mapped, key: str, value: Any, ref: recipe_mod.Recipe) -> str:
    if key.startswith("hardware.") or key == "method":
        return ""
    if key == "global_batch_size":
        t = ref.training
        return (
            f"keep {value} sequences per optimizer step: {mapped.edit('training.per_device_train_batch_size', t.get('per_device_train_batch_size'))}, "
            f"{mapped.edit('training.gradient_accumulation_steps', t.get('gradient_accumulation_steps'))} on {ref.world_size} GPUs as the recipe does"
        )
    return "" if value is None else mapped.edit(key, value)
