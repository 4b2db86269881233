"""Sample lengths against the cap (vramfit/review/lengths.py): a collator that pads each batch to its longest sample is
planned at the data's longest sample where the review can know it (a published set's bound, a sample of the training
file), with the cap planned beside and said; a collator that pads to the cap, or data it cannot know, keeps the cap."""

from __future__ import annotations

import json

import pytest

from vramfit.planner.plan import plan
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


def test_a_published_set_whose_samples_reach_the_cap_keeps_the_cap_and_its_error(tmp_path):
    """LLaVA's v1.5 instruction mix holds ShareGPT conversations filled up to 2,048 tokens: batches reach the cap, so the
    cap is the verdict (an error here), and the review says why it planned there."""
    result = _review(tmp_path, "./playground/data/llava_v1_5_mix665k.json")
    assert result.plan is not None and result.plan.setup.seq_len == 2048
    said = [f for f in _length_findings(result) if "which batches reach" in f.what]
    assert len(said) == 1 and "ShareGPT" in said[0].what and said[0].severity == "info"
    assert [f for f in result.findings if f.severity == "error" and f.key == "--gpu"]


def _unknown_data(tmp_path, gpu: str):
    (tmp_path / "zero2.json").write_text(json.dumps(ZERO2))
    script = tmp_path / "finetune.sh"
    script.write_text(LLAVA.format(data="./playground/data/my_mix.json"))
    return review([str(script)], gpu=gpu, gpus=8)


def test_data_it_cannot_know_is_planned_at_the_cap_and_a_shorter_sample_that_fits_makes_it_a_warning(tmp_path):
    """Batches padded to their longest sample, of data the review cannot read: planned at the cap, which does not fit on
    8 x A100-80G at 32 x 2,048; it fits at shorter samples, so the verdict is a warning naming the length that fits and
    the cap edit that guarantees it, not an error (the run fails only if the data holds such samples)."""
    result = _unknown_data(tmp_path, "a100-80g")
    assert result.plan is not None and result.plan.setup.seq_len == 2048 and not result.plan.fits
    assert not [f for f in result.findings if f.severity == "error"], [str(f) for f in result.findings if f.severity == "error"]
    warned = [f for f in result.findings if f.severity == "warning" and f.key == "--model_max_length"]
    assert len(warned) == 1 and "each batch is padded to its longest sample" in warned[0].what, [str(f) for f in warned]
    fits_at = int(warned[0].what.rsplit("no sample exceeds ", 1)[1].split(" ", 1)[0].replace(",", ""))
    assert 256 <= fits_at < 2048 and warned[0].fix.startswith("check your data") and f"--model_max_length {fits_at}" in warned[0].fix
    shorter = plan(result.plan.setup.replace(seq_len=fits_at))
    assert shorter.fits and not plan(result.plan.setup.replace(seq_len=fits_at * 2)).fits


def test_data_it_cannot_know_stays_an_error_where_no_sample_length_fits(tmp_path):
    """On 24 GB cards the 13B weights alone overflow: no sample length fits, so the error stands whatever the data."""
    result = _unknown_data(tmp_path, "rtx3090")
    assert [f for f in result.findings if f.severity == "error" and f.key == "--gpu"]
    assert not [f for f in result.findings if f.severity == "warning" and f.key == "--model_max_length"]


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
    [
        ("llava/train/train_mem.py", True),
        ("share4v/train/train.py", True),
        ("fastchat/train/train_lora.py", False),
        ("qlora.py", True),
        ("train.py", None),
    ],
)
def test_the_collator_facts(program, pads):
    assert lengths.pads_to_longest(program)[0] is pads


@pytest.mark.parametrize(
    "settings, pads",
    [
        ({"conv_style": "internvl2_5"}, True),  # preprocess_internvl2_5: padding=False
        ({"conv_style": "internlm2-chat"}, False),  # the other templates pad to max_seq_length ...
        ({"conv_style": "internlm2-chat", "group_by_length": "True"}, True),  # ... unless group_by_length
        ({"conv_style": "internvl2_5", "use_packed_ds": "True"}, None),  # packed: neither
        ({}, False),
    ],
)
def test_internvls_collator_depends_on_the_template_and_group_by_length(settings, pads):
    assert lengths.pads_to_longest("internvl/train/internvl_chat_finetune.py", settings)[0] is pads


