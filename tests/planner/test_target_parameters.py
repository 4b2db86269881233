"""LoRA `target_parameters` (PEFT LoraConfig / axolotl `lora_target_parameters`): the fused MoE expert parameters
adapted through lora.ParamWrapper, planned with PEFT's own shapes; a name the planner has no shape for is said."""

import json

import pytest

from vramfit.planner import params
from vramfit.planner.setup import Setup

# a small Mixtral (transformers 5 fuses its experts: mlp.experts.gate_up_proj [E, 2F, H], mlp.experts.down_proj [E, H, F])
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
}
BASE = ["method=lora", "bf16=true", "lora_target_modules=q_proj,v_proj", "lora_dropout=0", "lora_r=8"]


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixtral") / "config.json"
    path.write_text(json.dumps(MIXTRAL))
    return path


def _peft_lora_parameters(config: dict, targets: list[str]) -> int:
    """LoRA parameters PEFT itself builds on the model (tiny: real tensors on the CPU)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], target_parameters=targets)
    peft_model = get_peft_model(model, lora)
    return sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)


@pytest.mark.parametrize("targets", [["experts.gate_up_proj", "experts.down_proj"], ["layers.1.mlp.experts.down_proj"]])
def test_target_parameters_are_planned_as_peft_builds_them(mixtral, targets):
    arch = params.summary(mixtral)
    s = Setup.from_args(mixtral, "a100-80g", 1, 1, None, [*BASE, f"lora_target_parameters={','.join(targets)}"])
    assert s.lora_target_parameters == tuple(targets)
    assert params.count(arch, s).lora == _peft_lora_parameters(MIXTRAL, targets)
    assert any("lora.ParamWrapper" in n for n in s.notes)


def test_a_parameter_without_a_known_shape_or_a_match_is_said_not_guessed(mixtral):
    arch = params.summary(mixtral)
    plain = params.count(arch, Setup.from_args(mixtral, "a100-80g", 1, 1, None, BASE)).lora
    s = Setup.from_args(mixtral, "a100-80g", 1, 1, None, [*BASE, "lora_target_parameters=input_layernorm.weight,no.such_param"])
    assert params.count(arch, s).lora == plain
    (note,) = s.notes
    assert "input_layernorm.weight" in note and "not planned" in note and "no.such_param match no parameter" in note


def test_target_parameters_refuse_dropout_as_peft_does(mixtral):
    from vramfit.problems import ConfigError

    with pytest.raises(ConfigError) as error:
        Setup.from_args(mixtral, "a100-80g", 1, 1, None, [*BASE[:3], "lora_dropout=0.05", "lora_target_parameters=experts.down_proj"])
    assert error.value.problems.items[0].key == "lora_dropout"
