"""verl (volcengine/verl) launches: `python3 -m verl.trainer.main_ppo key=value ...`, Hydra overrides over
verl/trainer/config/ppo_trainer.yaml, read as the run verl makes of them.

Every fact below is read from verl at b178a3cd (2026-01-29), cited as file:line:
- the keys and their defaults: verl/trainer/config/_generated_ppo_trainer.yaml (scripts/print_cfg.py's flattening of
  ppo_trainer.yaml and its sub-configs), shipped verbatim beside this module as verl_ppo_trainer.yaml; main_ppo.py:35
  `@hydra.main(config_path="config", config_name="ppo_trainer")`. Hydra's struct mode refuses an override of a key the
  config lacks unless it is written `+key=value`;
- the actor's dtype: fsdp_workers.py:324-326 `torch_dtype = fsdp_config.get("model_dtype", None)`, fp32 for the actor
  (config default `model_dtype: fp32`), FSDP MixedPrecision(param_dtype=fsdp_config.dtype (bf16), reduce_dtype=fp32,
  buffer_dtype=fp32) at fsdp_workers.py:495-503: fp32 master weights and AdamW states, bf16 compute (the planner's
  dtype float32 with bf16);
- the sharding: fsdp_workers.py:520-560: FSDP1 (`strategy: fsdp`, sharding FULL_SHARD unless
  `reshard_after_forward: false`) or FSDP2 `fully_shard` (`strategy: fsdp2`); the reference policy is always given
  CPUOffload(offload_params=True) (fsdp_workers.py:524-526 "We force reference policy to use CPUOffload"): its weights
  live in host RAM, gathered a unit at a time;
- the batch: fsdp_workers.py:240-262: ppo_mini_batch_size *= rollout.n, then //= (world / ulysses size), asserted > 0;
  a global ppo_micro_batch_size //= (world / ulysses size) into ppo_micro_batch_size_per_gpu; the mini-batch must be a
  multiple of the micro-batch (both asserted: the run stops at init);
- no accumulation of unsharded gradients: dp_actor.py update_policy calls loss.backward() for each micro-batch with no
  no_sync context, so FSDP reduce-scatters every micro-batch (the plan's gradient_accumulation_steps stays 1);
- dynamic batches: dp_actor.py:552-553 `max_token_len = ppo_max_token_len_per_gpu * ulysses_sequence_parallel_size`,
  prepare_dynamic_batch packs each micro-batch up to that many tokens;
- the loss: dp_actor.py:258-277: with use_remove_padding the model's whole logits over every token of the micro-batch
  (`logits_rmpad = output.logits.squeeze(0)  # (total_nnz, vocab_size)`), log-probs by logprobs_from_logits, the entropy
  (when entropy_coeff != 0 or calculate_entropy: dp_actor.py:573) from the same logits; no fused head unless
  model.use_fused_kernels;
- the phases: fsdp_workers.py:677-750 rollout_mode: the actor's weights are loaded to the GPU (param_offload), synced
  into the rollout engine and offloaded again, then the engine resumes its weights and KV cache (free_cache_engine);
  vllm_async_server.py:563-571 `sleep`: in the hybrid engine `sleep(level=2)` when free_cache_engine (default true): the
  engine's share is held only while generating. update_actor (fsdp_workers.py:893-932) loads the offloaded weights and
  optimizer states back to the GPU for the update and offloads them after it: param_offload / optimizer_offload free
  the GPU during generation, not during the update;
- the rollout engine's share: vLLM's gpu_memory_utilization (vllm_async_server.py:279), SGLang's mem_fraction_static
  (async_sglang_server.py:260), both from rollout.gpu_memory_utilization;
- the critic: main_ppo.py:172 / ppo/utils.py:86-97 need_critic: critic.enable, else algorithm.adv_estimator == gae;
  main_ppo.py:196-197 puts Role.Critic on "global_pool" with the actor, and ray_trainer.py init_workers fuses the
  colocated roles into one process per GPU (create_colocated_worker_cls); fsdp_workers.py CriticWorker builds
  critic.model.path as AutoModelForTokenClassification with num_labels = 1, FSDP with the actor's precision rules
  (model_dtype fp32), CPUOffload off ("causes incorrect results when using grad accumulation"), and loads / offloads
  its weights and optimizer states around update_critic / compute_values when critic.model.fsdp_config.param_offload /
  optimizer_offload; dp_critic.py update_critic ends with zero_grad(): no gradients between updates (mapping._verl_critic);
  the reference: ppo/utils.py:72-76 need_reference_policy: algorithm.use_kl_in_reward or actor.use_kl_loss.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vramfit.problems import Problems

COMMIT = "verl b178a3cd"
ENTRY_MODULES = ("verl.trainer.main_ppo",)
DEFAULTS_FILE = Path(__file__).with_name("verl_ppo_trainer.yaml")
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"
REF = "actor_rollout_ref.ref"
STRATEGIES = ("fsdp", "fsdp2", "megatron")
ROLLOUTS = ("vllm", "sglang", "hf", "trtllm")
# verl.utils.torch_dtypes.PrecisionType names -> the planner's dtype
DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16"}
# The keys read into the plan (verl's names); every other key of the config is read, not reviewed.
PLANNED = frozenset(
    {
        f"{MODEL}.path",
        f"{MODEL}.enable_gradient_checkpointing",
        f"{MODEL}.use_remove_padding",
        f"{MODEL}.lora_rank",
        f"{MODEL}.lora_alpha",
        f"{MODEL}.target_modules",
        f"{MODEL}.use_fused_kernels",
        f"{MODEL}.override_config.attn_implementation",
        f"{MODEL}.enable_activation_offload",
        f"{MODEL}.use_liger",
        f"{ACTOR}.strategy",
        f"{ACTOR}.ppo_mini_batch_size",
        f"{ACTOR}.ppo_micro_batch_size",
        f"{ACTOR}.ppo_micro_batch_size_per_gpu",
        f"{ACTOR}.use_dynamic_bsz",
        f"{ACTOR}.ppo_max_token_len_per_gpu",
        f"{ACTOR}.ulysses_sequence_parallel_size",
        f"{ACTOR}.fsdp_config.param_offload",
        f"{ACTOR}.fsdp_config.optimizer_offload",
        f"{ACTOR}.fsdp_config.offload_policy",
        f"{ACTOR}.fsdp_config.reshard_after_forward",
        f"{ACTOR}.fsdp_config.model_dtype",
        f"{ACTOR}.fsdp_config.dtype",
        f"{ACTOR}.use_kl_loss",
        f"{ACTOR}.entropy_coeff",
        f"{ROLLOUT}.name",
        f"{ROLLOUT}.gpu_memory_utilization",
        f"{ROLLOUT}.free_cache_engine",
        f"{ROLLOUT}.n",
        f"{ROLLOUT}.tensor_model_parallel_size",
        f"{REF}.fsdp_config.param_offload",
        "data.max_prompt_length",
        "data.max_response_length",
        "data.train_batch_size",
        "algorithm.adv_estimator",
        "algorithm.use_kl_in_reward",
        "critic.enable",
        "critic.model.path",
        "critic.ppo_micro_batch_size",
        "critic.ppo_micro_batch_size_per_gpu",
        "critic.use_dynamic_bsz",
        "critic.ppo_max_token_len_per_gpu",
        "critic.ulysses_sequence_parallel_size",
        "critic.model.enable_gradient_checkpointing",
        "critic.model.fsdp_config.param_offload",
        "critic.model.fsdp_config.optimizer_offload",
        "trainer.n_gpus_per_node",
        "trainer.nnodes",
    }
)


def is_entry(program: str) -> bool:
    """The launched program is verl's PPO entry point (`-m verl.trainer.main_ppo`, or its file)."""
    words = program.split()
    module = words[1] if len(words) == 2 and words[0] == "-m" else None
    if module is not None:
        return module in ENTRY_MODULES
    return program.replace("\\", "/").endswith("verl/trainer/main_ppo.py")


