"""Embedding, reranker and generative-reranker heads (vramfit/planner/heads.py): planned as ms-swift builds them, with no
vocabulary-wide logits, and with every sequence one sample brings into the forward."""

from __future__ import annotations

import importlib

import pytest

from vramfit.planner import heads, params, training
from vramfit.planner.activations import FP32, LogitsMode, logits_bytes
from vramfit.planner.setup import Setup
from vramfit.problems import ConfigError

from planner_support import REPO, recipe_path

plan = importlib.import_module("vramfit.planner.plan")

EMB = REPO / "model_configs" / "hub" / "qwen3-embedding-0.6b.json"  # Qwen3, tied, vocab 151,669... as published
LLAMA8 = REPO / "model_configs" / "llama-3.1-8b.json"  # untied lm_head: 128,256 x 4,096
GIB = 2**30
BASE = ("bf16=true", "per_device_train_batch_size=2", "max_length=1024", "gradient_checkpointing=true")


def setup(*items, config=EMB, gpus=1) -> Setup:
    return Setup.from_args(config, "h100", gpus, 1, None, [*BASE, *items])


def gib(p, key, phase="train"):
    return p.phase_breakdowns[phase].get(key, 0.0)


@pytest.mark.parametrize(
    "items, head, labels, sequences",
    [
        (("task_type=embedding",), "embedding", None, 2),  # anchor + positive
        (("task_type=embedding", "negatives=3"), "embedding", None, 5),
        (("head=embedding",), "embedding", None, 2),
        (("task_type=reranker",), "seq_cls", 1, 8),  # MAX_POSITIVE_SAMPLES 1 x (1 + MAX_NEGATIVE_SAMPLES 7)
        (("task_type=reranker", "negatives=3", "positives=2"), "seq_cls", 1, 8),
        (("task_type=generative_reranker",), "generative_reranker", None, 8),
        (("task_type=seq_cls", "num_labels=5"), "seq_cls", 5, 1),
        (("task_type=SEQ_CLS", "num_labels=1"), "seq_cls", 1, 1),
    ],
)
def test_task_types_name_the_head_and_the_sequences_of_a_sample(items, head, labels, sequences):
    s = setup(*items)
    assert s.head == head and s.sequences_per_sample == sequences
    if labels is not None:
        assert s.num_labels == labels


def test_bad_counts_are_refused():
    for item, message in (("negatives=-1", "negatives"), ("positives=0", "positives"), ("task_type=ranking", "ms-swift task type")):
        with pytest.raises(ConfigError, match=message):
            setup("task_type=embedding" if "task" not in item else "bf16=true", item)


def test_an_embedding_plans_no_vocabulary_wide_logits():
    """patch_output_normalizer: lm_head returns the hidden states; what the loss adds is the pooling index's dense gradient
    of the hidden states (tokens x hidden in the compute dtype), not tokens x vocabulary."""
    lm, emb = plan.plan(setup()), plan.plan(setup("head=embedding", "negatives=0"))
    arch = params.summary(EMB)
    tokens = 2 * 2 * 1024  # micro-batch 2 x (anchor + positive)
    assert gib(lm, "logits") * GIB > 2 * 1024 * arch.vocab * FP32  # the causal LM's fp32 logits
    mode = LogitsMode(0, arch.text.hidden, 2, False, False, 2)
    assert logits_bytes(mode, tokens) == tokens * arch.text.hidden * 2
    assert emb.per_gpu_peak_gib < lm.per_gpu_peak_gib
    assert emb.parameters["total"] == lm.parameters["total"]  # the causal LM's class: its lm_head stays (tied here)
    assert any("no vocabulary-wide logits" in n and "anchor + positive" in n for n in emb.notes)


def test_an_embedding_sample_s_negatives_are_sequences_of_the_forward():
    """_embedding_data_collator: anchor, positive and every negative of each sample in one batch: the kept layer inputs of
    a checkpointed run grow with 2 + negatives."""
    two, five = plan.plan(setup("head=embedding")), plan.plan(setup("head=embedding", "negatives=3"))
    same_tokens = plan.plan(setup("head=embedding", "per_device_train_batch_size=5"))
    assert gib(five, "activations") == pytest.approx(gib(same_tokens, "activations"), rel=1e-9)  # 2 x 5 sequences either way
    assert gib(five, "activations") == pytest.approx(gib(two, "activations") * 2.5, rel=1e-6)


