"""The fake-tensor trace of the training step (vramfit/planner/trace.py).

Tiny configs from transformers' own config classes; no network, no GPU. The disk cache is the
private one of conftest.py."""

from __future__ import annotations

import json
import time

from vramfit.planner import Setup, trace

from planner_support import qwen3_next_config

H, FFN, HEADS, KV, VOCAB = 64, 128, 4, 2, 512


def _llama(tmp_path, layers=4, **kw):
    """4 layers: traced whole, in one run; more: traced at 2, 3, 4 layers and extrapolated."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=H, intermediate_size=FFN, num_hidden_layers=layers, num_attention_heads=HEADS, num_key_value_heads=KV, vocab_size=VOCAB, **kw)
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(cfg.to_dict(), default=str))
    return path


def _setup(path, **kw) -> Setup:
    base = dict(
        label="t",
        source="t",
        model_config=path,
        gpu="a100-80g",
        gpus_per_node=1,
        engine="single",
        precision="bf16-true",
        optimizer="adamw_torch",
        seq_len=256,
        micro_batch=2,
    )
    return Setup(**{**base, **kw})


def test_checkpointed_layer_keeps_its_input_and_depths_extrapolate(tmp_path):
    """With non-reentrant checkpointing each added layer keeps its input, b x s x h x 2 bytes (the
    issue's Llama-3.2-3B check: 4 x 4096 x 3072 x 2 B = 96 MiB per layer), so the traced depths
    extrapolate linearly to the full depth."""
    s = _setup(_llama(tmp_path, layers=6), gradient_checkpointing=True)
    t = trace.trace_step(s, cache=False)
    assert t.linear and [d[0] for d in t.depths] == [2, 3, 4]
    assert t.per_layer["text"] == 2 * 256 * H * 2
    assert t.train_transient > 0 and t.peak_bytes >= t.train_transient and t.flops > 0
    assert "activations" in t.traced and any("model states" in m for m in t.modelled)


def test_trace_is_cached_on_disk_keyed_by_the_knobs(tmp_path):
    s = _setup(_llama(tmp_path))
    cold = trace.trace_step(s)
    trace._memo.clear()  # a new process: the disk cache answers
    started = time.perf_counter()
    warm = trace.trace_step(s)
    assert warm.cached and time.perf_counter() - started < 0.5
    assert warm.train_transient == cold.train_transient and warm.flops == cold.flops
    from vramfit.planner import params

    assert (params.cache_dir() / "trace" / f"{trace.trace_key(s)}.json").is_file()
    assert trace.trace_key(s) != trace.trace_key(s.replace(micro_batch=3))
    assert trace.trace_key(s) != trace.trace_key(s.replace(attention="eager"))


def test_lora_runs_through_peft_under_fake_tensors(tmp_path):
    """PEFT wraps the fake model; the optimizer holds states for the adapters only, exactly the
    parameters params.count counts (AdamW in bf16: two 2-byte moments each, plus its step counters)."""
    from vramfit.planner import params

    s = _setup(_llama(tmp_path), method="lora", train_llm=False, lora_r=8, lora_targets="all-linear", lora_dropout=0.05)
    t = trace.trace_step(s, cache=False)
    counts = params.count(params.summary(s.model_config), s)
    moments = 4 * counts.trainable
    assert moments <= t.by_category["Optstate"] <= moments * 1.01


def test_step_flops_matches_the_traced_count(tmp_path):
    """The analytic FLOP count (no trace) against torch.utils.flop_counter's on the same step."""
    for gc in (False, True):
        s = _setup(_llama(tmp_path), gradient_checkpointing=gc)
        traced = trace.trace_step(s, cache=False).flops
        assert abs(trace.step_flops(s) - traced) / traced < 0.05, (gc, trace.step_flops(s), traced)


# ----------------------------------------------------------------------------------------------
# The CPU trace keeps what a GPU run keeps


def test_sdpa_takes_the_cuda_kernel_not_the_cpu_one():
    """On the CPU, F.scaled_dot_product_attention runs `_scaled_dot_product_flash_attention_for_cpu`;
    a GPU runs FlashAttention (16-bit, no mask) or memory-efficient attention (with a mask), which
    save a log-sum-exp per head and query for backward. The trace calls the CUDA kernels."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    with FakeTensorMode():
        q = torch.randn(2, 4, 128, 64, dtype=torch.bfloat16, requires_grad=True)
        mask = torch.ones(128, 128, dtype=torch.bool)
        with Ops() as cpu:
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        with trace._cuda_sdpa(), Ops() as flash:
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        with trace._cuda_sdpa(), Ops() as masked:
            F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        with trace._cuda_sdpa(), Ops() as fp32:
            F.scaled_dot_product_attention(q.float(), q.float(), q.float(), is_causal=True)
    assert "aten._scaled_dot_product_flash_attention_for_cpu" in cpu.names
    assert "aten._scaled_dot_product_flash_attention" in flash.names
    assert "aten._scaled_dot_product_efficient_attention" in masked.names
    assert "aten._scaled_dot_product_efficient_attention" in fp32.names  # flash takes 16-bit only


def test_dropout_keeps_cudas_bool_mask():
    """CUDA's fused dropout keeps a 1-byte bool mask for backward; the CPU path keeps a noise tensor
    in the input's dtype. The trace keeps the bool mask."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    def saved(fn):
        kept = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.dtype) or t, lambda t: t):
            fn()
        return kept

    with FakeTensorMode():
        x = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)
        cpu = saved(lambda: F.dropout(x, 0.1, True))
        with trace._cuda_sdpa():
            cuda = saved(lambda: F.dropout(x, 0.1, True))
    assert torch.bool not in cpu and torch.bfloat16 in cpu
    assert cuda == [torch.bool]