@pytest.mark.parametrize(
    "tower, per_image, tokens",
    [("openai/clip-vit-large-patch14-336", None, 576), ("openai/clip-vit-large-patch14", None, 256), (None, 729, 729), ("my/tower", None, None)],
)
def test_image_tokens_of_a_tower(tower, per_image, tokens):
    assert lengths.image_tokens(tower, per_image) == tokens


@pytest.mark.parametrize(
    "program, settings, pads",
    [
        ("llamafactory-cli train", {"stage": "sft"}, True),  # SFTDataCollatorWith4DAttentionMask: padding=True
        ("llamafactory-cli train", {"stage": "dpo", "cutoff_len": 1024}, True),  # PairwiseDataCollatorWithPadding
        ("lmf train", {"stage": "kto"}, True),  # KTODataCollatorWithPadding
        (None, {"stage": "rm", "finetuning_type": "lora", "cutoff_len": 4096, "packing": False}, True),  # its YAML alone
        ("src/train_bash.py", {"stage": "sft", "cutoff_len": "1024"}, True),  # 0.2-0.5: DataCollatorForSeq2Seq
        ("llamafactory-cli train", {"stage": "sft", "packing": True}, False),  # packed to exactly cutoff_len
        ("llamafactory-cli train", {"stage": "sft", "neat_packing": "true"}, False),
        ("src/train_bash.py", {"stage": "sft", "sft_packing": "True", "cutoff_len": 2048}, False),  # 0.2-0.5
        ("llamafactory-cli train", {"stage": "pt"}, False),  # pretraining packs by default ...
        ("llamafactory-cli train", {"stage": "pt", "packing": "false"}, True),  # ... unless told not to
        ("train.py", {"cutoff_len": 1024}, None),  # one argument of its name is not LLaMA-Factory
    ],
)
def test_llamafactorys_collators_pad_to_the_longest_sample_unless_it_packs(program, settings, pads):
    assert lengths.pads_to_longest(program, settings)[0] is pads


LLAMAFACTORY_DPO = """model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
stage: {stage}
do_train: true
finetuning_type: lora
lora_target: q_proj,v_proj
dataset: rm_data_private
template: llama3
cutoff_len: 1024
output_dir: saves/llama3-8b/lora/dpo
per_device_train_batch_size: 4
gradient_accumulation_steps: 8
learning_rate: 0.00001
fp16: true
{extra}"""


@pytest.mark.parametrize(
    "stage, extra, said",
    [
        ("dpo", "", "pad each batch to its longest sample"),  # hiyouga/LlamaFactory#3716's run on one A10: pairs padded to the longest
        ("sft", "packing: true\n", None),  # packed: every sequence is cutoff_len long, so the cap is what runs
        ("pt", "", None),  # pretraining packs by default
    ],
)
def test_llamafactory_at_a_cap_of_data_it_cannot_read_keeps_the_cap_and_the_sample_length_sizes_it(tmp_path, stage, extra, said):
    """LLaMA-Factory pads each batch to its longest sample, but with data the review cannot read its cutoff_len stays the
    verdict (an error where it does not fit), said with how to plan at the data's length; packed sequences fill cutoff_len,
    so there the cap is simply what runs. The data's longest sample, given, sizes the step only where batches are padded."""
    config = tmp_path / "llama3_lora_dpo.yaml"
    config.write_text(LLAMAFACTORY_DPO.format(stage=stage, extra=extra))
    result = review([str(config)], gpu="a10", gpus=1)
    assert result.plan is not None and result.plan.setup.seq_len == 1024 and not result.plan.fits
    assert [f for f in result.findings if f.severity == "error" and f.key == "--gpu"] and not result.length_worst_case
    infos = [f for f in result.findings if f.severity == "info" and f.key == "cutoff_len" and "--sample-length" in f.what]
    assert bool(infos) == bool(said) and all(said in f.what for f in infos), [str(f) for f in result.findings]
    given = review([str(config)], gpu="a10", gpus=1, sample_length=256)
    assert given.plan is not None and given.plan.setup.seq_len == (256 if said else 1024)


