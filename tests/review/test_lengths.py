"""Sample lengths against the cap (vramfit/review/lengths.py): a collator that pads each batch to its longest sample is
planned at the data's longest sample where the review can know it (a published set's bound, a sample of the training
file), with the cap planned beside and said; a collator that pads to the cap, or data it cannot know, keeps the cap."""

from __future__ import annotations

import json

import pytest

from vramfit.review import lengths
from vramfit.review.reviewer import review

LLAVA = """deepspeed llava/train/train_mem.py \\
    --deepspeed ./zero2.json \\
    --model_name_or_path lmsys/vicuna-13b-v1.5 \\
    --version plain \\
    --data_path {data} \\
    --vision_tower openai/clip-vit-large-patch14-336 \\
    --tune_mm_mlp_adapter True \\
    --bf16 True \\
    --per_device_train_batch_size 32 \\
    --gradient_accumulation_steps 1 \\
    --model_max_length 2048 \\
    --gradient_checkpointing True
"""
ZERO2 = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}


def _review(tmp_path, data: str, program: str = "llava/train/train_mem.py"):
    (tmp_path / "zero2.json").write_text(json.dumps(ZERO2))
    script = tmp_path / "pretrain.sh"
    script.write_text(LLAVA.format(data=data).replace("llava/train/train_mem.py", program))
    return review([str(script)], gpu="a100-80g", gpus=8)


def _length_findings(result):
    return [f for f in result.findings if f.key == "--model_max_length" and f.source == "planner"]


def test_a_published_set_bounded_by_how_it_was_made_is_planned_at_its_longest_sample(tmp_path):
    """LLaVA's projector pretraining on LCS-558K: one image (576 tokens at CLIP-L/14 336 px) and one BLIP caption per
    sample, batches padded to their longest sample: planned at 640 tokens, the 2,048 cap beside it, no error."""
    result = _review(tmp_path, "./playground/data/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json")
    assert result.plan is not None and result.plan.setup.seq_len == 576 + 64
    assert not [f for f in result.findings if f.severity == "error"], [str(f) for f in result.findings if f.severity == "error"]
    said = " ".join(f.what for f in _length_findings(result))
    assert "planned at the data's longest sample, 640 tokens" in said and "pads each batch to its longest sample" in said
    assert "at the cap of 2,048 tokens" in said and "no sample of this data reaches it" in said
    assert all(f.severity == "info" for f in _length_findings(result))


