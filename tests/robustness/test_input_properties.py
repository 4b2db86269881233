"""Property-based harness: inputs generated from the schemas themselves, for every command and file type.

Strategies are derived, not hand-listed: recipe values from the pydantic models' annotations and
bounds (vramfit.recipe), overrides from the training arguments' own field names (TRL / transformers
dataclasses), DeepSpeed JSONs by mutating the shipped presets with values of each key's type and
beyond, model configs from the size keys the model-config check bounds, logs from the doctor's own
test logs cut and spliced with wild numbers, launch scripts from TrainingArguments flags.

Each example runs in a private copy of the tree and asserts: exit code in {0, 1, 2, 3} (70 would be a
bug), no traceback, under 30 s, the process's peak RSS under 2 GiB above where it started, and no file
outside the run's own folder created or changed. Hypothesis's database is off (nothing written into
the repository) and examples are derandomized, so CI reproduces them.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import typing
from contextlib import contextmanager
from pathlib import Path

import yaml
from harness import REPO, TREE, invoke
from hypothesis import HealthCheck, Phase, given, settings, strategies as st
from pydantic import BaseModel

# VRAMFIT_FUZZ_EXAMPLES=200 for a longer hunt (random, not derandomized); CI runs 12 per property.
EXAMPLES = int(os.environ.get("VRAMFIT_FUZZ_EXAMPLES", "12"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=EXAMPLES == 12,
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: a failing example is shown as drawn
    suppress_health_check=list(HealthCheck),
)
EXPECTED = {0, 1, 2, 3}
RSS_BUDGET_KIB = 2 * 1024 * 1024
RECIPES = sorted(p.name for p in (REPO / "recipes").iterdir() if (p / "recipe.yaml").is_file())
START_RSS = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

_PRISTINE: Path | None = None


def _pristine() -> Path:
    global _PRISTINE
    if _PRISTINE is None:
        _PRISTINE = Path(tempfile.mkdtemp(prefix="vramfit-props-"))
        for name in TREE:
            shutil.copytree(REPO / name, _PRISTINE / name, symlinks=True)
    return _PRISTINE


@contextmanager
def sandbox():
    folder = Path(tempfile.mkdtemp(prefix="vramfit-case-"))
    tree = folder / "tree"
    shutil.copytree(_pristine(), tree, symlinks=True)
    cwd = os.getcwd()
    os.chdir(tree)
    old = os.environ.get("VRAMFIT_CACHE_DIR")
    os.environ["VRAMFIT_CACHE_DIR"] = str(folder / "cache")
    try:
        yield tree
    finally:
        os.chdir(cwd)
        if old is None:
            os.environ.pop("VRAMFIT_CACHE_DIR", None)
        else:
            os.environ["VRAMFIT_CACHE_DIR"] = old
        shutil.rmtree(folder, ignore_errors=True)


def check(tree: Path, argv: list[str], allowed=("runs/p",), stdin: bytes | None = None):
    result = invoke(tree, argv, allowed=allowed, stdin=stdin)
    text = result.out + result.err
    assert "Traceback" not in text, text[-3000:]
    assert result.code in EXPECTED, (result.code, text[-2000:])
    assert result.seconds < 30
    assert result.changed == [], result.changed[:5]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - START_RSS < RSS_BUDGET_KIB
    return result


# ------------------------------------------------------------------ values, from annotations

JUNK = st.sampled_from(["", "auto", "$(touch PWNED)", "a\nb", "1e400", "-1", "0", "true", "ü🚀", "../../etc/passwd", "\t", "null"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), JUNK)
ANY = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)), max_leaves=5)


def _bounds(metadata) -> list[float]:
    edges = []
    for m in metadata:
        for name in ("gt", "ge", "lt", "le"):
            v = getattr(m, name, None)
            if v is not None:
                edges += [v - 1, v, v + 1]
    return edges


def for_annotation(annotation, metadata=()) -> st.SearchStrategy:
    """A strategy for a field: values of its type (edges of its bounds included), and values of other types."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    near = st.sampled_from(_bounds(metadata)) if _bounds(metadata) else st.nothing()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        own = model_strategy(annotation)
    elif origin is typing.Literal:
        own = st.sampled_from(list(args))
    elif origin is typing.Union:
        own = st.one_of(*[for_annotation(a) for a in args])
    elif annotation is bool:
        own = st.booleans()
    elif annotation is int:
        own = st.one_of(st.integers(-5, 5000), near.map(int))
    elif annotation is float:
        own = st.one_of(st.floats(allow_nan=True, allow_infinity=True), near.map(float))
    elif annotation is str:
        own = st.one_of(st.text(max_size=30), JUNK)
    elif origin in (list, dict):
        own = ANY
    else:
        own = ANY
    return st.one_of(own, own, SCALARS)


