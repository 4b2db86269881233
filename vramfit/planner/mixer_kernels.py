"""The fused kernels of the sequence mixers, for the trace: what mamba-ssm, causal-conv1d and flash-linear-attention
allocate and keep for backward, read from their source, as autograd Functions that run under fake tensors.

transformers 5.23 calls each mixer's kernel through `use_kernel_func_from_hub_with_fallback(NAME, PACKAGE)`
(integrations/hub_kernels.py): the `kernels` package's Hub kernel when asked for, else the original package when it
imports (`mamba_ssm`, `causal_conv1d`, `fla`), else the decorated torch function. On a GPU with the packages installed a
training step therefore runs:
- Mamba / FalconMamba (`MambaMixer.forward`, `self.training and cache_params is None`): `mamba_inner_fn`, one autograd
  Function from the in_proj output to the out_proj output (conv1d, x_proj, dt_proj, the selective scan, out_proj);
- Jamba / Zamba: `causal_conv1d_fn`, then `selective_scan_fn`;
- Mamba-2, Bamba, Falcon-H1, GraniteMoeHybrid, NemotronH, Zamba2 (`*Mixer.forward` in training):
  `mamba_split_conv1d_scan_combined`, one Function from the in_proj output to the out_proj output (conv1d, the chunked
  scan, the gated RMSNorm, out_proj);
- Qwen3-Next / Qwen3.5 / OLMo-hybrid Gated DeltaNet: `causal_conv1d_fn`, then fla's `chunk_gated_delta_rule`;
- LFM2's short convolution: `causal_conv1d_fn`.
Without the packages the torch functions run: a per-token loop (Mamba's `mamba_selective_scan`), a per-chunk loop
(`torch_chunk_gated_delta_rule`) or chunked einsums (`mamba2_chunk_scan`), each keeping its own intermediates.

The CPU trace cannot run the CUDA / Triton kernels. With `mixer_kernels=fused` (Setup) the trace replaces each decorated
function of the model's modeling module by the Function below for the step: its forward allocates the tensors the
kernel's forward allocates, saves what the kernel saves (`ctx.save_for_backward`), and returns what it returns; its
backward allocates what the kernel's backward allocates, in order, and returns gradients of the inputs' shapes. The
rest of the model (projections, norms, attention layers, MLPs, checkpointing, which discards and recomputes what a
Function saves as it does any op's) stays traced. Sources, each read at the commit named:
- state-spaces/mamba e9594ce1c732d97440f0332fdc43170a2294dbfa: mamba_ssm/ops/selective_scan_interface.py
  (`SelectiveScanFn`, `MambaInnerFn`, `checkpoint_lvl=1`), csrc/selective_scan/selective_scan.cpp (`selective_scan_fwd`:
  out, x of [batch, dim, ceil(L / 2048), 2 * dstate] fp32, out_z; `selective_scan_bwd`), mamba_ssm/ops/triton/
  ssd_combined.py (`MambaSplitConv1dScanCombinedFn`, `_mamba_chunk_scan_combined_fwd` / `_bwd`), ssd_chunk_state.py,
  ssd_state_passing.py, ssd_bmm.py, ssd_chunk_scan.py, layernorm_gated.py (`_layer_norm_fwd`: out, rstd fp32);
- Dao-AILab/causal-conv1d 0d2252d161f25f7907bbd05985c08ab98d255874: causal_conv1d/causal_conv1d_interface.py
  (`CausalConv1dFn`: saves its input only; the activation is fused);
- fla-org/flash-linear-attention bc3b101dcb713ddc5bd8924b66754eb68b5ccf89: fla/ops/gated_delta_rule/chunk.py
  (`ChunkGatedDeltaRuleFunction`, `chunk_gated_delta_rule_fwd` / `_bwd`), chunk_fwd.py (A: [B, T, HV, 64] in k's dtype),
  wy_fast.py, fla/ops/common/chunk_delta_h.py (h: [B, NT, HV, K, V] in k's dtype), chunk_o.py, fla/modules/l2norm.py,
  fla/utils/_decorators.py (`input_guard`: every input made contiguous).

Not modelled: the kernels' FLOPs (only the projections the Functions run with torch ops are counted), Kimi-Linear's
`chunk_kda` (its torch path is traced), the SM-count-dependent split of Mamba-2's dB / dC / dCB partial sums (taken at
an H100's 132 SMs)."""

