"""Reading the three data formats: every record checked, a bad one named by file and line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vramfit.train import data
from vramfit.train.data import DataError

from train_support import REPO, relative, write_run


@pytest.fixture
def recipe_with(smoke_recipe, tmp_path):
    """recipe_with(name, text, suffix) -> the smoke recipe reading `text` as its training file."""

    def make(name: str, text: str, suffix: str):
        path = tmp_path / f"train{suffix}"
        path.write_text(text)
        return smoke_recipe(name, f"data.train_file={path}")

    return make


def _error(recipe) -> str:
    with pytest.raises(DataError) as info:
        data.read(recipe)
    return str(info.value)


LLAVA = "sharegpt4v-7b-8xa100-40g"


def test_llava_json_reads_conversations(smoke_recipe):
    records = data.read(smoke_recipe(LLAVA))
    first = records[0]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    assert first["messages"][0]["content"][0] == {"type": "image"}
    assert first["messages"][0]["content"][1]["text"] == "What colour is the square?"
    assert first["images"][0].is_file()


def test_llava_json_names_record_and_line(recipe_with, smoke_recipe):
    good = json.loads(smoke_recipe(LLAVA).path(smoke_recipe(LLAVA).data.train_file).read_text())[:2]
    bad = {"id": "x", "image": good[0]["image"], "conversations": [{"from": "human", "value": "<image>\nhi"}, {"from": "robot", "value": "?"}]}
    text = json.dumps(good, indent=1)[:-2] + ",\n" + json.dumps(bad, indent=1) + "\n]"
    line = text[: text.index('"id": "x"')].count("\n")  # the line the record's "{" is on
    message = _error(recipe_with(LLAVA, text, ".json"))
    assert f"train.json: record 2 (line {line}): conversations[1] must be {{from: human|gpt" in message


@pytest.mark.parametrize(
    "record, what",
    [
        ({"id": 1, "image": "nope.png", "conversations": [{"from": "human", "value": "<image>\nq"}, {"from": "gpt", "value": "a"}]}, "does not exist"),
        ({"id": 1, "conversations": [{"from": "human", "value": "<image>\nq"}, {"from": "gpt", "value": "a"}]}, "1 <image> placeholder(s) for 0 image(s)"),
        ({"id": 1, "conversations": [{"from": "human", "value": "q"}]}, "must end with a gpt turn"),
        ({"id": 1, "conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": "q"}]}, "turns must alternate"),
        ({"id": 1}, "expected {id, image, conversations"),
    ],
)
def test_llava_json_rejects(recipe_with, record, what):
    assert what in _error(recipe_with(LLAVA, json.dumps([record]), ".json"))


def test_llava_json_syntax_error_names_the_record(recipe_with):
    good = json.dumps({"id": 0, "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]})
    assert "record 1 (line 2): not valid JSON" in _error(recipe_with(LLAVA, f'[{good},\n {{"id": 1,,}}]', ".json"))


def test_chat_jsonl_names_the_line(recipe_with):
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
    text = f"{good}\n\n{good}\n" + json.dumps({"messages": [{"role": "user", "content": "no answer"}]}) + "\n"
    assert "train.jsonl: line 4: no assistant message" in _error(recipe_with("axolotl-llama-3b-8xa100-80g", text, ".jsonl"))
    assert "line 1: not valid JSON" in _error(recipe_with("axolotl-llama-3b-8xa100-80g", "{oops\n", ".jsonl"))


def test_rec_jsonl(recipe_with, smoke_recipe):
    recipe = smoke_recipe("vlm-r1-h20")
    records = data.read(recipe)
    assert len(records[0]["solution"]) == 4 and records[0]["image"].is_file()
    image = records[0]["image"].name
    bad = json.dumps({"image": image, "problem": "the cat", "solution": [10, 10, 5, 20]})
    assert "line 1: solution [10, 10, 5, 20] is not a box" in _error(recipe_with("vlm-r1-h20", bad, ".jsonl"))
    bad = json.dumps({"image": image, "problem": "the cat", "solution": "10,10,20,20"})
    assert "solution must be [x1, y1, x2, y2] numbers" in _error(recipe_with("vlm-r1-h20", bad, ".jsonl"))


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
def test_entrypoint_exits_2_before_training(smoke_recipe, tmp_path):
    """A malformed record stops the run with exit code 2 and the record's place, before any training."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}\n{"messages": 3}\n')
    run_dir = write_run("axolotl-llama-3b-8xa100-80g", tmp_path / "run", [f"data.train_file={relative(bad)}"])
    result = subprocess.run([sys.executable, "-m", "vramfit.train", f"--run-dir={run_dir}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"vramfit: {bad}: line 2: expected" in result.stderr
    assert not list((run_dir / "output").glob("checkpoint-*"))