@functools.lru_cache(maxsize=None)
def _defaults() -> dict:
    return yaml.safe_load(DEFAULTS_FILE.read_text())


def defaults() -> dict:
    """ppo_trainer.yaml as verl composes it (a fresh copy)."""
    return copy.deepcopy(_defaults())


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(node, dict) and node:
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    else:
        out[prefix] = node
    return out


@functools.lru_cache(maxsize=None)
def known_keys() -> frozenset[str]:
    """Every dotted key of the composed config, its sections included."""
    flat = _flatten(_defaults())
    keys = set(flat)
    for key in flat:
        parts = key.split(".")
        keys.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(keys)


@functools.lru_cache(maxsize=None)
def open_sections() -> frozenset[str]:
    """Sections whose default is an empty mapping (engine_kwargs.vllm, override_config, ...): any key below them is taken."""
    return frozenset(k for k, v in _flatten(_defaults()).items() if v == {})


def is_known(key: str) -> bool:
    if key in known_keys():
        return True
    return any(key.startswith(section + ".") for section in open_sections())


@dataclass
class Override:
    key: str  # dotted, without the +/++/~ prefix
    value: Any  # parsed as Hydra parses an override's value (YAML scalars, [lists], {maps})
    op: str  # "" (override), "+" (append), "++" (force), "~" (delete)
    word: str  # as written


