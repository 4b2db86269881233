"""PPO's other models (planner knobs `trainer=ppo`, `critic_model`, `reward_model_path`, `critic_update`,
`critic_offload_outside_update`; vramfit/planner/ppo.py): the critic is trained (its weights, gradients and optimizer
states, sharded as the policy's), the reward model and the reference copy are frozen."""

from __future__ import annotations

import importlib

import pytest

from vramfit.planner import params
from vramfit.planner.setup import Setup
from vramfit.problems import ConfigError

from planner_support import REPO

plan = importlib.import_module("vramfit.planner.plan")

LLAMA = REPO / "model_configs" / "llama-3.2-3b.json"
BASE = ("per_device_train_batch_size=2", "seq_len=1024", "bf16=true", "gradient_checkpointing=true")
GIB = 2**30


def planned(*items, gpus=8, deepspeed="zero2"):
    return plan.plan(Setup.from_args(LLAMA, "a100-80g", gpus, 1, deepspeed, [*BASE, *items]))


def value_model_params() -> int:
    """The critic: the model without its lm_head, with a one-output head over every position (hidden + its bias)."""
    arch = params.summary(LLAMA)
    return arch.total - arch.groups["lm_head"] + arch.text.hidden + 1


def test_a_critic_adds_its_trained_states_sharded_as_the_policys():
    """ZeRO-2 over 8 GPUs, DeepSpeed's accounting: 16-bit weights whole, fp32 master + Adam moments (12 B) / 8 held
    between the critic's updates; its update adds its 16-bit gradient partition and its reduce buckets."""
    none, ppo = planned("trainer=ppo", "critic_model=none"), planned("trainer=ppo", f"critic_model={LLAMA}")
    n = value_model_params()
    assert "critic" not in none.phase_breakdowns["train"] and "critic_update" not in none.phases
    held = ppo.phase_breakdowns["train"]["critic"]
    assert held == pytest.approx((2 * n + 12 * n / 8) / GIB, rel=1e-3)
    update = ppo.phase_breakdowns["critic_update"]
    assert update["critic"] > held + 2 * n / 8 / GIB  # + its gradient partition and its buckets
    assert update["activations"] > 0 and update.get("logits", 0.0) < 0.01  # one output per position, no vocabulary
    assert ppo.per_gpu_peak_gib >= none.per_gpu_peak_gib + held - 0.01  # held through the policy's step
    assert any(note.startswith("PPO: a critic") for note in ppo.notes)


def test_trainer_ppo_takes_the_policys_model_as_its_critic_and_keeps_a_reference_copy():
    p = planned("trainer=ppo")
    assert p.setup.critic_config == LLAMA and p.setup.ref_model == "copy"
    assert p.phase_breakdowns["train"]["reference_model"] == pytest.approx(p.parameters["total"] * 2 / GIB)
    lora = planned("trainer=ppo", "method=lora")
    assert lora.setup.ref_model == "none"  # TRL's PPOTrainer disables the adapter for the reference pass


def test_a_frozen_reward_model_is_whole_under_zero2_and_sharded_under_zero3():
    z2 = planned("trainer=ppo", f"reward_model_path={LLAMA}", "critic_model=none")
    z3 = planned("trainer=ppo", f"reward_model_path={LLAMA}", "critic_model=none", deepspeed="zero3")
    n = value_model_params()
    assert z2.phase_breakdowns["train"]["reward_model"] == pytest.approx(2 * n / GIB, rel=1e-3)
    assert z3.phase_breakdowns["train"]["reward_model"] == pytest.approx(2 * n / 8 / GIB, rel=1e-3)


def test_a_critic_trained_in_the_policys_backward_adds_its_activations_to_the_step():
    apart, joint = planned("trainer=ppo", "critic_update=separate"), planned("trainer=ppo", "critic_update=joint")
    assert "critic_update" in apart.phases and "critic_update" not in joint.phases
    assert joint.phase_breakdowns["train"]["activations"] > apart.phase_breakdowns["train"]["activations"] * 1.5
    assert joint.phases["train"] > apart.phases["train"]


def test_the_critics_states_offloaded_between_its_updates_leave_the_other_phases():
    """verl critic param_offload / optimizer_offload: back on the GPU only for the critic's own update."""
    kept = planned("trainer=ppo", deepspeed=None, gpus=1)
    away = planned("trainer=ppo", "critic_offload_outside_update=weights,optimizer", deepspeed=None, gpus=1)
    assert kept.phase_breakdowns["train"]["critic"] > 10 and "critic" not in away.phase_breakdowns["train"]
    assert away.phase_breakdowns["critic_update"]["critic"] == pytest.approx(kept.phase_breakdowns["critic_update"]["critic"])


@pytest.mark.parametrize(
    "items, key",
    [
        (("critic_model=x",), "critic_model"),  # trainer=sft
        (("trainer=ppo", "critic_update=both"), "critic_update"),
        (("trainer=ppo", "critic_offload_outside_update=gradients"), "offload_outside_update"),
    ],
)
def test_bad_ppo_knobs_are_bad_input(items, key):
    with pytest.raises(ConfigError) as info:
        Setup.from_args(LLAMA, "a100-80g", 8, 1, "zero2", [*BASE, *items])
    assert any(p.key == key for p in info.value.problems.items)


def test_a_critic_found_nowhere_leaves_the_plan_incomplete():
    p = planned("trainer=ppo", "critic_model=no-such-org/no-such-critic")
    assert p.setup.critic_config is None and any("critic" in what for what in p.incomplete)


def test_experience_making_generates_then_forwards_with_the_whole_logits():
    """rollout_micro_batch (OpenRLHF micro_rollout_batch_size): transformers generate of max_new_tokens with its KV cache,
    then the no-grad forwards holding the logits and their log_softmax; none without it, no generation with vLLM."""
    p = planned("trainer=ppo", "rollout_micro_batch=4", "max_new_tokens=512")
    arch = params.summary(LLAMA)
    assert p.phase_breakdowns["generation"]["kv_cache"] > 0
    assert p.phase_breakdowns["experience"]["logits"] == pytest.approx(2 * 4 * 1024 * arch.vocab * 2 / GIB)
    assert "experience" not in planned("trainer=ppo").phases
    assert "generation" not in planned("trainer=ppo", "rollout_micro_batch=4", "rollout_vllm=server").phases


def test_a_recipes_planner_section_takes_the_ppo_knobs():
    from vramfit import recipe as recipes
    from vramfit.paths import all_recipe_files

    path = next(p for p in all_recipe_files() if p.parent.name == "llama-3.1-8b-full-8xh100" or p.stem == "llama-3.1-8b-full-8xh100")
    base = recipes.load(path)
    ppo = plan.with_overrides(base, {"planner.trainer": "ppo", "planner.reward_model_path": "meta-llama/Llama-3.1-8B", "planner.rollout_micro_batch": 2})
    p = plan.plan_recipe(ppo, fixes=False)
    assert {"critic", "reward_model", "reference_model"} <= set(p.phase_breakdowns["train"])
    assert {"critic_update", "generation", "experience"} <= set(p.phases)
    assert p.per_gpu_peak_gib > plan.plan_recipe(base, fixes=False).per_gpu_peak_gib
