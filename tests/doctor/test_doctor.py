"""`vramfit doctor`: the corpus of crash logs in tests/doctor/logs, each with its expected diagnosis in
expected.json; the PyTorch OOM formats one by one; the CLI contract; and inputs that are not logs at all.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import random
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from vramfit.doctor import Diagnosis, cli as doctor_cli, diagnose, render
from vramfit.doctor.diagnosis import CAUSES, KINDS, PHASES

HERE = Path(__file__).parent
LOGS = HERE / "logs"
EXPECTED = json.loads((HERE / "expected.json").read_text())
REPO = HERE.parents[1]
FIX_FORMS = ("overrides", "env", "deepspeed", "launch")


def fix_keys(diagnosis: Diagnosis) -> set[str]:
    return {key for fix in diagnosis.fixes for form in FIX_FORMS for key in fix.get(form, {})}


def run_cli(argv: list[str], plan_fixes=None) -> int:
    parser = argparse.ArgumentParser()
    doctor_cli.add_arguments(parser)
    return doctor_cli.run(parser.parse_args(argv), plan_fixes=plan_fixes)


# --- the corpus ---


def test_every_log_has_an_expectation_and_back():
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)
    assert len(EXPECTED) >= 20


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_log(name):
    want = EXPECTED[name]
    d = diagnose(LOGS / name)
    assert (d.kind, d.phase, d.cause) == (want["kind"], want["phase"], want["cause"]), render(d)
    missing = set(want["fix_keys"]) - fix_keys(d)
    assert not missing, f"fixes lack {missing}:\n{render(d)}"
    if "ranks" in want:
        assert d.ranks == want["ranks"]
    for key, value in want.get("figures", {}).items():
        assert d.figures[key] == pytest.approx(value, abs=1e-4), key
    assert d.kind in KINDS and d.phase in PHASES and d.cause in CAUSES


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixes_are_well_formed_and_explained(name):
    d = diagnose(LOGS / name)
    for fix in d.fixes:
        assert len([form for form in FIX_FORMS if form in fix]) == 1, fix
        # each why quotes what it read: a number, or the message itself when the log printed none
        assert any(ch.isdigit() for ch in fix["why"]) or "'" in fix["why"], fix
    assert len(d.evidence) <= 8 and all(len(item["text"]) <= 400 for item in d.evidence)


def test_sharegpt4v_batch_fixes_keep_the_global_batch():
    d = diagnose(LOGS / "sharegpt4v_zero3_backward_a100_40g.log")
    splits = [f["overrides"] for f in d.fixes if "per_device_train_batch_size" in f.get("overrides", {})]
    assert {(s["per_device_train_batch_size"], s["gradient_accumulation_steps"]) for s in splits} == {(4, 2), (1, 8)}


def test_vlmr1_fixes_keep_generations_divisible():
    d = diagnose(LOGS / "vlmr1_grpo_6xh20_generation.log")
    world, generations = 6, 4
    for fix in d.fixes:
        o = fix.get("overrides", {})
        if "per_device_train_batch_size" in o:
            assert o["per_device_train_batch_size"] * world * o["gradient_accumulation_steps"] % generations == 0
    assert {"num_generations": 3} in [f.get("overrides") for f in d.fixes]  # 24 completions: 3 divides, 4 -> 3


def test_host_kill_explains_the_cuda_message():
    d = diagnose(LOGS / "tinychart_host_ram_shown_as_cuda_error.log")
    assert any("symptom" in note for note in d.notes)
    assert "SIGKILL" in d.why and "pinned" in d.why
    assert "CUDA error: out of memory" in " ".join(item["text"] for item in d.evidence)


def test_pinned_host_allocation_failing_as_cuda_error_is_host_ram():
    log = (
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 848, '
        "in _create_fp32_partitions\n"
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/accelerator/cuda_accelerator.py", line 292, '
        "in pin_memory\n"
        "RuntimeError: CUDA error: out of memory\n"
    )
    d = diagnose(io.BytesIO(log.encode()))
    assert (d.kind, d.phase, d.cause) == ("cuda_oom", "model_load", "host_ram")
    assert "host RAM (pinned memory" in render(d)


def test_nccl_timeout_names_the_silent_rank():
    d = diagnose(LOGS / "nccl_watchdog_timeout_while_rank0_saves.log")
    assert "rank 0 reported no timeout" in d.why


# --- the PyTorch OOM formats, as single lines ---

FORMATS = {
    "torch<=2.0": (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.90 GiB (GPU 0; 39.59 GiB total "
        "capacity; 28.77 GiB already allocated; 3.20 GiB free; 34.12 GiB reserved in total by PyTorch) If reserved "
        "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for "
        "Memory Management and PYTORCH_CUDA_ALLOC_CONF",
        {"requested_gib": 3.90, "gpu": 0, "total_gib": 39.59, "allocated_gib": 28.77, "free_gib": 3.20, "reserved_unallocated_gib": 34.12 - 28.77},
    ),
    "torch2.1": (
        "CUDA out of memory. Tried to allocate 320.00 MiB. GPU 6 has a total capacty of 79.15 GiB of which "
        "15.31 MiB is free. Process 12345 has 79.12 GiB memory in use. Of the allocated memory 77.49 GiB is "
        "allocated by PyTorch, and 683.81 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
        "memory is large try setting max_split_size_mb to avoid fragmentation.",
        {
            "requested_gib": 320 / 1024,
            "gpu": 6,
            "total_gib": 79.15,
            "free_gib": 15.31 / 1024,
            "in_use_gib": 79.12,
            "allocated_gib": 77.49,
            "reserved_unallocated_gib": 683.81 / 1024,
        },
    ),
    "torch>=2.2": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.25 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.22 GiB memory in use. "
        "Of the allocated memory 70.11 GiB is allocated by PyTorch, and 6.55 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        {"requested_gib": 2.0, "gpu": 0, "total_gib": 79.25, "free_gib": 1.02, "in_use_gib": 78.22, "allocated_gib": 70.11, "reserved_unallocated_gib": 6.55},
    ),
    "bytes and KiB": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 KiB. GPU 1 has a total capacity of 23.53 GiB of which 0 bytes is free.",
        {"requested_gib": 512 / 2**20, "free_gib": 0.0, "total_gib": 23.53, "gpu": 1},
    ),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_oom_format(fmt):
    line, figures = FORMATS[fmt]
    d = diagnose(io.BytesIO(line.encode()))
    assert d.kind == "cuda_oom"
    for key, value in figures.items():
        assert d.figures[key] == pytest.approx(value, abs=1e-5), key


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    ],
)
def test_oom_without_figures(line):
    d = diagnose(io.BytesIO(line.encode()))
    assert (d.kind, d.cause) == ("cuda_oom", "true_capacity")
    assert "requested_gib" not in d.figures and d.fixes


def test_grpo_needs_two_generations():
    line = "ValueError: GRPO requires at least 2 generations per prompt to calculate the advantages. You provided 1, which is less than the minimum required."
    d = diagnose(io.BytesIO(line.encode()))
    assert (d.kind, d.figures["num_generations"]) == ("grpo_divisibility", 1)
    assert d.fixes[0]["overrides"] == {"num_generations": 2}


def test_fragmentation_threshold():
    # 6.55 GiB reserved-unallocated of 79.25 GiB (> 5%) against a 2 GiB request: fragmentation
    assert diagnose(io.BytesIO(FORMATS["torch>=2.2"][0].encode())).cause == "fragmentation"
    # 320 MiB request, 684 MiB spare of 79 GiB (< 2%): not worth calling fragmentation
    assert diagnose(io.BytesIO(FORMATS["torch2.1"][0].encode())).cause == "true_capacity"


def test_text_streams_and_ansi_and_prefixes():
    line = "10.0.0.5: [rank7]: \x1b[31m" + FORMATS["torch>=2.2"][0] + "\x1b[0m\n"
    d = diagnose(io.StringIO(line))
    assert d.kind == "cuda_oom" and d.ranks == [7] and d.source == "<stream>"


# --- render and JSON ---


def test_render_says_what_where_why_and_fixes():
    d = diagnose(LOGS / "minicpmv_lora_eval_every_50_steps.log")
    text = render(d)
    first = text.splitlines()[0]
    assert first.startswith(str(LOGS / "minicpmv_lora_eval_every_50_steps.log") + ": CUDA out of memory in evaluation")
    assert "320.00 MiB" in first and "Fix: prediction_loss_only=true." in first
    for part in (
        "What ran out: GPU memory",
        "Where:",
        "Cause:        evaluation spike",
        "Fixes, cheapest first:",
        "  1. prediction_loss_only=true",
        "Evidence:",
    ):
        assert part in text


def test_render_nothing_recognised():
    d = diagnose(LOGS / "clean_finished_run.log")
    text = render(d)
    assert "nothing recognised" in text.splitlines()[0]
    assert "Looked for:" in text and "CUDA out of memory" in text and "SIGKILL" in text


def test_json_output(capsys):
    assert run_cli([str(LOGS / "vlmr1_grpo_6xh20_generation.log"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    keys = ("kind", "phase", "cause", "why", "figures", "fixes", "evidence", "ranks", "notes", "settings", "source")
    assert set(keys) <= set(data)
    assert data["kind"] == "cuda_oom" and data["figures"]["gpu"] == 3
    assert all("why" in fix for fix in data["fixes"])


def test_text_output(capsys):
    assert run_cli([str(LOGS / "axolotl_llama3b_allocator_cache.log")]) == 0
    out = capsys.readouterr().out
    assert "Fix: export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True." in out.splitlines()[0]


def test_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(FORMATS["torch<=2.0"][0].encode())))
    assert run_cli(["-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "cuda_oom"


# --- the planner hook ---


def fake_planner(calls):
    def plan_fixes(recipe, overrides):
        calls.append((recipe, overrides))
        # pretend only accumulation-heavy splits fit
        return [(o, 60.0 if o.get("gradient_accumulation_steps", 1) >= 8 else 90.0, o.get("gradient_accumulation_steps", 1) >= 8) for o in overrides]

    return plan_fixes


def test_plan_fixes_annotates_and_picks_the_first_that_fits(capsys):
    calls = []
    log = str(LOGS / "sharegpt4v_zero3_backward_a100_40g.log")
    assert run_cli([log, "--recipe", "sharegpt4v-7b-8xa100-40g"], plan_fixes=fake_planner(calls)) == 0
    out = capsys.readouterr().out
    recipe, overrides = calls[0]
    assert recipe == "sharegpt4v-7b-8xa100-40g"
    assert {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 8} in overrides
    assert "Fix: per_device_train_batch_size=1 gradient_accumulation_steps=8." in out.splitlines()[0]
    assert "[planner: peak 60.0 GiB, fits]" in out and "[planner: peak 90.0 GiB, does not fit]" in out
    assert "Apply first: fix 2" in out  # batch splits lead when the frames show no logits/vision spike

    assert run_cli([log, "--recipe", "x", "--json"], plan_fixes=fake_planner([])) == 0
    fixes = json.loads(capsys.readouterr().out)["fixes"]
    assert [f for f in fixes if f.get("apply_first")][0]["overrides"]["gradient_accumulation_steps"] == 8
    assert all("fits" in f for f in fixes if "overrides" in f)


def test_no_planner_or_no_recipe_skips_planning(capsys):
    calls = []
    assert run_cli([str(LOGS / "sharegpt4v_zero3_backward_a100_40g.log")], plan_fixes=fake_planner(calls)) == 0
    assert run_cli([str(LOGS / "sharegpt4v_zero3_backward_a100_40g.log"), "--recipe", "r"]) == 0
    assert not calls and "planner" not in capsys.readouterr().out


def test_planner_error_still_prints_the_diagnosis(capsys):
    def broken(recipe, overrides):
        raise ValueError(f"{recipe}: no such recipe")

    with pytest.raises(ValueError):
        run_cli([str(LOGS / "sharegpt4v_zero3_backward_a100_40g.log"), "--recipe", "nope"], plan_fixes=broken)
    assert "CUDA out of memory in backward" in capsys.readouterr().out


# --- bad input ---


def test_missing_path_exits_2(tmp_path, capsys):
    missing = tmp_path / "nope.log"
    assert run_cli([str(missing)]) == 2
    captured = capsys.readouterr()
    assert str(missing) in captured.err and "no such file" in captured.err and not captured.out


def test_directory_exits_2(tmp_path, capsys):
    assert run_cli([str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert str(tmp_path) in captured.err and "is a directory" in captured.err


def test_empty_log(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    d = diagnose(empty)
    assert (d.kind, d.lines_read, d.fixes) == ("unknown", 0, [])
    assert "nothing recognised" in render(d)


def test_a_launch_script_given_for_a_log_is_pointed_at_the_review(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc_per_node 8 train.py --model_name_or_path Qwen/Qwen2.5-7B\n")
    d = diagnose(script)
    assert d.kind == "unknown" and f"`vramfit review {script}` reviews it" in render(d)
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.0\n")
    assert "vramfit review" not in render(diagnose(log))


def test_random_bytes(tmp_path):
    rng = random.Random(7)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(rng.randbytes(3_000_000) + b"\xff\xfe\x00\xc3(")
    d = diagnose(junk)
    assert d.kind == "unknown"
    assert any("NUL bytes" in note for note in d.notes)
    assert "nothing recognised" in render(d)


def test_garbage_text_and_a_runaway_line(tmp_path):
    path = tmp_path / "garbage.log"
    with open(path, "wb") as out:
        out.write(b"%|" * 3_000_000)  # one 6 MB "line" of bar fragments, no newline
        out.write(b"\r" * 1_000_000 + b"\n\n\n" + "é\udcff".encode("utf-8", "surrogatepass") + b"\n")
        out.write(b"[rank99999999]: [rank]: ::::\n" * 1000 + b"Traceback (most recent call last):\n" * 1000)
    assert diagnose(path).kind == "unknown"


def test_many_distinct_long_lines_stay_bounded(tmp_path):
    rng = random.Random(3)
    path = tmp_path / "long_lines.log"
    with open(path, "w") as out:
        for _ in range(4000):  # 4000 distinct 3 kB lines, nothing to find
            out.write("".join(rng.choices("abcdfhjkqvxyz ", k=3000)) + "\n")
    tracemalloc.start()
    d = diagnose(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert d.kind == "unknown" and d.lines_read == 4000
    assert peak < 20 * 2**20, f"peak {peak / 2**20:.1f} MiB"


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
def test_100mb_log_streams_in_bounded_memory(tmp_path):
    spec = importlib.util.spec_from_file_location("doctor_speed", REPO / "benchmarks" / "doctor_speed.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    path = tmp_path / "big.log"
    bench.write_log(path, 100)
    assert path.stat().st_size >= 100e6
    tracemalloc.start()
    start = time.perf_counter()
    d = diagnose(path)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (d.kind, d.phase, d.ranks) == ("cuda_oom", "backward", [3])
    assert d.figures["step"] > 0
    assert peak < 50 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    assert seconds < 60  # traced; untraced it is ~2 s (benchmarks/doctor_speed.py)


def test_doctor_imports_no_heavy_library():
    code = (
        "import sys, vramfit.doctor.cli; "
        "heavy = {'torch', 'transformers', 'deepspeed', 'yaml', 'pydantic', 'rich', 'numpy'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