HYDRA_FLAGS = ("--config-path", "--config-name", "--config-dir", "-cp", "-cn", "-cd")
OVERRIDE = re.compile(r"(?P<op>\+\+|\+|~)?(?P<key>[A-Za-z_][\w\-]*(?:\.[A-Za-z_0-9][\w\-]*)*)(?:=(?P<value>.*))?", re.S)


def parse_value(text: str) -> Any:
    """An override's value as Hydra's grammar reads it, for what launch scripts write: YAML scalars (true / 1e-6 / null),
    quoted strings, [lists] and {maps}; anything YAML cannot read stays the string it is."""
    if text == "":
        return ""
    if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text) and not re.fullmatch(r"[-+]?\d+", text):
        return float(text)  # Hydra's grammar reads 1e-6 as a float; YAML 1.1 (PyYAML) would keep it a string
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if not isinstance(value, (dict, list)) or text.lstrip()[:1] in "[{" else text


def parse(words: list[str]) -> tuple[list[Override], dict[str, str], list[str]]:
    """(overrides, Hydra's own flags, words that are neither) of a main_ppo command line."""
    overrides: list[Override] = []
    flags: dict[str, str] = {}
    stray: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if name in HYDRA_FLAGS:
            if eq:
                flags[name], i = value, i + 1
            else:
                flags[name], i = (words[i + 1] if i + 1 < len(words) else ""), i + 2
            continue
        found = OVERRIDE.fullmatch(word)
        if found and (found.group("value") is not None or found.group("op") == "~"):
            raw = found.group("value")
            overrides.append(Override(found.group("key"), parse_value(raw) if raw is not None else None, found.group("op") or "", word))
        else:
            stray.append(word)
        i += 1
    return overrides, flags, stray


def apply(config: dict, overrides: list[Override]) -> dict:
    for o in overrides:
        parts = o.key.split(".")
        node = config
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        if o.op == "~":
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = o.value
    return config


_INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?\s*(?P<key>[^,}]+?)\s*(?:,\s*(?P<default>[^}]*))?\}$")


