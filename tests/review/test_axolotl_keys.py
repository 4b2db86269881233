"""axolotl keys the review used to misread or ignore, found by benchmarks/example_peaks.py on axolotl's own examples
(their READMEs publish the peak each config used). Each test fails on the code before its fix."""

from __future__ import annotations

import pytest

from vramfit.review.reviewer import review

from review_support import find

BASE = "base_model: meta-llama/Llama-3.2-3B\nsequence_len: 4096\nmicro_batch_size: 2\ngradient_checkpointing: true\nbf16: true\n"
CCE = "plugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\n"


def _review(tmp_path, text: str):
    path = tmp_path / "train.yaml"
    path.write_text(text)
    return review([str(path)], gpu="a100-80g", gpus=1)


def test_the_cut_cross_entropy_plugin_plans_no_vocabulary_logits(tmp_path):
    # axolotl integrations/cut_cross_entropy/args.py: the plugin's `cut_cross_entropy` defaults to True
    plain, cce = _review(tmp_path, BASE), _review(tmp_path, BASE + CCE)
    assert plain.plan.setup.loss_kernel == "torch"
    assert cce.plan.setup.loss_kernel == "cce"
    assert cce.plan.breakdown.get("logits", 0.0) < 0.25 * plain.plan.breakdown["logits"]


def test_cut_cross_entropy_false_turns_the_plugin_off(tmp_path):
    result = _review(tmp_path, BASE + CCE + "cut_cross_entropy: false\n")
    assert result.plan.setup.loss_kernel == "torch"
    assert not find(result, key="cut_cross_entropy", severity="warning")


def test_cut_cross_entropy_without_the_plugin_is_a_warning(tmp_path):
    result = _review(tmp_path, BASE + "cut_cross_entropy: true\n")
    assert result.plan.setup.loss_kernel == "torch"
    [warning] = find(result, key="cut_cross_entropy", severity="warning")
    assert "without the Cut Cross-Entropy plugin" in warning.what


def test_quantize_moe_experts_quantizes_the_fused_expert_tensors(tmp_path):
    # transformers v5 keeps MoE experts as 3-D parameters that bitsandbytes leaves in 16 bits; axolotl's
    # quantize_moe_experts (monkeypatch/moe_quant.py) quantizes them as they load
    moe = "base_model: zai-org/GLM-4.7-Flash\nadapter: qlora\nload_in_4bit: true\nlora_target_modules:\n  - q_proj\n"
    moe += "sequence_len: 1024\nmicro_batch_size: 1\ngradient_checkpointing: true\nbf16: true\n"
    plain, quantized = _review(tmp_path, moe), _review(tmp_path, moe + "quantize_moe_experts: true\n")
    assert not plain.plan.setup.quantize_moe_experts and quantized.plan.setup.quantize_moe_experts
    # GLM-4.7-Flash: ~29 B of its 30 B parameters are fused experts, 16-bit without the switch, ~4.5 bits with it
    assert plain.plan.breakdown["weights"] > 50
    assert quantized.plan.breakdown["weights"] < 0.4 * plain.plan.breakdown["weights"]


def test_under_a_pinned_transformers_4_the_experts_of_a_fused_moe_type_are_quantized(tmp_path):
    # transformers 4 kept GLM-4.7-Flash's (glm4_moe_lite) experts as nn.Linear modules, which bitsandbytes quantizes;
    # transformers 5 fuses them into 3-D parameters it skips (PEFT transformers_weight_conversion's fused MoE types)
    moe = "base_model: zai-org/GLM-4.7-Flash\nadapter: qlora\nload_in_4bit: true\nlora_target_modules:\n  - q_proj\n"
    moe += "sequence_len: 1024\nmicro_batch_size: 1\ngradient_checkpointing: true\nbf16: true\n"
    path = tmp_path / "train.yaml"
    path.write_text(moe)
    current = review([str(path)], gpu="a100-80g", gpus=1)
    pinned = review([str(path)], gpu="a100-80g", gpus=1, transformers_version="4.56.1")
    assert not current.plan.setup.quantize_moe_experts
    assert pinned.plan.setup.quantize_moe_experts
    assert find(pinned, key="load_in_4bit", severity="info", text="experts are nn.Linear modules")
    assert pinned.plan.breakdown["weights"] < 0.4 * current.plan.breakdown["weights"]


def test_a_moe_type_with_3d_experts_in_transformers_4_keeps_them_unquantized(tmp_path):
    # gpt-oss kept its experts as 3-D parameters in transformers 4 too (no per-expert conversion on load)
    path = tmp_path / "train.yaml"
    path.write_text("base_model: openai/gpt-oss-20b\nadapter: qlora\nload_in_4bit: true\nsequence_len: 1024\nmicro_batch_size: 1\n")
    pinned = review([str(path)], gpu="a100-80g", gpus=1, transformers_version="4.55.0")
    assert not pinned.plan.setup.quantize_moe_experts
    assert not find(pinned, text="experts are nn.Linear modules")


