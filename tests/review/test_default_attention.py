"""The attention a run gets depends on the transformers release its repository pins (review/default_attention.py):
eager where the pinned release runs the model without SDPA, both readings where the pin allows both, unchanged where
nothing is pinned."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramfit.review import default_attention
from vramfit.review.reviewer import review
from vramfit.review.versions import Pin, find_pin

from review_support import find

# DeepSpeed-Chat's step 1 shape (main.py defaults: 16 x 512 tokens, fp16) on one A100-40G, written as a Trainer script
OPT = "deepspeed --num_gpus 1 train.py --model_name_or_path facebook/opt-1.3b --per_device_train_batch_size 16 --model_max_length 512 --fp16 True --output_dir out"


def script(folder: Path, pin: str | None, command: str = OPT) -> str:
    if pin is not None:
        (folder / "requirements.txt").write_text(f"torch\ntransformers{pin}\n")
    path = folder / "run.sh"
    path.write_text(command + "\n")
    return str(path)


def test_every_entry_names_its_source_and_its_releases_in_order():
    minor = default_attention._minor
    assert {"llama", "opt", "gpt2", "bert", "mistral", "phi", "t5"} <= set(default_attention.TABLE)
    for model_type, entry in default_attention.TABLE.items():
        assert entry.model_type == model_type
        assert "wheel" in entry.source or "#" in entry.source, model_type  # a release read, or the pull request
        if entry.eager is not None:
            first, last = map(minor, entry.eager)
            assert first <= last < minor(entry.sdpa), model_type


@pytest.mark.parametrize(
    "model_type, op, version, expected",
    [
        ("opt", "==", "4.31.0", "eager"),
        ("opt", "==", "4.45.2", "eager"),
        ("opt", "==", "4.46.0", "sdpa"),
        ("opt", ">=", "4.31.0", "both"),
        ("opt", ">=", "4.46", "sdpa"),
        ("opt", "~=", "4.40.0", "eager"),  # ~=4.40.0: 4.40.x only
        ("opt", "<=", "4.40", "eager"),
        ("llama", "==", "4.37.2", "sdpa"),  # LLaVA's pin: Llama is SDPA from 4.36
        ("llama", "==", "4.34", "eager"),
        ("qwen2", "==", "4.34", None),  # no Qwen2 in 4.34: a pin older than the model decides nothing
        ("qwen2", ">=", "4.33", "sdpa"),  # every release with Qwen2 picks SDPA
        ("t5", "==", "4.45.2", "eager"),
        ("t5", "==", "5.10.0", None),  # between the releases read: unknown
        ("opt", "==", "4.28.0", None),  # before the releases read
        ("bloom", "==", "4.31.0", None),  # not in the table: the installed default, as before
    ],
)
def test_the_reading_under_a_pin(model_type, op, version, expected):
    assert default_attention.reading(model_type, Pin("transformers", op, version, "requirements.txt")) == expected
    assert default_attention.reading(model_type, None) is None


def test_an_upper_bound_beside_the_pin_is_read(tmp_path):
    (tmp_path / "requirements.txt").write_text("torch\ntransformers>=4.31.0,<4.36\n")
    pin = find_pin(tmp_path / "run.sh")
    assert pin.upper == ("<", "4.36") and str(pin) == "transformers>=4.31.0,<4.36 (requirements.txt)"
    assert default_attention.reading("llama", pin) == "eager"  # every allowed release is before Llama's SDPA (4.36)
    assert default_attention.reading("qwen2", pin) is None  # no allowed release has Qwen2


def test_a_vlm_is_read_by_its_text_model_and_remote_code_is_left_out():
    assert default_attention.text_model_type({"model_type": "llava", "text_config": {"model_type": "llama"}}) == "llama"
    assert default_attention.text_model_type({"model_type": "phi3", "auto_map": {"AutoModelForCausalLM": "x.Y"}}) is None


def test_a_pinned_release_with_eager_attention_is_planned_eager(tmp_path):
    result = review([script(tmp_path, "==4.31.0")], gpu="a100-40g", gpus=1)
    assert result.plan.setup.attention == "eager" and result.exit_code == 1
    [error] = find(result, key="--gpu", severity="error")
    assert "this repository pins transformers==4.31.0 (requirements.txt), where OPT's attention is eager" in error.what
    assert "exceeds" in error.what and "#33298" in error.what
    assert error.fix.startswith('pin transformers>=4.46 in requirements.txt (SDPA by default), or load the model with attn_implementation="sdpa"; or ')
    assert "--per_device_train_batch_size" in error.fix  # the planner's own fixes, re-planned with eager attention
    # --transformers-version says the same for a script with no pin
    other = tmp_path / "other"
    other.mkdir()
    flagged = review([script(other, None)], gpu="a100-40g", gpus=1, transformers_version="4.40.0")
    assert flagged.exit_code == 1 and find(flagged, key="--gpu", severity="error", text="planned under transformers==4.40.0 (--transformers-version)")


def test_a_lower_bound_pin_plans_both_readings_and_no_pin_plans_as_before(tmp_path):
    (tmp_path / "pinned").mkdir()
    (tmp_path / "free").mkdir()
    both = review([script(tmp_path / "pinned", ">=4.31.0")], gpu="a100-40g", gpus=1)
    free = review([script(tmp_path / "free", None)], gpu="a100-40g", gpus=1)
    assert both.exit_code == 0 and both.plan.setup.attention == "sdpa"
    [warning] = find(both, key="--gpu", severity="warning")
    sdpa, eager = both.plan.per_gpu_peak_gib, None
    assert f"planned with SDPA (the default from 4.46) the peak is {sdpa:.1f} of" in warning.what
    eager = float(warning.what.split("with eager attention it is ")[1].split(" GiB")[0])
    assert eager > both.plan.gpu_memory_gib > sdpa and "does not fit" in warning.what
    assert 'attn_implementation="sdpa"' in warning.fix and "--per_device_train_batch_size" in warning.fix
    # nothing pinned: the plan and its findings as they were, no eager reading
    assert free.plan.setup.attention == "sdpa" and free.plan.per_gpu_peak_gib == sdpa
    assert not [f for f in free.findings if "eager" in f.what]


def test_a_torch_older_than_2_1_1_runs_every_release_eager(tmp_path):
    """transformers' is_torch_sdpa_available needs torch >= 2.1.1: the run's torch (--torch-version) decides eager even
    where the pin allows SDPA releases; torch 2.1.1 and later leave the pin's reading."""
    from vramfit.review import default_attention

    assert default_attention.torch_without_sdpa("1.12.1") and default_attention.torch_without_sdpa("2.1.0+cu121")
    assert not default_attention.torch_without_sdpa("2.1.1") and not default_attention.torch_without_sdpa(None)
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = review([script(tmp_path / "old", ">=4.31.0")], gpu="a100-40g", gpus=1, torch_version="1.12.1")
    [error] = find(old, key="--gpu", severity="error", text="planned under torch 1.12.1 (--torch-version), where OPT's attention is eager")
    assert old.exit_code == 1 and old.plan is None or old.plan.setup.attention == "eager"
    assert "with torch >= 2.1.1 and transformers >= 4.46" in error.fix
    new = review([script(tmp_path / "new", ">=4.31.0")], gpu="a100-40g", gpus=1, torch_version="2.4.0")
    assert new.plan.setup.attention == "sdpa" and find(new, key="--gpu", severity="warning")


def test_the_files_choice_of_attention_wins_over_the_pin(tmp_path):
    for name, command, eager in [
        ("explicit", OPT + " --attn_implementation sdpa", False),
        # FastChat's train_mem.py patches flash-attn into Llama only: an OPT run keeps the pinned release's eager attention
        ("fastchat-opt", OPT.replace("train.py", "fastchat/train/train_mem.py"), True),
        ("fastchat-llama", OPT.replace("train.py", "fastchat/train/train_mem.py").replace("facebook/opt-1.3b", "meta-llama/Llama-2-7b-hf"), False),
    ]:
        folder = tmp_path / name
        folder.mkdir()
        result = review([script(folder, "==4.31.0", command)], gpu="a100-80g", gpus=1)
        assert (result.plan.setup.attention == "eager") is eager, name