def test_a_generative_reranker_reads_two_rows_of_lm_head_and_writes_its_whole_gradient():
    """get_generative_reranker_logits: F.linear over lm_head.weight[[yes, no]] then their difference (3 columns per position);
    the row index's backward is dense, so a trained lm_head still gets a vocab x hidden gradient."""
    s = setup("task_type=generative_reranker", config=LLAMA8)
    arch = training.with_head(params.summary(LLAMA8), s)
    out = heads.output(s, arch)
    assert (out.width, out.weight_rows) == (3, 128256)
    assert arch.total == params.summary(LLAMA8).total  # lm_head kept whole
    tokens, hidden = 8 * 2 * 1024, 4096
    mode = LogitsMode(out.width, hidden, 2, False, True, 2, True, "torch", False, out.weight_rows)
    assert logits_bytes(mode, tokens) == tokens * 3 * 2 + tokens * hidden * 2 + 128256 * hidden * 2
    lm = plan.plan(setup("per_device_train_batch_size=16", config=LLAMA8))  # the same 16 sequences as a causal LM
    gen = plan.plan(s)
    assert gib(gen, "logits") < gib(lm, "logits") / 100
    assert gib(gen, "weights") == gib(lm, "weights")


def test_evaluation_keeps_one_row_per_sequence_for_pooled_heads():
    """A sequence classifier returns pooled_logits [batch, num_labels], an embedding [batch, hidden]: the kept predictions are
    per sequence, not per position."""
    arch = params.summary(EMB)
    for items, width in ((("task_type=seq_cls", "num_labels=3"), 3), (("head=embedding",), arch.text.hidden)):
        s = setup(*items, "eval_strategy=steps", "prediction_loss_only=false")
        p = plan.plan(s)
        steps = max(1, -(-s.eval_samples // (s.eval_batch * s.sequences_per_sample * s.world)))
        rows = s.eval_batch * s.sequences_per_sample
        assert gib(p, "eval_logits", "evaluation") * GIB == pytest.approx((2 * steps - 1) * rows * width * 2)


def test_recipe_planner_section_takes_the_task():
    from vramfit.recipe import load

    path = recipe_path("axolotl-llama-3b-8xa100-80g")
    s = Setup.from_recipe(load(path, ["planner.task_type=reranker", "planner.negatives=3"]))
    assert (s.head, s.num_labels, s.sequences_per_sample) == ("seq_cls", 1, 4)
    s = Setup.from_recipe(load(path, ["planner.head=embedding"]))
    assert (s.head, s.sequences_per_sample) == ("embedding", 2)
    with pytest.raises(ConfigError):
        load(path, ["planner.negatives=-2"])


def test_packed_groups_fill_the_packed_rows():
    """With packing every row is filled to max_length whatever sequences it holds: a reranker group is not a multiplier."""
    assert setup("task_type=generative_reranker", "packing=true").sequences_per_sample == 1


@pytest.mark.parametrize("head, labels", [("seq_cls", 1), ("token_cls", 3), ("embedding", 1), ("generative_reranker", 1)])
def test_the_trace_builds_the_task_s_head_and_agrees_with_the_plan(tmp_path, head, labels):
    """plan --trace for a classification head runs transformers' AutoModelFor{Sequence,Token}Classification under fake
    tensors, for ms-swift's embedding / generative reranker the causal LM with its lm_head forward replaced as ms-swift
    replaces it and ms-swift's loss on the last position (no fallback to the analytic terms), keyed apart from the causal
    LM's trace; its activations agree with the analytic plan's."""
    import json

    from transformers import LlamaConfig

    from vramfit.planner import trace

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, vocab_size=512)
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(cfg.to_dict(), default=str))
    s = Setup.from_args(path, "h100", 1, 1, None, ["bf16=true", "per_device_train_batch_size=2", "max_length=256", f"head={head}", f"num_labels={labels}"])
    assert trace.trace_key(s) != trace.trace_key(s.replace(head="lm"))
    traced, analytic = plan.plan(s, trace=True), plan.plan(s)
    assert not any(n.startswith("trace: not used") for n in traced.notes)
    assert any("traced with fake tensors" in n for n in traced.notes)
    t, a = (sum(p.phase_breakdowns["train"].get(k, 0.0) for k in ("activations", "logits")) for p in (traced, analytic))
    assert t == pytest.approx(a, rel=0.10)