from __future__ import annotations

import contextlib
import inspect
import math
import re
import sys
from typing import Any

MIXER_KERNELS = ("fused", "torch")
# Streaming multiprocessors of the GPU the kernels split their backward partial sums over (mamba_ssm ssd_chunk_state.py
# `_chunk_state_bwd_db`: `sm_count = torch.cuda.get_device_properties(...).multi_processor_count`): an H100 SXM.
SM_COUNT = 132
# What each kernel's package is called when a plan names it
PACKAGES = {
    "causal_conv1d_fn": "causal-conv1d",
    "selective_scan_fn": "mamba-ssm",
    "mamba_inner_fn": "mamba-ssm and causal-conv1d",
    "mamba_split_conv1d_scan_combined": "mamba-ssm and causal-conv1d",
    "chunk_gated_delta_rule": "flash-linear-attention",
}
_DECORATED = re.compile(r'@use_kernel_func_from_hub_with_fallback\(\s*"(\w+)",\s*"\w+"[^)]*\)\s*\ndef (\w+)\(')


def decorated(module_name: str) -> dict[str, str]:
    """{kernel name: the module global that transformers decorated with it} for one modeling module."""
    module = sys.modules.get(module_name)
    if module is None:
        return {}
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return {}
    return {kernel: name for kernel, name in _DECORATED.findall(source)}


@contextlib.contextmanager
def fused(model):
    """Within: every decorated mixer function of the model's modeling modules that a kernel below stands for runs that
    kernel's Function. Yields the set of the kernel names called so far (filled as the model calls them)."""
    emulations = _emulations()
    modules = {type(m).__module__ for m in model.modules()}
    undo: list[tuple[Any, str, Any]] = []
    called: set[str] = set()

    def calling(kernel, function):
        def call(*args, **kwargs):
            called.add(kernel)
            return function(*args, **kwargs)

        return call

    try:
        for module_name in sorted(modules):
            for kernel, name in decorated(module_name).items():
                if kernel in emulations:
                    module = sys.modules[module_name]
                    undo.append((module, name, getattr(module, name)))
                    setattr(module, name, calling(kernel, emulations[kernel]))
        yield called
    finally:
        for module, name, value in reversed(undo):
            setattr(module, name, value)


def _emulations() -> dict[str, Any]:
    return {
        "causal_conv1d_fn": causal_conv1d_fn,
        "selective_scan_fn": selective_scan_fn,
        "mamba_inner_fn": mamba_inner_fn,
        "mamba_split_conv1d_scan_combined": mamba_split_conv1d_scan_combined,
        "chunk_gated_delta_rule": chunk_gated_delta_rule,
    }


def _torch():
    import torch

    return torch


def _function(name: str, forward, backward):
    """An autograd Function class named after the kernel's."""
    torch = _torch()
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})


# ---------------------------------------------------------------------------------------------------------------------
# causal-conv1d: CausalConv1dFn
# ---------------------------------------------------------------------------------------------------------------------


def _conv_forward(ctx, x, weight, bias):
    if x.stride(2) != 1 and x.stride(1) != 1:
        x = x.contiguous()
    out = _torch().empty_like(x)  # causal_conv1d_fwd: the output (the activation applied in the kernel)
    ctx.save_for_backward(x, weight, bias)
    return out