def get(config: dict, key: str, _depth: int = 0) -> Any:
    """The value of a dotted key, its `${...}` / `${oc.select:KEY,DEFAULT}` interpolations resolved (relative
    `${.sibling}` included), None where the key is absent."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, str) and _depth < 8 and (m := _INTERPOLATION.match(node.strip())):
        target = m.group("key")
        if target.startswith("."):
            target = key.rsplit(".", 1)[0] + target if "." in key else target[1:]
        value = get(config, target, _depth + 1)
        if value is None and m.group("default") is not None:
            return parse_value(m.group("default").strip().strip('"'))
        return value
    return node


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check(config: dict, file: str, where: dict[str, str]) -> Problems:
    """What verl refuses before training (its config's dataclass checks and fsdp_workers' asserts): exit 2.
    `where`: the override that wrote each key (the word), for the message."""
    problems = Problems()

    def bad(key: str, what: str, fix: str) -> None:
        problems.add(file, key, what, fix)

    for key, default in (
        ("trainer.n_gpus_per_node", 8),
        ("trainer.nnodes", 1),
        (f"{ROLLOUT}.n", 1),
        ("data.max_prompt_length", 512),
        ("data.max_response_length", 512),
        ("data.train_batch_size", 1024),
        (f"{ACTOR}.ppo_mini_batch_size", 256),
        (f"{ACTOR}.ulysses_sequence_parallel_size", 1),
        (f"{ROLLOUT}.tensor_model_parallel_size", 2),
        (f"{ACTOR}.ppo_max_token_len_per_gpu", 16384),
    ):
        value = get(config, key)
        if not _positive_int(value):
            bad(key, f"must be a positive integer, got {value!r}", f"write {key}={default}.")
    for key in (f"{ACTOR}.ppo_micro_batch_size", f"{ACTOR}.ppo_micro_batch_size_per_gpu"):
        value = get(config, key)
        if value is not None and not _positive_int(value):
            bad(key, f"must be a positive integer or null, got {value!r}", f"write {key}=4 (or leave it unset with use_dynamic_bsz=True).")
    util = get(config, f"{ROLLOUT}.gpu_memory_utilization")
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
        bad(
            f"{ROLLOUT}.gpu_memory_utilization",
            f"must be a fraction of the GPU's memory in (0, 1], got {util!r}",
            f"write {ROLLOUT}.gpu_memory_utilization=0.5.",
        )
    rank = get(config, f"{MODEL}.lora_rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        bad(f"{MODEL}.lora_rank", f"must be 0 (no LoRA) or a positive integer, got {rank!r}", f"write {MODEL}.lora_rank=0 (or 32 for LoRA).")
    strategy = get(config, f"{ACTOR}.strategy")
    if strategy not in STRATEGIES:
        bad(f"{ACTOR}.strategy", f"{strategy!r} is not one of verl's actor strategies ({', '.join(STRATEGIES)})", f"write {ACTOR}.strategy=fsdp.")
    dtype = get(config, f"{ACTOR}.fsdp_config.model_dtype")
    if dtype is not None and str(dtype) not in DTYPES:
        bad(
            f"{ACTOR}.fsdp_config.model_dtype",
            f"{dtype!r} is not a dtype verl's PrecisionType reads ({', '.join(DTYPES)})",
            f"write {ACTOR}.fsdp_config.model_dtype=fp32.",
        )
    for key in ("trainer.n_gpus_per_node", "trainer.nnodes", f"{ACTOR}.ulysses_sequence_parallel_size", f"{ACTOR}.ppo_mini_batch_size", f"{ROLLOUT}.n"):
        if not _positive_int(get(config, key)):
            return problems  # the batch checks below need these
    world = get(config, "trainer.n_gpus_per_node") * get(config, "trainer.nnodes")
    sp = get(config, f"{ACTOR}.ulysses_sequence_parallel_size")
    if world % sp:
        bad(
            f"{ACTOR}.ulysses_sequence_parallel_size",
            f"{sp} does not divide the {world} GPUs (the device mesh is (world / sp, sp))",
            f"write {ACTOR}.ulysses_sequence_parallel_size={max(d for d in range(1, sp + 1) if world % d == 0)}.",
        )
        return problems
    dp = world // sp
    mini = get(config, f"{ACTOR}.ppo_mini_batch_size") * get(config, f"{ROLLOUT}.n") // dp
    if mini <= 0:  # fsdp_workers.py:241-246
        bad(
            f"{ACTOR}.ppo_mini_batch_size",
            f"{get(config, f'{ACTOR}.ppo_mini_batch_size')} prompts x rollout.n {get(config, f'{ROLLOUT}.n')} over {dp} data-parallel "
            "ranks is 0 per rank: verl asserts 'ppo_mini_batch_size ... should be larger than 0 after normalization' at init",
            f"write {ACTOR}.ppo_mini_batch_size={dp}.",
        )
        return problems
    micro = micro_per_gpu(config)
    if micro is not None and not get(config, f"{ACTOR}.use_dynamic_bsz") and micro > 0 and mini % micro:  # fsdp_workers.py:254-258
        bad(
            f"{ACTOR}.ppo_micro_batch_size_per_gpu",
            f"the mini-batch per rank ({get(config, f'{ACTOR}.ppo_mini_batch_size')} x n {get(config, f'{ROLLOUT}.n')} / {dp} ranks = "
            f"{mini}) is not a multiple of the micro-batch {micro}: verl asserts it at init",
            f"write {ACTOR}.ppo_micro_batch_size_per_gpu={max(d for d in range(1, micro + 1) if mini % d == 0)}.",
        )
    return problems


def micro_per_gpu(config: dict) -> int | None:
    """ppo_micro_batch_size_per_gpu as fsdp_workers normalises it (a global ppo_micro_batch_size // (world / sp))."""
    per_gpu = get(config, f"{ACTOR}.ppo_micro_batch_size_per_gpu")
    glob = get(config, f"{ACTOR}.ppo_micro_batch_size")
    if glob is not None and _positive_int(glob):
        world = (get(config, "trainer.n_gpus_per_node") or 1) * (get(config, "trainer.nnodes") or 1)
        sp = get(config, f"{ACTOR}.ulysses_sequence_parallel_size") or 1
        return glob // max(1, world // sp)
    return per_gpu if _positive_int(per_gpu) else None


def needs_critic(config: dict) -> bool:
    enable = get(config, "critic.enable")
    if enable is not None:
        return bool(enable)
    return str(get(config, "algorithm.adv_estimator")) == "gae"


def needs_reference(config: dict) -> bool:
    return bool(get(config, "algorithm.use_kl_in_reward")) or bool(get(config, f"{ACTOR}.use_kl_loss"))


def merge(config: dict, document: dict) -> dict:
    """A Hydra config's own values (its `_self_`) over the composed defaults, section by section."""
    for key, value in document.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            merge(config[key], value)
        else:
            config[key] = value
    return config


def is_config(document: dict) -> bool:
    """A Hydra config composed over verl's ppo_trainer (`defaults: [ppo_trainer, _self_]`)."""
    defaults_list = document.get("defaults")
    return isinstance(defaults_list, list) and any(d in ("ppo_trainer", "ppo_megatron_trainer") for d in defaults_list if isinstance(d, str))
