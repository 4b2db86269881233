"""`vramfit review` end to end on small files written in tmp_path: what it reads, what it reports,
its exit codes and its JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from vramfit.review import cli
from vramfit.review.reviewer import review
from vramfit.review.sources import read_all

from review_support import SEEDS, find

DS_ZERO3 = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 3},
}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def script(folder: Path, flags: str, head: str = "", ds: dict | None = None) -> Path:
    """A torchrun launch of Llama-3.2-3B on 8 GPUs with ZeRO-3, plus `flags`."""
    write(folder, "ds.json", json.dumps(ds or DS_ZERO3))
    return write(
        folder,
        "run.sh",
        f"#!/usr/bin/env bash\nset -euo pipefail\n{head}\n"
        "torchrun --nproc_per_node 8 train.py \\\n"
        "    --model_name_or_path meta-llama/Llama-3.2-3B \\\n"
        "    --deepspeed ds.json \\\n"
        f"    --bf16 true --gradient_checkpointing true --model_max_length 1024 {flags}\n",
    )


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """Through the CLI's own entry, as a user runs it (cli.main routes the libraries' loggers off stdout:
    a cold DeepSpeed import's warning would otherwise land in --json output)."""
    from vramfit.cli import main

    code = main(["review", *argv])
    return code, capsys.readouterr().out


def test_var_resolution_flag_equals_value_and_continuations(tmp_path):
    path = script(tmp_path, "--per_device_train_batch_size=${BS} \\\n    --gradient_accumulation_steps=$((8 / BS))", head="BS=${BS:-2}")
    result = review([str(path)], gpu="a100-80g", host_ram_gib=512)
    assert result.plan.setup.micro_batch == 2 and result.plan.setup.gradient_accumulation_steps == 4
    assert result.plan.setup.world == 8 and result.plan.setup.seq_len == 1024
    assert "2 per GPU x 4 accumulation x 8 ranks = 64" in result.summary[2]


def test_clean_setup_exits_0(tmp_path, capsys):
    path = script(tmp_path, "--per_device_train_batch_size 1 --gradient_accumulation_steps 4", head="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    code, out = run_cli([str(path), "--gpu", "a100-80g", "--host-ram-gib", "512"], capsys)
    assert code == 0, out
    assert "exit 0: nothing found would fail or OOM the run." in out
    assert "closest recipe: axolotl-llama-3b-8xa100-80g" in out and "memory plan (vramfit plan):" in out


def test_unknown_flag_is_reported_with_did_you_mean(tmp_path):
    path = script(tmp_path, "--per_device_train_bath_size 4 --lerning_rate 1e-5")
    result = review([str(path)], gpu="a100-80g")
    [typo] = find(result, key="--per_device_train_bath_size", severity="warning")
    assert typo.what == (
        "unknown flag --per_device_train_bath_size: not a TrainingArguments or launcher argument. Did you mean '--per_device_train_batch_size'?"
    )
    assert typo.line == 7 and typo.file.endswith("run.sh")
    assert find(result, key="--lerning_rate", text="Did you mean '--learning_rate'?")


def test_launcher_flags_unknown_or_after_the_script(tmp_path):
    path = write(
        tmp_path,
        "run.sh",
        "torchrun --nproc_per_nodes 8 --nproc_per_node 8 train.py --model_name_or_path meta-llama/Llama-3.2-3B --nnodes 2 --model_max_length 512\n",
    )
    result = review([str(path)], gpu="a100-80g")
    [launcher] = find(result, key="--nproc_per_nodes")
    assert "torchrun refuses it" in launcher.what and "Did you mean '--nproc_per_node'" in launcher.what
    [misplaced] = find(result, key="--nnodes")
    assert "is a torchrun option, but it comes after the script" in misplaced.what
    assert find(result, key="--deepspeed", text="no DeepSpeed JSON: reviewed as plain data parallel")


def test_value_set_only_at_run_time_is_reported_not_guessed(tmp_path):
    result = review([str(script(tmp_path, "--per_device_train_batch_size $1"))], gpu="a100-80g")
    [runtime] = find(result, key="--per_device_train_batch_size", text="set when the script runs")
    assert "its value '$1' is set when the script runs" in runtime.what and runtime.severity == "info"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.sh", "no such file"),
        (lambda d: d, "is a directory"),
        (lambda d: (d / "bin.sh").write_bytes(b"\xff\xfe\x00torchrun") and d / "bin.sh", "is not UTF-8 text (byte 0xff at offset 0)"),
        (lambda d: write(d, "bad.json", "{not json"), "is not valid JSON at line 1"),
        (lambda d: write(d, "notes.txt", "hello"), "cannot tell what kind of file"),
        (
            lambda d: write(d, "crash.log", "torch.OutOfMemoryError: CUDA out of memory."),
            "is a log of a run, not a launch script or config. Fix: read it with `vramfit doctor",
        ),
        (lambda d: write(d, "run.sh", "echo hello\n"), "has no launch command"),
    ],
)
def test_unreadable_input_exits_2(tmp_path, capsys, make, message):
    path = make(tmp_path)
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    code = cli.run(parser.parse_args([str(path), "--gpu", "a100-80g"]))
    captured = capsys.readouterr()
    assert code == 2 and not captured.out  # bad input: the one problem format of every command, on stderr
    assert captured.err.startswith("vramfit: ") and "nothing was launched or written" in captured.err and message in captured.err