def test_a_sample_of_the_training_file_sizes_the_step_and_the_cap_is_a_warning_when_it_would_not_fit(tmp_path):
    """The training file where the script names it: its longest sample sizes the step; the cap, which a sample not read
    could still reach, is a warning with the edit that makes the plan hold."""
    records = [
        {"id": str(i), "image": f"{i:05d}.jpg", "conversations": [{"from": "human", "value": "<image>\nDescribe."}, {"from": "gpt", "value": "x" * (30 * i)}]}
        for i in range(1, 11)
    ]
    (tmp_path / "data.json").write_text(json.dumps(records))
    result = _review(tmp_path, "./data.json")
    longest = max(len("\nDescribe.\n" + "x" * (30 * i)) // lengths.CHARS_PER_TOKEN + 1 for i in range(1, 11)) + 576
    assert result.plan is not None and result.plan.setup.seq_len == longest
    cap = [f for f in _length_findings(result) if "the peak would be" in f.what]
    assert len(cap) == 1 and cap[0].severity == "warning" and "the longest of those read" in cap[0].what
    assert cap[0].fix.startswith(f"--model_max_length {longest}")
    assert not [f for f in result.findings if f.severity == "error"]


def test_the_published_file_here_keeps_its_bound_unless_its_samples_exceed_it(tmp_path):
    """The real LCS-558K file where the script names it (a JSON list, read from its head only): its captions stay within
    the published bound, so the bound holds (a note at the cap, no warning); an edited file with longer captions is
    sized by its own samples."""
    folder = tmp_path / "LLaVA-Pretrain"
    folder.mkdir()
    caption = {"id": "004539375", "image": "00453/004539375.jpg"}
    short = [
        {
            **caption,
            "conversations": [
                {"from": "human", "value": "Render a clear and concise summary of the photo.\n<image>"},
                {"from": "gpt", "value": "select luxury furniture 3 - inch gel memory foam mattress topper"},
            ],
        }
    ]
    (folder / "blip_laion_cc_sbu_558k.json").write_text(json.dumps(short * 50))
    found = lengths.longest(str(folder / "blip_laion_cc_sbu_558k.json"), 576)
    assert found is not None and found.bound and found.tokens == 640
    long = [{**caption, "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "y" * 900}]}]
    (folder / "blip_laion_cc_sbu_558k.json").write_text(json.dumps(long))
    found = lengths.longest(str(folder / "blip_laion_cc_sbu_558k.json"), 576)
    assert found is not None and not found.bound and found.tokens == 576 + 900 // lengths.CHARS_PER_TOKEN + 1


def test_a_json_lines_sample_with_chat_content_parts(tmp_path):
    lines = [{"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "a" * 300}]}]}, {"text": "b" * 30}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    found = lengths.longest(str(tmp_path / "train.jsonl"), 100)
    assert found is not None and found.tokens == 100 + 300 // lengths.CHARS_PER_TOKEN + 1 and "first 2 samples" in found.how


def test_data_it_cannot_know_keeps_the_cap(tmp_path):
    """LLaVA's instruction mix is not in the table and not here: the cap is the verdict, as before (an error here)."""
    result = _review(tmp_path, "./playground/data/llava_v1_5_mix665k.json")
    assert result.plan is not None and result.plan.setup.seq_len == 2048
    assert not [f for f in _length_findings(result) if "longest sample" in f.what]
    assert [f for f in result.findings if f.severity == "error" and f.key == "--gpu"]


def test_a_program_padding_every_sample_to_the_cap_keeps_the_cap(tmp_path):
    """FastChat pads every sample to model_max_length: the data's length does not lower the step."""
    result = _review(tmp_path, "./playground/data/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json", program="fastchat/train/train_mem.py")
    assert result.plan is not None and result.plan.setup.seq_len == 2048


def test_the_longest_sample_given_on_the_command_line(tmp_path):
    """--sample-length: the data's longest sample as the user gives it, used where the collator pads to the longest
    sample, and said not used where it pads to the cap."""
    (tmp_path / "zero2.json").write_text(json.dumps(ZERO2))
    for program, used in (("llava/train/train_mem.py", True), ("fastchat/train/train_mem.py", False)):
        script = tmp_path / "pretrain.sh"
        script.write_text(LLAVA.format(data="./playground/data/llava_v1_5_mix665k.json").replace("llava/train/train_mem.py", program))
        result = review([str(script)], gpu="a100-80g", gpus=8, sample_length=700)
        assert result.plan is not None and result.plan.setup.seq_len == (700 if used else 2048), program
        said = [f for f in result.findings if "--sample-length" in f.what or f.key == "--sample-length"]
        assert said and (("as given" in said[0].what) if used else said[0].what.startswith("not used")), [str(f) for f in said]


@pytest.mark.parametrize(
    "program, pads",
    [("llava/train/train_mem.py", True), ("share4v/train/train.py", True), ("fastchat/train/train_lora.py", False), ("train.py", None)],
)
def test_the_collator_facts(program, pads):
    assert lengths.pads_to_longest(program)[0] is pads


@pytest.mark.parametrize(
    "tower, per_image, tokens",
    [("openai/clip-vit-large-patch14-336", None, 576), ("openai/clip-vit-large-patch14", None, 256), (None, 729, 729), ("my/tower", None, None)],
)
def test_image_tokens_of_a_tower(tower, per_image, tokens):
    assert lengths.image_tokens(tower, per_image) == tokens
