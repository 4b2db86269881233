"""GKD (`trainer=gkd`; vramfit/planner/gkd.py): the frozen teacher's weights, the loss's full-vocabulary tensors and
on-policy generation, as TRL's experimental GKDTrainer and ms-swift's GKD trainer hold them."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os

import pytest

from vramfit.planner import gkd, knobs
from vramfit.planner.setup import Setup
from vramfit.problems import ConfigError

plan = importlib.import_module("vramfit.planner.plan")
GIB = 2**30
VOCAB = 32000


def config(tmp_path, name, hidden, layers, vocab=VOCAB):
    path = tmp_path / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": hidden,
                "intermediate_size": hidden * 2,
                "num_hidden_layers": layers,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": vocab,
                "max_position_embeddings": 8192,
                "tie_word_embeddings": False,
                "torch_dtype": "bfloat16",
            }
        )
    )
    return path


BASE = ("per_device_train_batch_size=2", "max_length=512", "bf16=true", "gradient_checkpointing=true")


def planned(student, *items, gpus=1, deepspeed=None):
    return plan.plan(Setup.from_args(student, "a100-80g", gpus, 1, deepspeed, [*BASE, *items]))


def test_trl_generalized_jsd_loss_holds_the_counted_full_vocabulary_tensors():
    """The pinned TRL's own loss, run on fake tensors under MemTracker: its peak (the student's and the teacher's logits
    included, as compute_loss holds them) is the count the planner uses, for the JSD and for a plain KL."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    defaults = {f.name: f.default for f in dataclasses.fields(GKDConfig)}
    assert {k: defaults[k] for k in knobs.GKD_DEFAULTS} == knobs.GKD_DEFAULTS
    batch, seq, vocab = 2, 65, 512
    for beta, kind in ((0.5, "jsd"), (0.0, "kl"), (1.0, "kl")):
        with FakeTensorMode():
            student = torch.randn(batch, seq, vocab, requires_grad=True)
            teacher = torch.randn(batch, seq, vocab)
            tracker = MemTracker()
            with tracker:
                loss = GKDTrainer.generalized_jsd_loss(student[:, :-1, :], teacher[:, :-1, :], beta=beta)
                peak = next(iter(tracker.get_tracker_snapshot("peak").values()))["Total"]
            loss.backward()
        unit = batch * (seq - 1) * vocab * 4
        assert peak / unit == pytest.approx(gkd.TRL_LOSS_TENSORS[kind], abs=0.1), (beta, peak / unit)


