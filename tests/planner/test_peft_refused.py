"""LoRA targets PEFT refuses on the architecture (Mamba's out_proj): planned as PEFT builds them, or said."""

import json

import pytest

from vramfit.planner import params
from vramfit.planner.setup import PEFT_REFUSED_RULE, Setup
from vramfit.problems import ConfigError

# a small Mamba (the shape of state-spaces/mamba-2.8b-hf, model_configs/hub/mamba-2.8b-hf.json, at toy widths)
MAMBA = {
    "architectures": ["MambaForCausalLM"],
    "model_type": "mamba",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "state_size": 8,
    "conv_kernel": 4,
    "expand": 2,
    "time_step_rank": 4,
    "vocab_size": 256,
    "use_bias": False,
    "use_conv_bias": True,
}


@pytest.fixture
def mamba(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MAMBA))
    return path


def _setup(path, *items):
    return Setup.from_args(path, "a100-80g", 1, 1, None, ["method=lora", "bf16=true", *items])


def test_default_targets_are_the_ones_peft_accepts(mamba):
    s = _setup(mamba)
    assert sorted(s.lora_targets) == ["dt_proj", "in_proj", "x_proj"]
    assert any("PEFT" in n and "out_proj" in n for n in s.notes)
    arch = params.summary(mamba)
    adapted = {lin.name.rsplit(".", 1)[-1]: lin for lin in arch.linears if lin.layer == 0}
    want = sum(16 * (adapted[n].in_features + adapted[n].out_features) for n in ("in_proj", "x_proj", "dt_proj"))
    assert params.count(arch, s).lora == want * MAMBA["num_hidden_layers"]


@pytest.mark.parametrize("targets", ["all-linear", "in_proj,out_proj"])
def test_given_refused_targets_stop_with_the_accepted_ones(mamba, targets):
    with pytest.raises(ConfigError) as error:
        _setup(mamba, f"lora_target_modules={targets}")
    (problem,) = error.value.problems.items
    assert problem.rule == PEFT_REFUSED_RULE and "out_proj" in problem.what
    assert "in_proj" in problem.fix and "out_proj" not in problem.fix


def test_peft_decides_which_model_types_refuse():
    assert set(params.peft_refused_modules("mamba", ["in_proj", "out_proj", "conv1d"])) == {"out_proj", "conv1d"}
    assert params.peft_refused_modules("llama", ["out_proj"]) == ()


def test_review_says_the_refused_targets_in_the_users_keys_and_plans_the_accepted_ones(mamba, tmp_path, monkeypatch):
    """axolotl's lora_target_linear on a Mamba model: the run stops in get_peft_model (an error in the user's keys); the
    memory is planned on the targets PEFT accepts. (The activation trace Mamba needs is not what is tested here, and
    takes seconds: stood in for by "not computed".)"""
    from vramfit.planner import trace
    from vramfit.review.reviewer import review

    monkeypatch.setattr(trace, "train_terms", lambda *a, **k: (None, [], ["activations (not traced in this test)"]))

    config = tmp_path / "lora.yml"
    config.write_text(
        "base_model: state-spaces/mamba-2.8b-hf\nadapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_dropout: 0\n"
        "lora_target_linear: true\nsequence_len: 64\nmicro_batch_size: 1\nbf16: true\n"
    )
    result = review([str(config)], gpu="h100", gpus=1, model_config=str(mamba))
    (error,) = [f for f in result.findings if f.severity == "error"]
    assert "out_proj" in error.what and error.key == "lora_target_linear"
    assert "lora_target_modules" in error.fix and "in_proj" in error.fix and "out_proj" not in error.fix
    assert sorted(result.plan.setup.lora_targets) == ["dt_proj", "in_proj", "x_proj"]