def _conv_backward(ctx, dout):
    torch = _torch()
    x, weight, bias = ctx.saved_tensors
    if dout.stride(2) != 1 and dout.stride(1) != 1:
        dout = dout.contiguous()
    dx = torch.empty_like(x)
    dweight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)  # causal_conv1d_bwd: fp32 partials
    dbias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if bias is not None else None
    return dx, dweight.to(weight.dtype), dbias.to(bias.dtype) if bias is not None else None


_CausalConv1d = None


def causal_conv1d_fn(x, weight, bias=None, activation=None, seq_idx=None, *args, **kwargs):
    global _CausalConv1d
    if _CausalConv1d is None:
        _CausalConv1d = _function("CausalConv1dFn", _conv_forward, _conv_backward)
    return _CausalConv1d.apply(x, weight, bias)


# ---------------------------------------------------------------------------------------------------------------------
# mamba-ssm: SelectiveScanFn (Jamba, Zamba)
# ---------------------------------------------------------------------------------------------------------------------


def _scan_forward(ctx, u, delta, A, B, C, D, z, delta_bias, return_last_state):
    torch = _torch()
    u, delta = (t if t.stride(-1) == 1 else t.contiguous() for t in (u, delta))
    B, C = (t if t.stride(-1) == 1 else t.contiguous() for t in (B, C))
    if z is not None and z.stride(-1) != 1:
        z = z.contiguous()
    batch, dim, length = u.shape
    dstate = A.shape[-1]
    out = torch.empty_like(delta)
    x = torch.empty(batch, dim, math.ceil(length / 2048), 2 * dstate, dtype=torch.float32, device=u.device)
    out_z = torch.empty_like(z) if z is not None else None
    ctx.has_z = z is not None
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, x, out if z is not None else None)
    result = out_z if z is not None else out
    if return_last_state:
        return result, x[:, :, -1, 1::2]
    return result


def _scan_backward(ctx, dout, *rest):
    torch = _torch()
    u, delta, A, B, C, D, z, delta_bias, x, out = ctx.saved_tensors
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    du = torch.empty_like(u)
    ddelta = torch.empty_like(delta)
    dA = torch.zeros_like(A, dtype=torch.float32)
    dB = torch.zeros_like(B, dtype=torch.float32)  # variable B / C: fp32 (selective_scan_bwd)
    dC = torch.zeros_like(C, dtype=torch.float32)
    dD = torch.zeros_like(D) if D is not None else None
    ddelta_bias = torch.zeros_like(delta_bias) if delta_bias is not None else None
    dz = torch.empty_like(z) if z is not None else None
    return du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, None


_SelectiveScan = None


def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False, *args, **kwargs):
    global _SelectiveScan
    if _SelectiveScan is None:
        _SelectiveScan = _function("SelectiveScanFn", _scan_forward, _scan_backward)
    return _SelectiveScan.apply(u, delta, A, B, C, D, z, delta_bias, bool(return_last_state))


# ---------------------------------------------------------------------------------------------------------------------
# mamba-ssm: MambaInnerFn (Mamba, FalconMamba), checkpoint_lvl=1
# ---------------------------------------------------------------------------------------------------------------------


