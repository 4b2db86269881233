"""Broken recipe variants: each is refused with exit 2, a message naming the key, the numbers and
the fix, and nothing is launched or written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vramfit.cli import main


def edit_yaml(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _set(*keys_value):
    *keys, value = keys_value

    def change(data):
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value

    return change


def _zero(**extra):
    return lambda d: d["zero_optimization"].update(extra)


# (id, recipe, overrides, file edit: (relative path, change) or None, expected key, expected text)
CASES = [
    ("unknown-top-level-key", "vlm-r1-h20", [], ("recipes/vlm-r1-h20/recipe.yaml", _set("lanucher", "torchrun")), "lanucher", "Did you mean 'launcher'"),
    (
        "unknown-nested-key",
        "vlm-r1-h20",
        [],
        ("recipes/vlm-r1-h20/recipe.yaml", _set("model", "atn_implementation", "sdpa")),
        "model.atn_implementation",
        "Did you mean 'attn_implementation'",
    ),
    (
        "unknown-training-arg",
        "sharegpt4v-7b-8xa100-40g",
        ["training.per_device_batch_size=4"],
        None,
        "training.per_device_batch_size",
        "Did you mean 'per_device_train_batch_size' or 'per_device_eval_batch_size'?",
    ),
    (
        "unknown-override-key",
        "sharegpt4v-7b-8xa100-40g",
        ["per_devic_train_batch_size=2"],
        None,
        "per_devic_train_batch_size",
        "Did you mean 'per_device_train_batch_size'",
    ),
    ("override-without-equals", "sharegpt4v-7b-8xa100-40g", ["hardware.nodes=2", "training.seed:1"], None, "", "write overrides as key=value"),
    (
        "string-learning-rate",
        "sharegpt4v-7b-8xa100-40g",
        [],
        ("recipes/sharegpt4v-7b-8xa100-40g/recipe.yaml", _set("training", "learning_rate", "fast")),
        "training.learning_rate",
        "'fast' is a string where a number belongs. Fix: write a number, e.g. learning_rate: 5e-05",
    ),
    (
        "negative-micro-batch",
        "sharegpt4v-7b-8xa100-40g",
        ["per_device_train_batch_size=-4"],
        None,
        "training.per_device_train_batch_size",
        "must not be negative",
    ),
    ("batch-not-global", "sharegpt4v-7b-8xa100-40g", ["global_batch_size=100"], None, "global_batch_size", "4 x 4 x 8 = 128 != global_batch_size 100"),
    (
        "batch-upstream-micro-on-one-node",
        "sharegpt4v-7b-8xa100-40g",
        ["per_device_train_batch_size=8"],
        None,
        "global_batch_size",
        "Fix: set gradient_accumulation_steps: 2",
    ),
    (
        "grpo-divisibility",
        "vlm-r1-h20",
        ["num_generations=5"],
        None,
        "training.num_generations",
        "valid num_generations: [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96]",
    ),
    ("bf16-on-v100", "vlm-r1-h20", ["hardware.gpu=v100-32g"], None, "training.bf16", "no bf16 support"),
    ("fp16-and-bf16", "sharegpt4v-7b-8xa100-40g", ["fp16=true"], None, "training.fp16", "both true"),
    ("unknown-gpu", "vlm-r1-h20", ["hardware.gpu=a100-40gb"], None, "hardware.gpu", "'a100-40gb' is not allowed"),
    ("gpus-not-a-number", "vlm-r1-h20", ["hardware.gpus_per_node=eight"], None, "hardware.gpus_per_node", "is not a int"),
    ("unknown-method", "vlm-r1-h20", ["method=dpo"], None, "method", "'dpo' is not allowed"),
    ("lora-without-block", "sharegpt4v-7b-8xa100-40g", ["method=lora"], None, "model.lora", "needs a model.lora block"),
    ("full-with-lora-block", "minicpmv-lora-8xa100-80g", ["method=full"], None, "model.lora", "method full trains every weight"),
    (
        "qlora-zero3-uint8-storage",
        "sharegpt4v-7b-8xa100-40g",
        ["method=qlora", "model.lora.r=16", "model.lora.alpha=32", "model.lora.target_modules=[q_proj,v_proj]", "model.quantization.bits=4"],
        None,
        "model.quantization.quant_storage",
        "ZeRO-3 cannot shard 4-bit weights stored as uint8",
    ),
    ("grpo-wrong-format", "vlm-r1-h20", ["data.format=llava_json"], None, "data.format", "has none"),
    (
        "absolute-data-path",
        "sharegpt4v-7b-8xa100-40g",
        [],
        ("recipes/sharegpt4v-7b-8xa100-40g/recipe.yaml", _set("data", "train_file", "/home/alice/sharegpt4v.json")),
        "data.train_file",
        "absolute or personal path",
    ),
    (
        "home-output-dir",
        "sharegpt4v-7b-8xa100-40g",
        [],
        ("recipes/sharegpt4v-7b-8xa100-40g/recipe.yaml", _set("training", "output_dir", "~/checkpoints/run1")),
        "training.output_dir",
        "absolute or personal path",
    ),
    ("missing-model-config", "vlm-r1-h20", ["model.config=model_configs/nope.json"], None, "model.config", "does not exist"),
    (
        "architecture-mismatch",
        "sharegpt4v-7b-8xa100-40g",
        ["model.architecture=LlamaForCausalLM"],
        None,
        "model.architecture",
        "set model.architecture: LlavaForConditionalGeneration",
    ),
    ("runner-owned-arg", "vlm-r1-h20", ["training.deepspeed=deepspeed_configs/zero2.json"], None, "training.deepspeed", "top-level `deepspeed:`"),
    ("missing-deepspeed-json", "vlm-r1-h20", ["deepspeed=deepspeed_configs/zero9.json"], None, "deepspeed", "does not exist"),
    ("deepspeed-json-outside-folder", "vlm-r1-h20", ["deepspeed=recipes/vlm-r1-h20/recipe.yaml"], None, "deepspeed", "outside deepspeed_configs/"),
    (
        "ds-top-level-typo",
        "vlm-r1-h20",
        [],
        ("deepspeed_configs/zero3.json", lambda d: d.update(zero_optimisation={"stage": 3})),
        "zero_optimisation",
        "silently ignores the top-level key 'zero_optimisation'. Did you mean 'zero_optimization'",
    ),
    ("ds-nested-typo", "vlm-r1-h20", [], ("deepspeed_configs/zero3.json", _zero(offload_parm={"device": "cpu"})), "", "offload_parm"),
    (
        "ds-string-number",
        "vlm-r1-h20",
        [],
        ("deepspeed_configs/zero3.json", lambda d: d.update(train_micro_batch_size_per_gpu="8")),
        "train_micro_batch_size_per_gpu",
        "'8' is a string where a number belongs",
    ),
    (
        "ds-contradicts-args",
        "vlm-r1-h20",
        [],
        ("deepspeed_configs/zero3.json", lambda d: d.update(train_micro_batch_size_per_gpu=8)),
        "train_micro_batch_size_per_gpu",
        "train_micro_batch_size_per_gpu=8 vs per_device_train_batch_size=4",
    ),
    (
        "ds-auto-nothing-fills",
        "vlm-r1-h20",
        [],
        ("deepspeed_configs/zero3.json", _zero(stage3_max_live_parameters="auto")),
        "zero_optimization.stage3_max_live_parameters",
        "nothing fills it",
    ),
    (
        "ds-param-offload-stage2",
        "docowl1.5-8b-8xa100-80g",
        [],
        ("deepspeed_configs/zero2.json", _zero(offload_param={"device": "cpu"})),
        "zero_optimization.offload_param",
        "needs ZeRO stage 3 (stage is 2)",
    ),
    (
        "ds-fp16-and-bf16",
        "vlm-r1-h20",
        [],
        ("deepspeed_configs/zero3.json", lambda d: d.update(fp16={"enabled": True}, bf16={"enabled": True})),
        "fp16.enabled",
        "both enabled",
    ),
    ("ds-broken-json", "vlm-r1-h20", [], ("deepspeed_configs/zero3.json", None), "", "is not valid JSON at line"),
    ("recipe-broken-yaml", "vlm-r1-h20", [], ("recipes/vlm-r1-h20/recipe.yaml", None), "", "is not valid YAML at line"),
    ("model-config-is-directory", "vlm-r1-h20", ["model.config=model_configs"], None, "model.config", "does not exist"),
    ("name-grammar", "vlm-r1-h20", ["name=VLM R1 on h20"], None, "name", "does not follow"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_broken_variant_is_refused(case, tree, capsys):
    _, recipe, overrides, edit, key, text = case
    if edit is not None:
        path = tree / edit[0]
        if edit[1] is None:  # a syntax error in the file
            path.write_text(path.read_text()[:-40] + "\n  {[ broken")
        elif path.suffix == ".json":
            edit_json(path, edit[1])
        else:
            edit_yaml(path, edit[1])
    run_dir = tree / "runs" / "should-not-exist"
    code = main(["run", recipe, *overrides, "--dry-run", "--run-dir", str(run_dir)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "nothing was launched or written" in err
    assert text in err, err
    if key:
        assert f": {key}: " in err, err
    assert "Fix:" in err
    assert not run_dir.exists()


def test_every_problem_is_reported_at_once(tree, capsys):
    code = main(["validate", "vlm-r1-h20", "num_generations=5", "global_batch_size=100", "hardware.gpu=v100-32g", "--no-plan"])
    err = capsys.readouterr().err
    assert code == 2
    for key in ("training.num_generations", "global_batch_size", "training.bf16", "hardware.gpu"):
        assert f": {key}: " in err, err


def test_at_least_25_variants():
    assert len(CASES) >= 25
