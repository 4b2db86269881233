"""`python train.py ...` with no launcher is one process (vramfit/review/one_process.py): DeepSpeed runs one rank, the
Trainer refuses FSDP, and several visible GPUs are DataParallel. A program that starts processes of its own, or Slurm
tasks, is not one process. In process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit.review.reviewer import review

from review_support import find

ZERO3 = {"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto"}
ARGS = (
    "train.py --model_name_or_path Qwen/Qwen2.5-7B --per_device_train_batch_size 1 --gradient_checkpointing True "
    "--model_max_length 2048 --bf16 True --output_dir out"
)


def _write(folder: Path, script: str, program: str = "from transformers import TrainingArguments\n") -> Path:
    (folder / "ds_z3.json").write_text(json.dumps(ZERO3))
    (folder / "train.py").write_text(program)
    path = folder / "run.sh"
    path.write_text("#!/bin/bash\n" + script + "\n")
    return path


def test_deepspeed_under_one_python_process_is_one_rank(tmp_path):
    """ZeRO-3 of a 7B model over 8 ranks fits an A100-80G; `python train.py --deepspeed` is one rank holding it all."""
    launched = review([str(_write(tmp_path, f"torchrun --nproc_per_node 8 {ARGS} --deepspeed ds_z3.json"))], gpu="a100-80g")
    assert launched.exit_code == 0 and launched.plan.setup.world == 8
    bare = review([str(_write(tmp_path, f"python {ARGS} --deepspeed ds_z3.json"))], gpu="a100-80g", gpus=8)
    assert bare.plan.setup.world == 1 and bare.exit_code == 1
    said = find(bare, text="one process (python train.py")
    assert said and said[0].severity == "warning" and "deepspeed --num_gpus 8 train.py" in said[0].fix
    assert "python (one process)" in bare.summary[0]


def test_deepspeed_under_one_process_with_no_gpu_count_is_planned_on_one_gpu(tmp_path):
    result = review([str(_write(tmp_path, f"python {ARGS} --deepspeed ds_z3.json"))], gpu="a100-80g")
    assert result.plan.setup.world == 1
    assert not find(result, text="the files do not say how many GPUs")  # one process: the count does not matter
    assert find(result, text="planned as 1 rank on 1 GPU, whatever the node has")


def test_fsdp_under_one_python_process_is_the_trainers_refusal(tmp_path):
    fsdp = ' --fsdp "full_shard auto_wrap"'
    bare = review([str(_write(tmp_path, f"python {ARGS}{fsdp}"))], gpu="a100-80g", gpus=4)
    refused = find(bare, text="only works in distributed training")
    assert refused and refused[0].severity == "error" and bare.exit_code == 1
    launched = review([str(_write(tmp_path, f"torchrun --nproc_per_node 4 {ARGS}{fsdp}"))], gpu="a100-80g")
    assert not find(launched, text="only works in distributed training")


def test_several_visible_gpus_without_sharding_are_dataparallel(tmp_path):
    result = review([str(_write(tmp_path, f"CUDA_VISIBLE_DEVICES=0,1,2,3 python {ARGS}"))], gpu="a100-80g")
    said = find(result, text="torch.nn.DataParallel")
    assert said and said[0].severity == "info" and "torchrun --nproc_per_node 4" in said[0].fix
    alone = review([str(_write(tmp_path, f"CUDA_VISIBLE_DEVICES=0 python {ARGS}"))], gpu="a100-80g")
    assert not find(alone, text="torch.nn.DataParallel")


@pytest.mark.parametrize(
    "script, program",
    [
        (f"python {ARGS} --deepspeed ds_z3.json", "import torch.multiprocessing as mp\nmp.spawn(main, nprocs=8)\n"),
        (f"srun --ntasks-per-node 8 python {ARGS} --deepspeed ds_z3.json", "from transformers import TrainingArguments\n"),
        (f"#SBATCH --ntasks-per-node=8\nsrun python {ARGS} --deepspeed ds_z3.json", "from transformers import TrainingArguments\n"),
    ],
    ids=["spawns-its-own", "slurm-tasks", "slurm-allocation-tasks"],
)
def test_a_program_that_starts_its_own_processes_is_not_one_process(tmp_path, script, program):
    result = review([str(_write(tmp_path, script, program))], gpu="a100-80g", gpus=8)
    assert not find(result, text="one process (python")
    assert result.plan.setup.world == 8


def test_a_bare_python_in_a_batch_script_is_one_process_on_the_nodes_gpus(tmp_path):
    """sbatch runs the batch script once: `python train.py` in it (no srun) is one process, whatever --gpus-per-node says."""
    script = f"#SBATCH --nodes=1\n#SBATCH --gpus-per-node=4\npython {ARGS} --deepspeed ds_z3.json"
    result = review([str(_write(tmp_path, script))], gpu="a100-80g")
    said = find(result, text="one process (python train.py, no launcher) on 4 GPUs")
    assert said and said[0].severity == "warning" and result.plan.setup.world == 1
