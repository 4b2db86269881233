"""TRL's preference trainers (planner knobs `trainer`, `ref_model`, `fused_lm_head`; vramfit/planner/knobs.py
trainer_fields): the frozen reference copy DPO keeps, none under PEFT or with precomputed log-probs, chosen + rejected
as one batch of twice the micro-batch, DPO's fused log-prob head in place of whole logits."""

from __future__ import annotations

import importlib
import json

import pytest

from vramfit.planner import grpo, params
from vramfit.planner.setup import Setup
from vramfit.problems import ConfigError

from planner_support import REPO

plan = importlib.import_module("vramfit.planner.plan")

LLAMA = REPO / "model_configs" / "llama-3.2-3b.json"
BASE = ("per_device_train_batch_size=2", "seq_len=1024", "bf16=true", "gradient_checkpointing=true")


def planned(*items, gpus=1, deepspeed=None):
    return plan.plan(Setup.from_args(LLAMA, "a100-80g", gpus, 1, deepspeed, [*BASE, *items]))


def total(p) -> int:
    return p.parameters["total"]


def test_dpo_holds_a_frozen_reference_copy_of_the_base_in_the_runs_dtype():
    copy, pre = planned("trainer=dpo"), planned("trainer=dpo", "precompute_ref_log_probs=true")
    ref = copy.phase_breakdowns["train"]["reference_model"]
    assert ref == pytest.approx(total(copy) * 2 / 2**30)  # bf16, the whole base on the one GPU
    assert "reference_model" not in pre.phase_breakdowns["train"]
    assert copy.per_gpu_peak_gib == pytest.approx(pre.per_gpu_peak_gib + ref, rel=0.05)  # + its share of the reserve
    # ZeRO-3 shards the reference like the policy (trl prepare_deepspeed keeps stage 3)
    z3 = planned("trainer=dpo", gpus=8, deepspeed="zero3")
    assert z3.phase_breakdowns["train"]["reference_model"] == pytest.approx(ref / 8)


def test_a_peft_policy_is_its_own_reference():
    lora = planned("trainer=dpo", "method=lora")
    assert lora.setup.ref_model == "none" and "reference_model" not in lora.phase_breakdowns["train"]
    assert planned("trainer=dpo", "method=lora", "ref_model=copy").phase_breakdowns["train"]["reference_model"] > 5


def test_chosen_and_rejected_run_as_one_batch_of_twice_the_micro_batch():
    orpo = planned("trainer=orpo")
    sft4 = planned("per_device_train_batch_size=4")
    for key in ("activations", "logits"):
        assert orpo.phase_breakdowns["train"][key] == pytest.approx(sft4.phase_breakdowns["train"][key])
    assert orpo.setup.micro_batch == 2  # the batch the user sets stays what it is


def test_dpo_log_probs_come_from_trls_fused_head_not_whole_logits():
    fused, whole = planned("trainer=dpo"), planned("trainer=dpo", "fused_lm_head=false")
    assert whole.phase_breakdowns["train"]["logits"] > 3 and fused.phase_breakdowns["train"].get("logits", 0.0) < 1
    assert fused.per_gpu_peak_gib < whole.per_gpu_peak_gib
    s = fused.setup.replace(micro_batch=4)
    arch = params.summary(LLAMA)
    head = grpo.fused_head_bytes(s, arch, params.count(arch, s), tokens=4 * 1024)
    assert head == 4096 * 32768 * 2 + 4 * 1024 * arch.text.hidden * 4 + arch.vocab * arch.text.hidden * 4  # tile, grad hidden, grad head


def test_reward_trainer_scores_pairs_with_a_one_label_head():
    reward = planned("trainer=reward")
    assert (reward.setup.head, reward.setup.num_labels, reward.setup.sequences_per_sample) == ("seq_cls", 1, 2)


@pytest.mark.parametrize(
    "items, key",
    # trainer=ppo is planned since session 10 (planner/ppo.py); rloo is a trainer the planner does not model
    [(("trainer=orpo", "ref_model=copy"), "ref_model"), (("trainer=rloo",), "trainer"), (("trainer=reward", "fused_lm_head=true"), "fused_lm_head")],
)
def test_what_a_trainer_does_not_have_is_refused(items, key):
    with pytest.raises(ConfigError) as err:
        planned(*items)
    assert key in str(err.value)


def test_an_offloaded_reference_copy_lives_in_host_ram(tmp_path):
    ds = tmp_path / "zero3_offload.json"
    ds.write_text(
        json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": True}})
    )
    p = planned("trainer=dpo", gpus=8, deepspeed=str(ds))
    assert "reference_model" not in p.phase_breakdowns["train"]
    assert p.host_breakdown["reference_model"] == pytest.approx(total(p) * 2 / 2**30)  # 8 ranks x 1/8 of the bf16 base
