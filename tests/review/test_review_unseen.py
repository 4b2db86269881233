"""Idioms met on first contact with repositories the review had never seen (benchmarks/upstream_sweep_s10.md):
each reads as the upstream code runs it. In process; the sweep's figures come from that file's command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit.review.reviewer import review

from review_support import find

# yangjianxin1/Firefly train_args/*.json (e22b406e), cut to what matters here: a TrainingArguments JSON of transformers 4
FIREFLY = {
    "output_dir": "output/firefly",
    "model_name_or_path": "Qwen/Qwen2.5-0.5B",
    "train_file": "./data/pretrain",
    "task_type": "sft",
    "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 16,
    "max_seq_length": 1024,
    "gradient_checkpointing": True,
    "optim": "adamw_hf",
    "bf16": True,
}


@pytest.mark.parametrize("pin", ["transformers==4.34\n", None])
def test_optim_adamw_hf_is_transformers_4s_adamw_not_bad_input(tmp_path: Path, pin: str | None):
    """`optim: adamw_hf` (transformers' own AdamW, removed for torch.optim.AdamW: huggingface/transformers#36177) was
    refused by the installed TrainingArguments (exit 1, "refuses these arguments"); it is reviewed as adamw_torch (the
    same two fp32 moments) and said as info, naming the pin where the repository has one."""
    if pin:
        (tmp_path / "requirements.txt").write_text(pin)
    path = tmp_path / "train_args.json"
    path.write_text(json.dumps(FIREFLY, indent=4))
    result = review([str(path)], gpu="a100-80g", gpus=1)
    assert result.exit_code == 0, [str(f) for f in result.findings if f.severity == "error"]
    said = find(result, key="optim", text="reviewed as adamw_torch")
    assert len(said) == 1 and said[0].severity == "info"  # nothing pinned: transformers 4 dates the value too
    assert ("pins transformers==4.34" in said[0].what) == bool(pin)


# allenai/open-instruct scripts/train/olmo2/grpo_fast_13b_zero.sh (e6c3044a), its shape: mason.py hands the cluster a command
# line (`source setup.sh \&\& python open_instruct/grpo_fast.py ...`) whose learners take `--deepspeed_stage N`
MASON = (
    "python mason.py \\\n    --cluster ai2/jupiter --num_nodes 1 \\\n    --gpus 8 -- source configs/beaker_configs/ray_node_setup.sh "
    "\\&\\& python open_instruct/grpo_fast.py \\\n    --model_name_or_path Qwen/Qwen2.5-0.5B \\\n"
    "    --per_device_train_batch_size 1 --response_length 1024 --max_prompt_token_length 1024 \\\n"
    "    --deepspeed_stage 3{offload} --gradient_checkpointing\n"
)


@pytest.mark.parametrize("offload", ["", " --deepspeed_offload_optimizer"])
def test_open_instructs_deepspeed_stage_shards_and_masons_command_line_is_one_launch(tmp_path: Path, offload: str):
    """open-instruct's learners build their DeepSpeed config from `--deepspeed_stage` and two offload switches
    (grpo_utils.py ExperimentConfig, utils.get_train_ds_config, always bf16): it was 'read, not reviewed' and the run
    planned as plain data parallel; and mason.py's own command (`-- source ...`) was a second launch with no model."""
    path = tmp_path / "grpo.sh"
    path.write_text("#!/bin/bash\n" + MASON.format(offload=offload))
    result = review([str(path)], gpu="a100-80g", gpus=8)
    said = [str(f) for f in result.findings]
    assert not [s for s in said if "launch 1 of 2" in s or "--deepspeed_stage is" in s or "no DeepSpeed JSON" in s], said
    planned = find(result, key="--gpu", text="zero buffers")  # sharded: ZeRO's buffers in the plan
    assert planned and ("optimizer states" in planned[0].what) != bool(offload), said


# allenai/open-instruct configs/train_configs/sft/tulu3_8b_preview_mix_v3.0.yaml (e6c3044a), its shape: a key written twice
TWICE = """model_name_or_path: Qwen/Qwen2.5-0.5B
gradient_checkpointing: true
max_seq_length: 1024
per_device_train_batch_size: 1
bf16: true
checkpointing_steps: epoch
gradient_checkpointing: true
checkpointing_steps: 1000
"""


def test_a_key_written_twice_is_read_as_yaml_safe_load_does(tmp_path: Path):
    """HfArgumentParser.parse_yaml_file (yaml.safe_load) keeps the last value of a key written twice: the config runs.
    It was exit 2 (bad input); now the same value twice is info, two values a warning naming the one the run gets."""
    path = tmp_path / "sft.yaml"
    path.write_text(TWICE)
    result = review([str(path)], gpu="a100-80g", gpus=1)
    assert result.exit_code == 0, [str(f) for f in result.findings if f.severity == "error"]
    [same] = find(result, key="gradient_checkpointing", text="written twice")
    [differ] = find(result, key="checkpointing_steps", text="written twice")
    assert same.severity == "info" and same.line == 7
    assert differ.severity == "warning" and "the run gets 1000" in differ.what


def test_model_path_names_the_model(tmp_path: Path):
    """DAMO-NLP-SG/VideoLLaMA2 (videollama2/train.py ModelArguments.model_path, scripts/custom/finetune.sh at c0bb03ab)
    names the LLM by --model_path: it was 'the script's own argument' and the review stopped at 'no model'."""
    path = tmp_path / "finetune.sh"
    path.write_text(
        "torchrun --nproc_per_node 8 videollama2/train.py --model_type videollama2_qwen2 --model_path Qwen/Qwen2.5-0.5B \\\n"
        "    --bf16 True --per_device_train_batch_size 1 --model_max_length 1024 --gradient_checkpointing True\n"
    )
    result = review([str(path)], gpu="a100-80g")
    assert result.exit_code == 0, [str(f) for f in result.findings]
    assert find(result, key="--gpu", text="predicted peak")


# simplescaling/s1 train/sft.py (77272c6e), lines 33-42: only a 70B model is spread by device_map
S1 = """
import transformers
def train():
    config, args = parser.parse_args_into_dataclasses()
    kwargs = {}
    if "70B" in config.model_name:
        kwargs = {"device_map": "auto", "torch_dtype": "auto"}
        model = transformers.AutoModelForCausalLM.from_pretrained(config.model_name, **kwargs)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(config.model_name)
"""


def test_a_device_map_in_one_branch_of_an_if_the_arguments_decide_is_not_taken_as_the_run():
    """The first load in line order was taken as the run's: device_map="auto" under torchrun, an error (accelerate
    refuses it). Which branch runs depends on the model the script is given; the other loads it whole."""
    import ast

    from vramfit.review import device_map

    read = device_map.read(ast.parse(S1), S1)
    assert read is not None and read.kind == "unknown"
    alone = S1.replace("    else:\n        model = transformers.AutoModelForCausalLM.from_pretrained(config.model_name)\n", "")
    assert device_map.read(ast.parse(alone), alone).kind == "spread"


def test_easyr1_is_said_not_reviewed(tmp_path: Path):
    """hiyouga/EasyR1 examples/qwen2_5_vl_7b_geo3k_grpo.sh (b44b311b): verl's fork with its own config schema. It was
    read as a plain Python launch ('no config.json found for no model'); it is now said as a launcher not reviewed."""
    path = tmp_path / "grpo.sh"
    path.write_text(
        "#!/bin/bash\n\nset -x\n\nMODEL_PATH=Qwen/Qwen2.5-VL-7B-Instruct  # replace it with your local file path\n\n"
        "python3 -m verl.trainer.main \\\n    config=examples/config.yaml \\\n    data.train_files=hiyouga/geometry3k@train \\\n"
        "    worker.actor.model.model_path=${MODEL_PATH} \\\n    trainer.n_gpus_per_node=8\n"
    )
    result = review([str(path)], gpu="a100-80g")
    assert result.exit_code == 3
    [said] = find(result, key="python3 -m verl.trainer.main", text="EasyR1")
    assert "not reviewed" in said.what and "examples/config.yaml's settings" in said.fix


# 2U1/Qwen2-VL-Finetune src/train/train_cls.py (6695161a), its load: a model class of the ...ForSequenceClassification family
TRAIN_CLS = """
from transformers import HfArgumentParser, Trainer, TrainingArguments
from src.model import Qwen2ForSequenceClassification

def compute_metrics(pred):
    return {}

def train():
    model = Qwen2ForSequenceClassification.from_pretrained(model_args.model_id, config=cfg)
    model.config.num_labels = training_args.num_labels
"""


def test_a_classification_model_class_of_the_script_is_a_score_head(tmp_path: Path):
    """Only AutoModelFor(Sequence|Token)Classification was read: Qwen2-VL-Finetune's finetune_cls.sh (a Qwen2.5-VL
    classifier, 2 labels, evaluated each epoch with compute_metrics) was planned with vocabulary-wide eval logits,
    1,487 GiB per GPU, an error. The class's name says the head; `--num_labels` its outputs."""
    (tmp_path / "train_cls.py").write_text(TRAIN_CLS)
    path = tmp_path / "finetune_cls.sh"
    path.write_text(
        "deepspeed train_cls.py --model_id Qwen/Qwen2.5-0.5B --num_labels 2 --bf16 True --per_device_train_batch_size 4 \\\n"
        "    --per_device_eval_batch_size 4 --eval_strategy epoch --gradient_checkpointing True --model_max_length 2048\n"
    )
    result = review([str(path)], gpu="a100-80g", gpus=8)
    assert result.exit_code == 0, [str(f) for f in result.findings if f.severity == "error"]
    assert find(result, key="Qwen2ForSequenceClassification", text="a score head of 2 outputs")


def test_a_settings_file_alone_that_fits_only_sharded_is_a_warning_naming_the_launch(tmp_path):
    """alignment-handbook / open-instruct recipes are TrainingArguments YAMLs launched with `accelerate launch
    --config_file zero3.yaml`: reviewed alone, plain data parallel is the reading, and where ZeRO-3 would fit the launch
    decides - a warning, not an error. A file that names its sharding, or LLaMA-Factory's YAML (llamafactory-cli runs
    it, its own deepspeed key says ZeRO), keeps the verdict."""
    recipe = tmp_path / "config_full.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-14B\nbf16: true\nper_device_train_batch_size: 4\nmax_length: 2048\ngradient_checkpointing: true\noutput_dir: out\n"
    )
    alone = review([str(recipe)], gpu="a100-80g", gpus=8)
    [said] = find(alone, text="does not fit as plain data parallel, which is how this file reads alone")
    assert said.severity == "warning" and alone.exit_code == 0 and "under ZeRO-3 over the same GPUs it fits" in said.what
    factory = tmp_path / "lf.yaml"
    factory.write_text(
        "model_name_or_path: Qwen/Qwen2.5-14B\nstage: sft\nfinetuning_type: full\ncutoff_len: 2048\n"
        "per_device_train_batch_size: 4\nbf16: true\ngradient_checkpointing: true\ntemplate: qwen\noutput_dir: out\n"
    )
    kept = review([str(factory)], gpu="a100-80g", gpus=8)
    assert kept.exit_code == 1 and not find(kept, text="which is how this file reads alone")
