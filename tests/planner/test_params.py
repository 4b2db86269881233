"""Parameter counts read off the meta-device model, and trainable / frozen per recipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vramfit.planner import Setup, params

from planner_support import REPO, SHARED_CONFIGS, needs_shared, recipe_path

CONFIGS = sorted((REPO / "model_configs").glob("*.json")) + sorted(SHARED_CONFIGS.glob("*.json"))


def _setup(config, **kw) -> Setup:
    return Setup(label="t", source="t", model_config=config, gpu="a100-80g", gpus_per_node=1, **kw)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_total_matches_the_published_meta_count(config):
    """Every config's `_params` (meta-device count, T5 lm_head added back) is reproduced exactly."""
    expected = json.loads(config.read_text())["_params"]
    arch = params.summary(config)
    assert arch.total == expected
    assert sum(arch.groups.values()) == arch.total


@needs_shared
def test_t5_untied_lm_head_is_counted():
    arch = params.summary(SHARED_CONFIGS / "t0_3b.json")
    assert arch.groups["lm_head"] == 32128 * 2048 and not arch.tied_embeddings


def test_lora_rank_times_in_plus_out_per_targeted_linear():
    config = REPO / "model_configs" / "llama-3.2-3b.json"
    arch = params.summary(config)
    c = params.count(arch, _setup(config, method="lora", train_llm=False, lora_r=16, lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"]))
    per_layer = 16 * (3072 + 3072) + 2 * 16 * (3072 + 1024) + 16 * (3072 + 3072)  # q, k, v, o (8 KV heads x 128)
    assert c.lora == 28 * per_layer
    assert c.trainable_base == arch.groups["projector"]  # nothing else trains in place
    assert c.total == arch.total and c.quantized == 0


def test_regex_targets_only_the_language_model():
    """The MiniCPM-V recipe's regex adapts the LLM attention, not the ViT's q/k/v/out projections."""
    from vramfit.recipe import load

    recipe = load(recipe_path("minicpmv-lora-8xa100-80g"))
    setup = Setup.from_recipe(recipe)
    arch = params.summary(setup.model_config)
    c = params.count(arch, setup)
    assert {a.stack for a in c.adapted} == {"text"}
    llm = 32 * 64 * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096))
    assert c.lora == llm
    assert c.vision_full and c.vision_grad_layers == arch.stacks["vision"].layers


@needs_shared
def test_fused_qkv_is_one_adapter_for_q_k_v():
    config = SHARED_CONFIGS / "qwen-7b.json"
    arch = params.summary(config)
    fused = params.count(arch, _setup(config, method="lora", train_llm=False, lora_r=64, lora_fused_qkv=True, lora_targets=["q_proj", "k_proj", "v_proj"]))
    separate = params.count(arch, _setup(config, method="lora", train_llm=False, lora_r=64, lora_targets=["q_proj", "k_proj", "v_proj"]))
    assert fused.lora == 32 * 64 * (4096 + 3 * 4096)
    assert separate.lora == 32 * 3 * 64 * (4096 + 4096)


def test_vision_tower_unfrozen_from_layer_n():
    config = REPO / "model_configs" / "llava-1.5-7b.json"
    arch = params.summary(config)
    full = params.count(arch, _setup(config, train_vision=True))
    from_12 = params.count(arch, _setup(config, train_vision=12))
    frozen = params.count(arch, _setup(config, train_vision=False))
    layers = arch.stacks["vision"].layer_params
    assert from_12.trainable_base - frozen.trainable_base == sum(layers[12:])
    assert full.trainable_base - frozen.trainable_base == arch.groups["vision"]
    assert (from_12.vision_grad_layers, frozen.vision_grad_layers) == (12, 0)


def test_modules_to_save_are_copies_unless_trained_in_place():
    config = REPO / "model_configs" / "llama-3.2-3b.json"
    arch = params.summary(config)
    kw = dict(method="lora", train_llm=False, train_projector=False, lora_r=8, lora_targets="all-linear", modules_to_save=("embed_tokens",))
    copies = params.count(arch, _setup(config, **kw))
    in_place = params.count(arch, _setup(config, modules_to_save_copies=False, **kw))
    assert copies.copies == arch.groups["embed"] and copies.trainable_base == 0
    assert in_place.copies == 0 and in_place.trainable_base == arch.groups["embed"]


