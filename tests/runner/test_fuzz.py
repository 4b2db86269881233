"""Bad input, fuzzed: mutated recipe YAML, overrides and DeepSpeed JSON never produce a traceback;
every invalid input exits 2 with a message, and nothing is launched or written.

The counts of what was tried and rejected are printed (pytest -s) for the closing notes."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from vramfit.cli import main

REPO = Path(__file__).resolve().parents[2]
RECIPE = "vlm-r1-h20"
TALLY: Counter = Counter()

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["auto", "8", "1e-5", "ü🚀", "$(touch CANARY)", "a;b", "`id`", "x\ny", "'\"", "../../etc/passwd", ""]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=12), inner, max_size=3)), max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))


def _mutate(doc, data):
    """Replace, delete or add a key at a random place in a parsed document."""
    paths = [p for p in _paths(doc) if p]
    path = data.draw(st.sampled_from(paths))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "replace":
        parent[path[-1]] = data.draw(values)
    elif action == "delete":
        del parent[path[-1]]
    else:
        target = parent if isinstance(parent, dict) else doc
        target[data.draw(st.text(min_size=1, max_size=20))] = data.draw(values)
    return action


def _check(tree, capsys, argv):
    run_dir = tree / "runs" / "fuzz"
    shutil.rmtree(run_dir, ignore_errors=True)  # an earlier accepted example may have written it
    code = main([*argv, "--run-dir", str(run_dir)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    assert not (tree / "CANARY").exists()
    if code == 0:
        TALLY["accepted"] += 1
        return
    TALLY["rejected"] += 1
    assert code == 2, out.err
    assert "nothing was launched or written" in out.err and out.err.strip()
    assert not run_dir.exists()


# derandomize: CI runs the same examples every time, so a failure there reproduces here.
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


FORMATS = {"yaml": (yaml.safe_load, lambda doc: yaml.safe_dump(doc, allow_unicode=True)), "json": (json.loads, lambda doc: json.dumps(doc, allow_nan=True))}


def _fuzz_file(tree, capsys, data, relative: str, kind: str) -> None:
    """Mutate one file of the tree, run the runner on it, and put the file back."""
    path = tree / relative
    original = path.read_text()
    load, dump = FORMATS[kind]
    doc = load(original)
    TALLY[f"{kind}:" + _mutate(doc, data)] += 1
    try:
        path.write_text(dump(doc))
        _check(tree, capsys, ["run", RECIPE, "--dry-run"])
    finally:
        path.write_text(original)


@FUZZ
@given(data=st.data())
def test_fuzzed_recipe_yaml(tree, capsys, data):
    _fuzz_file(tree, capsys, data, f"recipes/{RECIPE}/recipe.yaml", "yaml")


@FUZZ
@given(data=st.data())
def test_fuzzed_deepspeed_json(tree, capsys, data):
    _fuzz_file(tree, capsys, data, "deepspeed_configs/zero3.json", "json")


override_keys = st.sampled_from(
    [
        "per_device_train_batch_size",
        "learning_rate",
        "num_generations",
        "hardware.gpu",
        "hardware.gpus_per_node",
        "data.max_pixels",
        "model.train.vision_tower",
        "env.X",
        "deepspeed",
        "global_batch_size",
        "model",
        "training",
        "a.b.c",
        "",
        "1abc",
        "model.lora.r",
    ]
)


@FUZZ
@given(key=override_keys, value=st.one_of(st.text(max_size=30), scalars.map(str)))
def test_fuzzed_overrides(tree, capsys, key, value):
    TALLY["override"] += 1
    _check(tree, capsys, ["run", RECIPE, f"{key}={value}", "--dry-run"])


RAW = [b"", b"\x00\xff\xfe garbage", b"{[", "ñame: ü\n".encode(), b"- a\n- b\n", b"name: [unclosed\n", b"\t\tname: x\n"]


@pytest.mark.parametrize("content", RAW, ids=range(len(RAW)))
@pytest.mark.parametrize("target", ["recipe", "deepspeed"])
def test_broken_files(tree, capsys, content, target):
    path = tree / ("recipes/vlm-r1-h20/recipe.yaml" if target == "recipe" else "deepspeed_configs/zero3.json")
    path.write_bytes(content)
    TALLY["broken-file"] += 1
    _check(tree, capsys, ["run", RECIPE, "--dry-run"])


def test_directory_where_a_file_belongs(tree, capsys):
    (tree / "deepspeed_configs" / "zero3.json").unlink()
    (tree / "deepspeed_configs" / "zero3.json").mkdir()
    _check(tree, capsys, ["run", RECIPE, "--dry-run"])
    (tree / "recipes" / "vlm-r1-h20" / "recipe.yaml").unlink()
    (tree / "recipes" / "vlm-r1-h20" / "recipe.yaml").mkdir()
    _check(tree, capsys, ["run", RECIPE, "--dry-run"])


def test_report_tally(capsys):
    """Runs after the fuzz tests of this module (same process): every example was judged, both ways."""
    if not TALLY:
        pytest.skip("the fuzz tests ran in another process (pytest-xdist) or were deselected: nothing to tally")
    with capsys.disabled():
        print(f"\nfuzz tally: {dict(sorted(TALLY.items()))}")
    mutated = sum(v for k, v in TALLY.items() if k.startswith(("yaml:", "json:")))
    assert TALLY["accepted"] + TALLY["rejected"] >= mutated + TALLY["override"] + TALLY["broken-file"]
    assert TALLY["accepted"] > 0, "no fuzzed variant was accepted: the runner refuses everything"
    assert TALLY["rejected"] >= TALLY["broken-file"] > 0, "a broken file was accepted"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "overrides",
    [["global_batch_size=1000000000000"], ["global_batch_size=999999999990"], ["per_device_train_batch_size=1000000000000", "global_batch_size=8000000000000"]],
)
def test_absurd_batch_sizes_are_refused_quickly(tree, capsys, overrides):
    """Found by the fuzzer: the batch fix searched every integer up to global_batch_size (minutes)."""
    _check(tree, capsys, ["run", RECIPE, "--dry-run", *overrides])
