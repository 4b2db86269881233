"""The `device_map_gpus` knob (device_map.py): one process spreads the model's layers over N GPUs with accelerate's
balanced device map; the plan is the busiest GPU of the split, its own layers' states and activations, and the logits
where the lm_head is."""

from __future__ import annotations

import importlib
import json

import pytest

from vramfit.planner import device_map, params
from vramfit.planner.setup import Setup

plan = importlib.import_module("vramfit.planner.plan")

LAYERS = 16
TINY = {  # a small Llama whose layers outweigh its embeddings, with its own lm_head and logits that set its GPU's peak
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "vocab_size": 8192,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
FULL = ("method=full", "per_device_train_batch_size=4", "max_length=2048", "gradient_checkpointing=true")


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("device_map") / "tiny-llama.json"
    path.write_text(json.dumps(TINY))
    return path


def planned(config, *items):
    return plan.plan(Setup.from_args(config, "h100", 1, 1, None, [*FULL, *items]))


def test_the_balanced_split_places_whole_layers_with_the_first_gpu_lighter_and_the_head_last(config):
    s = Setup.from_args(config, "h100", 1, 1, None, [*FULL, "device_map_gpus=4"])
    arch = params.summary(s.model_config)
    gpus = device_map.split(s, arch, params.count(arch, s))
    assert [g.index for g in gpus] == [0, 1, 2, 3] and sum(g.layers for g in gpus) == LAYERS
    assert gpus[0].embed and not any(g.embed for g in gpus[1:])
    assert gpus[-1].head and not any(g.head for g in gpus[:-1])  # untied: the lm_head comes last
    assert gpus[0].layers < gpus[1].layers  # the first GPU keeps room for the largest layer (accelerate's main device)
    assert all(2 <= g.layers <= LAYERS // 4 + 2 for g in gpus)
    assert sum(g.weight_share for g in gpus) == pytest.approx(1.0)


def test_a_four_gpu_device_map_plan_holds_a_quarter_of_the_states_and_the_logits_where_the_head_is(config):
    whole, split = planned(config), planned(config, "device_map_gpus=4")
    assert split.setup.device_map_gpu is not None and whole.setup.device_map_gpu is None
    gpu = split.setup.device_map_gpu
    for term in ("weights", "gradients", "optimizer_states"):
        share = split.phase_breakdowns["optimizer_step"][term] / whole.phase_breakdowns["optimizer_step"][term]
        assert 0.15 < share < 0.40, (term, share)  # about a quarter of the layers' states per GPU
    assert split.per_gpu_peak_gib < whole.per_gpu_peak_gib
    # the busiest GPU is named: here the lm_head's, which alone holds the logits and loss
    assert gpu.head and any(f"planned is the busiest, GPU {gpu.index} of 4" in n for n in split.notes)
    assert split.phase_breakdowns["train"]["logits"] == pytest.approx(whole.phase_breakdowns["train"]["logits"])
    s = split.setup
    arch = params.summary(s.model_config)
    first = device_map.split(s, arch, params.count(arch, s))[0]
    at_first = plan.plan(s.replace(device_map_gpus=1, device_map_gpu=first))  # the first GPU: no lm_head, no logits
    assert "logits" not in at_first.phase_breakdowns["train"]
    assert at_first.per_gpu_peak_gib < split.per_gpu_peak_gib  # the plan is the busiest GPU's


def test_device_map_gpus_is_a_gpu_count(config):
    from vramfit.problems import ConfigError

    with pytest.raises(ConfigError, match="device_map_gpus"):
        Setup.from_args(config, "h100", 1, 1, None, [*FULL, "device_map_gpus=0"])
    # accelerate refuses a model dispatched over several GPUs under FSDP / DeepSpeed
    with pytest.raises(ConfigError, match="cannot be sharded by FSDP"):
        Setup.from_args(config, "h100", 1, 1, None, [*FULL, "device_map_gpus=2", "fsdp=full_shard auto_wrap"])


@pytest.mark.parametrize("tied, vocab, gpus", [(False, 8192, 4), (True, 8192, 4), (False, 32000, 4), (True, 8192, 2)])
def test_the_split_is_accelerates_own_device_map(tmp_path, tied, vocab, gpus):
    # the oracle: accelerate's get_balanced_memory + infer_auto_device_map over the model built on the meta device, as
    # transformers' from_pretrained(device_map="auto") calls them (no GPU needed: max_memory given)
    import collections

    import torch
    import transformers
    from accelerate import init_empty_weights
    from accelerate.utils import get_balanced_memory, infer_auto_device_map

    values = {**TINY, "tie_word_embeddings": tied, "vocab_size": vocab}
    with init_empty_weights():
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**values)).to(torch.bfloat16)
    memory = {i: 80 * 2**30 for i in range(gpus)}
    kwargs = {"no_split_module_classes": model._no_split_modules, "dtype": torch.bfloat16}
    placed = infer_auto_device_map(model, max_memory=get_balanced_memory(model, max_memory=memory, **kwargs), **kwargs)
    layers = collections.Counter(device for name, device in placed.items() if ".layers." in name)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values))
    s = Setup.from_args(path, "h100", 1, 1, None, [*FULL, f"device_map_gpus={gpus}"])
    arch = params.summary(s.model_config)
    split = device_map.split(s, arch, params.count(arch, s))
    assert [g.layers for g in split] == [layers.get(i, 0) for i in range(gpus)]
    assert [g.index for g in split if g.embed] == [placed["model.embed_tokens"]]
    assert [g.index for g in split if g.head] == [placed["lm_head"]]