def test_autocast_follows_cudas_op_lists_not_the_cpus():
    """CUDA autocast runs layer_norm and softmax in fp32 (their outputs, kept for backward, are
    fp32); CPU autocast runs them in bf16. The trace applies CUDA's lists; linear is bf16 on both."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.randn(4, 64)
        w = torch.nn.Parameter(torch.randn(64, 64))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cpu = (F.layer_norm(x.bfloat16(), (64,)).dtype, F.softmax(x.bfloat16(), -1).dtype, F.linear(x, w).dtype)
        with trace._CudaAutocast(torch.bfloat16):
            cuda = (F.layer_norm(x.bfloat16(), (64,)).dtype, F.softmax(x.bfloat16(), -1).dtype, F.linear(x, w).dtype)
    assert cpu == (torch.bfloat16, torch.bfloat16, torch.bfloat16)
    assert cuda == (torch.float32, torch.float32, torch.bfloat16)


def test_amp_trace_keeps_the_autocast_weight_copies(tmp_path):
    """Mixed precision with fp32 master weights (loaded in fp32, autocast): the bf16 copy autocast
    makes of each trained weight is saved for backward; the pure-bf16 step has none, and neither has
    the Trainer's bf16 flag over a model loaded in bf16 (autocast over 16-bit weights copies nothing)."""
    path = _llama(tmp_path)
    amp = trace.trace_step(_setup(path, precision="bf16", master_fp32=True), cache=False)
    loaded16 = trace.trace_step(_setup(path, precision="bf16", master_fp32=False), cache=False)
    pure = trace.trace_step(_setup(path, precision="bf16-true"), cache=False)
    assert amp.train_transient > loaded16.train_transient
    assert amp.train_transient > pure.train_transient


def test_fsdp_computes_with_its_16_bit_parameters_so_autocast_copies_none(tmp_path):
    """accelerate's FSDP keeps fp32 master shards but computes with parameters its MixedPrecisionPolicy casts to the run's
    bf16 (param_dtype): no autocast copy of a weight is kept, so the step holds what the bf16-loaded DDP step holds (the
    trace held a bf16 copy of every trained weight: 48 GiB of 'activations' on Qwen3.5-27B, axolotl's 27b-fft.yaml).
    Lightning's bf16-mixed computes in fp32 (master_fp32), which keeps the copies."""
    path = _llama(tmp_path)
    ddp = trace.trace_step(_setup(path, precision="bf16", master_fp32=False), cache=False)
    fsdp = trace.trace_step(_setup(path, precision="bf16", master_fp32=False, engine="fsdp", gpus_per_node=2), cache=False)
    lightning = trace.trace_step(_setup(path, precision="bf16", master_fp32=True, engine="fsdp", gpus_per_node=2), cache=False)
    assert fsdp.train_transient == ddp.train_transient
    assert lightning.train_transient > fsdp.train_transient


