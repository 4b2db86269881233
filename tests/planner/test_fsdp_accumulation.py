"""FSDP gradient accumulation (states.py `fsdp_accumulated_gradients`) and LoRA adapters that share
their layer's FSDP unit with the frozen weights (`fsdp_unit_frozen`, `fsdp_lora_units=layer`).

Under `no_sync()` (every micro-batch of an accumulation window but the last) FSDP keeps each
gradient unsharded; in a unit that flattens frozen and trainable parameters together
(FSDP1, use_orig_params=True) autograd computes the frozen weights' gradients too. litgpt's
multi-GPU LoRA table (Lightning Fabric, FSDP per Block, 32-128 micro-batches per step) is both."""

from __future__ import annotations

import importlib
import json
import warnings

import pytest

from vramfit.planner import knobs, params, states
from vramfit.planner.setup import Setup
from vramfit.problems import ConfigError, Problems

from planner_support import REPO

plan = importlib.import_module("vramfit.planner.plan")

LLAMA = REPO / "model_configs" / "llama-3.2-3b.json"
GIB = 2**30


def setup(*items, gpus=2) -> Setup:
    return Setup.from_args(LLAMA, "a100-80g", gpus, 1, None, list(items))


def resolved(s: Setup):
    arch = params.summary(s.model_config)
    return arch, params.count(arch, plan.lora_targets(s, arch))


FULL = ("fsdp=full_shard auto_wrap", "dtype=bfloat16", "method=full")
LORA = ("fsdp=full_shard auto_wrap", "dtype=bfloat16", "method=lora", "lora_target_modules=q_proj,v_proj", "lora_r=8")


def test_accumulation_under_no_sync_holds_every_trained_gradient_unsharded():
    """bf16 full fine-tuning on 8 GPUs: the train phase of a window's micro-batches holds 2 B x every trained
    parameter (the shards are 1/8 of it); the optimizer step sees the shards; one micro-batch per step, or
    accelerate's sync_each_batch, reduce-scatters after every backward."""
    acc = setup(*FULL, "gradient_accumulation_steps=4", gpus=8)
    arch, c = resolved(acc)
    st = states.gpu_states(acc, c, arch)
    assert st.accumulated == pytest.approx(c.trainable * 2)
    assert st.gradients == pytest.approx(c.trainable * 2 / 8)
    p = plan.plan(acc)
    assert p.phase_breakdowns["train"]["gradients"] == pytest.approx(c.trainable * 2 / GIB)
    assert p.phase_breakdowns["optimizer_step"]["gradients"] == pytest.approx(c.trainable * 2 / 8 / GIB)

    for other in (setup(*FULL, "gradient_accumulation_steps=1", gpus=8), setup(*FULL, "gradient_accumulation_steps=4", "sync_each_batch=true", gpus=8)):
        o = plan.plan(other)
        assert states.gpu_states(other, c, arch).accumulated == 0.0
        assert o.phase_breakdowns["train"]["gradients"] == pytest.approx(c.trainable * 2 / 8 / GIB)
        assert o.phase_breakdowns["train"]["weights"] == p.phase_breakdowns["train"]["weights"]


def test_accumulated_gradients_stay_on_the_gpu_with_cpu_offload():
    """torch's no_sync docstring: with CPU offloading the gradients are not offloaded inside the context."""
    s = setup("fsdp=full_shard auto_wrap offload", "dtype=bfloat16", "method=full", "gradient_accumulation_steps=2")
    arch, c = resolved(s)
    st = states.gpu_states(s, c, arch)
    assert st.gradients == 0.0 and st.accumulated == pytest.approx(c.trainable * 2)


def test_sync_each_batch_is_read_as_transformers_spells_it():
    """TrainingArguments(accelerator_config={"gradient_accumulation_kwargs": {"sync_each_batch": True}}) (a recipe's
    `training:`), or the accelerate field on its own."""
    fsdp = {"engine": "fsdp", "fsdp_version": 1}
    spelt = {"accelerator_config": {"gradient_accumulation_kwargs": {"sync_each_batch": True}}}
    assert knobs.fsdp_accumulation_fields(spelt, fsdp, {}, Problems(), "f")["fsdp_sync_each_batch"] is True
    assert knobs.fsdp_accumulation_fields({"sync_each_batch": "true"}, fsdp, {}, Problems(), "f")["fsdp_sync_each_batch"] is True
    assert knobs.fsdp_accumulation_fields({}, fsdp, {}, Problems(), "f") == {"fsdp_lora_units": "separate", "fsdp_sync_each_batch": False}