def _inner_forward(
    ctx, xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight, out_proj_bias, A, D, delta_bias, b_rms, c_rms, dt_rms
):
    import torch.nn.functional as F

    torch = _torch()
    if xz.stride(-1) != 1:
        xz = xz.contiguous()  # transformers passes in_proj(...).transpose(1, 2): a [batch, 2 * dim, L] copy, kept
    batch, two_dim, length = xz.shape
    dim = two_dim // 2
    dstate = A.shape[-1]
    rank = delta_proj_weight.shape[1]
    dtype = xz.dtype
    x_proj_weight, delta_proj_weight, out_proj_weight = (w.to(dtype) for w in (x_proj_weight, delta_proj_weight, out_proj_weight))
    conv1d_out = torch.empty(batch, dim, length, dtype=dtype, device=xz.device)  # causal_conv1d_fwd_function
    x_dbl = F.linear(conv1d_out.transpose(1, 2).reshape(batch * length, dim), x_proj_weight)  # rearrange copies, then (bl, r + 2n)
    delta = delta_proj_weight @ x_dbl[:, :rank].t()  # [dim, b * l]: the scan reads it as [b, dim, l]
    B = x_dbl[:, rank : rank + dstate].reshape(batch, length, 1, dstate).permute(0, 2, 3, 1).contiguous()  # [b, 1, n, l]
    C = x_dbl[:, -dstate:].reshape(batch, length, 1, dstate).permute(0, 2, 3, 1).contiguous()
    if b_rms is not None:  # FalconMamba: rms_norm_forward of B, C and delta, each a new tensor
        B, C = torch.empty_like(B), torch.empty_like(C)
        delta = torch.empty_like(delta)
    out = torch.empty(batch, dim, length, dtype=dtype, device=xz.device)  # selective_scan_cuda.fwd: out (empty_like(delta))
    scan_intermediates = torch.empty(batch, dim, math.ceil(length / 2048), 2 * dstate, dtype=torch.float32, device=xz.device)
    out_z = torch.empty(batch, dim, length, dtype=dtype, device=xz.device)
    del conv1d_out, delta  # checkpoint_lvl 1: recomputed in backward
    ctx.shape = (batch, dim, length, dstate, rank)
    ctx.has_out_bias = out_proj_bias is not None
    ctx.save_for_backward(
        xz, conv1d_weight, conv1d_bias, x_dbl, x_proj_weight, delta_proj_weight, out_proj_weight, A, B, C, D, delta_bias, scan_intermediates, out
    )
    bias = out_proj_bias.to(dtype) if out_proj_bias is not None else None
    return F.linear(out_z.transpose(1, 2), out_proj_weight, bias)


def _inner_backward(ctx, dout):
    torch = _torch()
    xz, conv1d_weight, conv1d_bias, x_dbl, x_proj_weight, delta_proj_weight, out_proj_weight, A, B, C, D, delta_bias, scan_intermediates, out = (
        ctx.saved_tensors
    )
    batch, dim, length, dstate, rank = ctx.shape
    dtype, device = xz.dtype, xz.device

    def bdl(dt=dtype):
        return torch.empty(batch, dim, length, dtype=dt, device=device)

    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    conv1d_out, delta = bdl(), bdl()  # recomputed (checkpoint_lvl 1)
    dxz = torch.empty_like(xz)
    dout_y = out_proj_weight.t() @ dout.reshape(batch * length, -1).t()  # [dim, b * l]
    dconv1d_out, ddelta, out_z = bdl(), bdl(), bdl()  # selective_scan_cuda.bwd: du, ddelta, recomputed out_z (dz into dxz)
    dA = torch.zeros_like(A, dtype=torch.float32)
    dB = torch.zeros_like(B, dtype=torch.float32)
    dC = torch.zeros_like(C, dtype=torch.float32)
    dD = torch.zeros_like(D) if D is not None else None
    ddelta_bias = torch.zeros_like(delta_bias) if delta_bias is not None else None
    dout_proj_weight = torch.empty(out_proj_weight.shape, dtype=dtype, device=device)
    dout_proj_bias = torch.empty(out_proj_weight.shape[0], dtype=dtype, device=device) if ctx.has_out_bias else None
    del out_z, dout_y
    dx_dbl = torch.empty_like(x_dbl)
    db_rows = dB.reshape(batch, dstate, length).permute(0, 2, 1).contiguous()  # rearrange "b 1 n l -> (b l) n", fp32
    del dB, db_rows
    dc_rows = dC.reshape(batch, dstate, length).permute(0, 2, 1).contiguous()
    del dC, dc_rows
    ddelta_proj_weight = torch.empty(delta_proj_weight.shape, dtype=dtype, device=device)
    del ddelta
    conv_rows = conv1d_out.transpose(1, 2).reshape(batch * length, dim)  # rearrange "b d l -> (b l) d" for dx_proj_weight
    dx_proj_weight = torch.empty(x_proj_weight.shape, dtype=dtype, device=device)
    del conv_rows, conv1d_out, delta
    dconv1d_weight = torch.zeros(conv1d_weight.shape, dtype=torch.float32, device=device)  # causal_conv1d_bwd (dx into dxz)
    dconv1d_bias = torch.zeros(conv1d_bias.shape, dtype=torch.float32, device=device) if conv1d_bias is not None else None
    del dconv1d_out, dx_dbl
    return (
        dxz,
        dconv1d_weight.to(conv1d_weight.dtype),
        dconv1d_bias.to(conv1d_bias.dtype) if conv1d_bias is not None else None,
        dx_proj_weight,
        ddelta_proj_weight,
        dout_proj_weight,
        dout_proj_bias,
        dA,
        dD,
        ddelta_bias,
        None,
        None,
        None,
    )