def test_which_checkpoints_store_per_expert_linears_is_read_off_transformers_conversions():
    from vramfit.review.mapping import _experts_merged_on_load

    # transformers 5 merges these checkpoints' experts.*.<proj>.weight into 3-D parameters as it loads them
    assert all(_experts_merged_on_load(t) for t in ("jamba", "mixtral", "qwen3_moe", "qwen3_next", "glm4_moe_lite"))
    # 3-D experts in the checkpoint already (transformers 4 built them so too), and dense models
    assert not any(_experts_merged_on_load(t) for t in ("gpt_oss", "llama4_text", "llama", "qwen3"))


def test_chunked_cross_entropy_plans_the_compiled_chunked_loss(tmp_path):
    # axolotl loaders/patch_manager.py -> monkeypatch/loss/chunked.py (130ef7c51): the ForCausalLM loss chunked over the
    # whole 16-bit logits, each chunk's cross-entropy under torch.compile; chunked_cross_entropy_num_chunks, default 8
    plain = _review(tmp_path, BASE)
    chunked = _review(tmp_path, BASE + "chunked_cross_entropy: true\nchunked_cross_entropy_num_chunks: 16\n")
    s = chunked.plan.setup
    assert (s.loss_kernel, s.compile_loss, s.loss_chunks) == ("chunked", True, 16)
    assert chunked.plan.breakdown["logits"] < 0.5 * plain.plan.breakdown["logits"]
    assert not any("chunked_cross_entropy" in str(f) and "not reviewed" in str(f) for f in chunked.findings)


@pytest.mark.parametrize(
    "line, attention",
    [
        # axolotl utils/schemas/enums.py CANONICAL_ATTN_IMPLS (at 067b021c) accepts these; its archived examples use xformers
        ("attn_implementation: xformers\n", "flash"),
        ("attn_implementation: sage\n", "flash"),
        ("attn_implementation: fp8\n", "sdpa"),
        # LEGACY_ATTN_FLAG_TO_IMPL: the deprecated switch still selects the backend
        ("xformers_attention: true\n", "flash"),
        ("sage_attention: true\n", "flash"),
    ],
)
def test_attention_backends_axolotl_accepts_are_planned_not_refused(tmp_path, line, attention):
    result = _review(tmp_path, BASE + line)
    assert not find(result, severity="error")
    assert result.plan.setup.attention == attention


@pytest.mark.parametrize(
    "extra, verdict",
    [
        ("", "warning"),  # DataCollatorForSeq2Seq, padding=True: the batch's longest sample, which the files do not bound
        ("sample_packing: true\n", "error"),  # multipack fills the micro-batch to sequence_len
        ("pad_to_sequence_len: true\n", "error"),  # pad_to_multiple_of = sequence_len
    ],
)
def test_without_sample_packing_axolotl_pads_each_batch_to_its_longest_sample(tmp_path, extra, verdict):
    # axolotl core/builders/causal.py build_collator (at 067b021c); its examples/llama-3/3b-qat-nvfp4.yaml: 64 x 8192, no packing
    text = "base_model: meta-llama/Llama-3.2-3B\nsequence_len: 8192\nmicro_batch_size: 64\ngradient_checkpointing: true\nbf16: true\n"
    result = _review(tmp_path, text + extra)
    assert [f.severity for f in result.findings if f.source == "planner" and "predicted peak" in f.what] == [verdict]
    if verdict == "warning":
        [warning] = find(result, key="sequence_len", severity="warning", text="padded to its longest sample")
        assert "sequence_len: " in warning.fix


def test_axolotl_evaluation_keeps_no_logits(tmp_path):
    # axolotl passes its trainers no compute_metrics (none in src/ at 067b021c), so transformers' Trainer.evaluate runs
    # evaluation_loop with prediction_loss_only=True; its examples/llama-3/diffusion/sft-1b.yaml was a 316 GiB false error
    result = _review(tmp_path, BASE + "val_set_size: 0.05\neval_strategy: epoch\n")
    assert result.plan.setup.prediction_loss_only
    assert not result.plan.phase_breakdowns.get("evaluation", {}).get("eval_logits")
    assert not find(result, severity="error")


def test_a_quantized_base_whose_experts_stay_16_bit_says_so(tmp_path):
    # axolotl's examples/jamba/qlora.yaml: 87.9 GiB of "weights" for a QLoRA, 84 GiB of them Jamba's fused experts that
    # bitsandbytes skips (axolotl docs/expert_quantization.qmd); the review names them and axolotl's switch
    moe = "base_model: zai-org/GLM-4.7-Flash\nadapter: qlora\nload_in_4bit: true\nlora_target_modules:\n  - q_proj\n"
    moe += "sequence_len: 1024\nmicro_batch_size: 1\ngradient_checkpointing: true\nbf16: true\n"
    plain, quantized = _review(tmp_path, moe), _review(tmp_path, moe + "quantize_moe_experts: true\n")
    [said] = find(plain, key="load_in_4bit", severity="info", text="the MoE experts stay 16-bit")
    assert said.fix.startswith("quantize_moe_experts: true")
    assert not find(quantized, text="the MoE experts stay 16-bit")
    dense = _review(tmp_path, BASE + "adapter: qlora\nload_in_4bit: true\n")
    assert not find(dense, text="the MoE experts stay 16-bit")