def test_lora_in_its_layer_unit_gives_every_layer_weight_a_gradient():
    """fsdp_lora_units=layer: the unit's whole FlatParameter gets a gradient - every decoder-layer parameter (counted
    here on the model transformers builds, meta device) besides the adapters; whole under no_sync, sharded
    otherwise. The default (PEFT's own wrap policy, as transformers' Trainer applies it) keeps the adapters'."""
    import torch
    import transformers

    raw = {k: v for k, v in json.loads(LLAMA.read_text()).items() if not k.startswith("_")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**raw))
    in_layers = sum(p.numel() for n, p in model.named_parameters() if ".layers." in n)

    shared = setup(*LORA, "gradient_accumulation_steps=8", "fsdp_lora_units=layer")
    separate = setup(*LORA, "gradient_accumulation_steps=8")
    arch, c = resolved(shared)
    assert states.fsdp_unit_frozen(shared, c, arch) == in_layers
    assert states.fsdp_unit_frozen(separate, c, arch) == 0
    a, b = states.gpu_states(shared, c, arch), states.gpu_states(separate, c, arch)
    assert a.accumulated == pytest.approx((c.trainable + in_layers) * 2)
    assert b.accumulated == pytest.approx(c.trainable * 2)
    synced = setup(*LORA, "gradient_accumulation_steps=1", "fsdp_lora_units=layer")
    assert states.gpu_states(synced, c, arch).gradients == pytest.approx((c.trainable + in_layers) * 2 / 2)
    gap = plan.plan(shared).per_gpu_peak_gib - plan.plan(separate).per_gpu_peak_gib
    assert gap == pytest.approx(in_layers * 2 / GIB, rel=0.01)


@pytest.mark.parametrize(
    "items, key",
    [
        (("fsdp_lora_units=layer", "method=lora"), "fsdp_lora_units"),  # no FSDP
        (("fsdp=full_shard", "fsdp_config.version=2", "fsdp_lora_units=layer", "method=lora"), "fsdp_lora_units"),
        (("fsdp=full_shard", "fsdp_config.use_orig_params=false", "fsdp_lora_units=layer", "method=lora"), "fsdp_lora_units"),
        (("fsdp=full_shard", "fsdp_lora_units=block"), "fsdp_lora_units"),
    ],
)
def test_units_that_cannot_mix_are_refused(items, key):
    with pytest.raises(ConfigError) as err:
        setup(*items)
    assert any(p.key == key and p.fix for p in err.value.problems.items), [str(p) for p in err.value.problems.items]


