"""The activation model against what autograd really keeps, on tiny layers of the real classes.

Each test builds one transformer layer of the model family with small shapes (the real shapes are
in the comments), runs it forward under `torch.autograd.graph.saved_tensors_hooks` and sums the
distinct storages autograd keeps, parameters and RoPE tables excluded. CPU kernels stand in for
CUDA ones: the CPU flash-attention kernel keeps what the CUDA ones keep (q, k, v, output, logsumexp).
"""

from __future__ import annotations

import pytest
import torch

from vramfit.planner import params
from vramfit.planner.activations import LayerMode, LogitsMode, layer_bytes, logits_bytes
from vramfit.planner.params import Stack

from planner_support import REPO


def kept_bytes_per_token(layer, x, skip=(), **kwargs) -> float:
    skip = {p.untyped_storage().data_ptr() for p in layer.parameters()} | set(skip)
    kept: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            kept[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x, **kwargs)
    return sum(kept.values()) / (x.shape[0] * x.shape[1])


def stack(**kw) -> Stack:
    base = dict(
        name="text",
        layers=1,
        hidden=256,
        ffn=688,
        heads=8,
        kv_heads=2,
        head_dim=32,
        gated=True,
        norm="rms",
        norms_per_layer=2,
        cross_attention=False,
        attn_dropout=0.0,
        hidden_dropout=0.0,
        act_saves=1.0,
        layer_params=(1,),
    )
    return Stack(**{**base, **kw})


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("trainable", [True, False])
def test_llama_layer(attention, trainable):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=256,  # 3072 in Llama-3.2-3B
        intermediate_size=688,
        num_attention_heads=8,
        num_key_value_heads=2,
        num_hidden_layers=1,
        vocab_size=64,
        attn_implementation=attention,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    layer = model.model.layers[0]
    layer.requires_grad_(trainable)
    b, s = 2, 64
    x = torch.randn(b, s, 256, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.model.rotary_emb(x, torch.arange(s)[None].expand(b, s))
    mask = torch.ones(b, 1, s, s, dtype=torch.bool).tril()  # a padding mask, as in SFT batches: GQA heads repeated
    measured = kept_bytes_per_token(
        layer, x, skip=(cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()), attention_mask=mask, position_embeddings=(cos, sin)
    )
    predicted, _ = layer_bytes(stack(), LayerMode(act=2, trainable=trainable, attention=attention), s)
    assert predicted == pytest.approx(measured, rel=0.02)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_phi_layer_with_python_gelu_and_dropout(attention):
    """Phi (TinyChart's LLM): one LayerNorm, parallel attention + MLP, `gelu_new` written in Python."""
    from transformers import PhiConfig, PhiForCausalLM

    cfg = PhiConfig(
        hidden_size=256,  # 2560 in Phi-2
        intermediate_size=1024,
        num_attention_heads=8,
        num_hidden_layers=1,
        vocab_size=64,
        resid_pdrop=0.1,
        attn_implementation=attention,
    )
    model = PhiForCausalLM(cfg).to(torch.bfloat16).train()
    arch_stack = params.summary(REPO / "model_configs" / "tinychart-3b-768.json").stacks["text"]
    assert (arch_stack.norms_per_layer, arch_stack.act_saves, arch_stack.gated) == (1, 4.0, False)
    x = torch.randn(2, 64, 256, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.model.rotary_emb(x, torch.arange(64)[None].expand(2, 64))
    measured = kept_bytes_per_token(
        model.model.layers[0], x, skip=(cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()), attention_mask=None, position_embeddings=(cos, sin)
    )
    predicted, _ = layer_bytes(
        stack(ffn=1024, kv_heads=8, gated=False, norm="layer", norms_per_layer=1, hidden_dropout=0.1, act_saves=4.0),
        LayerMode(act=2, trainable=True, attention=attention),
        64,
    )
    # CPU dropout keeps its mask in bf16 (CUDA: bool) and Phi's sdpa output is copied once more: within 8%
    assert predicted == pytest.approx(measured, rel=0.08)


def test_clip_vision_layer_quick_gelu():
    from transformers import CLIPVisionConfig
    from transformers.models.clip.modeling_clip import CLIPEncoderLayer

    layer = CLIPEncoderLayer(
        CLIPVisionConfig(
            hidden_size=256,  # 1024 in CLIP ViT-L/14
            intermediate_size=1024,
            num_attention_heads=8,
            attn_implementation="sdpa",
        )
    )
    layer = layer.to(torch.bfloat16).train()
    x = torch.randn(2, 64, 256, dtype=torch.bfloat16, requires_grad=True)
    measured = kept_bytes_per_token(layer, x, attention_mask=None)
    predicted, _ = layer_bytes(stack(ffn=1024, kv_heads=8, gated=False, norm="layer", act_saves=2.0), LayerMode(act=2, trainable=True, attention="sdpa"), 64)
    assert predicted == pytest.approx(measured, rel=0.02)


def test_logits_peak_is_twelve_bytes_per_logit_and_liger_avoids_it():
    tokens, vocab, hidden = 16384, 128256, 3072
    plain = logits_bytes(LogitsMode(vocab, hidden, 2, liger=False, head_trainable=True, head_bytes=2), tokens)
    assert plain == tokens * vocab * 12  # kept fp32 log-probs + two fp32 gradients
    liger = logits_bytes(LogitsMode(vocab, hidden, 2, liger=True, head_trainable=True, head_bytes=2), tokens)
    # liger_kernel: chunk = next_pow2(ceil(BT / ceil(V / H))) rows of logits, grad input BT x H, grad weight V x H
    chunk = 1 << (-(-tokens // -(-vocab // hidden)) - 1).bit_length()
    assert liger == chunk * vocab * 2 + tokens * hidden * 2 + vocab * hidden * 2
    assert liger < plain / 5
