"""Issue 19: the recipe planner is fed what validation resolved with the libraries' own code (one source)."""

from __future__ import annotations

import copy

import pytest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMFIT_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_value_only_trl_resolves_reaches_the_plan_built_and_cached(cache):
    """generation_batch_size=24 on 6 ranks x micro-batch 4: GRPOConfig.__post_init__ derives
    steps_per_generation = 24 / (4 x 6) = 1. The planner alone reads no such rule (it would generate
    gradient_accumulation_steps = 4 micro-batches at once)."""
    from vramfit.planner.plan import plan_recipe
    from vramfit.validate import validate

    peaks = []
    for cached in (False, True, True):  # built by TRL; written to the validate cache; read from it
        v = validate("vlm-r1-h20", ["generation_batch_size=24"], plan=False, cache=cached)
        assert v.arguments["steps_per_generation"] == 1 and v.arguments["generation_batch_size"] == 24
        p = plan_recipe(v.recipe, fixes=False, resolved=v.resolved)
        assert p.setup.steps_per_generation == 1 and p.setup.generation_batch == 4
        peaks.append(p.phases["generation"])
    assert list(cache.glob("validation-*.json"))
    assert peaks[0] == peaks[1] == peaks[2]
    alone = plan_recipe(v.recipe, fixes=False)
    assert alone.setup.steps_per_generation is None and alone.setup.generation_batch == 16
    assert alone.phases["generation"] > peaks[0]


def test_the_pre_launch_plan_and_the_plan_command_use_the_resolved_values(cache, capsys):
    import json

    from vramfit.cli import main
    from vramfit.validate import validate

    v = validate("vlm-r1-h20", ["generation_batch_size=24"], plan=True)  # what `vramfit run` / `slurm` plan before launch
    assert v.plan.setup.steps_per_generation == 1
    assert main(["plan", "vlm-r1-h20", "generation_batch_size=24", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["per_gpu_peak_gib"] == round(v.plan.per_gpu_peak_gib, 2)


def test_the_zero_block_is_the_json_transformers_filled(cache):
    """The "auto" buckets are transformers' (HfTrainerDeepSpeedConfig.trainer_config_finalize), and the plan
    follows the resolved JSON it is given, not a fill of its own."""
    from vramfit.planner.from_validation import Resolved
    from vramfit.planner.plan import plan_recipe
    from vramfit.validate import validate

    v = validate("vlm-r1-h20", [], plan=False, cache=True)
    zero = v.deepspeed["zero_optimization"]
    hidden = 2048  # model_configs of vlm-r1-h20: Qwen2.5-VL-3B text hidden size
    assert (zero["reduce_bucket_size"], zero["stage3_prefetch_bucket_size"], zero["stage3_param_persistence_threshold"]) == (
        hidden * hidden,
        int(0.9 * hidden * hidden),
        10 * hidden,
    )
    planned = plan_recipe(v.recipe, fixes=False, resolved=v.resolved).setup.zero
    assert (planned.reduce_bucket_size, planned.prefetch_bucket_size, planned.param_persistence_threshold) == (
        hidden * hidden,
        int(0.9 * hidden * hidden),
        10 * hidden,
    )
    other = copy.deepcopy(v.deepspeed)
    other["zero_optimization"]["stage3_prefetch_bucket_size"] = 123_456_789
    fed = plan_recipe(v.recipe, fixes=False, resolved=Resolved(v.arguments, other, v.recipe.deepspeed))
    assert fed.setup.zero.prefetch_bucket_size == 123_456_789


def test_a_fix_re_plan_keeps_the_resolved_values_and_re_derives_what_it_changes():
    from types import SimpleNamespace

    from vramfit.planner.from_validation import Resolved

    base = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4}
    arguments = {**base, "steps_per_generation": 4, "optim": "adamw_torch_fused"}
    resolved = Resolved(arguments, None, source_training=dict(base))
    assert resolved.training(SimpleNamespace(training=dict(base)))["steps_per_generation"] == 4
    fixed = resolved.training(SimpleNamespace(training={**base, "gradient_accumulation_steps": 8}))
    assert fixed["gradient_accumulation_steps"] == 8 and "steps_per_generation" not in fixed  # TRL's default re-derived
    assert fixed["optim"] == "adamw_torch_fused"  # the library default the recipe left out
    pinned = resolved.training(SimpleNamespace(training={**base, "steps_per_generation": 1}))
    assert pinned["steps_per_generation"] == 1
    # one argument, two names: a fix that turns gradient_checkpointing off is not undone by the resolved alias
    on = Resolved(
        {**arguments, "gradient_checkpointing": True, "activation_checkpointing": True}, None, source_training={**base, "gradient_checkpointing": True}
    )
    off = on.training(SimpleNamespace(training={**base, "gradient_checkpointing": False}))
    assert off["gradient_checkpointing"] is False and "activation_checkpointing" not in off
    # generation_batch_size set instead: TRL derives steps_per_generation = 48 / (2 micro x 6 ranks) = 4
    batch = {**base, "generation_batch_size": 48}
    resolved = Resolved({**arguments, "steps_per_generation": 2}, None, source_training=dict(batch))
    halved = resolved.training(SimpleNamespace(training={**batch, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 8}, world_size=6))
    assert halved["steps_per_generation"] == 4


def test_the_generation_fix_lowers_the_batch_a_recipe_sets():
    """TRL refuses steps_per_generation beside generation_batch_size: the fix changes the one the recipe sets."""
    import dataclasses

    from vramfit.paths import find_recipe
    from vramfit.planner import fixes
    from vramfit.planner.plan import plan_recipe
    from vramfit.recipe import load

    recipe = load(find_recipe("vlm-r1-h20"))
    planned = plan_recipe(recipe, fixes=False)
    short = dataclasses.replace(planned, fits=False, phases={**planned.phases, "generation": 2 * planned.gpu_memory_gib})
    for training, wanted in (({}, {"steps_per_generation": 1}), ({"generation_batch_size": 96}, {"generation_batch_size": 24})):
        found = fixes.candidates(short, "recipe", recipe=recipe.model_copy(update={"training": {**recipe.training, **training}}))
        assert ("generation", wanted) in [(family, overrides) for family, overrides, _why in found]


def test_fix_re_plans_are_fed_too(cache):
    """A recipe that does not fit: every fix is re-planned on the resolved values, the fix's own keys winning."""
    from vramfit.planner.plan import plan_recipe, with_overrides
    from vramfit.validate import validate

    v = validate("vlm-r1-h20", ["generation_batch_size=24", "max_completion_length=65536"], plan=False, cache=True)
    p = plan_recipe(v.recipe, resolved=v.resolved)
    assert not p.fits and p.fixes
    for fix in p.fixes:
        again = plan_recipe(with_overrides(v.recipe, fix["overrides"]), fixes=False, resolved=v.resolved)
        assert round(again.per_gpu_peak_gib, 1) == round(fix["per_gpu_peak_gib"], 1)
        assert again.setup.micro_batch == fix["overrides"].get("per_device_train_batch_size", 4)
        # TRL: 24 / (micro-batch x 6 ranks)
        assert again.setup.steps_per_generation == 24 // (again.setup.micro_batch * 6)
