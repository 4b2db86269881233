"""`vramfit plan`: JSON, plot, --model-config mode, exit codes and error messages."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from vramfit.planner import cli

from planner_support import REPO, recipe_path

KEYS = {"per_gpu_peak_gib", "gpu_memory_gib", "fits", "host_ram_gib", "host_ram_available_gib", "host_ram_fits", "breakdown", "phases", "fixes"}
LLAMA = str(REPO / "model_configs" / "llama-3.2-3b.json")


def vramfit_plan(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="vramfit plan")
    cli.add_arguments(parser)
    code = cli.run(parser.parse_args(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_documented_keys(capsys):
    code, out, _ = vramfit_plan([str(recipe_path("vlm-r1-h20")), "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and KEYS <= set(data)
    assert data["fits"] is True and data["peak_phase"] in data["phases"]
    assert abs(sum(data["breakdown"].values()) - data["per_gpu_peak_gib"]) < 0.05
    assert set(data["phases"]) == {"train", "optimizer_step", "generation"}


def test_not_fitting_exits_1_and_prints_verdict_equation_and_fixes(capsys):
    code, out, _ = vramfit_plan([str(recipe_path("axolotl-llama-3b-8xa100-80g")), "gradient_checkpointing=false", "use_liger_kernel=false"], capsys)
    assert code == 1
    assert "DOES NOT FIT" in out and "per-GPU peak (train) = weights" in out and "usable" in out
    assert "use_liger_kernel=true" in out and "GiB per GPU" in out


def test_plot_is_a_png(tmp_path, capsys):
    path = tmp_path / "plan.png"
    code, _, _ = vramfit_plan([str(recipe_path("minicpmv-lora-8xa100-80g")), "--plot", str(path)], capsys)
    assert code == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_model_config_mode(capsys):
    base = ["--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "8", "--deepspeed", "zero3", "per_device_train_batch_size=4", "seq_len=4096", "bf16=true"]
    code, out, _ = vramfit_plan([*base, "gradient_checkpointing=true", "use_liger_kernel=true"], capsys)
    assert code == 0 and "FITS" in out
    code, out, _ = vramfit_plan([*base, "--json"], capsys)
    data = json.loads(out)
    assert code == 1 and data["fits"] is False and data["fixes"]
    assert all(set(f) == {"overrides", "per_gpu_peak_gib", "host_ram_gib", "why"} for f in data["fixes"])
    code, out, _ = vramfit_plan(
        [
            "--model-config",
            LLAMA,
            "--gpu",
            "h100",
            "--gpus",
            "1",
            "method=lora",
            "lora_r=16",
            "seq_len=2048",
            "bf16=true",
            "per_device_train_batch_size=1",
            "gradient_checkpointing=true",
            "eval_strategy=steps",
            "prediction_loss_only=true",
        ],
        capsys,
    )
    assert code == 0 and "evaluation" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["no-such-recipe"], "no-such-recipe"),
        ([str(recipe_path("vlm-r1-h20")), "per_device_train_batch_sise=2"], "Did you mean 'per_device_train_batch_size'?"),
        ([str(recipe_path("vlm-r1-h20")), "--plot", "plan.jpg"], "--plot"),
        (["--model-config", LLAMA, "--gpu", "a100-80", "--gpus", "8"], "Did you mean 'a100-80g'?"),
        (["--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "8", "seq_len=-3"], "seq_len: -3 is not a positive whole number"),
        (["--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "8", "per_device_train_batch_size=two"], "per_device_train_batch_size"),
        (["--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "8", "seqlen=1024"], "Did you mean 'seq_len'?"),
        (["--model-config", "missing/config.json", "--gpu", "a100-80g", "--gpus", "8"], "missing/config.json"),
        (["--model-config", LLAMA, "--gpu", "a100-80g"], "--gpus"),
    ],
)
def test_bad_input_exits_2_with_the_problem_format(argv, needle, capsys):
    code, out, err = vramfit_plan(argv, capsys)
    assert code == 2 and out == ""
    assert needle in err and "Fix:" in err


def test_plan_fixes_prices_doctor_fixes():
    priced = cli.plan_fixes(
        "axolotl-llama-3b-8xa100-80g",
        [{"gradient_checkpointing": False, "use_liger_kernel": False}, ["per_device_train_batch_size=2", "gradient_accumulation_steps=2"]],
    )
    assert [fits for _, _, fits in priced] == [False, True]
    assert priced[0][1] > priced[1][1]


def test_doctor_batch_splits_are_rebased_on_the_recipe():
    """A split read from the log (8 x 1 -> 1 x 8) is priced on the recipe's own 4 x 4, keeping its
    global batch (1 x 16 x 8 ranks = 128); a split that does not lower the recipe's 4 does not apply."""
    priced = cli.plan_fixes(
        "sharegpt4v-7b-8xa100-40g",
        [
            {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 8},
            {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
            {"per_device_train_batch_size": 3, "gradient_accumulation_steps": 3},
        ],
    )
    (rebased, peak, fits), (_, same, _), (_, odd, _) = priced
    assert rebased == {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 16}
    assert peak is not None and fits
    assert same is None and odd is None  # 4 is not lower than 4; 3 does not divide 16 samples


def test_doctor_prints_the_rebased_fix(capsys):
    from vramfit.cli import main

    log = REPO / "tests" / "doctor" / "logs" / "sharegpt4v_zero3_backward_a100_40g.log"
    assert main(["doctor", str(log), "--recipe", "sharegpt4v-7b-8xa100-40g", "--json"]) == 0
    fixes = json.loads(capsys.readouterr().out)["fixes"]
    splits = [f for f in fixes if "per_device_train_batch_size" in f.get("overrides", {}) and f.get("fits")]
    assert splits
    for fix in splits:
        o = fix["overrides"]
        assert o["per_device_train_batch_size"] * o["gradient_accumulation_steps"] * 8 == 128
        assert "on sharegpt4v-7b-8xa100-40g" in fix["why"]


def test_doctor_text_marks_fixes_that_do_not_apply(capsys):
    """The log's 16 x 1 -> 8 x 2 split cannot lower this recipe's per-device 4: shown, not priced."""
    from vramfit.cli import main

    log = REPO / "tests" / "doctor" / "logs" / "sharegpt4v_zero3_backward_a100_40g.log"
    assert main(["doctor", str(log), "--recipe", "sharegpt4v-7b-8xa100-40g"]) == 0
    out = capsys.readouterr().out
    assert "[planner: does not apply to this recipe]" in out
    assert "Apply first: fix" in out


def test_import_stays_light_and_help_lists_the_keys():
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    code = "import sys, vramfit.planner.cli; print(any(m in sys.modules for m in ('torch', 'transformers', 'deepspeed')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    text = parser.format_help()
    for key in (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "use_liger_kernel",
        "optim",
        "prediction_loss_only",
        "num_generations",
        "max_completion_length",
        "max_prompt_length",
        "beta",
        "method=full|lora|qlora|grpo",
        "seq_len",
        "lora_r",
        "max_pixels",
        "--model-config",
        "--deepspeed",
    ):
        assert key in text
