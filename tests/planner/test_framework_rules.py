"""Framework facts that the planner models from the scenario schema (docs/planner.md, "Accuracy")."""

import dataclasses

import pytest

from vramfit.planner import Setup, params, plan, states, training
from vramfit.planner.activations import LogitsMode, logits_bytes
from vramfit.planner.setup import _loss_fp32

from planner_support import REPO, needs_shared, scenario_rows, scenario_setup

GIB = 2**30
NF4_DQ_CONSTANTS = 1 / 64 + 4 / (64 * 256)  # uint8 absmax per 64 weights + one fp32 per 256 blocks

QWEN1 = {"model_type": "qwen2", "_original": {"model_type": "qwen"}}
NATIVE = {"model_type": "qwen2"}


def test_qwen1_remote_code_under_deepspeed_keeps_16bit_loss():
    assert _loss_fp32(QWEN1, "fp16", "deepspeed") is False
    assert _loss_fp32(QWEN1, "bf16", "deepspeed") is False


def test_autocast_and_native_models_upcast():
    assert _loss_fp32(QWEN1, "bf16", "single") is True  # autocast runs cross_entropy in fp32
    assert _loss_fp32(QWEN1, "fp32", "deepspeed") is True
    assert _loss_fp32(NATIVE, "fp16", "deepspeed") is True  # transformers' loss_utils upcasts


def test_16bit_loss_is_smaller_than_upcast_loss():
    up = logits_bytes(LogitsMode(151936, 2048, 2, False, False, 2, True), 8192)
    down = logits_bytes(LogitsMode(151936, 2048, 2, False, False, 2, False), 8192)
    assert down == 8192 * 151936 * 3 * 2
    assert down < up


# bitsandbytes: what ZeRO-3 / FSDP can shard of a quantized model, and the dequantized weight.


def scenario(row_id: str, **changes) -> dict:
    return {**scenario_rows()[row_id], **changes}


def planned(row: dict):
    s = scenario_setup(row)
    arch = params.summary(s.model_config)
    counts = params.count(arch, s)
    return s, arch, counts, states.gpu_states(s, counts, arch)


@needs_shared
def test_quant_constants_stay_whole_under_fsdp_offload():
    """P12 (Llama-2-70B nf4, double quant, bf16 storage, FSDP + CPU offload): the packed weights go
    to the CPU; the absmax constants (a QuantState attribute, not a parameter) stay whole on each GPU."""
    for gpus in (2, 8):
        s, _, counts, st = planned(scenario("P12-r12", num_gpus=gpus))
        assert s.engine == "fsdp" and s.zero.offload_params
        assert counts.quantized > 60e9
        assert abs(st.weights - counts.quantized * NF4_DQ_CONSTANTS) < 1e-3 * st.weights


@needs_shared
def test_zero3_shards_packed_4bit_weights_not_their_constants():
    """P10 (Llama-2-70B nf4 in bf16 storage, ZeRO-3, no offload): per GPU = (packed + 16-bit rest) / dp
    + the constants whole, so going from 2 to 4 GPUs removes a quarter of the shardable part only."""
    _, _, counts, two = planned(scenario("P10-r10", num_gpus=2))
    _, _, _, four = planned(scenario("P10-r10", num_gpus=4))
    constants = counts.quantized * NF4_DQ_CONSTANTS
    shardable = counts.quantized * 0.5 + (counts.total - counts.quantized + counts.adapters) * 2
    assert abs((two.weights - constants) - shardable / 2) < 0.01 * shardable
    assert abs((four.weights - constants) - shardable / 4) < 0.01 * shardable


@needs_shared
def test_bitsandbytes_dequantizes_the_widest_linear_gptq_does_not():
    s, _, counts, _ = planned(scenario("P12-r12"))
    assert counts.largest_quantized == 8192 * 28672  # Llama-2-70B gate / up / down projection
    assert states.dequantized_bytes(s, counts) == 8192 * 28672 * 2  # in the bf16 compute dtype
    gptq, _, gcounts, _ = planned(scenario("Q1-r31"))
    assert gptq.quantization == "gptq-int4" and gcounts.largest_quantized > 0
    assert states.dequantized_bytes(gptq, gcounts) == 0
    plain, _, pcounts, _ = planned(scenario("Q1-r25"))
    assert plain.quantization is None and pcounts.largest_quantized == 0


@needs_shared
def test_dequantized_weight_is_in_the_training_peak():
    row = scenario("P12-r12")
    s, arch, counts, _ = planned(row)
    without = training.train_peak(s, arch, dataclasses.replace(counts, largest_quantized=0), s.seq_len)
    p = plan(scenario_setup(row))
    assert p.peak_phase == "train"
    assert round(p.breakdown["activations"] * GIB - without["activations"]) == 8192 * 28672 * 2


# Optimizer states: torch.optim follows the parameter dtype (zeros_like), bitsandbytes / torchao do not.


def _states(*items):
    s = Setup.from_args(REPO / "model_configs" / "llama-3.2-3b.json", "a100-80g", 1, 1, None, list(items))
    arch = params.summary(s.model_config)
    c = params.count(arch, s)  # full fine-tuning: no LoRA targets to resolve
    return c, states.gpu_states(s, c, arch)


def test_low_bit_optimizer_states_keep_their_own_dtype_under_bf16_weights():
    """bitsandbytes optim/optimizer.py Optimizer2State.init_state: uint8 (8-bit) or float32 (32-bit)
    states whatever the parameter's dtype; torch AdamW's zeros_like moments are bf16 for bf16 weights."""
    eight = 2 * (1 + 4 / 256)
    for optim in ("adamw_torch_8bit", "adamw_8bit", "paged_adamw_8bit"):
        c, st = _states("dtype=bfloat16", f"optim={optim}")
        assert st.optimizer == pytest.approx(c.trainable * eight), optim
    c, st = _states("bf16=true", "optim=adamw_8bit")  # AMP over 16-bit loaded weights
    assert st.optimizer == pytest.approx(c.trainable * eight)
    c, st = _states("dtype=bfloat16", "optim=paged_adamw_32bit")
    assert st.optimizer == pytest.approx(c.trainable * 8)
    c, st = _states("dtype=bfloat16", "optim=adamw_torch_fused")
    assert st.optimizer == pytest.approx(c.trainable * 4)


def test_gradients_are_freed_before_the_next_forward_on_one_gpu():
    """zero_grad(set_to_none=True) after each step: a single-GPU full fine-tune's forward runs with no
    gradients (they are counted whole at the optimizer step); gradient accumulation and DDP keep theirs."""
    path = REPO / "model_configs" / "llama-3.2-3b.json"

    def train_grads(gpus, *items):
        p = plan(Setup.from_args(path, "a100-80g", gpus, 1, None, ["dtype=bfloat16", *items]))
        return p.phase_breakdowns["train"].get("gradients", 0.0), p.phase_breakdowns["optimizer_step"]["gradients"]

    single, at_step = train_grads(1)
    assert single == 0.0 and at_step > 5.5  # 3.2 B bf16 gradients, held at the step
    assert train_grads(1, "gradient_accumulation_steps=4")[0] == pytest.approx(at_step)
    assert train_grads(2)[0] > 0  # DDP's reducer buckets live for the whole run