def test_warm_cache_plans_without_importing_torch(tmp_path):
    """After one planning, counts come from the disk cache: no torch, no transformers."""
    env = {**os.environ, "VRAMFIT_CACHE_DIR": str(tmp_path)}
    code = (
        "import sys\nfrom vramfit.recipe import load\nfrom vramfit.planner import plan_recipe\n"
        f"p = plan_recipe(load({str(recipe_path('vlm-r1-h20'))!r}), fixes=False)\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules, round(p.per_gpu_peak_gib, 2))"
    )
    first = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert first.stdout.split()[0] == "True"  # the cold run builds the model
    torch_loaded, transformers_loaded, peak = second.stdout.split()
    assert (torch_loaded, transformers_loaded) == ("False", "False")
    assert peak == first.stdout.split()[2]
    assert list(tmp_path.glob("planner/*.json"))


# ----------------------------------------------------------------------------------------------
# Architectures the analytic model used to crash on or truncate (issue 13, section 1 and 3).
# Tiny configs built from transformers' own config classes; no network.


def _write(tmp_path, config, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config.to_dict(), default=str))
    return path


def _plan_cli(argv, capsys):
    import argparse

    from vramfit.planner import cli

    parser = argparse.ArgumentParser(prog="vramfit plan")
    cli.add_arguments(parser)
    code = cli.run(parser.parse_args(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_bert_encoder_layer_stack_is_read(tmp_path):
    """BERT's blocks are `encoder.layer.N` (KeyError: 'text' before): an encoder-only model is one
    'text' stack, built as its masked-LM class."""
    from transformers import BertConfig

    arch = params.summary(_write(tmp_path, BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, vocab_size=500)))
    assert arch.architecture == "BertForMaskedLM"
    assert arch.text.layers == 3 and arch.text.hidden == 64 and arch.text.ffn == 128 and arch.text.norm == "layer"
    assert arch.analytic_gap is None and not arch.encoder_decoder


def test_gpt2_conv1d_layers_are_linears(tmp_path):
    """GPT-2's projections are transformers' Conv1D (StopIteration in the summary before)."""
    from transformers import GPT2Config

    arch = params.summary(_write(tmp_path, GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=128)))
    names = {lin.name.rsplit(".", 1)[-1] for lin in arch.linears}
    assert {"c_attn", "c_proj", "c_fc"} <= names
    c_fc = next(lin for lin in arch.linears if lin.name.endswith("mlp.c_fc"))
    assert (c_fc.in_features, c_fc.out_features) == (64, 256)
    assert arch.text.layers == 2 and arch.text.ffn == 256


def test_internvl_list_image_size_and_its_vision_stack(tmp_path):
    """InternVL writes image_size / patch_size as [h, w] (TypeError before) and its InternViT blocks
    are `encoder.layer.N`: before, its vision tower was counted in the parameters but dropped from
    the activations without a word."""
    from transformers import InternVLConfig

    cfg = InternVLConfig(
        vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=[56, 56], patch_size=[14, 14]),
        text_config=dict(
            model_type="qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=500
        ),
    )
    arch = params.summary(_write(tmp_path, cfg))
    assert arch.image["image_size"] == 56 and arch.image["patch_size"] == 14
    assert "vision" in arch.stacks and arch.stacks["vision"].layers == 2
    assert arch.groups["vision"] > 0 and arch.analytic_gap is None
    from vramfit.planner.setup import image_geometry

    assert image_geometry(arch, None, None) == (16, 16)


def test_video_llava_towers_are_vision(tmp_path):
    """Video-LLaVA's `image_tower` / `video_tower` were counted as LLM weights (vision 0)."""
    from transformers import VideoLlavaConfig

    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14)
    cfg = VideoLlavaConfig(
        vision_config=vision,
        text_config=dict(model_type="llama", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=300),
    )
    arch = params.summary(_write(tmp_path, cfg))
    assert arch.groups["vision"] > 0 and "vision" in arch.stacks
    assert any("joins 2 layer lists" in n for n in arch.notes)  # two towers, said so


def test_mllama_two_vision_stacks_are_joined_and_said(tmp_path):
    from transformers import MllamaConfig

    cfg = MllamaConfig(
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_global_layers=1,
            attention_heads=2,
            image_size=28,
            patch_size=14,
            vision_output_dim=64,
            intermediate_layers_indices=[0],
        ),
        text_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=300,
            cross_attention_layers=[1],
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    )
    arch = params.summary(_write(tmp_path, cfg))
    assert arch.stacks["vision"].layers == 3  # 2 local + 1 global layer
    assert any("global_transformer" in n for n in arch.notes)


