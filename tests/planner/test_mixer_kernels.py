"""The sequence mixers' fused kernels (planner/mixer_kernels.py): what mamba-ssm, causal-conv1d and
flash-linear-attention keep for backward, read from their source, traced inside the step in place of transformers'
torch fallback; the knob `mixer_kernels=fused|torch` that says which path the run takes; and the trace's lengths (the
fused path loops over nothing and is traced at the run's length, a per-token torch loop at 8-32 tokens)."""

from __future__ import annotations

import json
import math

import pytest

from tests.planner.planner_support import qwen3_next_config
from vramfit.planner import mixer_kernels, params, trace
from vramfit.planner.setup import Setup
from vramfit.problems import ConfigError


def _write(tmp_path, config) -> object:
    path = tmp_path / f"{config.model_type}.json"
    path.write_text(json.dumps(config.to_dict(), default=str))
    return path


def _mamba(tmp_path):
    from transformers import MambaConfig

    return _write(tmp_path, MambaConfig(hidden_size=64, num_hidden_layers=2, vocab_size=256, state_size=8))


def _mamba2(tmp_path):
    from transformers import Mamba2Config

    return _write(
        tmp_path, Mamba2Config(hidden_size=64, num_hidden_layers=2, vocab_size=256, state_size=16, num_heads=4, head_dim=32, n_groups=1, chunk_size=32)
    )


def _lfm2(tmp_path):
    from transformers import Lfm2Config

    cfg = Lfm2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
    cfg.layer_types = ["conv", "full_attention"]
    return _write(tmp_path, cfg)


def _setup(path, **kw) -> Setup:
    base = dict(label="t", source="t", model_config=path, gpu="a100-80g", gpus_per_node=1, engine="single", precision="bf16-true", optimizer="adamw_torch")
    return Setup(**{**base, "seq_len": 256, "micro_batch": 2, **kw})


def _saved_bytes(fn, *args, **kwargs) -> tuple[int, object]:
    """Bytes of the tensors the call saves for backward that are not its inputs' storages (saved-tensor hooks see
    `ctx.save_for_backward`), and its output."""
    import torch

    inputs = {a.untyped_storage().data_ptr() for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in inputs:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args, **kwargs)
    return sum(seen.values()), out


def test_each_kernel_keeps_what_its_source_saves():
    """Each Function saves, beyond its inputs, what the kernel's `ctx.save_for_backward` holds (sizes from the source
    cited in mixer_kernels.py), and its backward returns gradients of the inputs' shapes."""
    import torch

    b, L, H, d, n, r = 2, 96, 32, 64, 8, 4
    bf = dict(dtype=torch.bfloat16, requires_grad=True)
    # causal-conv1d: the input only (the activation is fused), not the pre-activation the torch path keeps
    xb = torch.randn(b, L, d, **bf)
    x = xb.transpose(1, 2)  # channel-last, as transformers passes it: no copy
    w = torch.randn(d, 4, **bf)
    saved, out = _saved_bytes(mixer_kernels.causal_conv1d_fn, x, w, None, activation="silu")
    assert saved == 0 and out.shape == x.shape
    out.sum().backward()
    assert xb.grad.shape == xb.shape and w.grad.shape == w.shape
    # MambaInnerFn (checkpoint_lvl 1): the contiguous xz copy, x_dbl, B, C, the scan's fp32 chunk states, out
    xzb = torch.randn(b, L, 2 * d, **bf)
    xz = xzb.transpose(1, 2)
    weights = [torch.randn(*s, **bf) for s in ((d, 1, 4), (d,), (r + 2 * n, d), (d, r), (H, d))]
    A, D, dt_bias = torch.randn(d, n, requires_grad=True), torch.randn(d, requires_grad=True), torch.randn(d, requires_grad=True)
    saved, out = _saved_bytes(mixer_kernels.mamba_inner_fn, xz, *weights, None, A, None, None, D, delta_bias=dt_bias)
    expected = b * 2 * d * L * 2 + b * L * (r + 2 * n) * 2 + 2 * b * n * L * 2 + b * d * math.ceil(L / 2048) * 2 * n * 4 + b * d * L * 2
    assert saved == expected, (saved, expected)
    out.sum().backward()
    assert xzb.grad.shape == xzb.shape and weights[2].grad.shape == weights[2].shape
    # MambaSplitConv1dScanCombinedFn with the gated RMSNorm: out_x and the norm's fp32 rstd; zxbcdt is the input
    nheads, p, g, chunk = 4, 16, 1, 32
    dim = nheads * p
    zxbcdt = torch.randn(b, L, 2 * dim + 2 * g * n + nheads, **bf)
    conv_w, conv_b = torch.randn(dim + 2 * g * n, 4, **bf), torch.randn(dim + 2 * g * n, **bf)
    norm_w, out_w = torch.randn(dim, **bf), torch.randn(H, dim, **bf)
    A2, D2, dtb = (torch.randn(nheads, requires_grad=True) for _ in range(3))
    saved, out = _saved_bytes(
        mixer_kernels.mamba_split_conv1d_scan_combined,
        zxbcdt,
        conv_w,
        conv_b,
        dtb,
        A2,
        D=D2,
        chunk_size=chunk,
        rmsnorm_weight=norm_w,
        outproj_weight=out_w,
        headdim=p,
        ngroups=g,
    )
    assert saved == b * L * dim * 2 + g * b * L * 4 and out.shape == (b, L, H)
    out.sum().backward()
    assert zxbcdt.grad.shape == zxbcdt.shape and conv_w.grad.shape == conv_w.shape
    # ChunkGatedDeltaRuleFunction (l2norm in the kernel): l2-normed q, k and their fp32 rstd, the contiguous v copy,
    # the chunk-local cumsum of g (fp32), A [B, T, HV, 64]; beta is an input
    hk, hv, K, V = 2, 4, 16, 16
    mixed = torch.randn(b, L, hk * K * 2 + hv * V, **bf)
    q, k, v = (t.reshape(b, L, -1, s) for t, s in zip(torch.split(mixed, [hk * K, hk * K, hv * V], -1), (K, K, V)))
    gate, beta = torch.randn(b, L, hv, requires_grad=True), torch.rand(b, L, hv, **bf)
    saved, (o, state) = _saved_bytes(mixer_kernels.chunk_gated_delta_rule, q, k, v, g=gate, beta=beta, use_qk_l2norm_in_kernel=True)
    expected = 2 * (b * L * hk * K * 2 + b * L * hk * 4) + b * L * hv * V * 2 + b * L * hv * 4 + b * L * hv * 64 * 2
    assert saved == expected and o.shape == v.shape and state is None, (saved, expected)
    o.sum().backward()
    assert mixed.grad.shape == mixed.shape and gate.grad.shape == gate.shape