@pytest.fixture
def one_rank():
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_torch_fsdp_gives_frozen_weights_in_a_mixed_unit_a_gradient(one_rank):
    """What `fsdp_unit_frozen` models, on the installed torch (CPU, one gloo rank): with use_orig_params=True a unit
    holding a frozen weight and trainable adapters flattens them into one FlatParameter that requires grad, and its
    gradient after a backward under no_sync() covers the frozen weight too; wrapped apart (PEFT's policy), the frozen
    unit has none; with use_orig_params=False FSDP refuses the mix."""
    import torch
    import torch.nn as nn
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.base = nn.Linear(8, 8, bias=False)
            self.lora_a, self.lora_b = nn.Linear(8, 2, bias=False), nn.Linear(2, 8, bias=False)

        def forward(self, x):
            return self.base(x) + self.lora_b(self.lora_a(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.h = nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for block in self.h:
                x = block(x)
            return x.sum()

    def build(policy, use_orig_params=True):
        model = Model()
        for name, p in model.named_parameters():
            p.requires_grad = "lora_" in name
        return FSDP(model, auto_wrap_policy=ModuleWrapPolicy(policy), use_orig_params=use_orig_params, device_id=torch.device("cpu"))

    def grads(fsdp):
        with fsdp.no_sync():
            fsdp(torch.randn(3, 8)).backward()
        out = {}
        for m in fsdp.modules():
            if isinstance(m, FSDP) and m._handle is not None:
                fp = m._handle.flat_param
                out.setdefault(type(m._fsdp_wrapped_module).__name__, []).append((fp.numel(), 0 if fp.grad is None else fp.grad.numel()))
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FSDP1 deprecation, NO_SHARD at world size 1
        mixed = grads(build({Block}))
        assert mixed["Block"] == [(64 + 16 + 16, 64 + 16 + 16)] * 2  # the frozen 8 x 8 weight has a gradient
        apart = grads(build({Block, nn.Linear}))  # every linear a unit of its own, as PEFT's policy wraps adapters
        assert sorted(apart["Linear"]) == [(16, 16)] * 4 + [(64, 0)] * 2
        with pytest.raises(ValueError, match="requires_grad"):
            build({Block}, use_orig_params=False)


def test_sync_each_batch_is_offered_where_the_unsharded_gradients_break_the_fit():
    """Llama-3.1-8B full bf16 on 8 x RTX 4090, 8 micro-batches a step: 15 GiB of gradients held whole under no_sync;
    accelerate's sync_each_batch keeps them sharded and is the fix the search verifies (re-planned, fits)."""
    from vramfit.planner.plan import plan_args

    items = ["dtype=bfloat16", "method=full", "per_device_train_batch_size=1", "gradient_accumulation_steps=8", "seq_len=2048", "gradient_checkpointing=true"]
    p = plan_args(REPO / "model_configs" / "llama-3.1-8b.json", "rtx4090", 8, overrides=[*items, "fsdp=full_shard auto_wrap"])
    assert not p.ok
    fix = next(f for f in p.fixes if f["overrides"] == {"sync_each_batch": True})
    assert fix["per_gpu_peak_gib"] <= p.gpu_memory_gib * 0.95 < p.per_gpu_peak_gib


def test_a_recipe_says_both_as_transformers_and_the_planner_section_spell_them():
    """`training.accelerator_config` (TrainingArguments) carries sync_each_batch; `planner.fsdp_lora_units` the units."""
    from vramfit.recipe import load

    from planner_support import recipe_path

    base = ["deepspeed=none", "training.fsdp=full_shard auto_wrap", "training.gradient_accumulation_steps=4"]
    path = recipe_path("axolotl-llama-3b-8xa100-80g")
    s = Setup.from_recipe(load(path, [*base, "planner.fsdp_lora_units=layer"]))
    assert s.engine == "fsdp" and s.fsdp_lora_units == "layer" and not s.fsdp_sync_each_batch
    synced = Setup.from_recipe(load(path, [*base, "training.accelerator_config={gradient_accumulation_kwargs: {sync_each_batch: true}}"]))
    assert synced.fsdp_sync_each_batch and synced.fsdp_lora_units == "separate"


def test_fsdp_multi_tensor_adamw_keeps_one_moment_of_the_shard_at_the_step():
    """torch.optim.AdamW's default foreach path (`_multi_tensor_adamw`: exp_avg_sq_sqrt = torch._foreach_sqrt(...))
    over FSDP's local shards: one moment-sized intermediate of the shard at the step; the fused kernel and a
    CPU-offloaded step keep none on the GPU."""
    foreach = plan.plan(setup(*FULL, "optim=adamw_torch"))
    fused = plan.plan(setup(*FULL, "optim=adamw_torch_fused"))
    offload = plan.plan(setup("fsdp=full_shard auto_wrap offload", "dtype=bfloat16", "method=full", "optim=adamw_torch"))
    states_gib = foreach.phase_breakdowns["optimizer_step"]["optimizer_states"]
    assert foreach.phase_breakdowns["optimizer_step"]["optimizer_step"] == pytest.approx(states_gib / 2, rel=1e-6)
    assert "optimizer_step" not in fused.phase_breakdowns["optimizer_step"]
    assert "optimizer_step" not in offload.phase_breakdowns["optimizer_step"]


@pytest.mark.parametrize("version, holds", [("1.10.1", False), ("1.10.0.dev0", False), ("1.11.0", True), (None, True)])
def test_fsdp2_accumulation_follows_the_runs_accelerate(version, holds):
    """accelerate before 1.11.0 (huggingface/accelerate#3762, ec92b1af) had no no_sync for FSDP2: every micro-batch
    reduce-scattered, the gradients stayed sharded; from it, the unsharded gradients are kept. Unset: the installed one.
    The plan says which reading it used."""
    items = ["fsdp_config.version=2", *FULL, "gradient_accumulation_steps=4"] + ([f"accelerate_version={version}"] if version else [])
    s = setup(*items, gpus=8)
    arch, c = resolved(s)
    assert (states.gpu_states(s, c, arch).accumulated > 0) is holds
    (note,) = [n for n in plan.plan(s).notes if n.startswith("FSDP2 gradient accumulation planned under")]
    assert (version or "installed") in note and ("unsharded gradients are kept" in note) is holds
    # FSDP1 had no_sync before #3762 too: the reading does not move it
    fsdp1 = setup(*FULL, "gradient_accumulation_steps=4", *(["accelerate_version=1.10.1"] if version else []), gpus=8)
    assert states.gpu_states(fsdp1, c, arch).accumulated > 0


def test_accelerate_version_must_be_a_version():
    with pytest.raises(ConfigError) as error:
        setup(*FULL, "accelerate_version=latest")
    assert error.value.problems.items[0].key == "accelerate_version"
