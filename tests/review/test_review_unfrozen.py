"""Runs that train only the weights a list names (review/mapping.py `_unfrozen`): a TRL script's Spectrum YAML
(`spectrum_config_path`, philschmid run_sft.py `setup_model_for_spectrum`) and axolotl's `unfrozen_parameters`
(utils/freeze.py `freeze_layers_except`) are planned as the planner's `unfrozen_parameters`, not left incomplete;
with a LoRA adapter they stay not modelled (axolotl freezes after PEFT, against the PeftModel's names)."""

from __future__ import annotations

from pathlib import Path

from vramfit.review.reviewer import review

from review_support import find

FILES = Path(__file__).resolve().parent / "corpus" / "files"
PHIL = FILES / "philschmid+deep-learning-pytorch-huggingface" / "training"


def test_a_spectrum_yaml_is_planned_as_its_listed_weights():
    paths = [PHIL / "receipes/llama-3-1-8b-spectrum.yaml", PHIL / "configs/accelerate_configs/deepspeed_zero3.yaml", PHIL / "scripts/run_sft.py"]
    result = review([str(p) for p in paths], gpu="l4", gpus=8)
    listed = (PHIL / "configs/spectrum/snr_results_meta-llama-Meta-Llama-3.1-8B_unfrozenparameters_30percent.yaml").read_text()
    patterns = tuple(line.split("- ")[1] for line in listed.splitlines() if line.startswith("- "))
    setup = result.plan.setup
    assert setup.unfrozen_parameters == patterns and "^lm_head.weight$" in patterns
    assert result.plan.parameters["trainable"] < 0.5 * result.plan.parameters["total"]
    assert not find(result, key="spectrum_config_path", severity="warning")  # was: "does not fit if every trainable weight keeps AdamW states"
    assert find(result, key="spectrum_config_path", severity="info", text="planned as full fine-tuning of those weights")
    assert result.exit_code == 0


def test_axolotl_unfrozen_parameters_read_as_its_layer_name_patterns(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(
        "base_model: meta-llama/Llama-3.2-3B\nsequence_len: 1024\nmicro_batch_size: 1\ngradient_checkpointing: true\n"
        "unfrozen_parameters:\n  - ^lm_head.weight$\n  - ^model.embed_tokens.weight$[:32000]\n  - model.layers.2[0-9]+.mlp.down_proj\n"
    )
    result = review([str(path)], gpu="a100-80g", gpus=1)
    # LayerNamePattern: '.' is literal unless '.+', the [start:end] range is cut off (the tensor trains whole)
    assert result.plan.setup.unfrozen_parameters == ("^lm_head\\.weight$", "^model\\.embed_tokens\\.weight$", "model\\.layers\\.2[0-9]+\\.mlp\\.down_proj")
    assert result.exit_code in (0, 1)
    assert not find(result, key="unfrozen_parameters", severity="warning")


def test_with_a_lora_adapter_the_list_stays_not_modelled():
    path = FILES / "axolotl-ai-cloud+axolotl/examples/gemma3/gemma-3-4b-qlora.yml"
    result = review([str(path)], gpu="a100-80g", gpus=1)
    assert result.plan.setup.unfrozen_parameters == ()
    assert find(result, key="unfrozen_parameters", severity="info", text="with a LoRA adapter: not modelled")


def test_an_axolotl_list_that_matches_no_parameter_is_an_error_on_its_line(tmp_path):
    # re.match anchors at the name's start: `layers.` never meets `model.layers.` (axolotl: "All parameters are frozen")
    path = tmp_path / "train.yaml"
    path.write_text("base_model: meta-llama/Llama-3.2-3B\nsequence_len: 1024\nmicro_batch_size: 1\nunfrozen_parameters:\n  - layers.2[0-9]+.mlp\n")
    result = review([str(path)], gpu="a100-80g", gpus=1)
    [error] = find(result, key="unfrozen_parameters", severity="error")
    assert "none of the 1 regexes matches a parameter name of LlamaForCausalLM" in error.what and error.line == 4
    assert result.exit_code == 1
