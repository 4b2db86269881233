"""A model whose text layers mix the sequence without attention (Mamba, the gated delta rule of Qwen3-Next / Qwen3.5)
is sized by tracing those layers on the CPU, where transformers runs their torch fallback; on a GPU with the kernels
installed (mamba-ssm, causal-conv1d, flash-linear-attention, or the `kernels` package's Hub kernels) the same layers keep
less. A 'does not fit' resting on that trace says so and names the packages (axolotl's examples/mamba/config.yml: 221.7
GiB traced on an 80 GB card). It stays an error: without the kernels that is the run (hiyouga/LlamaFactory#10367's
Qwen3.5-27B QLoRA OOM on 48 GB cards). That wording belongs to the torch path only (`mixer_kernels=torch`, the review's
--mixer-kernels torch): by default the plan sizes the kernels themselves (planner/mixer_kernels.py; axolotl's Mamba
example then plans 30.8 GiB and fits)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from transformers import LlamaConfig, MambaConfig

from vramfit.review.reviewer import _torch_path_mixers


def _plan(tmp_path, config, mixer_kernels="torch") -> SimpleNamespace:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    return SimpleNamespace(setup=SimpleNamespace(model_config=path, mixer_kernels=mixer_kernels))


def test_a_mamba_model_is_traced_on_the_torch_fallback_of_its_mixer(tmp_path):
    config = MambaConfig(hidden_size=64, num_hidden_layers=2, vocab_size=512, state_size=8)
    assert _torch_path_mixers(_plan(tmp_path, config)) == ("MambaMixer", "mamba-ssm and causal-conv1d")
    assert _torch_path_mixers(_plan(tmp_path, config, "fused")) is None  # planned with the kernels: nothing to excuse


def test_an_attention_model_has_no_fallback_to_speak_of(tmp_path):
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=512)
    assert _torch_path_mixers(_plan(tmp_path, config)) is None
