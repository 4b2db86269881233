"""Hand-written adversarial corpus: what a new (or careless) user types, for every command.

Table-driven: each case is (files to plant in a private copy of the tree, the command, the exit
codes it may end with, the paths it may write). Every case also asserts what must never happen: a
traceback, an internal error (70) where none is expected, more than 30 s, or a file outside the
allowed paths created, changed or removed. Run in-process through vramfit.cli.main.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from harness import DOCUMENTED, REPO, invoke

RECIPE = "vlm-r1-h20"
RECIPE_FILE = f"recipes/{RECIPE}/recipe.yaml"
BASE = yaml.safe_load((REPO / RECIPE_FILE).read_text())
LORA = "minicpmv-lora-8xa100-80g"
LLAMA = "model_configs/llama-3.2-3b.json"
LLAMA_CFG = json.loads((REPO / LLAMA).read_text())


class Special:
    """A planted thing that is not a plain file."""

    def __init__(self, kind: str, target: str = ""):
        self.kind, self.target = kind, target


FIFO, DIR = Special("fifo"), Special("dir")
LOOP = Special("loop")


def link(target: str) -> Special:
    return Special("link", target)


@dataclass
class Case:
    id: str
    argv: list[str]
    expect: set[int]
    files: dict = field(default_factory=dict)  # relative path -> bytes | str | Special
    allowed: tuple[str, ...] = ()
    must: object = None  # callable(tree, result) with extra assertions
    stdin: bytes | None = None


def mutated(path: str, value) -> str:
    """The base recipe with one dotted key set (or removed, value=...)."""
    data = json.loads(json.dumps(BASE))
    node = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    if value is ...:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def recipe_text(**replace: str) -> str:
    text = (REPO / RECIPE_FILE).read_text()
    for old, new in replace.items():
        text = text.replace(old, new)
    return text


CASES: list[Case] = []


def add(*cases: Case) -> None:
    CASES.extend(cases)


# ------------------------------------------------------------------ 1. recipe values, every command that reads a recipe

RECIPE_COMMANDS = {
    "validate": ["validate", RECIPE, "--no-plan"],
    "plan": ["plan", RECIPE],
    "dry-run": ["run", RECIPE, "--dry-run", "--run-dir", "runs/x"],
    "slurm": ["slurm", RECIPE],
    "doctor": ["doctor", "empty.log", "--recipe", RECIPE],
}
BAD_VALUES = {
    "gpus-true": ("hardware.gpus_per_node", True),
    "gpus-inf": ("hardware.gpus_per_node", float("inf")),
    "gpus-zero": ("hardware.gpus_per_node", 0),
    "gpus-list": ("hardware.gpus_per_node", [6]),
    "nodes-true": ("hardware.nodes", True),
    "host-ram-inf": ("hardware.host_ram_gib", float("inf")),
    "host-ram-nan": ("hardware.host_ram_gib", float("nan")),
    "num-generations-0": ("training.num_generations", 0),
    "num-generations-true": ("training.num_generations", True),
    "micro-0": ("training.per_device_train_batch_size", 0),
    "micro-true": ("training.per_device_train_batch_size", True),
    "micro-text": ("training.per_device_train_batch_size", "four"),
    "micro-list": ("training.per_device_train_batch_size", [1, 2]),
    "lr-1e400-text": ("training.learning_rate", "1e400"),
    "lr-inf": ("training.learning_rate", float("inf")),
    "completion-inf": ("training.max_completion_length", float("inf")),
    "global-1e12": ("global_batch_size", 10**12),
    "global-true": ("global_batch_size", True),
    "hardware-list": ("hardware", []),
    "training-list": ("training", [1, 2]),
    "data-text": ("data", "rec.jsonl"),
    "env-metachar-key": ("env", {"A;touch PWNED": "1"}),
    "env-space-key": ("env", {"A B": "1"}),
    "env-empty-key": ("env", {"": "1"}),
    "name-newline": ("name", "vlm-r1-h20\n"),
    "name-sbatch-injection": ("name", "vlm-r1-h20\n#SBATCH --wrap=touch PWNED"),
    "gpu-newline": ("hardware.gpu", "h20\n"),
    "method-number": ("method", 4),
    "accumulation-negative": ("training.gradient_accumulation_steps", -1),
    "max-length-0": ("data.max_length", 0),
    "deepspeed-dev-zero": ("deepspeed", "/dev/zero"),
    "deepspeed-fifo": ("deepspeed", "deepspeed_configs/pipe.json"),
    "deepspeed-dir": ("deepspeed", "deepspeed_configs"),
    "deepspeed-loop": ("deepspeed", "deepspeed_configs/loop.json"),
    "deepspeed-missing": ("deepspeed", "deepspeed_configs/none.json"),
    "model-config-dev-zero": ("model.config", "/dev/zero"),
    "model-config-fifo": ("model.config", "model_configs/pipe.json"),
    "model-config-loop": ("model.config", "model_configs/loop.json"),
    "lora-list": ("model.lora", []),
    "summary-missing": ("summary", ...),
}
SPECIALS = {
    "deepspeed_configs/pipe.json": FIFO,
    "deepspeed_configs/loop.json": LOOP,
    "model_configs/pipe.json": FIFO,
    "model_configs/loop.json": LOOP,
    "empty.log": "",
}
for label, (key, value) in BAD_VALUES.items():
    for command, argv in RECIPE_COMMANDS.items():
        add(Case(f"recipe-{label}-{command}", argv, {2}, {RECIPE_FILE: mutated(key, value), **SPECIALS}))

# ------------------------------------------------------------------ 2. recipe files as bytes: the input layer

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
RAW_RECIPES = {
    "duplicate-top-key": recipe_text(**{"method: grpo": "method: grpo\nmethod: full"}),
    "duplicate-nested-key": recipe_text(**{"  gpu: h20": "  gpu: h20\n  gpu: h100"}),
    "alias-bomb": BOMB,
    "alias-bomb-inside-recipe": recipe_text(**{"env:\n": BOMB.replace("\n", "\n  ").join(["x_bomb:\n  ", "\nenv:\n"])}),
    "recursive-alias": "a: &a [*a]\n",
    "deep-flow-nesting": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "deep-block-nesting": "".join("  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "v\n",
    "latin1": recipe_text(summary="summary: caf\xe9 ").encode("latin-1", "replace"),
    "nul-byte": recipe_text(**{"method: grpo": "method: grp\x00o"}),
    "utf16": recipe_text().encode("utf-16"),
    "empty": "",
    "scalar": "hello\n",
    "list": "- a\n- b\n",
    "tab-indent": "name: x\n\thardware: 1\n",
    "unterminated-quote": 'name: "x\n',
    "two-megabytes": recipe_text() + ("#" * 1000 + "\n") * 2100,
    "binary": bytes(range(256)) * 8,
    "python-tag": "name: !!python/object:os.system [touch PWNED]\n",
    "unhashable-key": "? [a, b]\n: 1\n",
    "int-10e400": mutated("hardware.gpus_per_node", 10**400),
    "yaml-inf": recipe_text(**{"host_ram_gib: 1024": "host_ram_gib: .inf"}),
    "yaml-1e400-float": recipe_text(**{"learning_rate: 1.0e-6": "learning_rate: 1.0e+400"}),
    "multi-document": recipe_text() + "\n---\nname: other\n",
    "only-comment": "# nothing\n",
}
for label, content in RAW_RECIPES.items():
    for command in ("validate", "plan", "dry-run", "doctor"):
        add(Case(f"raw-{label}-{command}", RECIPE_COMMANDS[command], {2}, {RECIPE_FILE: content, "empty.log": ""}))

# A valid recipe written with a YAML merge key: an explicit key over a merged one is not a duplicate.
add(
    Case(
        "raw-merge-key-ok",
        ["validate", RECIPE, "--no-plan"],
        {0},
        {RECIPE_FILE: recipe_text(**{"hardware:\n  gpu: h20": "hardware:\n  <<: {gpu: h100, nodes: 1}\n  gpu: h20"})},
    )
)

# ------------------------------------------------------------------ 3. paths given on the command line

LONG = "x/" * 2100 + "recipe.yaml"
for label, path, planted in [
    ("fifo", "r.yaml", {"r.yaml": FIFO}),
    ("dev-zero", "/dev/zero", {}),
    ("dir-without-recipe", "deepspeed_configs", {}),
    ("symlink-loop", "loop.yaml", {"loop.yaml": LOOP}),
    ("too-long", LONG, {}),
    ("name-too-long", "a" * 300 + ".yaml", {}),
    ("missing", "nope.yaml", {}),
    ("file-as-folder", f"{RECIPE_FILE}/recipe.yaml", {}),
    ("dev-null", "/dev/null", {}),
    ("proc-self", "/proc/self/environ", {}),
]:
    for command in ("validate", "plan", "show", "slurm"):
        argv = [command, path] + (["--no-plan"] if command == "validate" else [])
        add(Case(f"path-{label}-{command}", argv, {2}, planted))
    add(Case(f"path-{label}-dry-run", ["run", path, "--dry-run", "--run-dir", "runs/x"], {2}, planted))

# ------------------------------------------------------------------ 4. overrides

OVERRIDES = {
    "micro-0": "per_device_train_batch_size=0",
    "micro-true": "per_device_train_batch_size=true",
    "micro-1e400": "per_device_train_batch_size=1e400",
    "micro-float-inf": "per_device_train_batch_size=.inf",
    "micro-text": "per_device_train_batch_size=abc",
    "micro-list": "per_device_train_batch_size=[1]",
    "micro-dict": "per_device_train_batch_size={a: 1}",
    "gpus-true": "hardware.gpus_per_node=true",
    "gpus-17": "hardware.gpus_per_node=17",
    "num-generations-0": "num_generations=0",
    "deepspeed-dev-zero": "deepspeed=/dev/zero",
    "deepspeed-etc": "deepspeed=/etc/passwd",
    "section-as-leaf": "hardware=3",
    "leaf-as-section": "hardware.gpu.x=1",
    "space-in-key": "a b=1",
    "empty-key": "=1",
    "dots": "training..x=1",
    "env-metachar": "env.A;touch PWNED=1",
    "name-newline": "name=vlm-r1-h20\n",
    "long-key": "k" * 100000 + "=1",
    "nul": "summary=a\x00b",
    "unknown": "per_device_train_batch=4",
    "nodes-2000": "hardware.nodes=2000",
    "lr-1e400": "learning_rate=1e400",
    "global-1e12": "global_batch_size=1000000000000",
    "accumulation-1e12": "gradient_accumulation_steps=1000000000000",
}
for label, item in OVERRIDES.items():
    for command in ("validate", "plan", "dry-run"):
        add(Case(f"override-{label}-{command}", [*RECIPE_COMMANDS[command], item], {2}))
    add(Case(f"override-{label}-slurm", ["slurm", RECIPE, item], {2}))

# ------------------------------------------------------------------ 5. DeepSpeed JSONs (the recipe's zero3.json replaced)

DS = "deepspeed_configs/zero3.json"
DS_BASE = json.loads((REPO / DS).read_text())


def ds(**changes) -> str:
    data = json.loads(json.dumps(DS_BASE))
    for key, value in changes.items():
        node = data
        parts = key.split("__")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return json.dumps(data, indent=2)


DS_CASES = {
    "duplicate-key": json.dumps(DS_BASE, indent=2).replace('"zero_optimization": {', '"zero_optimization": {"stage": 2,', 1),
    "nvme-no-path": ds(zero_optimization__offload_optimizer={"device": "nvme"}),
    "nvme-param-no-path": ds(zero_optimization__offload_param={"device": "nvme"}),
    "unknown-optimizer": ds(optimizer={"type": "AdamQ", "params": {}}),
    "optimizer-type-number": ds(optimizer={"type": 5}),
    "stage-4": ds(zero_optimization__stage=4),
    "stage-text": ds(zero_optimization__stage="three"),
    "nan": json.dumps(DS_BASE).replace('"auto"', "NaN", 1),
    "infinity": json.dumps(DS_BASE).replace('"auto"', "Infinity", 1),
    "1e400": json.dumps(DS_BASE).replace('"auto"', "1e400", 1),
    "deep": "[" * 100000 + "]" * 100000,
    "deep-objects": '{"a":' * 80 + "1" + "}" * 80,
    "top-level-list": "[1, 2]",
    "latin1": json.dumps(DS_BASE).replace('"auto"', '"caf\xe9"', 1).encode("latin-1"),
    "empty": "",
    "micro-0": ds(train_micro_batch_size_per_gpu=0),
    "zero-list": ds(zero_optimization=[]),
    "offload-text": ds(zero_optimization__offload_optimizer="cpu"),
    "five-megabytes": json.dumps({**DS_BASE, "pad": "x" * 5_000_000}),
}
for label, content in DS_CASES.items():
    for command in ("validate", "plan", "dry-run"):
        add(Case(f"deepspeed-{label}-{command}", RECIPE_COMMANDS[command], {2}, {DS: content}))

# ------------------------------------------------------------------ 6. plan --model-config


def cfg(**changes) -> str:
    data = {**LLAMA_CFG}
    for key, value in changes.items():
        if value is ...:
            data.pop(key, None)
        else:
            data[key] = value
    return json.dumps(data)


PLAN_ARGS = ["plan", "--model-config", "m.json", "--gpu", "a100-80g", "--gpus", "8"]
MODEL_CONFIGS = {
    "only-model-type": json.dumps({"model_type": "llama"}),
    "no-layers": cfg(num_hidden_layers=...),
    "zero-layers": cfg(num_hidden_layers=0),
    "negative-hidden": cfg(hidden_size=-4096),
    "hidden-text": cfg(hidden_size="big"),
    "hidden-true": cfg(hidden_size=True),
    "hidden-list": cfg(hidden_size=[1]),
    "unknown-model-type": cfg(model_type="no-such-model"),
    "model-type-number": cfg(model_type=7),
    "vocab-huge": cfg(vocab_size=10**30),
    "heads-zero": cfg(num_attention_heads=0),
    "duplicate-key": cfg().replace('"model_type"', '"hidden_size": 1, "model_type"', 1),
    "nested-deep": '{"a":' * 5000 + "1" + "}" * 5000,
    "top-level-list": "[]",
    "latin1": cfg(model_type="llama").encode() + b"\xff",
    "empty": "",
    "hidden-1e400": cfg().replace('"hidden_size": 3072', '"hidden_size": 1e400'),
    "text-config-list": cfg(text_config=[1]),
}
for label, content in MODEL_CONFIGS.items():
    add(Case(f"model-config-{label}", PLAN_ARGS, {2}, {"m.json": content}))
add(Case("model-config-million-layers", PLAN_ARGS, {1, 2}, {"m.json": cfg(num_hidden_layers=1_000_000)}))
for label, planted in (("fifo", FIFO), ("dir", DIR), ("loop", LOOP), ("dev-zero", link("/dev/zero"))):
    add(Case(f"model-config-{label}", PLAN_ARGS, {2}, {"m.json": planted}))
for label, extra in {
    "micro-0": ["per_device_train_batch_size=0"],
    "micro-true": ["per_device_train_batch_size=true"],
    "unknown-optim": ["optim=adamq"],
    "seq-negative": ["seq_len=-1"],
    "seq-1e400": ["seq_len=1e400"],
    "bad-regex": ["method=lora", "lora_target_modules=(unclosed"],
    "lora-r-0": ["method=lora", "lora_r=0"],
    "num-generations-0": ["method=grpo", "num_generations=0"],
    "unknown-key": ["per_device_batch=2"],
    "stray-word": ["hello"],
    "deepspeed-zero4": ["deepspeed=zero4"],
}.items():
    add(Case(f"model-args-{label}", [*PLAN_ARGS, *extra], {2}, {"m.json": cfg()}))
for label, argv in {
    "gpus-0": ["plan", "--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "0"],
    "gpus-negative": ["plan", "--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "-8"],
    "gpus-text": ["plan", "--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "eight"],
    "nodes-0": [*PLAN_ARGS[:1], "--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "8", "--nodes", "0"],
    "unknown-gpu": ["plan", "--model-config", LLAMA, "--gpu", "a100-81g", "--gpus", "8"],
    "stage-4-file": ["plan", "--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "8", "--deepspeed", "s4.json"],
    "unknown-optimizer-file": ["plan", "--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "8", "--deepspeed", "opt.json"],
    "deepspeed-dev-zero": ["plan", "--model-config", LLAMA, "--gpu", "a100-80g", "--gpus", "8", "--deepspeed", "/dev/zero"],
    "plot-not-png": ["plan", RECIPE, "--plot", "x.jpg"],
    "plot-missing-folder": ["plan", RECIPE, "--plot", "nope/x.png"],
    "two-recipes": ["plan", RECIPE, LORA],
}.items():
    add(Case(f"plan-flags-{label}", argv, {2}, {"s4.json": ds(zero_optimization__stage=4), "opt.json": ds(optimizer={"type": "AdamQ"})}))

# ------------------------------------------------------------------ 7. doctor: logs as files that never end, and logs with wild numbers

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 79.15 GiB of which 1.50 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch\n"
)
for label, planted, expect in [
    ("fifo", FIFO, {2}),
    ("dev-zero", link("/dev/zero"), {2}),
    ("dir", DIR, {2}),
    ("loop", LOOP, {2}),
    ("missing", None, {2}),
    ("binary", bytes(range(256)) * 64, {0}),
    ("latin1", "caf\xe9\n".encode("latin-1") * 100, {0}),
    ("empty", "", {0}),
    ("long-line", "x" * 5_000_000, {0}),
    ("oom", OOM, {0}),
    (
        "huge-numbers",
        OOM.replace("2.00 GiB", "1e300 GiB").replace("79.15", "1e308")
        + "per_device_train_batch_size=1000000000000 gradient_accumulation_steps=1000000000000 world_size=1000000000000 "
        "num_generations=999999999999 max_completion_length=100000000000000\n",
        {0},
    ),
    ("nul-bytes", b"\x00" * 100000 + OOM.encode(), {0}),
    ("many-lines", "ok\n" * 200000 + OOM, {0}),
]:
    add(Case(f"doctor-{label}", ["doctor", "crash.log"], expect, {"crash.log": planted} if planted is not None else {}))
    add(Case(f"doctor-{label}-json", ["doctor", "crash.log", "--json"], expect, {"crash.log": planted} if planted is not None else {}))
add(Case("doctor-too-long-path", ["doctor", LONG], {2}))
add(Case("doctor-stdin", ["doctor", "-"], {0}, stdin=OOM.encode()))
add(Case("doctor-recipe-missing", ["doctor", "crash.log", "--recipe", "no-such-recipe"], {2}, {"crash.log": OOM}))

# ------------------------------------------------------------------ 8. review: scripts and configs as people pass them

SCRIPT = "#!/bin/bash\ntorchrun --nproc_per_node 8 train.py --model_name_or_path meta-llama/Llama-3.2-3B --deepspeed ds.json --per_device_train_batch_size 4 --bf16 true\n"
for label, planted, argv, expect in [
    ("fifo", {"run.sh": FIFO}, ["review", "run.sh"], {2}),
    ("dev-zero", {}, ["review", "/dev/zero"], {2}),
    ("dir", {}, ["review", "recipes"], {2}),
    ("loop", {"run.sh": LOOP}, ["review", "run.sh"], {2}),
    ("missing", {}, ["review", "nope.sh"], {2}),
    ("too-long", {}, ["review", LONG], {2}),
    ("latin1-script", {"run.sh": SCRIPT.encode() + b"# caf\xe9\n"}, ["review", "run.sh"], {2}),
    ("five-megabytes", {"run.sh": SCRIPT + "#" * 5_000_000}, ["review", "run.sh"], {2}),
    ("duplicate-json", {"ds.json": '{"train_batch_size": 8, "train_batch_size": 16}'}, ["review", "ds.json"], {2}),
    ("alias-bomb", {"c.yaml": BOMB}, ["review", "c.yaml"], {2}),
    ("deep-json", {"ds.json": "[" * 100000 + "]" * 100000}, ["review", "ds.json"], {2}),
    ("1e400-json", {"ds.json": '{"train_batch_size": 1e400}'}, ["review", "ds.json"], {2}),
    ("script-names-fifo", {"run.sh": SCRIPT, "ds.json": FIFO}, ["review", "run.sh"], {2}),
    ("script-names-dev-zero", {"run.sh": SCRIPT.replace("ds.json", "/dev/zero")}, ["review", "run.sh"], {0, 1, 2, 3}),
    ("script-names-loop", {"run.sh": SCRIPT, "ds.json": LOOP}, ["review", "run.sh"], {2}),
    ("micro-0", {"run.sh": SCRIPT.replace("batch_size 4", "batch_size 0")}, ["review", "run.sh"], {0, 1, 2, 3}),
    ("payload", {"run.sh": SCRIPT.replace("train.py", "train.py $(touch PWNED) `touch PWNED`")}, ["review", "run.sh"], {0, 1, 2, 3}),
    ("unknown-suffix", {"notes.txt": "hello"}, ["review", "notes.txt"], {2}),
    ("model-config-fifo", {"run.sh": SCRIPT, "m.json": FIFO}, ["review", "run.sh", "--model-config", "m.json"], {2}),
    ("model-config-dev-zero", {"run.sh": SCRIPT}, ["review", "run.sh", "--model-config", "/dev/zero"], {2}),
    ("model-config-list", {"run.sh": SCRIPT, "m.json": "[1]"}, ["review", "run.sh", "--model-config", "m.json"], {2}),
    ("model-config-duplicate", {"run.sh": SCRIPT, "m.json": '{"a": 1, "a": 2}'}, ["review", "run.sh", "--model-config", "m.json"], {2}),
    ("empty-script", {"run.sh": ""}, ["review", "run.sh"], {2}),
    ("binary-script", {"run.sh": b"#!/bin/sh\n" + bytes(range(256))}, ["review", "run.sh"], {2}),
]:
    add(Case(f"review-{label}", argv, expect, planted))

# ------------------------------------------------------------------ 9. where a run writes


def unchanged(rel: str, content: str):
    def check(tree: Path, result) -> None:
        assert (tree / rel).read_text() == content, f"{rel} was overwritten"

    return check


DRY = ["run", RECIPE, "--dry-run"]
add(
    Case(
        "write-dry-run-over-users-deepspeed-json",
        [*DRY, "--run-dir", "mine"],
        {2},
        {"mine/deepspeed.json": '{"mine": 1}'},
        must=unchanged("mine/deepspeed.json", '{"mine": 1}'),
    ),
    Case("write-dry-run-over-users-env-json", [*DRY, "--run-dir", "mine"], {2}, {"mine/env.json": "{}"}, must=unchanged("mine/env.json", "{}")),
    Case("write-dry-run-users-notes", [*DRY, "--run-dir", "mine"], {2}, {"mine/notes.txt": "keep"}, must=unchanged("mine/notes.txt", "keep")),
    Case(
        "write-dry-run-overwrite-never-moves",
        [*DRY, "--run-dir", "mine", "--overwrite"],
        {2},
        {"mine/notes.txt": "keep"},
        must=unchanged("mine/notes.txt", "keep"),
    ),
    Case(
        "write-smoke-dry-run-users-files",
        ["run", RECIPE, "--smoke", "--dry-run", "--run-dir", "mine"],
        {2},
        {"mine/config.json": "{}"},
        must=unchanged("mine/config.json", "{}"),
    ),
    Case("write-run-dir-root", [*DRY, "--run-dir", "/"], {2}),
    Case("write-run-dir-cwd", [*DRY, "--run-dir", "."], {2}),
    Case("write-run-dir-parent", [*DRY, "--run-dir", ".."], {2}),
    Case("write-run-dir-home", [*DRY, "--run-dir", os.path.expanduser("~")], {2}),
    Case("write-run-dir-is-file", [*DRY, "--run-dir", "afile"], {2}, {"afile": "x"}, must=unchanged("afile", "x")),
    Case("write-run-dir-under-file", [*DRY, "--run-dir", "afile/sub"], {2}, {"afile": "x"}),
    Case("write-run-dir-too-long", [*DRY, "--run-dir", "d/" * 2100], {2}),
    Case("write-run-dir-fresh", [*DRY, "--run-dir", "runs/fresh"], {0}, allowed=("runs/fresh",), must=lambda tree, r: _paste_safe(r.out)),
    Case("write-run-dir-empty-existing", [*DRY, "--run-dir", "emptydir"], {0}, {"emptydir": DIR}, allowed=("emptydir",)),
    Case("write-port-70000", [*DRY, "--master-port", "70000"], {2}),
    Case("write-port-0", [*DRY, "--master-port", "0"], {2}),
    Case("write-port-negative", [*DRY, "--master-port", "-1"], {2}),
    Case("write-port-text", [*DRY, "--master-port", "http"], {2}),
    Case("write-join-timeout-0", [*DRY, "--join-timeout", "0"], {2}),
    Case("write-join-timeout-huge", [*DRY, "--join-timeout", "99999999999999"], {2}),
    Case("write-node-rank-negative", [*DRY, "--node-rank", "-1"], {2}),
    Case("write-smoke-nodes-3", ["run", RECIPE, "--smoke", "--dry-run", "--nodes", "3"], {2}),
    Case("write-nodes-without-smoke", [*DRY, "--nodes", "2"], {2}),
    Case("write-resume-and-overwrite", ["run", RECIPE, "--resume", "--overwrite", "--run-dir", "r"], {2}),
    Case("write-slurm-port-70000", ["slurm", RECIPE, "--master-port", "70000"], {2}),
    Case(
        "write-hostfile-fifo",
        ["run", "sharegpt4v-7b-16xa100-80g", "--dry-run", "--hostfile", "hf", "--run-dir", "runs/h"],
        {0, 2},
        {"hf": FIFO},
        allowed=("runs/h",),
    ),
    Case(
        "write-hostfile-dev-zero",
        ["run", "sharegpt4v-7b-16xa100-80g", "--dry-run", "--hostfile", "/dev/zero", "--run-dir", "runs/h"],
        {0, 2},
        allowed=("runs/h",),
    ),
    Case(
        "write-hostfile-binary",
        ["run", "sharegpt4v-7b-16xa100-80g", "--dry-run", "--hostfile", "hf", "--run-dir", "runs/h"],
        {0, 2},
        {"hf": b"\xff\xfe" * 1000},
        allowed=("runs/h",),
    ),
)


def _paste_safe(out: str) -> None:
    """The environment block is `export NAME=<one shell word>` lines; the quoted argv splits back to the JSON argv."""
    block = out.split("## environment (added to the inherited one)\n", 1)[1].split("\n\n## ", 1)[0]
    words = shlex.split(block)
    assert words[0::2] == ["export"] * (len(words) // 2) and len(words) % 2 == 0, block
    for word in words[1::2]:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word, re.S), word
    lines = out.splitlines()
    argv = json.loads(lines[lines.index("## command (argv)") + 1])
    assert shlex.split(lines[lines.index("## the same, quoted for a shell") + 1]) == argv


add(
    Case(
        "paste-env-value-with-payload",
        [*DRY, "--run-dir", "runs/p", "env.NCCL_DEBUG=$(touch PWNED); `id`\nX=1"],
        {0},
        allowed=("runs/p",),
        must=lambda tree, r: _paste_safe(r.out),
    )
)
add(Case("paste-override-with-quotes-slurm", ["slurm", RECIPE, 'summary=it\'s "quoted" $(id)'], {0}, must=lambda tree, r: _slurm_safe(r.out)))


def _slurm_safe(out: str) -> None:
    run_line = next(line for line in out.splitlines() if '"$vramfit" run' in line)
    words = shlex.split(run_line)
    assert 'summary=it\'s "quoted" $(id)' in words, run_line
    assert not any(line.startswith("#SBATCH") and "$(" in line for line in out.splitlines())


# ------------------------------------------------------------------ 10. cp and slurm flags

for label, name, expect in [
    ("trailing-newline", "vlm-r1-4xa100-40g\n", {2}),
    ("leading-dotdot", "../evil-h20", {2}),
    ("slash", "a/b-h20", {2}),
    ("uppercase", "VLM-h20", {2}),
    ("no-gpu", "vlm-r1", {2}),
    ("existing", RECIPE, {2}),
    ("empty", "", {2}),
    ("nul", "vlm-r1-h20x\x00", {2}),
    ("space", "vlm r1-h20", {2}),
    ("very-long", "a" * 300 + "-h20", {2}),
]:
    add(Case(f"cp-{label}", ["cp", RECIPE, name], expect))
add(Case("cp-missing-source", ["cp", "no-such-recipe", "copy-of-nothing-h20"], {2}))
add(
    Case(
        "cp-ok",
        ["cp", RECIPE, "vlm-r1-copy-h20"],
        {0},
        allowed=("recipes/vlm-r1-copy-h20",),
        must=lambda tree, r: (tree / "recipes/vlm-r1-copy-h20/recipe.yaml").is_file() and not list((tree / "recipes").glob(".*tmp")),
    )
)
for label, flags in [
    ("time-newline", ["--time", "1:00:00\n#SBATCH --wrap=id"]),
    ("time-text", ["--time", "soon"]),
    ("partition-space", ["--partition", "a b"]),
    ("partition-newline", ["--partition", "gpu\n"]),
    ("account-subshell", ["--account", "$(id)"]),
    ("two-recipes", [LORA]),
]:
    add(Case(f"slurm-{label}", ["slurm", RECIPE, *flags], {2}))

# ------------------------------------------------------------------ 11. usage

for label, argv in [
    ("no-command", []),
    ("unknown-command", ["frobnicate"]),
    ("unknown-flag", ["validate", "--frob"]),
    ("show-nothing", ["show"]),
    ("run-nothing", ["run"]),
    ("show-two", ["show", RECIPE, LORA]),
]:
    add(Case(f"usage-{label}", argv, {2}))


# ------------------------------------------------------------------ the runner


def plant(tree: Path, files: dict) -> None:
    for rel, content in files.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            path.unlink()
        if isinstance(content, Special):
            if content.kind == "fifo":
                os.mkfifo(path)
            elif content.kind == "dir":
                path.mkdir()
            elif content.kind == "loop":
                os.symlink(path.name, path)
            elif content.kind == "link":
                os.symlink(content.target, path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_adversarial(case: Case, sandbox: Path):
    plant(sandbox, case.files)
    result = invoke(sandbox, case.argv, allowed=case.allowed, stdin=case.stdin)
    text = result.out + result.err
    assert "Traceback" not in text, text[-3000:]
    assert result.code in DOCUMENTED, (result.code, text[-2000:])
    assert result.code in case.expect, (result.code, text[-2000:])
    assert result.changed == [], f"files changed outside the allowed paths: {result.changed[:5]}"
    assert not (sandbox / "PWNED").exists()
    if result.code == 2:
        assert text.strip(), "exit 2 says why"
    if case.must:
        case.must(sandbox, result)


def test_corpus_size():
    assert len(CASES) >= 200, len(CASES)
