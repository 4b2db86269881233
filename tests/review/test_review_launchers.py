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


def test_trls_own_command_line_is_its_script_under_accelerate(tmp_path):
    """`trl sft ...` runs trl/scripts/sft.py under `accelerate launch` (trl/cli/commands/training.py): the flags the
    script's parser does not take are accelerate's, `--accelerate_config zero3` is TRL's bundled zero3.yaml, and the
    script's flags are SFTConfig's (TRL's defaults: gradient checkpointing on)."""
    path = tmp_path / "run.sh"
    path.write_text(
        "trl sft --model_name_or_path Qwen/Qwen2.5-7B --dataset_name trl-lib/Capybara --output_dir out \\\n"
        "    --per_device_train_batch_size 2 --max_length 4096 --accelerate_config zero3 --num_processes 4\n"
    )
    result = review([str(path)], gpu="h100")
    assert result.exit_code == 0, [str(f) for f in result.findings if f.severity != "info"]
    setup = result.plan.setup
    assert setup.zero.stage == 3 and setup.world == 4  # from TRL's zero3.yaml and --num_processes
    assert "trl/accelerate_configs/zero3.yaml" in result.summary[0]
    assert not find(result, text="unknown flag")


def test_trls_command_line_reads_its_config_file(tmp_path):
    (tmp_path / "sft.yaml").write_text(
        "model_name_or_path: Qwen/Qwen2.5-1.5B\nper_device_train_batch_size: 4\nmax_length: 4096\ngradient_checkpointing: false\noutput_dir: out\n"
    )
    path = tmp_path / "run.sh"
    path.write_text("trl sft --config sft.yaml --num_processes 4\n")
    result = review([str(path)], gpu="h100")
    assert "Qwen2.5-1.5B" in result.summary[0] and not find(result, text="unknown flag --config")
    assert result.plan.setup.world == 4 and result.plan.setup.micro_batch == 4


@pytest.mark.parametrize(
    "command",
    ["tune run --nproc_per_node 2 lora_finetune_distributed --config llama3_1/8B_lora", "litgpt finetune_lora meta-llama/Llama-3.2-1B --devices 2"],
    ids=["torchtune", "litgpt-cli"],
)
def test_a_launcher_vramfit_does_not_read_is_incomplete_not_bad_input(tmp_path, command):
    path = tmp_path / "run.sh"
    path.write_text(command + "\n")
    result = review([str(path)], gpu="h100")
    assert result.exit_code == 3 and find(result, text="which vramfit does not read")
    assert not find(result, text="has no launch command")


@pytest.mark.parametrize("flags, world", [("--hostfile hostfile", 16), ("--hostfile=hostfile --num_gpus 2", 4)], ids=["pool", "num-gpus"])
def test_a_deepspeed_hostfile_gives_the_nodes_and_gpus(tmp_path, flags, world):
    """deepspeed --hostfile: one node per host, each host's slots its GPUs (DeepSpeed's own fetch_hostfile), unless the
    command's --num_gpus / --num_nodes say otherwise."""
    (tmp_path / "hostfile").write_text("worker-1 slots=8\nworker-2 slots=8\n")
    path = _write(tmp_path, f"deepspeed {flags} train.py --model_name_or_path meta-llama/Llama-3.2-3B --deepspeed ds/stage3.conf")
    result = review([str(path)], gpu="a100-80g")
    assert result.plan.setup.world == world and result.plan.setup.nodes == 2
    assert not find(result, text="the files do not say how many GPUs")


@pytest.mark.parametrize(
    "call",
    [
        "bash scripts/finetune.sh Qwen/Qwen2.5-7B",
        "./scripts/finetune.sh Qwen/Qwen2.5-7B",
        "sh -x scripts/finetune.sh Qwen/Qwen2.5-7B",
        "sbatch --nodes 1 -J sft scripts/finetune.sh Qwen/Qwen2.5-7B",
    ],
)
def test_a_wrapper_that_runs_another_script_is_reviewed_through_it(tmp_path, call):
    """`bash scripts/finetune.sh ARGS` with no launch of its own: the called script's launch, its $1 the call's word."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "finetune.sh").write_text(
        "MODEL=${1:-meta-llama/Llama-3.2-1B}\ntorchrun --nproc_per_node 4 train.py --model_name_or_path $MODEL --output_dir o\n"
    )
    path = tmp_path / "run.sh"
    path.write_text(f"#!/bin/bash\nexport WANDB_MODE=offline\n{call}\n")
    result = review([str(path)], gpu="a100-80g")
    assert result.exit_code in (0, 1) and result.plan.setup.world == 4
    assert "Qwen/Qwen2.5-7B" in result.summary[0]  # the wrapper's argument, not the called script's default
    assert find(result, text="this script has no launch of its own: it runs")


@pytest.mark.parametrize("launch, world", [("mpirun -np 8 python", 8), ("horovodrun -np 4 python", 4), ("mpiexec -N 2 -hostfile hosts python3", 2)])
def test_an_mpi_launch_starts_its_processes(tmp_path, launch, world):
    """`mpirun -np N python train.py`: N processes on this node (DeepSpeed's mpi_discovery reads their ranks), not one."""
    path = _write(tmp_path, f"{launch} train.py --model_name_or_path meta-llama/Llama-3.2-3B --deepspeed ds/stage3.conf")
    result = review([str(path)], gpu="a100-80g")
    assert result.plan.setup.world == world and "mpirun" in result.summary[0]
    assert not find(result, text="one process (python")


def test_llamafactory_cli_reads_its_torchrun_environment(tmp_path):
    """llamafactory-cli starts torchrun with --nnodes $NNODES --nproc_per_node $NPROC_PER_NODE (llamafactory/cli.py)."""
    (tmp_path / "lf.yaml").write_text(
        "model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\nfinetuning_type: lora\ncutoff_len: 1024\n"
        "per_device_train_batch_size: 1\nbf16: true\ndataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: o\n"
    )
    path = tmp_path / "run.sh"
    path.write_text("FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=0 NPROC_PER_NODE=4 llamafactory-cli train lf.yaml\n")
    setup = review([str(path)], gpu="a100-80g").plan.setup
    assert (setup.nodes, setup.gpus_per_node) == (2, 4)


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


def test_trls_own_script_takes_its_model_configs_lora_defaults(tmp_path):
    """`trl sft --use_peft` leaves LoRA to TRL's ModelConfig: r 16, alpha 32, dropout 0.05, and target modules None, which
    PEFT turns into the model type's defaults (q_proj, v_proj for Qwen2), not all-linear."""
    path = tmp_path / "run.sh"
    path.write_text("trl sft --model_name_or_path Qwen/Qwen2.5-7B --dataset_name trl-lib/Capybara --use_peft --output_dir o\n")
    result = review([str(path)], gpu="h100", gpus=1)
    s = result.plan.setup
    assert (s.lora_r, list(s.lora_targets), s.lora_dropout) == (16, ["q_proj", "v_proj"], 0.05)
    assert find(result, text="reviewed with TRL's ModelConfig defaults, lora_r 16, lora_alpha 32, lora_dropout 0.05")