_MambaInner = None


def mamba_inner_fn(
    xz,
    conv1d_weight,
    conv1d_bias,
    x_proj_weight,
    delta_proj_weight,
    out_proj_weight,
    out_proj_bias,
    A,
    B=None,
    C=None,
    D=None,
    delta_bias=None,
    B_proj_bias=None,
    C_proj_bias=None,
    delta_softplus=True,
    checkpoint_lvl=1,
    b_rms_weight=None,
    c_rms_weight=None,
    dt_rms_weight=None,
    b_c_dt_rms_eps=1e-6,
    *args,
    **kwargs,
):
    global _MambaInner
    if _MambaInner is None:
        _MambaInner = _function("MambaInnerFn", _inner_forward, _inner_backward)
    return _MambaInner.apply(
        xz,
        conv1d_weight,
        conv1d_bias,
        x_proj_weight,
        delta_proj_weight,
        out_proj_weight,
        out_proj_bias,
        A,
        D,
        delta_bias,
        b_rms_weight,
        c_rms_weight,
        dt_rms_weight,
    )


# ---------------------------------------------------------------------------------------------------------------------
# mamba-ssm: MambaSplitConv1dScanCombinedFn (Mamba-2 and its hybrids), with the gated RMSNorm and out_proj
# ---------------------------------------------------------------------------------------------------------------------


def _ssd_shapes(zxbcdt, conv1d_weight, D, headdim, ngroups, chunk_size):
    batch, length, width = zxbcdt.shape
    nheads = D.shape[0]
    headdim = headdim if D.dim() == 1 else D.shape[1]
    dim = nheads * headdim
    dstate = (conv1d_weight.shape[0] - dim) // ngroups // 2
    d_nonssm = (width - 2 * dim - 2 * ngroups * dstate - nheads) // 2
    nchunks = math.ceil(length / chunk_size)
    return batch, length, nheads, headdim, dim, dstate, d_nonssm, nchunks


