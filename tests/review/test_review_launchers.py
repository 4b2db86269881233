"""How scripts published beside the corpus hand their launch over: environment managers (`uv run`), job launchers that
take the command after `--` (open-instruct's mason.py, `ray job submit`), DeepSpeed configs not named .json, and
`--model_id` as the model's name. In process; the corpus figures come from benchmarks/review_corpus.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit.review.reviewer import review

from review_support import find

ZERO3 = {"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto"}
ACCELERATE = (
    "accelerate launch --mixed_precision bf16 --num_processes 8 --use_deepspeed "
    "--deepspeed_config_file ds/stage3.conf train.py --model_name_or_path meta-llama/Llama-3.2-3B "
    "--max_seq_length 1024 --per_device_train_batch_size 1 --gradient_checkpointing"
)


def _write(folder: Path, script: str) -> Path:
    (folder / "ds").mkdir()
    (folder / "ds" / "stage3.conf").write_text(json.dumps(ZERO3))  # JSON under another name, as DeepSpeed reads it
    path = folder / "run.sh"
    path.write_text("#!/bin/bash\n" + script + "\n")
    return path


@pytest.mark.parametrize(
    "script",
    [
        f"uv run {ACCELERATE}",
        f'LAUNCH_CMD="{ACCELERATE}"\nuv run $LAUNCH_CMD',
        f"uv run python mason.py --cluster ai2/jupiter --num_nodes 1 --gpus 8 -- {ACCELERATE}",
        f"ray job submit --address http://127.0.0.1:8265 -- {ACCELERATE}",
        f"poetry run {ACCELERATE}",
    ],
    ids=["uv-run", "uv-run-variable", "mason-double-dash", "ray-double-dash", "poetry-run"],
)
def test_the_launch_after_a_runner_or_a_double_dash_is_reviewed(tmp_path, script):
    result = review([str(_write(tmp_path, script))], gpu="a100-80g", gpus=8)
    assert result.exit_code in (0, 1), [str(f) for f in result.findings if f.severity != "info"]
    assert not find(result, text="has no launch command")
    assert result.plan is not None and result.plan.setup.zero.stage == 3  # the .conf was read as the DeepSpeed JSON
    assert "Llama-3.2-3B" in result.summary[0]


def test_a_python_launch_keeps_its_own_double_dash_arguments(tmp_path):
    """`python train.py -- --flag`: what follows `--` is no launch, so train.py stays the program."""
    path = _write(tmp_path, "python train.py --model_name_or_path meta-llama/Llama-3.2-3B --max_seq_length 512 -- --extra")
    result = review([str(path)], gpu="a100-80g")
    assert not find(result, text="has no launch command") and result.plan is not None


def test_a_deepspeed_config_that_is_not_json_is_still_bad_input(tmp_path):
    path = _write(tmp_path, f"uv run {ACCELERATE}")
    (tmp_path / "ds" / "stage3.conf").write_text("stage = 3\n")
    result = review([str(path)], gpu="a100-80g", gpus=8)
    assert result.exit_code == 2 and find(result, text="is not valid JSON", severity="error")


def test_model_id_names_the_model(tmp_path):
    """2U1/Qwen2-VL-Finetune's ModelArguments call the model `model_id` (src/params.py); so does smollm's train.py."""
    path = tmp_path / "finetune.sh"
    path.write_text(
        "deepspeed src/train/train_sft.py --model_id Qwen/Qwen2.5-7B-Instruct --bf16 True "
        "--per_device_train_batch_size 1 --model_max_length 1024 --gradient_checkpointing True\n"
    )
    result = review([str(path)], gpu="a100-80g", gpus=8)
    assert result.plan is not None and "Qwen2.5-7B-Instruct" in result.summary[0]
    assert not find(result, key="--model_id", text="own argument")


def test_an_llm_foundry_config_is_read_with_llm_foundry_s_defaults(tmp_path):
    """mosaicml/llm-foundry's YAML (scripts/train/yamls/): read as llm-foundry runs it (review/llmfoundry.py), not as
    TrainingArguments; MPTConfig's defaults for the model keys it leaves out, Composer's for fsdp_config's (no activation
    checkpointing), each said."""
    path = tmp_path / "7b_sft.yaml"
    path.write_text(
        "max_seq_len: 2048\nmodel:\n  name: mpt_causal_lm\n  d_model: 4096\n  n_layers: 32\n"
        "train_loader:\n  name: finetuning\nglobal_train_batch_size: 64\ndevice_train_microbatch_size: 8\n"
        "precision: amp_bf16\nfsdp_config:\n  sharding_strategy: FULL_SHARD\n"
    )
    result = review([str(path)], gpu="a100-40g", gpus=8)
    assert result.exit_code in (0, 1) and not find(result, severity="warning")
    assert not find(result, text="own argument") and not find(result, text="no config.json found")
    assert find(result, text="model.n_heads 16") and find(result, text="fsdp_config.activation_checkpointing False")
    s = result.plan.setup
    assert (s.engine, s.gradient_checkpointing, s.micro_batch, s.gradient_accumulation_steps) == ("fsdp", False, 8, 1)


SFT_SCRIPT = "deepspeed src/train/train_sft.py --model_id Qwen/Qwen2.5-7B-Instruct --bf16 True --per_device_train_batch_size 1\n"


def test_a_program_named_sft_that_is_not_beside_the_script_gets_no_trl_defaults(tmp_path):
    """2U1/Qwen2-VL-Finetune's src/train/train_sft.py parses its own TrainingArguments (max_seq_length 32768, no TRL):
    with the program out of reach, SFTConfig's max_length 1024 and gradient_checkpointing True are not assumed."""
    path = tmp_path / "finetune.sh"
    path.write_text(SFT_SCRIPT)
    result = review([str(path)], gpu="a100-80g", gpus=8)
    assert find(result, key="SFTConfig", text="its name suggests TRL's SFTConfig, but whether it parses it is not known")
    setup = result.plan.setup
    assert setup.seq_len != 1024 and not setup.gradient_checkpointing
    assert find(result, text="no sequence length in the files")