def test_llamafactorys_datasets_are_read_through_its_dataset_info_where_they_lie_here(tmp_path):
    """A LLaMA-Factory checkout: `dataset: my_pairs` is data/dataset_info.json's entry, a local file in the sharegpt
    ranking format (the prompt's turns, then one chosen and one rejected message): its longest sample sizes the step, the
    longer answer counted, and the cap is planned beside it. An entry on the Hub leaves the lengths unknown: the cap is the verdict, said."""
    (tmp_path / "data").mkdir()
    (tmp_path / "examples").mkdir()
    pairs = [
        {
            "conversations": [{"from": "human", "value": "q" * (20 * i)}],
            "chosen": {"from": "gpt", "value": "c" * (30 * i)},
            "rejected": {"from": "gpt", "value": "r" * (10 * i)},
        }
        for i in range(1, 11)
    ]
    (tmp_path / "data" / "my_pairs.json").write_text(json.dumps(pairs))
    info = {
        "my_pairs": {"file_name": "my_pairs.json", "formatting": "sharegpt", "ranking": True},
        "hub_pairs": {"hf_hub_url": "llamafactory/DPO-En-Zh-20k", "ranking": True},
    }
    (tmp_path / "data" / "dataset_info.json").write_text(json.dumps(info))
    config = tmp_path / "examples" / "llama3_lora_dpo.yaml"
    config.write_text(LLAMAFACTORY_DPO.format(stage="dpo", extra="").replace("rm_data_private", "my_pairs"))
    result = review([str(config)], gpu="a10", gpus=1)
    longest = len("q" * 200 + "\n" + "c" * 300) // lengths.CHARS_PER_TOKEN + 1
    assert result.plan is not None and result.plan.setup.seq_len == longest and result.plan.fits
    assert not [f for f in result.findings if f.severity == "error"] and not result.length_worst_case
    said = [f for f in result.findings if f.key == "cutoff_len" and f.source == "planner"]
    assert any("my_pairs of data/dataset_info.json" in f.what for f in said), [str(f) for f in said]
    assert any(f.severity == "warning" and "at the cap of 1,024 tokens" in f.what for f in said), [str(f) for f in said]
    config.write_text(LLAMAFACTORY_DPO.format(stage="dpo", extra="").replace("rm_data_private", "my_pairs,hub_pairs"))
    unknown = review([str(config)], gpu="a10", gpus=1)
    assert unknown.plan is not None and unknown.plan.setup.seq_len == 1024 and not unknown.length_worst_case
    assert any(f.key == "cutoff_len" and "--sample-length" in f.what for f in unknown.findings), [str(f) for f in unknown.findings]


# artidoro/qlora's qlora.py (7f4e95a6): DataArguments' own length arguments, as it declares them
QLORA_PY = """\
from dataclasses import dataclass, field
import transformers

@dataclass
class DataArguments:
    source_max_len: int = field(default=1024)
    target_max_len: int = field(default=256)

parser = transformers.HfArgumentParser((DataArguments, transformers.Seq2SeqTrainingArguments))
"""


@pytest.mark.parametrize(
    "passed, tokens",
    [
        ("--source_max_len 16 --target_max_len 512", 528),  # scripts/finetune_guanaco_65b.sh
        ("--target_max_len 512", 1536),  # source_max_len: qlora.py's own default, 1024
        ("", 1280),  # both its defaults
    ],
)
def test_qlora_py_runs_at_its_source_plus_target_length(tmp_path, passed, tokens):
    # DataCollatorForCausalLM cuts the source at source_max_len and the target at target_max_len and joins them
    (tmp_path / "qlora.py").write_text(QLORA_PY)
    script = tmp_path / "run.sh"
    script.write_text(f"python qlora.py --model_name_or_path huggyllama/llama-7b --output_dir out --bf16 {passed}\n")
    result = review([str(script)], gpu="a100-80g", gpus=1)
    assert result.plan is not None and result.plan.setup.seq_len == tokens
    assert any(f"sequence length {tokens:,} tokens" in f.what and "DataCollatorForCausalLM" in f.what for f in result.findings)


@pytest.mark.parametrize("second, worst", [("llava/train/train_mem.py", True), ("fastchat/train/train.py", False)])
def test_a_script_of_several_launches_says_a_worst_case_length_of_any_of_them(tmp_path, second, worst):
    # the first launch pads every sample to the cap (FastChat): its length is bound; the second's, LLaVA's collator over
    # data not here, is the cap the data may not reach
    (tmp_path / "zero2.json").write_text(json.dumps(ZERO2))
    script = tmp_path / "two.sh"
    launch = LLAVA.format(data="missing.json")
    script.write_text(launch.replace("llava/train/train_mem.py", "fastchat/train/train.py") + "\n" + launch.replace("llava/train/train_mem.py", second))
    result = review([str(script)], gpu="a100-80g", gpus=8)
    assert any("2 launch commands" in f.what for f in result.findings)
    assert result.length_worst_case is worst and result.to_json()["length_worst_case"] is worst
