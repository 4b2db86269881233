"""The `keeps_previous_output` knob (training.py previous_output_point): a loop that holds the last step's output into
the next forward (LitGPT's fit: `logits = model(...)`) has both steps' logits alive at the forward's end, and with
bitsandbytes < 0.43.2 the 4-bit linears' inputs the previous graph kept as ctx attributes."""

from __future__ import annotations

import importlib

from vramfit.planner import params, training
from vramfit.planner.setup import Setup

from planner_support import REPO

plan = importlib.import_module("vramfit.planner.plan")

LLAMA = REPO / "model_configs" / "llama-3.2-3b.json"
UNTIED = REPO / "model_configs" / "llama-3.1-8b.json"  # its own lm_head: Llama 3.2 3B ties it to the embedding
QLORA = ("method=qlora", "load_in_4bit=true", "bnb_4bit_quant_type=nf4", "dtype=bfloat16", "lora_target_modules=q_proj,v_proj")
QLORA += ("per_device_train_batch_size=2", "max_length=512", "lora_r=8", "lora_dropout=0.05", "loss_kernel=chunked")


def points(*items, config=LLAMA):
    s = Setup.from_args(config, "a10g", 1, 1, None, list(QLORA + items))
    arch = params.summary(s.model_config)
    counts = params.count(arch, plan.lora_targets(s, arch))
    kept = training.train_peak(s, arch, counts, 512)
    return s, arch, training.previous_output_point(s, arch, counts, 512, 0.0, 0.0), kept


def test_the_previous_steps_logits_and_old_bitsandbytes_kept_inputs_join_the_forward_peak():
    s, arch, old, kept = points("bitsandbytes_version=0.42.0", "keeps_previous_output=true")
    assert s.keeps_previous_output and s.quant_keeps_input
    tokens = 2 * 512
    assert old["logits"] == 2 * 2 * arch.vocab * tokens  # this step's and the last step's bf16 logits
    assert old["activations"] > 0  # MatMul4Bit's ctx.tensors of the previous graph
    _, _, new, _ = points("bitsandbytes_version=0.45.0", "keeps_previous_output=true")
    assert new["activations"] == 0.0 and new["logits"] == old["logits"]  # bitsandbytes#1270 keeps (None, B)
    _, _, _, without = points("bitsandbytes_version=0.42.0")
    # the knob adds a point to the peak's candidates, and here it is the peak
    assert sum(kept.values()) > sum(without.values())


def test_the_knob_is_off_unless_set():
    s, _, _, _ = points()
    assert not s.keeps_previous_output


def test_a_quantized_lm_head_is_counted_4_bit_and_dequantized_at_the_forward_s_end():
    """Lightning's BitsandbytesPrecision (LitGPT) swaps every nn.Linear, lm_head included; transformers keeps it 16-bit."""
    s, arch, end, _ = points("quantize_lm_head=true", config=UNTIED)
    plain, _, _, _ = points(config=UNTIED)
    counts = params.count(arch, plan.lora_targets(s, arch))
    counts_plain = params.count(arch, plan.lora_targets(plain, arch))
    head = arch.groups["lm_head"]
    assert s.quantize_lm_head and not plain.quantize_lm_head and not arch.tied_embeddings
    assert counts.quantized == counts_plain.quantized + head and counts.largest_quantized == head
    assert end["activations"] == head * 2  # the bf16 dequantized vocabulary matrix (states.dequantized_bytes)
    assert end["logits"] == 2 * arch.vocab * 2 * 512  # this step's logits only: keeps_previous_output is off