def model_strategy(model: type[BaseModel]) -> st.SearchStrategy:
    fields = {n: f for n, f in model.model_fields.items() if n != "source"}
    return st.fixed_dictionaries({}, optional={n: for_annotation(f.annotation, f.metadata) for n, f in fields.items()})


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


@st.composite
def mutated_recipe(draw):
    """A shipped recipe with 1-3 keys replaced by values drawn from their own schema field, or deleted."""
    from vramfit import recipe as schema

    name = draw(st.sampled_from(RECIPES))
    data = yaml.safe_load((REPO / "recipes" / name / "recipe.yaml").read_text())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(_paths(data))))
        parent = data
        for k in path[:-1]:
            parent = parent[k]
        model, annotation, metadata = schema.Recipe, None, ()
        for k in path:
            field = model.model_fields.get(k) if model else None
            annotation, metadata = (field.annotation, field.metadata) if field else (None, ())
            model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        if draw(st.integers(0, 9)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(for_annotation(annotation, metadata) if annotation is not None else ANY)
    return name, data


def _training_fields() -> list[str]:
    from vramfit.checks.training_args import fields_for

    return sorted(set(fields_for("grpo")) | set(fields_for("full")))


@st.composite
def overrides(draw):
    from vramfit.recipe import TOP_LEVEL

    keys = st.one_of(
        st.sampled_from(_training_fields()),
        st.sampled_from(TOP_LEVEL),
        st.sampled_from(["hardware.gpus_per_node", "hardware.nodes", "data.max_length", "model.lora.r", "env.X"]),
        st.text(min_size=1, max_size=12),
    )
    values = st.one_of(st.integers(-2, 2**40).map(str), JUNK, st.text(max_size=20), st.sampled_from(["[1]", "{a: 1}", ".inf", "1e400"]))
    return [f"{draw(keys)}={draw(values)}" for _ in range(draw(st.integers(1, 3)))]


# ------------------------------------------------------------------ the properties


@SETTINGS
@given(case=mutated_recipe(), command=st.sampled_from(["validate", "plan", "dry-run", "slurm", "doctor"]))
def test_recipes(case, command):
    name, data = case
    with sandbox() as tree:
        (tree / "recipes" / name / "recipe.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
        (tree / "empty.log").write_text("")
        argv = {
            "validate": ["validate", name, "--no-plan"],
            "plan": ["plan", name],
            "dry-run": ["run", name, "--dry-run", "--run-dir", "runs/p"],
            "slurm": ["slurm", name],
            "doctor": ["doctor", "empty.log", "--recipe", name],
        }[command]
        check(tree, argv)
        assert not (tree / "PWNED").exists()


@SETTINGS
@given(items=overrides(), recipe=st.sampled_from(RECIPES), command=st.sampled_from(["validate", "plan", "dry-run", "slurm"]))
def test_overrides(items, recipe, command):
    with sandbox() as tree:
        argv = {
            "validate": ["validate", recipe, "--no-plan"],
            "plan": ["plan", recipe],
            "dry-run": ["run", recipe, "--dry-run", "--run-dir", "runs/p"],
            "slurm": ["slurm", recipe],
        }[command]
        check(tree, [*argv, *items])


def _like(value) -> st.SearchStrategy:
    """Values of a JSON value's own type (and a few of other types)."""
    if isinstance(value, bool):
        own = st.booleans()
    elif isinstance(value, int):
        own = st.integers(-2, 2**62)
    elif isinstance(value, float):
        own = st.floats(allow_nan=False, allow_infinity=False)
    elif isinstance(value, str):
        own = st.one_of(st.just("auto"), st.text(max_size=12), st.sampled_from(["cpu", "nvme", "none", "AdamQ"]))
    else:
        own = ANY.filter(lambda v: not isinstance(v, float))
    return st.one_of(own, own, st.none(), st.integers(-3, 5), st.sampled_from([[], {}, "x"]))


@st.composite
def deepspeed_json(draw):
    name = draw(st.sampled_from(sorted(p.name for p in (REPO / "deepspeed_configs").glob("*.json"))))
    data = json.loads((REPO / "deepspeed_configs" / name).read_text())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(_paths(data))))
        parent = data
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = draw(_like(parent[path[-1]]))
    text = json.dumps(data)
    if draw(st.integers(0, 5)) == 0:  # a duplicate key, as a hand edit leaves it
        text = text.replace("{", '{"zero_optimization": {}, ', 1)
    return name, text