def test_missing_deepspeed_json_named_by_the_script_is_incomplete_not_bad_input(tmp_path):
    """A path relative to where the script is run from: the rest is reviewed, memory is not planned (no ZeRO stage known),
    and the exit code says incomplete (3), not bad input. Kept deliberately since session 9, when a missing JSON whose
    name says its stage (zero3.json, ds_config_zero2.json) became planned from its name (the tests below): `ds.json`
    says no stage, so guessing one would be a plan the files do not support."""
    path = script(tmp_path, "")
    (tmp_path / "ds.json").unlink()
    result = review([str(path)], gpu="a100-80g")
    assert result.exit_code == 3 and result.plan is None
    [missing] = find(result, key="--deepspeed", text="names ds.json, which is not next to the script")
    assert missing.severity == "info" and "memory not planned" in missing.what
    assert missing.fix == f"pass the file as another PATH: vramfit review {missing.file} path/to/ds.json."
    assert not find(result, text="reviewed as plain data parallel")
    assert not find(result, severity="error")


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("zero0.json", (0, False, False)),
        ("./scripts/zero3.json", (3, False, False)),
        ("ds_config_zero2.json", (2, False, False)),
        ("ds_z2_config.json", (2, False, False)),
        ("stage1.json", (1, False, False)),
        ("local_scripts/zero3_offload.json", (3, True, True)),  # R1-V's: both on the CPU, as LLaVA's zero3_offload.json
        ("ds_z3_offload_config.json", (3, True, True)),
        ("zero2_offload.json", (2, True, False)),  # stage 2 offloads the optimizer only
        ("zero3_bf16_cpuoffload_params.json", (3, False, True)),
        ("zero_stage3_offload_optimizer.json", (3, True, False)),
        ("ds_config.json", None),  # says no stage
        ("zero2_zero3.json", None),  # says two
        ("zero3_nvme_offload.json", None),  # an offload the plan cannot place
        ("zero2_offload_param.json", None),  # parameters offload at stage 3 only
        ("config_1z3.json", None),
    ],
)
def test_a_deepspeed_json_names_its_stage_only_where_its_name_is_unambiguous(written, expected):
    from vramfit.review.sources import zero_from_name

    assert zero_from_name(written) == expected


