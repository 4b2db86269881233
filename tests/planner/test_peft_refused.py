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