def test_a_program_beside_the_script_that_parses_sftconfig_gets_its_defaults(tmp_path):
    path = tmp_path / "finetune.sh"
    path.write_text(SFT_SCRIPT)
    (tmp_path / "src" / "train").mkdir(parents=True)
    (tmp_path / "src" / "train" / "train_sft.py").write_text(
        "from dataclasses import dataclass, field\nfrom transformers import HfArgumentParser\nfrom trl import SFTConfig\n\n\n"
        "@dataclass\nclass ModelArguments:\n    model_id: str = field(default='Qwen/Qwen2.5-7B-Instruct')\n\n\n"
        "parser = HfArgumentParser((ModelArguments, SFTConfig))\n"
    )
    result = review([str(path)], gpu="a100-80g", gpus=8)
    assert not find(result, key="SFTConfig", text="is not known")
    assert result.plan.setup.seq_len == 1024 and result.plan.setup.gradient_checkpointing


def _notebook(cells: list[tuple[str, list[str]]]) -> str:
    """A notebook as Jupyter saves it (nbformat 4, indent 1, one JSON string per source line)."""
    out = [{"cell_type": kind, "metadata": {}, "source": [line + "\n" for line in lines[:-1]] + lines[-1:], "outputs": []} for kind, lines in cells]
    for cell in out:
        if cell["cell_type"] != "code":
            del cell["outputs"]
    return json.dumps({"cells": out, "metadata": {}, "nbformat": 4, "nbformat_minor": 4}, indent=1) + "\n"


def test_a_notebooks_shell_launch_is_reviewed_at_its_lines(tmp_path):
    """QwenLM/Qwen's recipes/finetune/deepspeed/*.ipynb: `!torchrun ... \\` over several lines of one cell."""
    path = tmp_path / "finetune_lora_multi_gpu.ipynb"
    path.write_text(
        _notebook(
            [
                ("markdown", ["# LoRA on two GPUs"]),
                ("code", ["from modelscope.hub.snapshot_download import snapshot_download", "snapshot_download('x')"]),
                ("code", ["!export CUDA_VISIBLE_DEVICES=7", "%env TOKENIZERS_PARALLELISM=false"]),
                (
                    "code",
                    [
                        "!torchrun --nproc_per_node 2 finetune.py \\",
                        '    --model_name_or_path "meta-llama/Llama-3.2-3B" \\',
                        "    --bf16 True \\",
                        "    --per_device_train_batch_size 3 \\",
                        "    --model_max_length 512 \\",
                        "    --max_steps -1",
                    ],
                ),
            ]
        )
    )
    result = review([str(path)], gpu="a100-80g", gpus=2)
    assert result.exit_code in (0, 1), [str(f) for f in result.findings if f.severity != "info"]
    assert result.plan.setup.micro_batch == 3 and result.plan.setup.seq_len == 512
    assert "2 x a100-80g" in result.summary[1]
    lines = path.read_text().split("\n")
    [length] = [f for f in result.findings if f.key == "--model_max_length" and f.line]
    assert "--model_max_length 512" in lines[length.line - 1]


def test_a_notebook_without_a_shell_launch_is_read_as_python(tmp_path):
    path = tmp_path / "sft.ipynb"
    path.write_text(
        _notebook(
            [
                ("code", ["!pip install trl"]),
                (
                    "code",
                    [
                        "from trl import SFTConfig, SFTTrainer",
                        "args = SFTConfig(output_dir='out', per_device_train_batch_size=2, max_length=512, bf16=True)",
                        "trainer = SFTTrainer(model='meta-llama/Llama-3.2-3B', args=args, train_dataset=None)",
                    ],
                ),
            ]
        )
    )
    result = review([str(path)], gpu="a100-80g", gpus=1)
    assert result.plan is not None and result.plan.setup.micro_batch == 2 and result.plan.setup.seq_len == 512