def test_a_gkd_plan_holds_the_teachers_weights_and_the_loss_tensors(tmp_path):
    student, teacher = config(tmp_path, "student", 256, 2), config(tmp_path, "teacher", 512, 4)
    with pytest.raises(ConfigError):  # trainer=gkd was not a knob before
        Setup.from_args(student, "a100-80g", 1, 1, None, [*BASE, "trainer=sft", "lmbda=0.5"])
    p = planned(student, "trainer=gkd", f"teacher_model={teacher}")
    assert not p.incomplete and p.setup.teacher_config == teacher
    tarch = gkd.teacher_arch(p.setup)
    train = p.phase_breakdowns["train"]
    assert train["teacher_model"] == pytest.approx(tarch.total * 2 / GIB)  # bf16, whole on the one GPU
    # TRL trains on prompt (max_length) + max_new_tokens (128) and holds 17 fp32 tensors of tokens x vocab (AMP)
    assert p.setup.seq_len == 512 + 128
    assert train["logits"] == pytest.approx(17 * 2 * 640 * VOCAB * 4 / GIB)
    assert "generation" in p.phases and "seq_kd" not in p.phases and "trainer=gkd" in " ".join(p.notes)
    kd = planned(student, "trainer=gkd", f"teacher_model={teacher}", "seq_kd=true")  # the teacher generates too
    # with gradient checkpointing TRL generates without a KV cache: each token re-runs the (wider) teacher over the sequence
    assert "kv_cache" not in kd.phase_breakdowns["seq_kd"]
    assert kd.phase_breakdowns["seq_kd"]["activations"] > kd.phase_breakdowns["generation"]["activations"]
    sft = planned(student)
    assert p.per_gpu_peak_gib > sft.per_gpu_peak_gib + train["teacher_model"]
    # ZeRO-3 shards the teacher (TRL prepare_deepspeed keeps stage 3); the loss is 16-bit under DeepSpeed
    z3 = planned(student, "trainer=gkd", f"teacher_model={teacher}", gpus=4, deepspeed="zero3")
    assert z3.phase_breakdowns["train"]["teacher_model"] == pytest.approx(train["teacher_model"] / 4)
    assert z3.phase_breakdowns["train"]["logits"] == pytest.approx(train["logits"] / 2)
    # TRL's gkd.py loads the teacher with the policy's quantization_config: its linears 4-bit too
    q = planned(student, "trainer=gkd", f"teacher_model={teacher}", "method=qlora", "load_in_4bit=true")
    from vramfit.planner import params, states

    linears = params.count(tarch, q.setup).quantized
    assert linears > 0
    saved = linears * (2 - states.quant_bytes(q.setup)) / GIB
    assert q.phase_breakdowns["train"]["teacher_model"] == pytest.approx(train["teacher_model"] - saved)
    # ms-swift: its chunked loss over the labelled completion (max_completion_length per sample)
    swift = planned(student, "trainer=gkd", f"teacher_model={teacher}", "gkd_loss=swift", "max_completion_length=256")
    rows = 2 * 256
    assert swift.phase_breakdowns["train"]["logits"] == pytest.approx((13 * rows + 10 * rows) * VOCAB * 4 / GIB)
    # packing fills each row with samples, every position of it a completion that can be scored
    packed = planned(student, "trainer=gkd", f"teacher_model={teacher}", "gkd_loss=swift", "max_completion_length=256", "packing=true")
    assert packed.phase_breakdowns["train"]["logits"] == pytest.approx((13 * 2 * 512 + 10 * 512) * VOCAB * 4 / GIB)


def test_a_larger_teacher_moves_the_plan_by_its_weights(tmp_path):
    student = config(tmp_path, "student", 256, 2)
    small, large = config(tmp_path, "small", 256, 2), config(tmp_path, "large", 1024, 8)
    a = planned(student, "trainer=gkd", f"teacher_model={small}", "lmbda=0")
    b = planned(student, "trainer=gkd", f"teacher_model={large}", "lmbda=0")
    grown = (gkd.teacher_arch(b.setup).total - gkd.teacher_arch(a.setup).total) * 2 / GIB
    assert grown > 0.05
    assert b.phase_breakdowns["train"]["teacher_model"] - a.phase_breakdowns["train"]["teacher_model"] == pytest.approx(grown)
    assert b.per_gpu_peak_gib - a.per_gpu_peak_gib == pytest.approx(grown, rel=0.05)


def test_a_teacher_server_holds_nothing_and_an_unknown_teacher_leaves_the_plan_incomplete(tmp_path):
    student = config(tmp_path, "student", 256, 2)
    served = planned(student, "trainer=gkd", "gkd_loss=swift", "teacher_model_server=http://127.0.0.1:8000")
    assert served.setup.teacher_server and "teacher_model" not in served.phase_breakdowns["train"] and not served.incomplete
    unknown = planned(student, "trainer=gkd", "teacher_model=nobody/no-such-teacher-7b")
    assert unknown.incomplete and "no-such-teacher-7b" in unknown.incomplete[0]
    with pytest.raises(ConfigError):
        Setup.from_args(student, "a100-80g", 1, 1, None, [*BASE, "trainer=gkd", "lmbda=1.5"])
    other = config(tmp_path, "other", 256, 2, vocab=VOCAB + 64)
    with pytest.raises(ConfigError, match="vocabulary"):  # TRL's GKDTrainer refuses a teacher of another vocabulary
        Setup.from_args(student, "a100-80g", 1, 1, None, [*BASE, "trainer=gkd", f"teacher_model={other}"])
    aligned = planned(student, "trainer=gkd", f"teacher_model={other}", "gkd_loss=swift")  # ms-swift pads to the larger
    assert aligned.phase_breakdowns["train"]["logits"] > planned(student, "trainer=gkd", "gkd_loss=swift").phase_breakdowns["train"]["logits"]