def _split_forward(ctx, zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, rmsnorm_weight, outproj_weight, outproj_bias, chunk_size, headdim, ngroups):
    import torch.nn.functional as F

    torch = _torch()
    batch, length, nheads, headdim, dim, dstate, d_nonssm, nchunks = _ssd_shapes(zxbcdt, conv1d_weight, D, headdim, ngroups, chunk_size)
    dtype, device = zxbcdt.dtype, zxbcdt.device
    f32 = torch.float32
    conv_dim = dim + 2 * ngroups * dstate
    xbc_conv = torch.empty(batch, length, conv_dim, dtype=dtype, device=device)  # causal_conv1d_fwd_function
    # _mamba_chunk_scan_combined_fwd (z=None under the gated RMSNorm)
    dt_out = torch.empty(batch, nheads, nchunks, chunk_size, dtype=f32, device=device)  # _chunk_cumsum_fwd
    dA_cumsum = torch.empty(batch, nheads, nchunks, chunk_size, dtype=f32, device=device)
    states = torch.empty(batch, nchunks, nheads, headdim, dstate, dtype=f32, device=device)  # _chunk_state_fwd
    passed = torch.empty(batch, nchunks, nheads, headdim * dstate, dtype=dtype, device=device)  # _state_passing_fwd (C's dtype)
    final_states = torch.empty(batch, nheads, headdim * dstate, dtype=f32, device=device)
    del states
    CB = torch.empty(batch, nchunks, ngroups, chunk_size, chunk_size, dtype=f32, device=device)  # _bmm_chunk_fwd
    out_x = torch.empty(batch, length, nheads, headdim, dtype=dtype, device=device)  # _chunk_scan_fwd
    del CB, passed, final_states, dt_out, dA_cumsum, xbc_conv
    rstd = None
    if rmsnorm_weight is not None:  # layernorm_gated._layer_norm_fwd: out, rstd [ngroups * b * l] fp32
        out = torch.empty(batch, length, d_nonssm + dim, dtype=dtype, device=device)
        rstd = torch.empty(ngroups * batch * length, dtype=f32, device=device)
    else:
        out = out_x.reshape(batch, length, dim)
    ctx.shape = (batch, length, nheads, headdim, dim, dstate, d_nonssm, nchunks, chunk_size, ngroups)
    ctx.has = (conv1d_bias is not None, rmsnorm_weight is not None, outproj_weight is not None, outproj_bias is not None)
    if outproj_weight is not None:
        outproj_weight = outproj_weight.to(dtype)
        out = F.linear(out, outproj_weight, outproj_bias.to(dtype) if outproj_bias is not None else None)
    ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias, rmsnorm_weight, rstd, outproj_weight)
    return out