def test_a_notebook_that_is_not_json_is_bad_input(tmp_path):
    path = tmp_path / "broken.ipynb"
    path.write_text('{"cells": [')
    result = review([str(path)], gpu="a100-80g")
    assert result.exit_code == 2 and find(result, text="is not a Jupyter notebook's JSON", severity="error")


def test_uv_run_of_a_python_file_is_a_python_launch(tmp_path):
    """open-instruct's `uv run --active open_instruct/grpo_fast.py ...`: uv runs the file with the environment's python."""
    path = tmp_path / "run.sh"
    path.write_text("uv run --active train.py --model_name_or_path meta-llama/Llama-3.2-3B --max_seq_length 512\n")
    result = review([str(path)], gpu="a100-80g")
    assert not find(result, text="has no launch command") and result.plan is not None


def test_open_instructs_tensor_parallel_degree_makes_a_no_fit_an_upper_bound(tmp_path):
    """open_instruct/dpo_utils.py: tensor_parallel_degree / context_parallel_degree (OLMo-core), which the planner does not model."""
    path = tmp_path / "multi_node.sh"
    path.write_text(
        "torchrun --nproc_per_node=8 open_instruct/dpo.py --model_name_or_path meta-llama/Llama-3.2-3B --max_seq_length 16384 "
        "--per_device_train_batch_size 16 --tensor_parallel_degree 2\n"
    )
    result = review([str(path)], gpu="a100-80g", gpus=8)
    assert not find(result, severity="error")
    assert find(result, key="--tensor_parallel_degree", severity="warning", text="without tensor parallelism")


@pytest.mark.parametrize(
    "script, said",
    [
        # ms-swift's examples beside their training scripts (examples/train/seq_cls/*/deploy.sh, qlora/bnb/merge_lora.sh)
        ("CUDA_VISIBLE_DEVICES=0 \\\nswift deploy \\\n    --adapters output/vx-xxx/checkpoint-xxx", "runs `swift deploy` (line 2)"),
        ("swift export --adapters output/vx-xxx/checkpoint-xxx --merge_lora true", "runs `swift export`"),
        ("llamafactory-cli chat examples/inference/qwen3.yaml", "runs `llamafactory-cli chat`"),
        ("# deprecated: see https://github.com/modelscope/ms-swift/blob/v3.4.1/full_lmdeploy.sh", "runs no command"),
        ("echo start\nnvidia-smi", "has no launch command"),
    ],
)
def test_a_script_that_trains_nothing_says_what_it_runs(tmp_path, script, said):
    path = tmp_path / "run.sh"
    path.write_text("#!/bin/bash\n" + script + "\n")
    result = review([str(path)], gpu="a100-80g")
    assert result.exit_code == 2
    [error] = find(result, severity="error")
    assert said in error.what
    assert "no training launch to review" in error.what or "it runs `echo` (line 2), `nvidia-smi` (line 3)" in error.what
    assert error.fix == "pass the script that starts training."


FSDP2 = """distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_version: 2
mixed_precision: bf16
num_machines: 1
num_processes: 4
"""
LF_YAML = """model_name_or_path: meta-llama/Llama-3.2-3B
stage: sft
do_train: true
finetuning_type: full
dataset: alpaca_en_demo
cutoff_len: 1024
per_device_train_batch_size: 1
bf16: true
"""


@pytest.mark.parametrize("named", [True, False])
def test_a_config_whose_comment_gives_its_accelerate_launch_is_read_with_that_accelerate_config(tmp_path, named):
    # LLaMA-Factory examples/ascend/qwen3_full_sft_fsdp2.yaml's head: the accelerate launch that runs it, with FSDP2
    (tmp_path / "examples" / "accelerate").mkdir(parents=True)
    (tmp_path / "examples" / "ascend").mkdir()
    (tmp_path / "examples" / "accelerate" / "fsdp2_config.yaml").write_text(FSDP2)
    name = "x_full_sft_fsdp2.yaml" if named else "another.yaml"
    head = f"# accelerate launch \\\n#     --config_file examples/accelerate/fsdp2_config.yaml \\\n#     src/train.py examples/ascend/{name}\n"
    path = tmp_path / "examples" / "ascend" / "x_full_sft_fsdp2.yaml"
    path.write_text(head + LF_YAML)
    result = review([str(path)], gpu="a100-80g")
    assert (result.plan.setup.engine == "fsdp") is named
    assert bool(find(result, key="--config_file", severity="info", text="the launch command this file's comment gives")) is named
    if named:
        assert result.plan.setup.gpus_per_node == 4