@pytest.mark.parametrize(
    "policy, cap_gib, gpus", [("balanced", 0.035, 4), ("balanced", 0.045, 3), ("sequential", 0.04, 4), ("sequential", 0.06, 3), ("sequential", None, 4)]
)
def test_a_max_memory_cap_and_the_sequential_map_follow_accelerate(tmp_path, policy, cap_gib, gpus):
    # the oracle as transformers' _get_device_map calls it: "sequential" takes get_max_memory (the caps, else the card's
    # memory), the others get_balanced_memory (min(balanced share, cap) on every GPU but the last)
    import collections

    import torch
    import transformers
    from accelerate import init_empty_weights
    from accelerate.utils import get_balanced_memory, infer_auto_device_map

    from vramfit.hardware import CATALOGUE

    with init_empty_weights():
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)).to(torch.bfloat16)
    cap = int(cap_gib * 2**30) if cap_gib else int(CATALOGUE["h100"].memory_gib * 2**30)
    memory = {i: cap for i in range(gpus)}
    kwargs = {"no_split_module_classes": model._no_split_modules, "dtype": torch.bfloat16}
    caps = dict(memory) if policy == "sequential" else get_balanced_memory(model, max_memory=dict(memory), **kwargs)
    placed = infer_auto_device_map(model, max_memory=caps, **kwargs)
    assert set(placed.values()) <= set(range(gpus))  # nothing offloaded: the planner places what is left on the last GPU
    if "" in placed:  # the whole model on one GPU (the sequential map of a model that fits GPU 0)
        placed = {"lm_head": placed[""], **{f"model.layers.{i}": placed[""] for i in range(LAYERS)}}
    layers = collections.Counter(device for name, device in placed.items() if ".layers." in name)
    items = [f"device_map_gpus={gpus}", f"device_map_policy={policy}"] + ([f"device_map_max_memory_gib={cap_gib}"] if cap_gib else [])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    s = Setup.from_args(path, "h100", 1, 1, None, [*FULL, *items])
    arch = params.summary(s.model_config)
    split = device_map.split(s, arch, params.count(arch, s))
    assert [g.layers for g in split] == [layers.get(i, 0) for i in range(gpus)]
    assert [g.index for g in split if g.head] == [placed["lm_head"]]