@pytest.mark.parametrize(
    "text, why",
    [
        ("{not json", "is not valid JSON at line 1"),
        ('["a list"]', "must be a JSON object (a config.json), got list"),
        ('{"hidden_size": 8}', "model_type: must name the model type as text, got None"),
        ('{"model_type": "no_such_model"}', "model_type: transformers 5"),  # the key, and below: why
        (
            '{"model_type": "llama", "hidden_size": 30, "num_attention_heads": 7}',
            "cannot build a 'llama' config from it (ValueError: The hidden size (30) is not a multiple of the number of attention heads (7))",
        ),
    ],
)
def test_malformed_configs_are_bad_input_not_a_crash(tmp_path, capsys, text, why):
    path = tmp_path / "config.json"
    path.write_text(text)
    code, out, err = _plan_cli(["--model-config", str(path), "--gpu", "a100-80g", "--gpus", "1"], capsys)
    assert code == 2, (out, err)
    assert why in err and str(path) in err and "Fix:" in err and "Traceback" not in out + err
    if "no_such_model" in text:
        assert "builds no config for model_type 'no_such_model' (a type it does not know)" in err


def test_config_no_auto_class_builds_is_bad_input(tmp_path, capsys):
    """A config class with no model class an auto class maps (Evolla: no LM head class)."""
    from transformers import AutoConfig

    path = tmp_path / "config.json"
    path.write_text(json.dumps(AutoConfig.for_model("evolla").to_dict(), default=str))
    code, _, err = _plan_cli(["--model-config", str(path), "--gpu", "a100-80g", "--gpus", "1"], capsys)
    assert code == 2 and "builds no model for model_type 'evolla'" in err


def test_planner_plans_bert_and_gpt2_without_a_crash(tmp_path, capsys):
    from transformers import BertConfig, GPT2Config

    for cfg in (
        BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=500),
        GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=256),
    ):
        path = _write(tmp_path, cfg, f"{cfg.model_type}.json")
        code, out, err = _plan_cli(["--model-config", str(path), "--gpu", "a100-80g", "--gpus", "1", "seq_len=128", "method=lora"], capsys)
        assert code == 0, err
        assert "per-GPU peak" in out


def test_encoder_decoder_is_built_as_its_seq2seq_model(tmp_path):
    """BART also maps to BartForCausalLM (its decoder alone); the model trained is the seq2seq one,
    with its encoder stack."""
    import json

    from transformers import BartConfig

    path = tmp_path / "bart.json"
    cfg = BartConfig(
        d_model=64,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        vocab_size=512,
    )
    path.write_text(json.dumps(cfg.to_dict()))
    arch = params.summary(path)
    assert arch.architecture == "BartForConditionalGeneration" and arch.encoder_decoder
    assert {"encoder", "decoder"} <= set(arch.stacks)


def test_falcon_runs_one_key_value_head_and_does_not_repeat_it(tmp_path):
    """falcon-7b's config says num_kv_heads 71 but its attention runs one (multi_query without the new
    decoder architecture), and hands it to SDPA as it is: no repeat_kv copy."""
    import json

    from transformers import FalconConfig

    path = tmp_path / "falcon.json"
    path.write_text(json.dumps(FalconConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=512).to_dict()))
    st = params.summary(path).stacks["text"]
    assert (st.heads, st.kv_heads, st.kv_repeat) == (4, 1, "never")


def test_per_head_norms_are_sized_by_heads_not_hidden(tmp_path):
    """Qwen3's q_norm / k_norm normalise every head (weight of head_dim): heads x head_dim and
    kv_heads x head_dim elements a token, apart from the two hidden-size norms."""
    import json

    from transformers import Qwen3Config

    path = tmp_path / "qwen3.json"
    cfg = Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=512)
    path.write_text(json.dumps(cfg.to_dict()))
    st = params.summary(path).stacks["text"]
    assert (st.norms_per_layer, st.head_norm_elems) == (2, (4 + 2) * 32)


# ----------------------------------------------------------------------------------------------
# Configs transformers builds that the model-config check used to refuse as bad input (exit 2), from
# `trace_sweep.py --scan` (every model type's default config): what transformers itself writes.


def _check(path):
    from vramfit.checks import model_config
    from vramfit.problems import Problems

    problems = Problems()
    data = model_config.check(path, problems)
    return data, [p.render() if hasattr(p, "render") else str(p) for p in problems.items]


@pytest.mark.parametrize(
    "config_class, kwargs, why",
    [
        ("Mamba2Config", {"num_hidden_layers": 2, "hidden_size": 64, "num_heads": 8, "head_dim": 16, "vocab_size": 128}, "Infinity in time_step_limit"),
        (
            "GPTNeoConfig",
            {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "attention_types": [[["global", "local"], 1]], "vocab_size": 128},
            "intermediate_size None: 4 x hidden",
        ),
        ("ProphetNetConfig", {"num_encoder_layers": 2, "num_decoder_layers": 2, "hidden_size": 64, "vocab_size": 128}, "depth as num_encoder_layers"),
        ("FunnelConfig", {"block_sizes": [1, 1], "d_model": 64, "n_head": 4, "d_head": 16, "d_inner": 128, "vocab_size": 128}, "depth as block_sizes"),
    ],
)
def test_configs_transformers_writes_are_not_bad_input(tmp_path, config_class, kwargs, why):
    import transformers

    config = getattr(transformers, config_class)(**kwargs)
    path = tmp_path / "config.json"
    path.write_text(config.to_json_string())  # transformers' own writer (json.dumps: float("inf") -> Infinity)
    data, problems = _check(path)
    assert data is not None and not problems, (why, problems)