@SETTINGS
@given(case=deepspeed_json(), command=st.sampled_from(["validate", "plan", "dry-run", "model-config"]))
def test_deepspeed_jsons(case, command):
    name, text = case
    with sandbox() as tree:
        (tree / "deepspeed_configs" / name).write_text(text)
        recipe = (
            next(r for r in RECIPES if f"deepspeed_configs/{name}" in (REPO / "recipes" / r / "recipe.yaml").read_text())
            if any(f"deepspeed_configs/{name}" in (REPO / "recipes" / r / "recipe.yaml").read_text() for r in RECIPES)
            else RECIPES[0]
        )
        argv = {
            "validate": ["validate", recipe, "--no-plan"],
            "plan": ["plan", recipe],
            "dry-run": ["run", recipe, "--dry-run", "--run-dir", "runs/p"],
            "model-config": [
                "plan",
                "--model-config",
                "model_configs/llama-3.2-3b.json",
                "--gpu",
                "a100-80g",
                "--gpus",
                "8",
                "--deepspeed",
                f"deepspeed_configs/{name}",
            ],
        }[command]
        check(tree, argv)


@st.composite
def model_config(draw):
    from vramfit.checks.model_config import MAX_SIZES

    name = draw(st.sampled_from(sorted(p.name for p in (REPO / "model_configs").glob("*.json"))))
    data = json.loads((REPO / "model_configs" / name).read_text())
    keys = sorted(set(MAX_SIZES) | set(data))
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(keys))
        if draw(st.integers(0, 4)) == 0:
            data.pop(key, None)
        else:
            data[key] = draw(st.one_of(st.integers(-2, 2**40), SCALARS, st.just(10**6)))
    return data


@SETTINGS
@given(data=model_config(), method=st.sampled_from(["full", "lora", "grpo"]))
def test_model_configs(data, method):
    with sandbox() as tree:
        (tree / "m.json").write_text(json.dumps(data))
        check(tree, ["plan", "--model-config", "m.json", "--gpu", "a100-80g", "--gpus", "8", f"method={method}"])


LOGS = sorted((REPO / "tests" / "doctor" / "logs").glob("*.log"))
NUMBERS = st.one_of(st.integers(0, 10**15).map(str), st.sampled_from(["1e300", "nan", "inf", "-0", "99999999999999999999"]))


@st.composite
def log_text(draw):
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        source = draw(st.sampled_from(LOGS)).read_bytes().splitlines()
        start = draw(st.integers(0, max(0, len(source) - 1)))
        lines += source[start : start + draw(st.integers(1, 60))]
    text = b"\n".join(lines).decode("utf-8", "replace")
    digits = [i for i, ch in enumerate(text) if ch.isdigit()]
    for _ in range(min(len(digits), draw(st.integers(0, 8)))):
        i = draw(st.sampled_from(digits))
        text = text[:i] + draw(NUMBERS) + text[i + 1 :]
    if draw(st.booleans()):
        text += draw(st.text(max_size=200))
    return text.encode("utf-8", "surrogatepass") if draw(st.booleans()) else text.encode("latin-1", "replace")


@SETTINGS
@given(log=log_text(), recipe=st.sampled_from([None, *RECIPES]), as_json=st.booleans())
def test_logs(log, recipe, as_json):
    with sandbox() as tree:
        (tree / "crash.log").write_bytes(log)
        check(tree, ["doctor", "crash.log", *(["--recipe", recipe] if recipe else []), *(["--json"] if as_json else [])])


@st.composite
def launch_script(draw):
    fields = _training_fields()
    launcher = draw(st.sampled_from(["torchrun --nproc_per_node {n}", "deepspeed --num_gpus {n}", "accelerate launch --num_processes {n}", "python"]))
    flags = []
    for _ in range(draw(st.integers(0, 8))):
        key = draw(st.sampled_from(fields))
        flags.append(f"--{key} {draw(st.one_of(NUMBERS, JUNK.map(repr), st.sampled_from(['true', 'false', 'ds.json'])))}")
    model = draw(st.sampled_from(["Qwen/Qwen2.5-VL-3B-Instruct", "meta-llama/Llama-3.2-3B", "lmsys/vicuna-7b-v1.5", "unknown/model", ""]))
    n = draw(st.one_of(st.integers(-1, 64).map(str), JUNK))
    return (
        "#!/bin/bash\nset -e\n"
        + draw(st.sampled_from(["", "export NCCL_DEBUG=INFO\n", "GPUS=8\n"]))
        + launcher.format(n=n)
        + f" train.py --model_name_or_path {model} --deepspeed ds.json "
        + " \\\n  ".join(flags)
        + "\n"
    )


@SETTINGS
@given(script=launch_script(), ds=deepspeed_json(), gpu=st.sampled_from([None, "h20", "a100-80g"]))
def test_scripts(script, ds, gpu):
    with sandbox() as tree:
        (tree / "run.sh").write_text(script)
        (tree / "ds.json").write_text(ds[1])
        check(tree, ["review", "run.sh", *(["--gpu", gpu] if gpu else [])])
