"""The micro-batch a log's tensors show (issue 17: "micro-batch from shapes"), read only where it is
unambiguous, and used: no batch split when the log shows one sample already, and a split that says the
micro-batch it starts from.

The world corpus (tests/doctor/world) prints shapes only in `size mismatch` lines (weights, never a batch);
its CUDA OOM logs are used as they are, with one shape line added where a user would have printed it. The
negative shape lines are titles of public issue threads, verbatim (URL beside each).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vramfit.doctor import diagnose
from vramfit.doctor.settings import Settings

WORLD = Path(__file__).parent / "world"


def batch_fixes(d) -> list[dict]:
    return [f for f in d.fixes if "per_device_train_batch_size" in f.get("overrides", {})]


def with_line(tmp_path: Path, name: str, line: str, at: int = 0) -> Path:
    lines = (WORLD / name).read_text().splitlines(keepends=True)
    lines.insert(at, line + "\n")
    path = tmp_path / name
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("name", ["heldout_notmem_size_mismatch_lit_llama.log", "heldout_notmem_size_mismatch_resume_fastchat.log"])
def test_weight_shapes_in_the_corpus_are_not_a_batch(name):
    # 'copying a param with shape torch.Size([32001, 4096]) from checkpoint, ... torch.Size([32000, 4096])'
    settings = Settings()
    for number, text in enumerate((WORLD / name).read_text().splitlines(), 1):
        settings.read_shapes(number, text)
    assert "torch.Size([" in (WORLD / name).read_text()
    assert settings.shapes == [] and settings.micro_batch() is None
    assert "micro_batch_from_shapes" not in diagnose(WORLD / name).settings


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: shape '[24, 1, 6400]' is invalid for input of size 460800",  # iscyy/ultralyticsPro#39
        "RuntimeError: shape '[-1, 32000]' is invalid for input of size 128376192",  # InternLM/xtuner#142
        "RuntimeError: shape '[1, 13, 8, 128]' is invalid for input of size 26624",  # lyogavin/airllm#172
        "RuntimeError: shape '[256, 256, 1]' is invalid for input of size 8192",  # YBIGTA/pytorch-hair-segmentation#46
        "_get_logits logits torch.Size([256, 151936]) True",  # a flattened [tokens, vocab]: no batch in it
        "idx = [4, 4096, 32000]",  # a bare list is not a tensor shape
    ],
)
def test_shapes_that_do_not_say_the_batch(line):
    settings = Settings()
    settings.read_shapes(1, line)
    assert settings.micro_batch() is None


@pytest.mark.parametrize(
    "line, rows",
    [
        ("RuntimeError: shape '[4, 4096, 32000]' is invalid for input of size 262144000", 4),
        ("dst_output[logits] torch.Size([1, 6, 151936]) torch.float32", 1),
        ("[ALIGN] Teacher torch.Size([2, 256, 152064]) → Student torch.Size([2, 256, 151936])", 2),
    ],
)
def test_logits_shapes_give_the_micro_batch(line, rows):
    settings = Settings()
    settings.read_shapes(7, line)
    count, evidence, how = settings.micro_batch()
    assert count == rows and evidence["line"] == 7 and "line 7" in how


def test_disagreeing_shapes_say_nothing():
    settings = Settings()
    settings.read_shapes(1, "logits torch.Size([8, 2048, 151936])")
    settings.read_shapes(2, "logits torch.Size([4, 2048, 151936])")
    assert settings.micro_batch() is None


def test_vocab_from_the_log_replaces_the_known_list():
    settings = Settings()
    settings.read(".", '  "vocab_size": 49953,')
    settings.read_shapes(2, "logits torch.Size([3, 1024, 49953])")
    settings.read_shapes(3, "logits torch.Size([5, 1024, 32000])")  # not this model's vocabulary
    assert settings.micro_batch()[0] == 3


def test_micro_batch_one_drops_the_batch_fix_and_the_next_leads(tmp_path):
    name = "cublas_alloc_linear_forward_qwen3.log"
    before = diagnose(WORLD / name)
    assert batch_fixes(before) and before.fixes[0] is batch_fixes(before)[0]
    after = diagnose(with_line(tmp_path, name, "logits.shape = torch.Size([1, 8192, 151936])"))
    assert after.settings["micro_batch_from_shapes"] == 1
    assert batch_fixes(after) == [] and after.fixes[0] == before.fixes[1]
    assert any("torch.Size([1, 8192, 151936])" in e["text"] for e in after.evidence)
    assert any("Micro-batch 1" in note for note in after.notes)


def test_split_starts_from_the_micro_batch_shown(tmp_path):
    name = "cublas_alloc_linear_forward_qwen3.log"
    d = diagnose(with_line(tmp_path, name, "logits.shape = torch.Size([4, 8192, 151936])"))
    splits = batch_fixes(d)
    assert [f["overrides"]["per_device_train_batch_size"] for f in splits] == [2, 1]
    assert splits[0]["overrides"]["gradient_accumulation_steps"] == 2
    assert "[4, 8192, 151936]" in splits[0]["why"] and "micro-batch" in splits[0]["why"]


def test_a_setting_in_the_log_wins_over_a_shape(tmp_path):
    name = "cublas_alloc_linear_forward_qwen3.log"
    path = with_line(tmp_path, name, "logits.shape = torch.Size([1, 8192, 151936])")
    text = "  --per_device_train_batch_size 8 --gradient_accumulation_steps 1 \\\n" + path.read_text()
    path.write_text(text)
    splits = batch_fixes(diagnose(path))
    assert splits[0]["overrides"] == {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}


def test_evaluation_shape_is_the_eval_batch(tmp_path):
    name = "eval_nested_concat_seq2seq.log"
    assert diagnose(WORLD / name).fixes[0]["overrides"] == {"per_device_eval_batch_size": 1}
    d = diagnose(with_line(tmp_path, name, "logits torch.Size([1, 512, 32128])"))
    assert d.phase == "evaluation"
    assert "per_device_eval_batch_size" not in d.fixes[0].get("overrides", {})


def test_dpo_concatenation_is_two_rows_per_sample(tmp_path):
    text = (
        "\n".join(
            [
                "logits torch.Size([4, 2048, 128256])",
                "Traceback (most recent call last):",
                '  File "/opt/conda/lib/python3.10/site-packages/trl/trainer/dpo_trainer.py", line 1451, in concatenated_forward',
                '    outputs = model(concatenated_batch["concatenated_input_ids"])',
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
                "79.15 GiB of which 1.20 GiB is free. Of the allocated memory 75.10 GiB is allocated by PyTorch, and "
                "1.30 GiB is reserved by PyTorch but unallocated.",
            ]
        )
        + "\n"
    )
    path = tmp_path / "dpo.log"
    path.write_text(text)
    d = diagnose(path)
    assert d.settings["micro_batch_from_shapes"] == 2
    assert "chosen and rejected" in d.settings["micro_batch_evidence"]


def test_request_sized_as_the_logits(tmp_path):
    settings = Settings()
    settings.read(".", '  "vocab_size": 32000,')
    settings.read(".", "--max_seq_length 4096")
    assert settings.micro_batch(250 / 1024)[0] == 1  # 1 x 4096 x 32000 x 2 bytes = 250.00 MiB
    assert settings.micro_batch(750 / 1024)[0] == 3  # 3 rows in bf16; 1.5 in fp32 is no row count
    assert settings.micro_batch(500 / 1024) is None  # 2 rows in bf16 or 1 in fp32: ambiguous
    assert settings.micro_batch(0.31) is None  # no row count fits
    assert Settings().micro_batch(250 / 1024) is None  # sequence and vocabulary not in the log


def test_request_sized_as_the_logits_end_to_end(tmp_path):
    lines = [
        "  --max_seq_length 4096 \\",
        '  "vocab_size": 32000,',
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/site-packages/transformers/loss/loss_utils.py", line 36, in fixed_cross_entropy',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {}. GPU 0 has a total capacity of 23.55 GiB "
        "of which 120.00 MiB is free. Of the allocated memory 22.10 GiB is allocated by PyTorch, and 100.00 MiB "
        "is reserved by PyTorch but unallocated.",
    ]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines).format("250.00 MiB") + "\n")
    d = diagnose(path)
    assert d.settings["micro_batch_from_shapes"] == 1 and batch_fixes(d) == []
    assert "250.00 MiB request is exactly 1 x 4096 x 32000 x 2 bytes" in d.settings["micro_batch_evidence"]
    path.write_text("\n".join(lines).format("500.00 MiB") + "\n")  # 2 rows in bf16 or 1 in fp32
    d = diagnose(path)
    assert "micro_batch_from_shapes" not in d.settings and batch_fixes(d)


def test_deepspeed_aio_block_size_is_not_a_sequence():
    settings = Settings()
    settings.read(".", '  "aio": {"block_size": 1048576, "queue_depth": 8},')
    settings.read(".", '  "vocab_size": 32000,')
    assert "max_seq_length" not in settings.values
    assert settings.micro_batch(0.125) is None