# ----------------------------------------------------------------------------------------------
# Architectures


def test_vlm_vision_tower_is_fed_pixels(tmp_path):
    """Qwen2-VL: the vision tower runs on flattened patches of the setup's image geometry; its
    grid helpers (`grid_thw.tolist()`) run on real values."""
    from transformers import Qwen2VLConfig

    cfg = Qwen2VLConfig(
        vision_config=dict(depth=4, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2),
        text_config=dict(hidden_size=256, intermediate_size=256, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, vocab_size=512),
    )  # head_dim 128: mrope [16, 24, 24]
    path = tmp_path / "qwen2vl.json"
    path.write_text(json.dumps(cfg.to_dict(), default=str))
    s = _setup(path, train_vision=True, images_per_sample=1, image_tokens=16, vision_patches=64, seq_len=64)
    t = trace.trace_step(s, cache=False)
    assert "vision tower" in t.traced and t.per_layer["vision"] > 0
    no_image = trace.trace_step(s.replace(images_per_sample=0), cache=False)
    assert t.train_transient > no_image.train_transient


def test_sweep_slice_runs(tmp_path, monkeypatch):
    """A few points of benchmarks/trace_sweep.py: an encoder-only, a Conv1D decoder, an
    encoder-decoder - traced and compared with the analytic planner."""
    import importlib.util

    from planner_support import REPO

    spec = importlib.util.spec_from_file_location("trace_sweep", REPO / "benchmarks" / "trace_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    out = tmp_path / "rows.jsonl"
    assert sweep.main(["--slice", "--json", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(sweep.SLICE)
    assert all("trace" in r and "analytic" in r for r in rows), rows


def test_plan_trace_flag_and_the_fallback_for_what_the_analytic_model_cannot_build(tmp_path, capsys):
    """`vramfit plan --model-config ... --trace` plans with traced activations and says which terms
    were traced and which modelled; Fuyu (patches projected by one Linear, no vision layer stack)
    is traced even without --trace, and the plan says why."""
    import argparse

    from transformers import FuyuConfig

    from vramfit.planner import cli

    def plan(argv):
        parser = argparse.ArgumentParser(prog="vramfit plan")
        cli.add_arguments(parser)
        code = cli.run(parser.parse_args(argv))
        return code, *capsys.readouterr()

    common = ["--gpu", "a100-80g", "--gpus", "1", "seq_len=128", "per_device_train_batch_size=2", "bf16=true"]
    code, out, err = plan(["--model-config", str(_llama(tmp_path)), *common, "--trace"])
    assert code == 0, err
    assert "traced with fake tensors" in out and "modelled, not traced: model states" in out
    fuyu = FuyuConfig(
        text_config=dict(model_type="persimmon", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=500)
    )
    path = tmp_path / "fuyu.json"
    path.write_text(json.dumps(fuyu.to_dict(), default=str))
    code, out, err = plan(["--model-config", str(path), *common])
    assert code == 0, err
    assert "the trace stands in for it" in out and "vision tower" in out


# ----------------------------------------------------------------------------------------------
# The analytic model against the trace, per fix (tiny configs of the real classes)


def _config(tmp_path, cls_name, **kw):
    import transformers

    cfg = getattr(transformers, cls_name)(**kw)
    path = tmp_path / f"{cls_name}.json"
    path.write_text(json.dumps(cfg.to_dict(), default=str))
    return path


def _analytic_per_layer(s) -> float:
    """Bytes one more layer of every LLM stack adds, from activations.py (no checkpointing)."""
    from vramfit.planner import params, training

    arch = params.summary(s.model_config)
    counts = params.count(arch, s)
    total = 0.0
    for name, own, cross in training.text_sequences(s, arch, s.seq_len):
        st, mode = arch.stacks[name], training.text_mode(s, arch, counts, name)
        per_token, per_sample = training.layer_bytes(st, mode, own, cross)
        total += per_token * s.micro_batch * own + per_sample * s.micro_batch + training.position_bias_bytes(st, mode, own, cross, False)[0]
    return total


def test_peak_is_extrapolated_moment_by_moment(tmp_path):
    """A tied embedding's backward (its buffered head gradient next to the embedding gradient) is the
    step's peak at 2-4 layers and is passed by the loss moment at 12: each moment is extrapolated on
    its own and the largest taken, which is what a trace at the full depth measures."""
    path = _config(tmp_path, "BertConfig", hidden_size=128, intermediate_size=256, num_hidden_layers=12, num_attention_heads=4, vocab_size=4096)
    s = _setup(path, seq_len=64, micro_batch=1)
    from vramfit.planner import params

    # (at 2 and 3 layers the tail moment is the larger one: the maximum of the two traced depths
    # extrapolated as one line gave 0 bytes per layer, as bert-base's did in the sweep)
    t = trace.trace_step(s, cache=False, check_linear=False)
    assert t.per_layer["text"] > 0
    direct = trace._run(s, params.summary(path), 12, 0, [])
    assert abs(t.train_transient - direct["train_transient"]) <= 0.01 * direct["train_transient"], (t.train_transient, direct["train_transient"])


def test_loss_dtype_is_read_off_the_models_forward(tmp_path):
    """BERT / T5 / BART call nn.CrossEntropyLoss on their 16-bit logits; Llama's `self.loss_function`
    upcasts (loss_utils.py ForCausalLMLoss); autocast upcasts either way."""
    from vramfit.planner import params, training

    bert = _config(tmp_path, "BertConfig", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=512)
    t5 = _config(tmp_path, "T5Config", d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, vocab_size=512)
    assert not params.summary(bert).loss_upcast and not params.summary(t5).loss_upcast
    assert params.summary(_llama(tmp_path)).loss_upcast
    s = _setup(bert)
    assert not training.loss_upcast(s, params.summary(bert))
    assert training.loss_upcast(s.replace(precision="bf16", engine="single"), params.summary(bert))


def test_t5_norm_position_bias_and_ffn_dropout_match_the_trace(tmp_path):
    """T5LayerNorm keeps its 16-bit input besides the fp32 upcast (measured on the module: 8 / 6 bytes
    an element, Llama's RMSNorm 6 / 4); the relative position bias becomes a per-layer SDPA mask;
    T5's FFN has a dropout of its own. One encoder + decoder layer, analytic against traced."""
    from vramfit.planner import params

    path = _config(tmp_path, "T5Config", d_model=64, d_ff=256, num_layers=6, num_heads=4, d_kv=16, vocab_size=512)
    arch = params.summary(path)
    enc = arch.stacks["encoder"]
    assert enc.norm_saves == (8.0, 6.0) and enc.position_bias and enc.ffn_dropout
    assert params.summary(_llama(tmp_path)).stacks["text"].norm_saves == (6.0, 4.0)
    s = _setup(path, seq_len=128, micro_batch=1)
    traced = trace.trace_step(s, cache=False, check_linear=False).per_layer["text"]
    assert abs(_analytic_per_layer(s) - traced) <= 0.03 * traced, (_analytic_per_layer(s), traced)


def test_moe_layer_keeps_k_experts_rows_and_the_router(tmp_path):
    """Mixtral's experts are 3-D parameters run by transformers' grouped_mm path: every token is
    copied to its k experts. The summary reads E, k and the expert width; one layer, analytic
    against traced."""
    from vramfit.planner import params

    path = _config(
        tmp_path,
        "MixtralConfig",
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        vocab_size=512,
    )
    st = params.summary(path).stacks["text"]
    assert (st.experts, st.top_k, st.expert_ffn, st.dense_ffn) == (4, 2, 96, False)
    s = _setup(path, seq_len=128, micro_batch=2)
    traced = trace.trace_step(s, cache=False, check_linear=False).per_layer["text"]
    assert abs(_analytic_per_layer(s) - traced) <= 0.03 * traced, (_analytic_per_layer(s), traced)


def test_moe_lora_keeps_the_merged_expert_weights(tmp_path):
    """LoRA on Mixtral: PEFT converts `all-linear` to its fused experts and router
    (`target_parameters`) and each forward merges the adapter into a full-size copy of the experts
    (ParamWrapper / _LoraFactorsProxy), kept for backward: one copy per layer beyond the per-token
    terms. One layer, analytic against traced; and the adapters' parameters are counted."""
    from vramfit.planner import activations, params, training

    path = _config(
        tmp_path,
        "MixtralConfig",
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=8,
        num_experts_per_tok=2,
        vocab_size=512,
    )
    s = _setup(path, seq_len=32, micro_batch=1, method="lora", lora_r=8, lora_targets="all-linear", lora_dropout=0.0, train_llm=True)
    arch = params.summary(path)
    counts = params.count(arch, s)
    # router [8, 64], gate_up [8, 192, 64], down [8, 64, 96]: in that order
    assert counts.expert_merge == (8 * 64, 8 * 192 * 64, 8 * 64 * 96)
    # ParamWrapper: lora_A Linear(in, r * E), lora_B Linear(r * E, out); gate_up at rank 2r (w1 + w3)
    experts = 8 * (64 + 8) + 16 * 8 * (64 + 192) + 8 * 8 * (96 + 64)
    assert counts.lora - params.count(arch, s.replace(lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"])).lora == 6 * experts
    merged, _ = activations.expert_merge_bytes(counts.expert_merge, training.frozen_weight_bytes(s))
    traced = trace.trace_step(s, cache=False, check_linear=False).per_layer["text"]
    assert abs(_analytic_per_layer(s) + merged - traced) <= 0.03 * traced, (_analytic_per_layer(s) + merged, traced)
    assert merged > 0.5 * traced  # the copy is most of what a layer keeps at 32 tokens


def test_opt_relu_keeps_one_tensor_and_its_residual_dropout(tmp_path):
    """OPT: ReLU keeps its output, the same tensor fc2 keeps as input (counted once); its residual
    dropout is configured as `dropout` (a bool mask after attention and after fc2). DistilBERT's FFN
    drops after lin2 (no mask of ffn elements). One layer, analytic against traced."""
    from vramfit.planner import params

    path = _config(tmp_path, "OPTConfig", hidden_size=64, ffn_dim=256, num_hidden_layers=6, num_attention_heads=4, word_embed_proj_dim=32, vocab_size=512)
    st = params.summary(path).stacks["text"]
    assert st.act_saves_output and st.hidden_dropout == 0.1 and not st.ffn_dropout
    s = _setup(path, seq_len=128, micro_batch=2)
    traced = trace.trace_step(s, cache=False, check_linear=False).per_layer["text"]
    assert abs(_analytic_per_layer(s) - traced) <= 0.03 * traced, (_analytic_per_layer(s), traced)
    distil = _config(tmp_path, "DistilBertConfig", dim=64, hidden_dim=256, n_layers=2, n_heads=4, vocab_size=512)
    assert not params.summary(distil).stacks["text"].ffn_dropout


# ----------------------------------------------------------------------------------------------
# Models only the trace sizes (layers that are not attention blocks), with LoRA as PEFT builds it


def test_lora_dropout_peft_refuses_on_fused_experts_is_bad_input_not_a_trace_failure(tmp_path):
    """PEFT 0.21 turns `all-linear` (or gate_proj / up_proj / down_proj) on a fused-MoE model into
    `target_parameters`, wrapped by lora.ParamWrapper, which raises on lora_dropout != 0: a dropout the
    user sets is bad input naming the key and the fix; the planner's own default is planned as 0 (a note);
    attention projections alone keep their dropout. PEFT itself, on the same tiny model, agrees."""
    import pytest
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from vramfit.planner import params
    from vramfit.problems import ConfigError

    path = qwen3_next_config(tmp_path)
    common = dict(gpu="h100", gpus=1)
    with pytest.raises(ConfigError) as refused:
        Setup.from_args(path, **common, overrides=["method=lora", "lora_dropout=0.05"])
    (problem,) = refused.value.problems.items
    assert problem.key == "lora_dropout" and "lora.ParamWrapper" in problem.what and "lora_dropout to 0" in problem.fix
    planned = Setup.from_args(path, **common, overrides=["method=lora"])
    assert planned.lora_dropout == 0.0 and any("lora_dropout 0 planned" in n for n in planned.notes)
    kept = Setup.from_args(path, **common, overrides=["method=lora", "lora_dropout=0.05", "lora_target_modules=q_proj,v_proj"])
    assert kept.lora_dropout == 0.05
    arch = params.summary(path)
    model = AutoModelForCausalLM.from_config(params.config_object(params.read_config(path)), dtype=torch.float32)
    for targets in ("all-linear", ["q_proj", "v_proj"], ["gate_proj", "up_proj", "down_proj"]):
        wrapped = params.peft_parameter_targets(arch, targets)
        if wrapped:
            with pytest.raises(ValueError, match="lora_dropout != 0"):
                get_peft_model(model, LoraConfig(r=4, lora_dropout=0.05, target_modules=targets))
        else:
            get_peft_model(AutoModelForCausalLM.from_config(model.config), LoraConfig(r=4, lora_dropout=0.05, target_modules=targets))
        assert bool(wrapped) == (targets != ["q_proj", "v_proj"]), (targets, wrapped)


def test_qwen3_next_lora_is_traced_and_a_failing_trace_says_where(tmp_path, capsys, monkeypatch):
    """The Gated DeltaNet model the analytic model cannot size is traced with LoRA as PEFT builds it (the
    fused experts in fp32 through transformers' grouped_mm fallback, as CUDA runs them); when the trace fails,
    the plan says what failed (the language model's forward, in which module), leaves out the activations it
    could not compute, and exits 3, not 1 and not a traceback."""
    import argparse

    from transformers.models.qwen3_next import modeling_qwen3_next

    from vramfit.planner import cli, params

    path = qwen3_next_config(tmp_path)
    s = Setup.from_args(path, "h100", 1, overrides=["method=lora", "seq_len=32", "per_device_train_batch_size=1"])
    assert s.precision != "bf16-true"  # fp32 experts: torch's meta kernel of _grouped_mm takes bf16 only
    t = trace.trace_step(s, cache=False, check_linear=False)
    assert t.train_transient > 0
    # at full depth three Gated DeltaNet layers, then attention: traced in whole patterns of 4, not at 2, 3, 4 layers
    deep = Setup.from_args(qwen3_next_config(tmp_path, layers=48), "h100", 1, overrides=["method=lora"])
    arch = params.summary(deep.model_config)
    assert trace._mixer_period(deep, arch) == 4 and trace._depth_plan(arch, True, 4)[0] == [(4, 0), (8, 0)]

    def boom(self, *args, **kwargs):
        raise RuntimeError("not under fake tensors")

    monkeypatch.setattr(modeling_qwen3_next.Qwen3NextGatedDeltaNet, "forward", boom)
    parser = argparse.ArgumentParser(prog="vramfit plan")
    cli.add_arguments(parser)
    code = cli.run(parser.parse_args(["--model-config", str(path), "--gpu", "h100", "--gpus", "1", "method=lora", "seq_len=32", "bf16=true"]))
    out, err = capsys.readouterr()
    assert code == 3 and "Traceback" not in out + err, (code, err)
    assert "the trace failed (the language model's forward (module model.layers.0.linear_attn) at 4 layers: RuntimeError" in err, err
    assert "activations and logits not computed" in out and "vision-tower" not in out + err


def test_review_names_the_dropout_peft_refuses_in_the_users_own_flags(tmp_path):
    """A TRL script with --use_peft on a fused-MoE model: TRL's lora_dropout default (0.05) is what PEFT refuses under
    transformers 5. Where the repository pins transformers 5 the review warns, with the fix in the script's flags; where
    nothing pins it (transformers 4 keeps one Linear per expert, which LoRA wraps with its dropout) it is a note. The
    memory is planned either way."""
    from vramfit.review.reviewer import review

    folder = tmp_path / "my-moe"
    folder.mkdir()
    qwen3_next_config(tmp_path).rename(folder / "config.json")
    script = tmp_path / "run.sh"
    script.write_text(f"accelerate launch --num_processes 2 sft.py --model_name_or_path {folder} --use_peft --lora_target_modules all-linear --bf16\n")
    unpinned = review([str(script)], gpu="a100-80g")
    (note,) = [f for f in unpinned.findings if "lora.ParamWrapper" in f.what]
    assert note.severity == "info" and "nothing beside the files pins transformers" in note.what and unpinned.plan is not None
    (tmp_path / "requirements.txt").write_text("transformers==5.23.0\n")
    pinned = review([str(script)], gpu="a100-80g")
    (warning,) = [f for f in pinned.findings if "lora.ParamWrapper" in f.what]
    assert warning.severity == "warning" and "pins transformers==5.23.0" in warning.what, warning
    assert warning.fix.startswith("--lora_dropout 0, or --lora_target_modules") and pinned.plan is not None


def test_minicpm_v_4_6_vision_tower_is_fed_its_packed_patches(tmp_path):
    """MiniCPM-V 4.6 (a Qwen3.5 text stack the analytic model cannot size): `get_image_features` takes NaViT-packed
    patches and each image's grid (`target_sizes`); the trace feeds them, so the vision tower is traced, not dropped."""
    import transformers

    d = json.loads((transformers.MiniCPMV4_6Config()).to_json_string())
    d["vision_config"].update(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=2, image_size=224, patch_size=14)
    d["text_config"].update(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        vocab_size=VOCAB,
    )
    d["text_config"].pop("layer_types", None)  # rebuilt for 2 layers (Gated DeltaNet)
    d.update(insert_layer_id=0, image_token_id=VOCAB - 1, video_token_id=VOCAB - 2)  # the ViT merger after layer 0: in every traced depth
    path = tmp_path / "minicpmv4_6.json"
    path.write_text(json.dumps(d))
    s = _setup(path, method="lora", lora_r=4, lora_targets="all-linear", train_llm=True, images_per_sample=1, image_tokens=16, vision_patches=256, seq_len=64)
    t = trace.trace_step(s, cache=False, check_linear=False)
    assert "vision tower" in t.traced and t.per_layer["vision"] > 0


def test_review_of_a_model_whose_trace_fails_is_incomplete_not_fits(tmp_path, monkeypatch):
    """The review plans a Gated DeltaNet model through the trace; when the trace fails the plan lacks its activations,
    and the review says which and why and exits 3, not 'fits' on model states alone."""
    from transformers.models.qwen3_next import modeling_qwen3_next

    from vramfit.review.reviewer import review

    def boom(self, *args, **kwargs):
        raise RuntimeError("not under fake tensors")

    monkeypatch.setattr(modeling_qwen3_next.Qwen3NextGatedDeltaNet, "forward", boom)
    folder = tmp_path / "my-moe"
    folder.mkdir()
    qwen3_next_config(tmp_path).rename(folder / "config.json")
    script = tmp_path / "run.sh"
    script.write_text(f"accelerate launch --num_processes 2 sft.py --model_name_or_path {folder} --use_peft --lora_dropout 0 --bf16 --max_length 64\n")
    result = review([str(script)], gpu="a100-80g")
    said = [f.what for f in result.findings if f.what.startswith("memory plan incomplete")]
    assert result.exit_code == 3 and said and "the language model's forward (module model.layers.0.linear_attn)" in said[0], [str(f) for f in result.findings]


def test_chunked_loss_is_traced_as_axolotl_patches_it(tmp_path):
    """axolotl `chunked_cross_entropy` (monkeypatch/loss/chunked.py at 130ef7c51): the whole 16-bit logits chunked, each
    chunk's cross-entropy compiled, so no fp32 copy of the whole logits exists; eager chunks keep each chunk's fp32
    log-softmax. Before, the trace ran the model's own loss whatever loss_kernel said."""
    vocab = 8192
    path = _llama(tmp_path, layers=4)
    cfg = json.loads(path.read_text())
    path.write_text(json.dumps({**cfg, "vocab_size": vocab}))
    tokens = 2 * 256
    own = trace.trace_step(_setup(path), cache=False).train_transient
    eager = trace.trace_step(_setup(path, loss_kernel="chunked"), cache=False).train_transient
    compiled = trace.trace_step(_setup(path, loss_kernel="chunked", compile_loss=True), cache=False).train_transient
    assert compiled < eager < own
    assert own - compiled >= tokens * vocab * 4  # at least one whole fp32 logits tensor fewer
    assert trace.trace_key(_setup(path, loss_kernel="chunked", compile_loss=True)) != trace.trace_key(_setup(path))


def test_a_traced_plan_with_cut_cross_entropy_says_it_traced_the_models_own_loss(tmp_path):
    from vramfit.planner import params

    s = _setup(_llama(tmp_path), loss_kernel="cce")
    arch = params.summary(s.model_config)
    _, notes, _ = trace.train_terms(s, arch, params.count(arch, s), wanted=True)
    assert any("Cut Cross-Entropy" in n and "over-counts" in n for n in notes)
