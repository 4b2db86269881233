"""`unfrozen_parameters`: full fine-tuning of only the weights whose names the regexes match (params.py
`unfrozen` / `count`), as philschmid's run_sft.py `setup_model_for_spectrum` and axolotl's
`freeze_layers_except` set requires_grad. The names are the meta model's own `named_parameters()`."""

from __future__ import annotations

import importlib
import json

import pytest

from vramfit.planner import params
from vramfit.planner.setup import Setup
from vramfit.problems import ConfigError

planner = importlib.import_module("vramfit.planner.plan")
H, FFN, LAYERS, VOCAB = 64, 128, 4, 512
COMMON = ["dtype=bfloat16", "per_device_train_batch_size=1", "seq_len=128", "optim=adamw_torch"]
# lm_head and the down_proj of layers 1 and 3 (`model.layers.1` must not take layers 10-19 of a deeper model:
# the dot after the index is part of the pattern)
LISTED = "^lm_head.weight$;model.layers.1.mlp.down_proj;model.layers.3.mlp.down_proj"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=H, intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB)
    path = tmp_path_factory.mktemp("unfrozen") / "llama.json"
    path.write_text(json.dumps(cfg.to_dict(), default=str))
    return path


def _setup(path, *items, gpus=1, deepspeed=None):
    return Setup.from_args(path, "a100-80g", gpus, 1, deepspeed, COMMON + list(items))


def test_trainable_count_is_the_listed_weights(llama):
    s = _setup(llama, f"unfrozen_parameters={LISTED}")
    arch = params.summary(llama)
    counts = params.count(arch, s)
    assert counts.trainable == VOCAB * H + 2 * H * FFN  # lm_head [vocab, h] + two down_proj [h, ffn]
    assert counts.frozen == arch.total - counts.trainable
    assert counts.lm_head_trainable and counts.text_trainable  # activations stay full fine-tuning's
    assert any("unfrozen_parameters: 3 of" in n and "full fine-tuning" in n for n in s.notes)
    full = params.count(arch, _setup(llama))
    assert full.trainable == arch.total


def test_optimizer_states_and_sharded_states_scale_with_the_listed_weights(llama):
    arch = params.summary(llama)
    for gpus, ds in ((1, None), (4, "zero3")):
        part = planner.plan(_setup(llama, f"unfrozen_parameters={LISTED}", gpus=gpus, deepspeed=ds))
        full = planner.plan(_setup(llama, gpus=gpus, deepspeed=ds))
        trained = VOCAB * H + 2 * H * FFN
        ratio = part.phase_breakdowns["train"]["optimizer_states"] / full.phase_breakdowns["train"]["optimizer_states"]
        assert ratio == pytest.approx(trained / arch.total, rel=1e-6)


def test_regexes_that_match_nothing_or_do_not_compile_are_bad_input(llama):
    with pytest.raises(ConfigError, match="none of the 1 regexes matches"):
        _setup(llama, "unfrozen_parameters=language_model.layers")  # re.match: anchored at the name's start
    with pytest.raises(ConfigError, match="is not a regular expression"):
        _setup(llama, "unfrozen_parameters=model.layers.(")
    with pytest.raises(ConfigError, match="with a LoRA adapter"):
        _setup(llama, "method=lora", "unfrozen_parameters=^lm_head")
