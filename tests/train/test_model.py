"""What trains, Liger and bitsandbytes wiring, QLoRA, and the refusal of remote-code checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from vramfit.checks.training_args import config_class
from vramfit.train.model import ModelError, check_checkpoint, load_model, part_of, trains

from train_support import REPO, write_run

LLAVA, LORA, LLAMA = "sharegpt4v-7b-8xa100-40g", "minicpmv-lora-8xa100-80g", "axolotl-llama-3b-8xa100-80g"


def _args(recipe, tmp_path):
    """The recipe's training arguments as the entrypoint builds them, without the DeepSpeed JSON (one process)."""
    return config_class(recipe.method)(**recipe.training, output_dir=str(tmp_path / "out"))


def _trainable(model) -> dict[str, bool]:
    return {name: p.requires_grad for name, p in model.named_parameters()}


@pytest.mark.parametrize(
    "name, part",
    [
        ("model.language_model.layers.0.mlp.up_proj.weight", "llm"),
        ("lm_head.weight", "llm"),
        ("model.layers.3.self_attn.q_proj.weight", "llm"),
        ("model.vision_tower.encoder.layers.1.mlp.fc1.weight", "vision_tower"),
        ("model.multi_modal_projector.linear_1.weight", "projector"),
        ("model.visual.blocks.0.attn.qkv.weight", "vision_tower"),
        ("model.visual.merger.mlp.0.weight", "projector"),
        ("base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.default.weight", "lora"),
        ("base_model.model.model.vision_tower.modules_to_save.default.encoder.layers.0.mlp.fc1.bias", "vision_tower"),
    ],
)
def test_parts(name, part):
    assert part_of(name) == part


def test_full_vision_from_layer_n(smoke_recipe, tmp_path):
    recipe = smoke_recipe(LLAVA, "model.train.vision_tower=1", "model.train.projector=false")
    model = load_model(recipe, _args(recipe, tmp_path))
    grads = _trainable(model)
    vision = {n: g for n, g in grads.items() if part_of(n) == "vision_tower"}
    assert all(g == (".layers.1." in n) for n, g in vision.items()), vision
    assert not any(g for n, g in grads.items() if part_of(n) == "projector")
    assert all(g for n, g in grads.items() if part_of(n) == "llm")
    assert trains("model.vision_tower.encoder.layers.7.x", recipe.model.train.model_copy(update={"vision_tower": 7}))


def test_lora_saves_the_trained_vision_parts_whole(smoke_recipe, tmp_path):
    recipe = smoke_recipe(LORA)
    model = load_model(recipe, _args(recipe, tmp_path))
    assert set(model.peft_config["default"].modules_to_save) == {"vision_tower", "multi_modal_projector"}
    grads = _trainable(model)
    assert all(g == (".modules_to_save." in n) for n, g in grads.items() if part_of(n) in ("vision_tower", "projector") and "post_layernorm" not in n)
    assert not any(g for n, g in grads.items() if part_of(n) == "llm")
    lora = [n for n, g in grads.items() if part_of(n) == "lora"]
    assert lora and all(grads[n] for n in lora)
    # The recipe's regex targets the LLM's attention only, never the vision tower's.
    assert all(".language_model." in n and any(f".{p}." in n for p in ("q_proj", "k_proj", "v_proj", "o_proj")) for n in lora)


def test_qlora_quantizes_the_base_and_trains_adapters(smoke_recipe, tmp_path):
    import bitsandbytes as bnb

    recipe = smoke_recipe(
        LLAMA,
        "method=qlora",
        "model.lora.r=8",
        "model.lora.alpha=16",
        "model.lora.target_modules=all-linear",
        "model.quantization.bits=4",
        "model.quantization.quant_storage=bfloat16",
    )
    model = load_model(recipe, _args(recipe, tmp_path))
    config = model.config.quantization_config
    assert (config.load_in_4bit, config.bnb_4bit_quant_type, config.bnb_4bit_use_double_quant) == (True, "nf4", True)
    assert config.bnb_4bit_compute_dtype == torch.bfloat16 and config.bnb_4bit_quant_storage == torch.bfloat16
    q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj.base_layer, bnb.nn.Linear4bit)
    assert {n for n, g in _trainable(model).items() if g} == {n for n in _trainable(model) if part_of(n) == "lora"}