def test_a_mamba_plan_is_traced_with_the_kernels_at_its_own_length_and_says_so(tmp_path):
    """With the kernels (the default) the Mamba layers run MambaInnerFn: no per-token loop, so a 4,096-token step is
    traced at its length; the plan names the kernels, the packages and the other path. The torch fallback keeps more."""
    path = _mamba(tmp_path)
    fused = trace.trace_step(_setup(path, seq_len=4096), cache=False)
    assert fused.lengths == () and fused.linear
    assert any("mamba_inner_fn" in m for m in fused.modelled)
    assert any("mamba-ssm" in n and "mixer_kernels=torch" in n for n in fused.notes), fused.notes
    arch = params.summary(path)
    assert trace._length_plan(_setup(path, seq_len=4096, mixer_kernels="torch"), arch) == (8, 16, 24, 32)


@pytest.mark.parametrize("build", [_mamba2, _lfm2, qwen3_next_config], ids=["mamba2", "lfm2", "qwen3_next"])
def test_fused_kernels_keep_less_than_the_torch_fallback(tmp_path, build):
    """Mamba-2 (MambaSplitConv1dScanCombinedFn: one Function from in_proj to out_proj), LFM2's short convolution
    (CausalConv1dFn) and Qwen3-Next's Gated DeltaNet (CausalConv1dFn + ChunkGatedDeltaRuleFunction) keep less with the
    kernels than on transformers' torch path; both are traced at the run's length (no loop long enough to shorten)."""
    path = build(tmp_path)
    kw = dict(seq_len=128, micro_batch=1) if build is qwen3_next_config else {}
    if build is qwen3_next_config:
        kw.update(precision="bf16", optimizer="adamw_torch")
    fused = trace.trace_step(_setup(path, **kw), cache=False, check_linear=False)
    slow = trace.trace_step(_setup(path, mixer_kernels="torch", **kw), cache=False, check_linear=False)
    assert fused.lengths == slow.lengths == ()
    assert fused.train_transient < slow.train_transient, (fused.train_transient, slow.train_transient)
    assert any("fused kernels" in m for m in fused.modelled) and not any("fused kernels" in m for m in slow.modelled)
    assert any("torch fallback" in t for t in slow.traced)


def test_the_knob_is_read_by_plan_recipes_and_review(tmp_path):
    """`mixer_kernels=fused|torch` in `plan --model-config` overrides, a recipe's planner section and the review's
    --mixer-kernels; any other value is bad input, and so is the torch path with packed sequences (transformers raises:
    "can't keep packed sequences apart without" the kernels' package)."""
    from vramfit.recipe import Knobs
    from vramfit.review.cli import add_arguments

    path = _mamba(tmp_path)
    assert Setup.from_args(path, "h100", 1).mixer_kernels == "fused"
    assert Setup.from_args(path, "h100", 1, overrides=["mixer_kernels=torch"]).mixer_kernels == "torch"
    for bad in (["mixer_kernels=cuda"], ["mixer_kernels=torch", "padding_free=true"]):
        with pytest.raises(ConfigError) as refused:
            Setup.from_args(path, "h100", 1, overrides=bad)
        assert any(p.key == "mixer_kernels" for p in refused.value.problems.items), bad
    assert Knobs(mixer_kernels="torch").mixer_kernels == "torch"
    from tests.planner.planner_support import recipe_path
    from vramfit.recipe import load

    recipe = load(recipe_path("axolotl-llama-3b-8xa100-80g"), ["planner.mixer_kernels=torch"])
    assert Setup.from_recipe(recipe).mixer_kernels == "torch"
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["x.yml", "--mixer-kernels", "torch"]).mixer_kernels == "torch"
    # a trace of a model with mixers is keyed by the path; one without keeps its key
    assert trace.trace_key(_setup(path)) != trace.trace_key(_setup(path, mixer_kernels="torch"))
