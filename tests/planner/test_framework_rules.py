"""Framework facts that the planner models from the scenario schema (docs/planner.md, "Accuracy")."""
from vramfit.planner.activations import LogitsMode, logits_bytes
from vramfit.planner.setup import _loss_fp32

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