def test_a_publishers_own_config_flag_is_not_a_nested_config(tmp_path):
    """SmolLM2-135M/360M publish `is_llama_config: true` (a flag their nanotron export writes, no sub-config llama reads):
    not bad input. A sub-config the class reads (a VLM's text_config) written as a flag still is."""
    llama = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**llama, "is_llama_config": True}))
    data, problems = _check(path)
    assert data is not None and not problems, problems
    path.write_text(json.dumps({"model_type": "llava", "text_config": True}))
    data, problems = _check(path)
    assert data is None and any("text_config" in p and "nested config" in p for p in problems), problems


def test_per_layer_lists_are_sizes_but_nan_and_fractions_are_not(tmp_path):
    from transformers import Gemma3nTextConfig

    gemma3n = json.loads(Gemma3nTextConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=1, vocab_size=128).to_json_string())
    base = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128}
    for config, ok in [
        ({**gemma3n, "intermediate_size": [128, 256]}, True),  # one per layer (Gemma 3n)
        ({**gemma3n, "intermediate_size": [128, 0]}, False),
        ({**base, "max_position_embeddings": 1200.5}, False),
    ]:
        path = tmp_path / "c.json"
        path.write_text(json.dumps(config))
        assert (_check(path)[0] is not None) == ok, config
    path.write_text(json.dumps(base)[:-1] + ', "rope_theta": NaN}')
    assert _check(path)[0] is None


def test_a_state_space_stack_is_planned_from_the_trace_not_as_attention(tmp_path):
    """Mamba-2 layers have no attention: the analytic formulas do not apply, so the plan says so and the
    trace sizes the activations (Arch.analytic_gap -> trace.train_terms)."""
    from transformers import Mamba2Config

    path = tmp_path / "mamba2.json"
    path.write_text(Mamba2Config(num_hidden_layers=4, hidden_size=64, num_heads=8, head_dim=16, vocab_size=128, n_groups=1).to_json_string())
    arch = params.summary(path)
    assert arch.text.mixers == ("Mamba2Mixer",) and "Mamba2Mixer" in arch.analytic_gap
    llama = params.summary(REPO / "model_configs" / "llama-3.2-3b.json")
    assert llama.text.mixers == () and llama.analytic_gap is None


def test_a_model_needing_a_missing_library_says_which_and_how(tmp_path, monkeypatch):
    import transformers

    from vramfit.problems import ConfigError

    def needs_timm(*args, **kwargs):
        raise ImportError("TimmWrapperModel requires the timm library but it was not found in your environment.")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", needs_timm)
    monkeypatch.setattr(transformers.AutoModel, "from_config", needs_timm)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4, "vocab_size": 96}))
    with pytest.raises(ConfigError) as exc:
        params.summary(path)
    text = str(exc.value.problems.items[0])
    assert "needs the timm library" in text and "pip install timm" in text


def test_peft_moe_tables_are_peft_own_and_a_warm_read_imports_no_peft(tmp_path, monkeypatch):
    """Every LoRA plan asks whether PEFT wraps fused MoE experts; importing PEFT to answer costs seconds a plan
    (a warm `plan --trace` of a LoRA recipe took 6 s instead of 0.3). The tables are read once per library
    versions into the cache, equal to PEFT's own, and a second process answers from the cache alone."""
    import subprocess
    import sys

    from peft.utils.transformers_weight_conversion import _MODEL_TO_CONVERSION_PATTERN, _MOE_FUSED_TARGETS, _MOE_TARGET_MODULE_MAPPING

    from vramfit.planner import params

    monkeypatch.setenv("VRAMFIT_CACHE_DIR", str(tmp_path))
    tables = params.peft_moe_conversion()
    assert tables["pattern"] == dict(_MODEL_TO_CONVERSION_PATTERN)
    assert tables["mapping"] == {k: dict(v) for k, v in _MOE_TARGET_MODULE_MAPPING.items()}
    assert set(tables["fused"]) == set(_MOE_FUSED_TARGETS) and "mixtral" in tables["converted"]
    probe = "import sys; from vramfit.planner import params; t = params.peft_moe_conversion(); print('peft' in sys.modules, len(t['pattern']))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", str(len(_MODEL_TO_CONVERSION_PATTERN))], out.stderr[-2000:]
