"""The recipe planner fed by validation: the arguments and DeepSpeed JSON as the libraries resolved them.

`vramfit validate` builds the recipe's real TrainingArguments / GRPOConfig (their `__post_init__` rules
applied, on the recipe's world size) and fills the DeepSpeed JSON's "auto" values with transformers'
own `HfTrainerDeepSpeedConfig` (vramfit/checks). `Resolved` carries those results; the validate cache
keeps them beside its verdict, so a warm `vramfit plan` is fed the libraries' values without
importing transformers, TRL or DeepSpeed. The planner takes them from here instead of deriving the
library defaults and the "auto" buckets again:

- the argument values the planner reads (`ARGUMENT_KEYS`) come from the built dataclass: a default
  the recipe leaves out, a value TRL derives (GRPO `steps_per_generation` from `generation_batch_size`);
- the ZeRO block comes from the resolved JSON ("auto" buckets filled from the model's hidden size).

Precision flags are the recipe's own: validation builds the dataclass with bf16/fp16 off on a
CPU-only host (the libraries refuse them there) and fills the JSON as on the recipe's GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Argument names the planner reads (setup.py `_training_fields` and `Setup.from_recipe`, knobs.py's vLLM keys).
ARGUMENT_KEYS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "per_device_eval_batch_size",
    "optim",
    "eval_strategy",
    "do_eval",
    "prediction_loss_only",
    "eval_accumulation_steps",
    "use_liger_kernel",
    "dataloader_num_workers",
    "dataloader_prefetch_factor",
    "gradient_checkpointing",
    "activation_checkpointing",
    "num_generations",
    "max_completion_length",
    "steps_per_generation",
    "beta",
    "ds3_gather_for_generation",
    "use_vllm",
    "vllm_mode",
    "vllm_gpu_memory_utilization",
    "vllm_enable_sleep_mode",
)
# Values the library derives from others in __post_init__: re-derived (not carried over) when a fix
# overrides the batch (GRPOConfig: steps_per_generation = gradient_accumulation_steps, or
# generation_batch_size / (per_device_train_batch_size x processes)).
DERIVED_KEYS = ("steps_per_generation",)
# Two names of one argument (transformers 5 renamed gradient_checkpointing; both are accepted and kept equal):
# a fix that sets one sets both.
ALIASES = (("gradient_checkpointing", "activation_checkpointing"),)
# Built off on a CPU-only host by validation: the recipe's own flags are planned (knobs.precision_fields).
PRECISION_KEYS = ("bf16", "fp16", "tf32", "bf16_full_eval", "fp16_full_eval")


@dataclass(frozen=True)
class Resolved:
    """What validation resolved with the libraries' own code for one recipe: the argument dataclass as a
    JSON-safe dict (`TrainingArguments.to_dict()`), the DeepSpeed JSON with its "auto" values filled (None:
    no JSON), and what they were resolved from (the recipe's `deepspeed:` and `training:`)."""

    arguments: dict[str, Any]
    deepspeed: dict[str, Any] | None
    deepspeed_file: str | None = None
    source_training: dict[str, Any] | None = None

    def training(self, recipe) -> dict[str, Any]:
        """`recipe.training` with the planner's keys as the library resolved them.

        `recipe` is the validated recipe, or it with fix overrides on top: a key whose value differs from
        the training the arguments were resolved from is the recipe's, and a derived key whose inputs
        changed is left to the planner (libraries.grpo_steps_per_generation re-derives it as TRL does)."""
        t = dict(recipe.training)
        base = self.source_training
        changed = set() if base is None else {k for k in set(t) | set(base) if t.get(k) != base.get(k)}
        changed |= {name for pair in ALIASES if changed & set(pair) for name in pair}
        for key in ARGUMENT_KEYS:
            if key not in self.arguments or key in changed:
                continue
            if key in DERIVED_KEYS and changed and key not in t:
                if t.get("generation_batch_size"):  # set instead of steps_per_generation: TRL derives it from the batch
                    from vramfit.libraries import grpo_steps_per_generation

                    micro = t.get("per_device_train_batch_size", self.arguments.get("per_device_train_batch_size"))
                    accumulation = t.get("gradient_accumulation_steps", self.arguments.get("gradient_accumulation_steps"))
                    t[key] = grpo_steps_per_generation(accumulation, None, t["generation_batch_size"], micro * recipe.world_size)
                continue
            t[key] = self.arguments[key]
        return t


def arguments_dict(args) -> dict[str, Any]:
    """The built TrainingArguments / GRPOConfig as JSON-safe values (enums as their values), for the cache."""
    import json

    out = {}
    for key, value in args.to_dict().items():
        if key in PRECISION_KEYS:
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out


def setup(recipe, resolved: Resolved):
    """`Setup.from_recipe` on the values validation resolved (see the module docstring)."""
    from vramfit.planner import params
    from vramfit.planner.setup import Setup, Zero, _hidden_size

    fed = recipe.model_copy(update={"training": resolved.training(recipe)})
    result = Setup.from_recipe(fed)
    # A fix that names another JSON (`deepspeed=...`) is planned from that file as setup.py reads it.
    same_json = resolved.deepspeed_file in (None, recipe.deepspeed)
    if resolved.deepspeed is not None and same_json and result.engine == "deepspeed":
        result = result.replace(zero=Zero.from_json(resolved.deepspeed, _hidden_size(params.read_config(result.model_config))))
    return result