def _split_backward(ctx, dout):
    import torch.nn.functional as F

    torch = _torch()
    zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias, rmsnorm_weight, rstd, outproj_weight = ctx.saved_tensors
    batch, length, nheads, headdim, dim, dstate, d_nonssm, nchunks, chunk_size, ngroups = ctx.shape
    has_bias, has_norm, has_proj, has_proj_bias = ctx.has
    dtype, device, f32 = zxbcdt.dtype, zxbcdt.device, torch.float32
    conv_dim = dim + 2 * ngroups * dstate

    def empty(*shape, dt=dtype):
        return torch.empty(*shape, dtype=dt, device=device)

    out_recompute = empty(batch, length, d_nonssm + dim) if has_proj else None
    xbc_conv = empty(batch, length, conv_dim)  # recomputed x, B, C
    dzxbcdt = torch.empty_like(zxbcdt)
    dxbc = empty(batch, length, conv_dim)
    dout_og = dout
    if has_proj:
        dout = F.linear(dout, outproj_weight.t())
    drmsnorm_weight = None
    if has_norm:  # _layer_norm_bwd: dx (dz into dzxbcdt), the weight's fp32 partial sums per SM
        dout = empty(batch * length, dim)
        dw_partial = empty(SM_COUNT, dim, dt=f32)
        drmsnorm_weight = empty(dim)
        del dw_partial
    # _mamba_chunk_scan_combined_bwd
    dt_in = empty(batch, length, nheads)  # dt.clone()
    dA_cumsum, dt = empty(batch, nheads, nchunks, chunk_size, dt=f32), empty(batch, nheads, nchunks, chunk_size, dt=f32)
    CB = empty(batch, nchunks, ngroups, chunk_size, chunk_size, dt=f32)
    states = empty(batch, nchunks, nheads, headdim, dstate, dt=f32)
    passed = empty(batch, nchunks, nheads, headdim * dstate, dt=f32)  # _state_passing_fwd, default fp32 out
    del states
    dstates = empty(batch, nchunks, nheads, headdim, dstate, dt=f32)  # _chunk_scan_bwd_dstates (states' dtype)
    dstates_x, states_x = empty(batch, nchunks, nheads, headdim * dstate), empty(batch, nchunks, nheads, headdim * dstate)
    dA_chunk = empty(batch, nheads, nchunks, dt=f32)
    del dstates, passed
    ddt = empty(batch, nheads, nchunks, chunk_size, dt=f32)  # _chunk_scan_chunk_state_bwd_dx (dx into dxbc)
    ratio = nheads // ngroups
    per_program = max(min(math.ceil(batch * nchunks * nheads / SM_COUNT), ratio), 1)
    splits = math.ceil(ratio / per_program)
    dB = empty(batch, length, splits, ngroups, dstate, dt=f32)  # _chunk_state_bwd_db
    ddA_next = empty(batch, nheads, nchunks, chunk_size, dt=f32)
    dC = empty(batch, length, splits, ngroups, dstate, dt=f32)  # _chunk_scan_bwd_dC
    ddA_prev = empty(batch, nheads, nchunks, chunk_size, dt=f32)
    dCB = empty(batch, nchunks, splits, ngroups, chunk_size, chunk_size, dt=f32)  # _chunk_scan_bwd_dcb, summed over splits
    del dB, dC
    dCB_sum = empty(batch, nchunks, ngroups, chunk_size, chunk_size, dt=f32)
    del dCB, dCB_sum
    ddA = empty(batch, nheads, nchunks, chunk_size, dt=f32)
    dA = torch.empty_like(A, dtype=f32)
    ddt_bias = torch.empty_like(dt_bias, dtype=f32)
    dD = torch.empty_like(D)
    del ddA, ddA_next, ddA_prev, ddt, dA_chunk, dstates_x, states_x, CB, dt, dA_cumsum, dt_in
    doutproj_weight = empty(*outproj_weight.shape) if has_proj else None
    doutproj_bias = empty(outproj_weight.shape[0]) if has_proj_bias else None
    del dout_og, out_recompute
    dweight = torch.zeros(conv1d_weight.shape, dtype=f32, device=device)  # causal_conv1d_bwd_function (dx into dzxbcdt)
    dbias = torch.zeros(conv1d_bias.shape, dtype=f32, device=device) if has_bias else None
    del dxbc, xbc_conv, dout
    return (
        dzxbcdt,
        dweight.to(conv1d_weight.dtype),
        dbias.to(conv1d_bias.dtype) if has_bias else None,
        ddt_bias,
        dA,
        dD,
        drmsnorm_weight,
        doutproj_weight,
        doutproj_bias,
        None,
        None,
        None,
    )


_SplitScan = None


def mamba_split_conv1d_scan_combined(
    zxbcdt,
    conv1d_weight,
    conv1d_bias,
    dt_bias,
    A,
    D,
    chunk_size,
    initial_states=None,
    seq_idx=None,
    dt_limit=(0.0, float("inf")),
    return_final_states=False,
    activation="silu",
    rmsnorm_weight=None,
    rmsnorm_eps=1e-6,
    outproj_weight=None,
    outproj_bias=None,
    headdim=None,
    ngroups=1,
    norm_before_gate=True,
    *args,
    **kwargs,
):
    global _SplitScan
    if _SplitScan is None:
        _SplitScan = _function("MambaSplitConv1dScanCombinedFn", _split_forward, _split_backward)
    return _SplitScan.apply(
        zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, rmsnorm_weight, outproj_weight, outproj_bias, int(chunk_size), headdim, int(ngroups)
    )


# ---------------------------------------------------------------------------------------------------------------------
# flash-linear-attention: ChunkGatedDeltaRuleFunction
# ---------------------------------------------------------------------------------------------------------------------

FLA_CHUNK = 64  # fla chunk_gated_delta_rule's chunk_size default (BT)


