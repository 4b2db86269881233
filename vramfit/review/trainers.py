"""Which trainer a launch runs (SFT, DPO, GRPO, KTO, ORPO, reward, GKD, ...) and the pinned TRL's
argument class for it, with the defaults that class sets where TrainingArguments' differ.

The trainer is read from the script's entry point (TRL's examples/scripts/dpo.py, `swift rlhf
--rlhf_type dpo`, LLaMA-Factory's `stage: dpo`, axolotl's `rl: dpo`, DeepSpeed-Chat's step2_dpo) and
from flags only that trainer has (num_generations: GRPO). The class is the installed TRL's own
(trl.SFTConfig, or trl.experimental.orpo.ORPOConfig where 1.x moved it).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
import warnings
from typing import Any

# trainer -> (module, class)
CLASSES = {
    "sft": ("trl", "SFTConfig"),
    "dpo": ("trl", "DPOConfig"),
    "grpo": ("trl", "GRPOConfig"),
    "kto": ("trl", "KTOConfig"),
    "reward": ("trl", "RewardConfig"),
    "rloo": ("trl", "RLOOConfig"),
    "orpo": ("trl.experimental.orpo", "ORPOConfig"),
    "gkd": ("trl.experimental.gkd", "GKDConfig"),
    "cpo": ("trl.experimental.cpo", "CPOConfig"),
    "online_dpo": ("trl.experimental.online_dpo", "OnlineDPOConfig"),
}
# Words in an entry point's name -> trainer (longest first when matching).
ENTRY_WORDS = {
    "online_dpo": "online_dpo",
    "reward_model": "reward",
    "reward_modeling": "reward",
    "grpo": "grpo",
    "gspo": "grpo",
    "dpo": "dpo",
    "kto": "kto",
    "orpo": "orpo",
    "gkd": "gkd",
    "cpo": "cpo",
    "rloo": "rloo",
    "sft": "sft",
    "rm": "reward",  # OpenRLHF openrlhf/cli/train_rm.py
}
# LLaMA-Factory's stage, ms-swift's rlhf_type, axolotl's rl -> trainer
STAGES = {
    "sft": "sft",
    "pt": "sft",
    "dpo": "dpo",
    "kto": "kto",
    "rm": "reward",
    "orpo": "orpo",
    "simpo": "cpo",
    "cpo": "cpo",
    "grpo": "grpo",
    "gkd": "gkd",
    "ppo": "ppo",
    "ipo": "dpo",
}
# Trainers whose evaluation returns log-probs or scores, never a [batch, seq, vocab] logits tensor.
NO_EVAL_LOGITS = {"dpo", "kto", "orpo", "cpo", "reward", "grpo", "rloo", "online_dpo"}


def from_entry(program: str) -> str | None:
    """The trainer a script's name says: examples/scripts/dpo.py -> dpo; step2_dpo_finetuning/main.py -> dpo."""
    words = re.split(r"[^a-z0-9]+", program.lower().replace("reward_model", "reward_model_").replace("online_dpo", "online-dpo"))
    text = "_".join(words)
    if "online_dpo" in text:
        return "online_dpo"
    if "reward_model" in text or "reward_modeling" in text:
        return "reward"
    for word in ("grpo", "gspo", "dpo", "kto", "orpo", "gkd", "cpo", "rloo", "sft", "rm"):
        if word in words or any(w.startswith(word + "_") or w.endswith("_" + word) for w in words):
            return ENTRY_WORDS[word]
    return None


def from_classes(names: frozenset[str] | set[str]) -> str | None:
    """The trainer of the TRL config class a program parses its arguments into (`HfArgumentParser((ModelArguments,
    DataTrainingArguments, SFTConfig))` in PEFT's examples/sft/train.py -> sft)."""
    found = {trainer for trainer, (_, cls) in CLASSES.items() if cls in names}
    return found.pop() if len(found) == 1 else None


@functools.lru_cache(maxsize=None)
def config_class(trainer: str | None):
    """The installed TRL's argument class for the trainer, else TrainingArguments."""
    if trainer in CLASSES:
        module, name = CLASSES[trainer]
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            pass
    from transformers import TrainingArguments

    return TrainingArguments


@functools.lru_cache(maxsize=None)
def fields(trainer: str | None) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(config_class(trainer)) if f.init)


@functools.lru_cache(maxsize=None)
def trl_only(trainer: str | None) -> frozenset[str]:
    """Fields of the trainer's class that TrainingArguments does not have."""
    return frozenset(fields(trainer)) - frozenset(fields(None))


@functools.lru_cache(maxsize=None)
def changed_defaults(trainer: str | None) -> dict[str, Any]:
    """TrainingArguments fields whose default the trainer's class changes (SFTConfig: gradient_checkpointing True,
    bf16 on unless fp16). bf16 None means 'on unless fp16' in TRL, written True here."""
    if config_class(trainer).__module__.startswith("transformers"):
        return {}
    base = {f.name: f.default for f in dataclasses.fields(config_class(None))}
    out = {}
    for f in dataclasses.fields(config_class(trainer)):
        if f.name in base and f.default is not dataclasses.MISSING and f.default != base[f.name] and f.name in ("gradient_checkpointing", "bf16"):
            out[f.name] = True if f.name == "bf16" and f.default is None else f.default
    return out


# TrainingArguments defaults every TRL trainer config changed, and the TRL release that changed them (read in TRL's history:
# the commits that set them in trl/trainer/*_config.py, and the first tag that contains each).
DEFAULT_SINCE: dict[str, tuple[tuple[int, int], str]] = {
    "bf16": ((0, 19), "huggingface/trl#3515"),
    "gradient_checkpointing": ((0, 22), "huggingface/trl#3510"),
}


def _minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def before_default(name: str, pin) -> bool:
    """True where every TRL release the pin (vramfit.review.versions.Pin) allows predates TRL's change of `name`'s
    default: the run keeps TrainingArguments' default. A pin that allows releases on both sides decides nothing."""
    if name not in DEFAULT_SINCE or pin is None:
        return False
    since, version = DEFAULT_SINCE[name][0], _minor(pin.version)
    if version is None:
        return False
    if pin.op in ("==", "~=", "<="):  # ~=0.16.1 allows 0.16.x only; ~=0.16 allows 0.x from 0.16: both decide only below
        return version < since and (pin.op != "~=" or pin.version.count(".") >= 2)
    if pin.op == "<":
        return version <= since
    if pin.op in (">=", ">") and getattr(pin, "upper", None):
        upper = _minor(pin.upper[1])
        return upper is not None and (upper <= since if pin.upper[0] == "<" else upper < since)
    return False


def default(trainer: str | None, name: str) -> Any:
    for f in dataclasses.fields(config_class(trainer)):
        if f.name == name:
            return f.default if f.default is not dataclasses.MISSING else None
    return None