def test_bitsandbytes_optimizer_is_the_trainers_choice(smoke_recipe, tmp_path):
    """`training.optim: adamw_bnb_8bit` reaches the Trainer, which builds bitsandbytes' 8-bit AdamW (and
    hands it to DeepSpeed: the recipe's JSON has no optimizer block of its own)."""
    import bitsandbytes as bnb

    from vramfit.train import sft

    recipe = smoke_recipe(LLAMA, "optim=adamw_bnb_8bit")
    assert "optimizer" not in json.loads(recipe.path(recipe.deepspeed).read_text())
    trainer = sft.build_trainer(recipe, _args(recipe, tmp_path), [])
    optimizer = trainer.create_optimizer()
    assert isinstance(optimizer, bnb.optim.AdamW) and optimizer.args.optim_bits == 8


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
def test_liger_kernels_patch_the_model(smoke_recipe, tmp_path):
    """use_liger_kernel: true applies liger-kernel's own patch. It cannot run here (Triton needs a GPU),
    so the check is that the model's modules are Liger's; in a subprocess, since the patch is global."""
    recipe = smoke_recipe(LLAMA, "use_liger_kernel=true")
    recipe_json = tmp_path / "recipe.json"
    recipe_json.write_text(json.dumps(recipe.model_dump(mode="json")))
    script = textwrap.dedent(f"""
        import json, pathlib
        from liger_kernel.transformers.model.llama import lce_forward
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
        from liger_kernel.transformers.swiglu import LigerSwiGLUMLP
        from vramfit.checks.training_args import config_class
        from vramfit.recipe import Recipe
        from vramfit.train.model import load_model
        out = pathlib.Path({str(tmp_path)!r})
        recipe = Recipe.model_validate(json.loads((out / "recipe.json").read_text()))
        args = config_class(recipe.method)(**recipe.training, output_dir=str(out / "o"))
        model = load_model(recipe, args)
        layer = model.model.layers[0]
        print(json.dumps([model.forward.__func__ is lce_forward, model.model.norm.forward.__func__ is LigerRMSNorm.forward,
                          layer.input_layernorm.forward.__func__ is LigerRMSNorm.forward,
                          layer.mlp.forward.__func__ is LigerSwiGLUMLP.forward]))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [True, True, True, True]


def _docowl_checkpoint(folder):
    """What mPLUG/DocOwl1.5's config.json says: a remote-code model type no transformers class loads."""
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"model_type": "mplug_docowl", "auto_map": {"AutoModelForCausalLM": "modeling_mplug_docowl.MPLUGDocOwlLlamaForCausalLM"}})
    )
    return folder


def test_remote_code_checkpoint_is_refused(smoke_recipe, tmp_path):
    checkpoint = _docowl_checkpoint(tmp_path / "docowl")
    recipe = smoke_recipe("docowl1.5-8b-8xa100-80g", f"model.id={checkpoint}")
    with pytest.raises(ModelError) as info:
        check_checkpoint(recipe)
    message = str(info.value)
    assert f"model.id {checkpoint} is a 'mplug_docowl' checkpoint (remote code:" in message
    assert "LlavaForConditionalGeneration ('llava') cannot load" in message and recipe.model.stand_in in message
    assert "vramfit run docowl1.5-8b-8xa100-80g --smoke" in message


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
def test_entrypoint_exits_2_on_a_remote_code_checkpoint(tmp_path):
    checkpoint = _docowl_checkpoint(tmp_path / "docowl")
    run_dir = write_run("docowl1.5-8b-8xa100-80g", tmp_path / "run", [f"model.id={checkpoint}"])
    result = subprocess.run([sys.executable, "-m", "vramfit.train", f"--run-dir={run_dir}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"vramfit: model.id {checkpoint} is a 'mplug_docowl' checkpoint" in result.stderr