def _gdr_forward(ctx, q, k, v, g, beta, l2norm):
    torch = _torch()
    q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))  # input_guard
    batch, length, heads, kdim = k.shape
    vheads, vdim = v.shape[2], v.shape[3]
    nt = math.ceil(length / FLA_CHUNK)
    f32 = torch.float32
    q_rstd = k_rstd = None
    if l2norm:  # l2norm_fwd: y and rstd [T] fp32 per row
        q, q_rstd = torch.empty_like(q), torch.empty(batch * length * heads, dtype=f32, device=q.device)
        k, k_rstd = torch.empty_like(k), torch.empty(batch * length * heads, dtype=f32, device=k.device)
    g_cum = torch.empty_like(g, dtype=f32)  # chunk_local_cumsum (output_dtype fp32)
    A = torch.zeros(batch, length, vheads, FLA_CHUNK, dtype=k.dtype, device=k.device)  # chunk_gated_delta_rule_fwd_intra
    w = k.new_empty(batch, length, vheads, kdim)
    u = torch.empty_like(v)
    h = k.new_empty(batch, nt, vheads, kdim, vdim)  # chunk_gated_delta_rule_fwd_h
    v_new = torch.empty_like(u)
    o = torch.empty_like(v)  # chunk_fwd_o
    del w, u, h, v_new
    ctx.shape = (batch, length, heads, kdim, vheads, vdim, nt)
    ctx.l2norm = bool(l2norm)
    ctx.save_for_backward(q, q_rstd, k, k_rstd, v, g_cum, beta, A)
    return o


def _gdr_backward(ctx, do):
    torch = _torch()
    q, q_rstd, k, k_rstd, v, g, beta, A = ctx.saved_tensors
    batch, length, heads, kdim, vheads, vdim, nt = ctx.shape
    do = do.contiguous()
    w, u = k.new_empty(batch, length, vheads, kdim), torch.empty_like(v)  # recompute_w_u_fwd
    h, v_new = k.new_empty(batch, nt, vheads, kdim, vdim), torch.empty_like(u)  # chunk_gated_delta_rule_fwd_h
    dv = torch.empty_like(do)  # chunk_bwd_dv_local
    dh, dv2 = q.new_empty(batch, nt, vheads, kdim, vdim), torch.empty_like(dv)  # chunk_gated_delta_rule_bwd_dhu
    del dv
    dq, dk = q.new_empty(batch, length, vheads, kdim), k.new_empty(batch, length, vheads, kdim)  # chunk_bwd_dqkwg
    dg = torch.empty(1, *g.shape, dtype=torch.float32, device=g.device)
    dw = torch.empty_like(w)
    del h, dh, v_new
    dk2, dv3, dg2, db = k.new_empty(batch, length, vheads, kdim), torch.empty_like(v), torch.empty_like(g), torch.empty_like(beta)  # prepare_wy_repr_bwd
    del dw, w, u, dv2, dk2, dg2
    dg = torch.empty_like(g, dtype=torch.float32)  # chunk_local_cumsum(reverse=True)
    if vheads != heads:  # grouped value heads: summed over the group
        dq, dk = (t.reshape(batch, length, heads, vheads // heads, kdim).sum(3) for t in (dq, dk))
    if ctx.l2norm:  # l2norm_bwd
        dq, dk = torch.empty_like(q), torch.empty_like(k)
    return dq, dk, dv3, dg, db, None


_GatedDeltaRule = None


def chunk_gated_delta_rule(
    q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False, *args, use_qk_l2norm_in_kernel=False, **kwargs
):
    global _GatedDeltaRule
    if _GatedDeltaRule is None:
        _GatedDeltaRule = _function("ChunkGatedDeltaRuleFunction", _gdr_forward, _gdr_backward)
    torch = _torch()
    o = _GatedDeltaRule.apply(q, k, v, g, beta, bool(use_qk_l2norm_in_kernel))
    final_state = None
    if output_final_state:
        final_state = torch.zeros(k.shape[0], v.shape[2], k.shape[3], v.shape[3], dtype=torch.float32, device=k.device)
    return o, final_state