def test_a_missing_deepspeed_json_whose_name_says_the_stage_is_planned_from_it(tmp_path):
    """Users paste commands without their JSON (R1-V#107's ./local_scripts/zero3.json, LlamaFactory#1409's
    ds_config_zero2.json): the name's ZeRO stage with DeepSpeed's own defaults for the rest (the plan equals that of a
    JSON holding only the stage), and, planned without offload, a fit is a fit (offload only lowers the plan)."""
    path = script(tmp_path, "")
    (tmp_path / "ds.json").unlink()
    path.write_text(path.read_text().replace("ds.json", "./scripts/zero3.json"))
    result = review([str(path)], gpu="a100-80g")
    assert result.exit_code == 0 and result.plan is not None and result.plan.setup.zero.stage == 3
    [note] = find(result, key="--deepspeed", text="memory planned from its file name: ZeRO stage 3 without offload")
    assert note.severity == "info" and "DeepSpeed's defaults" in note.what
    assert find(result, key="--gpu", text="an upper bound: offload in the JSON only lowers it")
    assert "zero3.json named in" in result.summary[0] and result.to_json()["deepspeed_by_name"] == "zero3.json"
    given = script(tmp_path / "given", "", ds={**DS_ZERO3, "fp16": {"enabled": "auto"}})
    assert review([str(given)], gpu="a100-80g").plan.per_gpu_peak_gib == pytest.approx(result.plan.per_gpu_peak_gib)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_what_a_deepspeed_json_s_name_leaves_is_deepspeed_s_own_default(stage):
    """What the name does not say (buckets, overlap_comm, stage 3 prefetch / persistence / live parameters, contiguous
    gradients, sub groups) is planned at the values DeepSpeed's own config parser gives a JSON that leaves them out."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    from vramfit.planner.setup import Zero

    ours, theirs = Zero.from_json({"zero_optimization": {"stage": stage}}, hidden=4096), DeepSpeedZeroConfig(stage=stage)
    assert (ours.overlap_comm, ours.contiguous_gradients) == (theirs.overlap_comm, theirs.contiguous_gradients)
    assert (ours.reduce_bucket_size, ours.allgather_bucket_size, ours.prefetch_bucket_size) == (
        theirs.reduce_bucket_size,
        theirs.allgather_bucket_size,
        theirs.prefetch_bucket_size,
    )
    assert (ours.max_live_parameters, ours.param_persistence_threshold, ours.sub_group_size) == (
        theirs.max_live_parameters,
        theirs.param_persistence_threshold,
        theirs.sub_group_size,
    )


def test_a_missing_deepspeed_json_planned_from_its_name_that_does_not_fit_is_a_warning(tmp_path):
    """Planned without the offload the name does not say, a non-fit depends on the JSON's offload settings: a warning
    naming that and what fits, not an error, unless even the most offload the stage allows does not fit (an error that
    says so). A name that says offload is planned with it."""
    text = (
        "torchrun --nproc_per_node 2 train.py --model_name_or_path meta-llama/Llama-3.1-8B --deepspeed {} "
        "--bf16 true --gradient_checkpointing true --model_max_length 1024\n"
    )
    result = review([str(write(tmp_path, "run.sh", text.format("ds_config_zero2.json")))], gpu="a100-40g")
    assert result.exit_code == 0 and not find(result, severity="error") and not result.plan.fits
    [warning] = find(result, key="--deepspeed", severity="warning", text="depends on the JSON's offload settings")
    assert "ds_config_zero2.json, not found: ZeRO stage 2 without offload" in warning.what
    assert "zero2_offload_optimizer.json" in warning.fix and "predicted" in warning.fix  # what fits
    # on 24 GB even the optimizer offload ZeRO-2 allows leaves 15 GiB of weights and 12 of logits: an error whatever it says
    [error] = find(review([str(tmp_path / "run.sh")], gpu="rtx3090"), key="--gpu", severity="error")
    assert "with the optimizer offloaded (ZeRO stage 2 cannot offload parameters)" in error.what and "do not change the verdict" in error.what
    offload = review([str(write(tmp_path, "off.sh", text.format("zero2_offload.json")))], gpu="a100-40g")
    assert offload.plan.setup.zero.offload_optimizer and not offload.plan.setup.zero.offload_params
    assert find(offload, key="--gpu", text="holds if the JSON offloads what its name says")


def test_a_path_given_with_the_same_file_name_is_the_one_reviewed(tmp_path):
    path = script(tmp_path / "a", "")
    (tmp_path / "a" / "ds.json").unlink()
    offload = {**DS_ZERO3, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
    given = write(tmp_path / "b", "ds.json", json.dumps(offload))
    result = review([str(path), str(given)], gpu="a100-80g")
    assert result.exit_code != 2 and result.plan.setup.zero.offload_optimizer


def test_model_name_matching_and_model_config_flag(tmp_path):
    local = write(tmp_path, "run.sh", "torchrun --nproc_per_node 2 train.py --model_name_or_path /ckpt/Qwen2.5-VL-3B-Instruct/ --model_max_length 2048\n")
    assert review([str(local)], gpu="a100-80g").plan.setup.model_config.name == "qwen2.5-vl-3b-instruct.json"
    other = write(tmp_path, "other.sh", "torchrun --nproc_per_node 2 train.py --model_name_or_path my-org/secret-7b --model_max_length 2048\n")
    result = review([str(other)], gpu="a100-80g")  # an unknown model: incomplete (exit 3), never "would fail"
    [missing] = find(result, key="--model_name_or_path", text="memory not planned")
    assert result.exit_code == 3 and result.plan is None and "--model-config" in missing.fix and missing.severity == "info"
    assert not find(result, severity="error")
    assert review([str(other)], gpu="a100-80g", model_config="model_configs/llava-1.5-7b.json").plan.setup.model_config.name == "llava-1.5-7b.json"


def test_against_names_the_recipe_to_compare_with(tmp_path):
    path = script(tmp_path, "--per_device_train_batch_size 1")
    result = review([str(path)], gpu="a100-80g", against="sharegpt4v-7b-8xa100-40g")
    assert result.closest_recipe == "sharegpt4v-7b-8xa100-40g"
    assert review([str(path)], gpu="a100-80g", against="sharegpt4v-7b").exit_code == 2


def test_no_gpu_flag_borrows_the_closest_recipes_and_says_so(tmp_path):
    result = review([str(script(tmp_path, ""))])
    [assumed] = find(result, key="--gpu", severity="warning")
    assert "the files do not say which GPU: reviewed as a100-80g, the closest recipe's (axolotl-llama-3b-8xa100-80g)" in assumed.what


def test_accelerate_config_deepspeed_settings_are_checked_against_the_arguments(tmp_path):
    write(
        tmp_path,
        "acc.yaml",
        "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
        "  zero_stage: 3\n  offload_optimizer_device: cpu\n  gradient_accumulation_steps: 4\n  zero_stage_typo: 1\n"
        "mixed_precision: bf16\nnum_machines: 1\nnum_processes: 8\n",
    )
    path = write(
        tmp_path,
        "run.sh",
        "accelerate launch --config_file acc.yaml train.py --model_name_or_path meta-llama/Llama-3.2-3B "
        "--gradient_accumulation_steps 2 --max_seq_length 1024\n",
    )
    result = review([str(path)], gpu="a100-80g")
    [contradiction] = find(result, key="gradient_accumulation_steps", severity="error")
    assert contradiction.file.endswith("acc.yaml") and contradiction.line == 6
    assert "contradicts the training arguments (gradient_accumulation_steps=4 vs gradient_accumulation_steps=2)" in contradiction.what
    assert find(result, key="deepspeed_config.zero_stage_typo", text="Did you mean 'zero_stage'?")
    assert result.plan.setup.world == 8 and result.plan.setup.zero.offload_optimizer and result.plan.setup.precision == "bf16"


def test_training_arguments_yaml(tmp_path):
    path = write(
        tmp_path,
        "train.yaml",
        "model_name_or_path: meta-llama/Llama-3.2-3B\nfinetuning_type: lora\nlora_rank: 16\n"
        "cutoff_len: 1024\nper_device_train_batch_size: 2\nlearning_rate: 1.0e-4\nbf16: true\n",
    )
    result = review([str(path)], gpu="a100-80g", gpus=4)
    assert result.plan.setup.method == "lora" and result.plan.setup.lora_r == 16 and result.plan.setup.seq_len == 1024


def test_json_shape(capsys):
    code, out = run_cli([str(SEEDS / "tinychart/scripts/train.sh"), "--gpu", "a100-80g", "--gpus", "8", "--host-ram-gib", "64", "--json"], capsys)
    data = json.loads(out)
    assert set(data) == {"findings", "plan", "closest_recipe", "exit_code", "model_assumed", "length_worst_case", "deepspeed_by_name"}
    assert data["deepspeed_by_name"] is None  # the JSON was read, not planned from its name
    assert data["model_assumed"] is None  # the model named by Hub id: no plan rests on a folder's name
    # TinyChart's collator (LLaVA's) pads each batch to its longest sample and data/train.json is not here: the plan is at
    # the cap, model_max_length 1024, a worst case (the script's second launch, convert_model_config.py, plans nothing)
    assert data["length_worst_case"] is True
    assert code == data["exit_code"] == 1 and data["closest_recipe"] == "tinychart-3b-8xa100-80g-offload"
    for finding in data["findings"]:
        assert set(finding) == {"severity", "file", "key", "what", "fix", "source", "line"}
        assert finding["severity"] in ("error", "warning", "info")
        assert finding["source"] in ("validation", "planner", "recipe-diff")
    severities = [f["severity"] for f in data["findings"]]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    assert data["plan"]["host_ram_fits"] is False and data["plan"]["host_ram_available_gib"] == 64


def test_json_for_unreadable_input(tmp_path, capsys):
    code, out = run_cli([str(tmp_path / "nope.sh"), "--json"], capsys)
    data = json.loads(out)
    assert code == data["exit_code"] == 2 and data["plan"] is None and data["closest_recipe"] is None
    assert data["findings"][0]["severity"] == "error" and "no such file" in data["findings"][0]["what"]


def test_reading_never_runs_the_script(tmp_path):
    marker = tmp_path / "ran"
    path = write(tmp_path, "run.sh", f"touch {marker}\nX=$(touch {marker})\ntorchrun --nproc_per_node 1 t.py --model_name_or_path x\n")
    read_all([str(path)])
    assert not marker.exists()


def test_the_runner_checks_report_in_the_users_flags(tmp_path):
    grpo = write(
        tmp_path,
        "grpo.sh",
        "torchrun --nproc_per_node 6 src/open_r1/grpo_rec.py --model_name_or_path Qwen/Qwen2.5-VL-3B-Instruct "
        "--num_generations 4 --per_device_train_batch_size 1 --max_pixels 1003520 --bf16 True\n",
    )
    result = review([str(grpo)], gpu="v100-32g")
    [divisible] = find(result, key="--num_generations", severity="error")
    assert "valid num_generations: [2, 3, 6]" in divisible.fix and divisible.line == 1
    [precision] = find(result, key="--bf16", severity="error")
    assert "no bf16 support" in precision.what


def test_lora_rank_without_a_switch_means_lora_and_trl_config_files_are_read(tmp_path):
    write(
        tmp_path,
        "recipes/sft.yaml",
        "model_name_or_path: meta-llama/Llama-3.2-3B\nper_device_train_batch_size: 2\ngradient_checkpointing: true\nbf16: true\nmax_seq_length: 1024\n",
    )
    path = write(tmp_path, "run.sh", "accelerate launch --num_processes 4 sft.py --config recipes/sft.yaml --lora_r 32 --lora_alpha 64\n")
    result = review([str(path)], gpu="a100-80g")
    setup = result.plan.setup
    assert setup.method == "lora" and setup.lora_r == 32 and setup.micro_batch == 2 and setup.world == 4
    assert not find(result, text="unknown")


def test_fewer_nodes_than_the_script_says_changes_the_global_batch(tmp_path):
    path = script(tmp_path, "--per_device_train_batch_size 4 --gradient_accumulation_steps 1", head="NODES=2")
    path.write_text(path.read_text().replace("--nproc_per_node 8", "--nproc_per_node 8 --nnodes $NODES"))
    result = review([str(path)], gpu="a100-80g", nodes=1)
    assert find(result, key="--nnodes", severity="info", text="the script says 2; reviewed with --nodes 1")
    [batch] = find(result, key="--per_device_train_batch_size", severity="info", text="the global batch changes")
    assert "the global batch changes from the 64 sequences per optimizer step the files give on their 16 ranks" in batch.what
    assert "4 x 1 x 8 = 32" in batch.what and batch.fix == "set gradient_accumulation_steps: 2 (keeps micro-batch 4)."
    assert "(the files, as written for 16 ranks: 64)" in result.summary[2]


def test_a_script_that_launches_axolotl_reads_its_config_and_fixes_go_there(tmp_path):
    config = SEEDS / "axolotl/llama-3b-fft.yml"
    path = write(tmp_path, "train.sh", f"accelerate launch --num_processes 8 -m axolotl.cli.train {config}\n")
    result = review([str(path)], gpu="a100-80g")
    assert result.plan.setup.world == 8 and result.plan.setup.micro_batch == 4
    [verdict] = find(result, source="planner", key="--gpu", severity="error")
    assert verdict.file.endswith("train.sh") and "micro_batch_size: 2, gradient_accumulation_steps: 2" in verdict.fix
    [checkpointing] = find(result, source="recipe-diff", key="gradient_checkpointing")
    assert checkpointing.file.endswith("llama-3b-fft.yml") and checkpointing.fix == "gradient_checkpointing: true"


def test_a_word_where_a_number_belongs_is_an_error_and_the_plan_waits(tmp_path):
    path = write(tmp_path, "train.yaml", "model_name_or_path: meta-llama/Llama-3.2-3B\nper_device_train_batch_size: four\nbf16: true\nmax_seq_length: 1024\n")
    result = review([str(path)], gpu="a100-80g", gpus=8)
    assert result.exit_code == 1 and result.plan is None
    [word] = find(result, key="per_device_train_batch_size", severity="error")
    assert "'four' is a string where a number belongs" in word.what and word.line == 2
    assert find(result, source="planner", text="memory not planned")


def test_user_paths_and_names_are_not_recipe_tree_findings(tmp_path):
    """A user's own launch script names machine paths (/home/..., /data/...); the recipe tree's rules
    (no personal paths in shared files, recipe naming) are not findings about their run."""
    path = script(
        tmp_path,
        "--per_device_train_batch_size 1 --gradient_accumulation_steps 4 --output_dir /home/alice/runs/llama3b --data_path /Users/alice/data/train.json",
        head="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    )
    result = review([str(path)], gpu="a100-80g", host_ram_gib=512)
    assert not find(result, text="absolute or personal path")
    assert not find(result, key="name")
    assert result.exit_code == 0, [f"{f.key}: {f.what}" for f in result.findings]


@pytest.mark.parametrize(
    "launch, ranks",
    [
        ("deepspeed train.py", 4),  # DeepSpeed's launcher starts one rank per visible GPU
        ("deepspeed --num_gpus 2 train.py", 2),  # what the launch states wins
        ("accelerate launch --config_file missing.yaml train.py", 4),  # its config (not here) says as many, usually
        ("accelerate launch --num_processes 2 train.py", 2),
    ],
)
def test_the_gpus_a_launch_sees_size_it_when_nothing_states_the_count(tmp_path, launch, ranks):
    write(tmp_path, "ds.json", json.dumps(DS_ZERO3))
    path = write(
        tmp_path,
        "run.sh",
        f"export CUDA_VISIBLE_DEVICES=0,1,2,3\n{launch} --model_name_or_path meta-llama/Llama-3.2-3B --deepspeed ds.json --bf16 true\n",
    )
    result = review([str(path)], gpu="a100-80g", host_ram_gib=512)
    assert any(f"1 node x {ranks} x a100-80g" in line for line in result.summary), result.summary
    assert not any(f.key == "--gpus" and f.severity == "warning" for f in result.findings)


def test_transformers_4_arguments_gone_from_5_are_dated_not_unknown(tmp_path):
    """FastChat / Alpaca-era scripts pass TrainingArguments fields transformers 5 dropped: with nothing pinned they
    date the script (an info and the edit for the upgrade), not an 'unknown flag' with a wrong did-you-mean."""
    path = script(tmp_path, "--save_safetensors True --include_tokens_per_second --fsdp_transformer_layer_cls_to_wrap LlamaDecoderLayer")
    result = review([str(path)], gpu="a100-80g", host_ram_gib=512)
    for flag in ("--save_safetensors", "--include_tokens_per_second", "--fsdp_transformer_layer_cls_to_wrap"):
        said = [f for f in result.findings if f.key == flag]
        assert said and all(f.severity == "info" and "transformers 4 accepts it" in f.what for f in said), said


def test_llamafactory_cli_runs_on_the_gpus_it_sees_and_its_data_arguments_are_not_unknown(tmp_path):
    """`CUDA_VISIBLE_DEVICES=3 llamafactory-cli train ...`: one visible GPU, one process (LLaMA-Factory's cli.py starts
    torchrun over get_device_count() GPUs); --dataset_dir is its DataArguments', not an unknown flag."""
    path = write(
        tmp_path,
        "run.sh",
        "CUDA_VISIBLE_DEVICES=3 llamafactory-cli train --stage sft --do_train True --model_name_or_path meta-llama/Llama-3.2-3B "
        "--finetuning_type lora --lora_target all --dataset_dir data --dataset mine --template llama3 --cutoff_len 1024 "
        "--per_device_train_batch_size 2 --bf16 True --output_dir out\n",
    )
    result = review([str(path)], gpu="a100-80g", host_ram_gib=512)
    assert any("1 node x 1 x a100-80g" in line for line in result.summary), result.summary
    assert not [f for f in result.findings if f.severity in ("error", "warning")], result.findings


def test_another_model_s_recipe_is_named_but_its_settings_are_not_offered_as_fixes(tmp_path):
    """A GPT-2 script shares no model or architecture with any recipe: the closest recipe's length, batch and
    checkpointing were chosen for another model, so no recipe-diff finding; `--against` still compares them."""
    path = write(
        tmp_path,
        "train.sh",
        "torchrun --nproc_per_node 8 train.py --model_name_or_path gpt2 --per_device_train_batch_size 16 --bf16 True --max_seq_length 512 --output_dir out\n",
    )
    result = review([str(path)], gpu="a100-80g", gpus=8)
    assert result.closest_recipe and not find(result, source="recipe-diff")
    assert "another model, so its settings are not compared" in result.summary[-1]
    named = review([str(path)], gpu="a100-80g", gpus=8, against=result.closest_recipe)
    assert find(named, source="recipe-diff")
