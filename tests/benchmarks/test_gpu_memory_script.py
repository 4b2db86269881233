"""benchmarks/gpu_memory.py: what can be checked without a GPU, and one real case on a GPU.

CPU: --list and --dry-run name every case with the planner's prediction; a real run without CUDA
exits 2 and says what to run instead; measured.json has the documented keys (fed fake results) and
reads back through vramfit/docs.py; the parent's flow (planner, emulated cards, targets, table) on
a faked subprocess; one shrunk case trains for real on CPU (--tiny) through the subprocess.
GPU (`make test-gpu`): one real-size case measured.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_memory.py"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
DOCUMENTED_TOP = {
    "gpu",
    "driver",
    "torch",
    "deepspeed",
    "transformers",
    "trl",
    "peft",
    "liger_kernel",
    "date",
    "cases",
    "peak_allocated_gib",
    "peak_reserved_gib",
}
DOCUMENTED_CASE = {"name", "settings", "peak_allocated_gib", "peak_reserved_gib", "tokens_per_s", "planner_gib", "error_pct", "oom"}


def _load():
    spec = importlib.util.spec_from_file_location("gpu_memory_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_memory_bench"] = module
    spec.loader.exec_module(module)
    return module


bench = _load()
CASES = bench.build_cases()


def run(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, env=env or ENV, capture_output=True, text=True, timeout=timeout)


def test_the_cases_the_issue_asks_for():
    llama = [c for c in CASES.values() if c.kind == "causal_lm"]
    assert len(llama) == 12
    assert {(c.micro_batch, c.gradient_checkpointing, c.liger) for c in llama} == {
        (mb, gc, lg) for mb in (1, 2, 4) for gc in (False, True) for lg in (False, True)
    }
    assert all(c.seq_len == 4096 and c.recipe == "axolotl-llama-3b-8xa100-80g" for c in llama)
    grpo = CASES["qwen2.5vl-3b-grpo"]  # the vlm-r1-h20 recipe's generation settings
    assert (grpo.micro_batch, grpo.extra["max_completion_length"], grpo.extra["max_pixels"]) == (4, 1024, 1003520)
    assert grpo.extra["completions_per_generate"] == 16
    llava = {c.name: c for c in CASES.values() if c.kind == "llava"}
    assert {c.method for c in llava.values()} == {"lora", "full"}
    assert all(c.seq_len == 2048 for c in llava.values())
    offload = [c for c in llava.values() if c.deepspeed]
    assert offload and all(c.deepspeed.endswith("zero3_offload_optimizer_params.json") for c in offload)
    # every recipe has exactly one first-choice case for its top-level peak
    for recipe in {c.recipe for c in CASES.values()}:
        assert [c.recipe_own for c in CASES.values() if c.recipe == recipe].count(1) == 1


def test_list_names_every_case_with_a_planner_prediction():
    proc = run("--list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for name, case in CASES.items():
        line = next((x for x in lines if x.split()[:1] == [name]), None)
        assert line is not None, f"{name} not listed"
        alloc, reserved, device = (float(v) for v in line.split()[2:5])
        assert 0 < alloc <= reserved <= device
        assert f"seq {case.seq_len}" in line and f"mb {case.micro_batch}" in line
    assert "device time" in proc.stdout and "Liger" in proc.stdout


def test_list_matches_the_planner_on_one_gpu():
    p = bench.predict(CASES["llama3b-4k-mb1-gc-liger"], "h100")
    from vramfit.planner import Setup, plan

    setup = Setup.from_args(
        REPO / "model_configs" / "llama-3.2-3b.json",
        "h100",
        1,
        overrides=[
            "seq_len=4096",
            "per_device_train_batch_size=1",
            "gradient_checkpointing=true",
            "use_liger_kernel=true",
            "bf16=true",
            "attn_implementation=sdpa",
            "expandable_segments=true",
        ],
    )
    assert p["allocated_gib"] == pytest.approx(plan(setup).measure("allocated"))
    assert setup.world == 1 and setup.engine == "single"


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
def test_dry_run_builds_every_model_on_meta_and_its_inputs():
    proc = run("--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in CASES:
        line = next((x for x in proc.stdout.splitlines() if x.split()[:1] == [name]), "")
        assert "= planner" in line, line  # built parameter counts equal the planner's
        assert re.search(r"planner \d+\.\d+ GiB allocated", line), line
        assert "MISMATCH" not in line
    assert "qwen2.5vl-3b-grpo" in proc.stdout and "tokens 2304 (1280 image)" in proc.stdout
    assert "tokens 2048 (576 image)" in proc.stdout
    assert proc.stdout.rstrip().endswith("dry run: ok")


@pytest.mark.parametrize("args", [("--all",), ("--case", "llama3b-4k-mb1")])
def test_a_real_run_without_cuda_exits_2_and_says_what_to_run(args):
    proc = run(*args, env={**ENV, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "--list" in proc.stderr and "--dry-run" in proc.stderr
    assert proc.stdout == ""


def test_unknown_case_and_nothing_to_do_exit_2():
    assert run("--case", "llama-70b").returncode == 2
    assert run().returncode == 2


def _fake(name: str, alloc: float, tps: float, **extra) -> dict:
    return {
        "name": name,
        "oom": False,
        "peak_allocated_gib": alloc,
        "peak_reserved_gib": alloc * 1.02,
        "run_peak_reserved_gib": alloc * 1.05,
        "tokens_per_s": tps,
        "total_gib": 79.19,
        "context_gib": 0.5,
        "device_name": "NVIDIA H100 80GB HBM3",
        "step_times_s": [1.0, 1.0],
        **extra,
    }


def _environment(gpu="NVIDIA H100 80GB HBM3"):
    return {"gpu": gpu, "driver": "550.54.15", **bench.versions(), "date": "2026-01-01"}


def test_measured_json_has_the_documented_keys(tmp_path):
    own, other = CASES["llama3b-4k-mb4-gc-liger"], CASES["llama3b-4k-mb4"]
    results = [
        (own, _fake(own.name, 28.0, 9000.0, planner_gib=29.0, error_pct=3.57)),
        (other, {"name": other.name, "oom": True, "at": "warm-up step 1: backward"}),
    ]
    (path,) = bench.write_measured(results, tmp_path, _environment())
    assert path == tmp_path / "axolotl-llama-3b-8xa100-80g" / "measured.json"
    data = json.loads(path.read_text())
    assert DOCUMENTED_TOP <= set(data)
    assert data["peak_allocated_gib"] == 28.0 and data["recipe_case"] == own.name
    assert data["transformers"] and data["date"] == "2026-01-01"
    for case in data["cases"]:
        assert DOCUMENTED_CASE <= set(case)
    oom = next(c for c in data["cases"] if c["oom"])
    assert oom["at"] == "warm-up step 1: backward" and oom["peak_allocated_gib"] is None
    assert next(c for c in data["cases"] if not c["oom"])["settings"]["seq_len"] == 4096

    # same GPU: merged case by case; another GPU: replaced
    third = CASES["llama3b-4k-mb1"]
    bench.write_measured([(third, _fake(third.name, 44.0, 7000.0))], tmp_path, _environment())
    assert {c["name"] for c in json.loads(path.read_text())["cases"]} == {own.name, other.name, third.name}
    bench.write_measured([(third, _fake(third.name, 44.0, 7000.0))], tmp_path, _environment("NVIDIA H200"))
    data = json.loads(path.read_text())
    assert [c["name"] for c in data["cases"]] == [third.name] and "peak_allocated_gib" not in data


def test_compare_prints_measured_against_the_planner_and_the_trace(tmp_path, capsys):
    """--compare: each recorded case against the analytic planner and the trace, both computed on the
    CPU; an OOM case is checked as a verdict. Liger cases are modelled (no trace), so this stays fast."""
    own, other = CASES["llama3b-4k-mb4-gc-liger"], CASES["llama3b-4k-mb4"]
    predicted = bench.predict(own, "h100")["allocated_gib"]
    results = [
        (own, _fake(own.name, predicted * 1.25, 9000.0)),
        (other, {"name": other.name, "oom": True, "at": "warm-up step 1: forward"}),
    ]
    bench.write_measured(results, tmp_path, _environment("NVIDIA H100 80GB HBM3"))
    assert bench.main(["--compare", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(own.name))
    assert "-20.0%" in row and "modelled (no trace)" in row  # planner / measured - 1 = 1 / 1.25 - 1
    assert "analytic: 1 measured cases, median |error| 20.0%" in out
    assert f"{other.name}: OOM measured; planner (trace) does not fit: agrees" in out
    assert bench.main(["--compare", "--out", str(tmp_path / "none")]) == 2


def test_the_fallback_case_gives_the_top_level_peak_when_the_first_cannot(tmp_path):
    first, fallback = CASES["llava7b-2k-full-zero3-offload"], CASES["llava7b-2k-full"]
    results = [(first, {"name": first.name, "oom": False, "skipped": "host RAM"}), (fallback, _fake(fallback.name, 55.0, 3000.0))]
    (path,) = bench.write_measured(results, tmp_path, _environment())
    data = json.loads(path.read_text())
    assert data["recipe_case"] == fallback.name and data["peak_allocated_gib"] == 55.0


def test_docs_show_the_measured_json(tmp_path):
    """vramfit/docs.py reads gpu, date and the top-level peaks from a recipe's measured.json."""
    from vramfit import docs
    from vramfit.recipe import load

    case = CASES["qwen2.5vl-3b-grpo"]
    bench.write_measured([(case, _fake(case.name, 40.5, 1500.0))], tmp_path, _environment())
    recipe = load(REPO / "recipes" / case.recipe / "recipe.yaml")
    recipe.source = tmp_path / case.recipe / "recipe.yaml"
    block = docs.plan_block(recipe)
    assert "Measured on NVIDIA H100 80GB HBM3 (2026-01-01)" in block
    assert f"{bench.SCOPE}: 40.5 GiB allocated, 41.31 GiB reserved" in block


def test_the_parent_flow_on_a_faked_subprocess(tmp_path, monkeypatch, capsys):
    """Planner per case on the device's card, emulated cards (inferred and re-run), targets, table, files."""
    ran = []
    peaks = {"llama3b-4k-mb1": 45.0, "llama3b-4k-mb1-liger": 25.0}

    def fake_run_child(case, opts, fraction, workdir, tag="", schedule=None):
        ran.append((case.name, fraction))
        if fraction:  # the 40 GB cap: the 45 GiB case does not fit
            return {"name": case.name, "oom": True, "at": "warm-up step 1: backward", "total_gib": 79.19}
        tps = 1000.0 if case.name.endswith("liger") else 900.0
        return _fake(case.name, peaks[case.name], tps)

    monkeypatch.setattr(bench, "run_child", fake_run_child)
    monkeypatch.setattr(bench, "host_memory_gib", lambda: (2015.0, 1900.0))  # a GPU node's RAM, not this host's
    opts = bench.parse(["--case", "llama3b-4k-mb1", "--case", "llama3b-4k-mb1-liger", "--emulate", "40,96", "--out", str(tmp_path)])
    assert bench.measure([CASES[n] for n in opts.case], opts) == 0
    out = capsys.readouterr().out
    # 45 GiB > 39.59: re-run capped; 25 GiB fits 40 GB by inference; 96 GB > the device: inferred fits
    assert ran == [("llama3b-4k-mb1", None), ("llama3b-4k-mb1", pytest.approx(39.59 / 79.19)), ("llama3b-4k-mb1-liger", None)]
    data = json.loads((tmp_path / "axolotl-llama-3b-8xa100-80g" / "measured.json").read_text())
    cases = {c["name"]: c for c in data["cases"]}
    assert cases["llama3b-4k-mb1"]["planner_gpu"] == "h100"
    assert cases["llama3b-4k-mb1"]["error_pct"] == pytest.approx(
        100 * (bench.predict(CASES["llama3b-4k-mb1"], "h100")["allocated_gib"] - 45.0) / 45.0, abs=1e-3
    )
    emulated = {e["card"]: e for e in cases["llama3b-4k-mb1"]["emulated"]}
    assert emulated["a100-40g"]["measured"] == "oom" and emulated["a100-40g"]["how"].startswith("run with")
    assert emulated["a100-40g"]["planner_fits"] is False and emulated["a100-40g"]["agree"] is True
    assert emulated["h20"]["measured"] == "fits" and emulated["h20"]["how"].startswith("inferred")
    assert {e["card"]: e["measured"] for e in cases["llama3b-4k-mb1-liger"]["emulated"]} == {"a100-40g": "fits", "h20": "fits"}
    assert "planner within 10%" in out and "Liger: Llama-3.2-3B at 4k peak >= 40% lower" in out
    assert "llama3b-4k-mb1: peak 45.00 -> 25.00 GiB (44% lower), tokens/s 900 -> 1000 (not lower): PASS" in out
    assert re.search(r"^llama3b-4k-mb1 +45\.00 +45\.90 +900 ", out, re.M)


def test_a_case_the_host_cannot_hold_is_skipped_not_run(tmp_path, monkeypatch, capsys):
    case = CASES["llama3b-4k-mb1"]
    need = bench.predict(case, bench.DEFAULT_CARD, "sdpa", True, host_ram_gib=2015.0)["host_ram_gib"]
    monkeypatch.setattr(bench, "run_child", lambda *a, **k: pytest.fail("a case the host cannot hold was started"))
    monkeypatch.setattr(bench, "host_memory_gib", lambda: (need / 0.9, need / 2))
    opts = bench.parse(["--case", case.name, "--out", str(tmp_path)])
    assert bench.measure([case], opts) == 0
    assert f"[{case.name}] skipped: host RAM: the planner needs {need:.0f} GiB" in capsys.readouterr().out


def test_an_oom_unconstrained_run_infers_smaller_cards(tmp_path):
    case = CASES["llama3b-4k-mb4"]
    opts = bench.parse(["--case", case.name])
    data = {"name": case.name, "oom": True, "at": "warm-up step 1: forward", "total_gib": 79.19}
    smaller = bench.emulate(case, data, "a100-40g", opts, tmp_path)
    larger = bench.emulate(case, data, "h20", opts, tmp_path)
    assert smaller["measured"] == "oom" and smaller["agree"] is True  # the planner says it does not fit 40 GB either
    assert larger["measured"] == "n/a" and "not emulable" in larger["how"]


def test_device_names_map_to_the_catalogue():
    assert bench.card_for_device("NVIDIA H100 80GB HBM3", 79.19) == "h100"
    assert bench.card_for_device("NVIDIA H200", 139.8) == "h200"
    assert bench.card_for_device("NVIDIA A100-SXM4-40GB", 39.59) == "a100-40g"
    assert bench.card_for_device("NVIDIA H100 NVL", 93.1) == "h20"  # no H100 NVL in the catalogue: nearest size
    assert [bench.emulated_card(x) for x in ("40", "80", "96", "a100-40g")] == ["a100-40g", "a100-80g", "h20", "a100-40g"]


def test_oom_phase_from_the_traceback():
    def backward():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    try:
        backward()
    except RuntimeError as exc:
        assert bench.where_in(exc) == "backward" and bench.is_oom(exc)


def test_the_subprocess_records_an_oom_with_its_phase(tmp_path, monkeypatch):
    import torch

    def fake_build_trainer(case, cuda, tiny, attn, warmup, steps, out, phase):
        phase.set("warm-up step 1")

        def backward():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.90 GiB")

        backward()

    monkeypatch.setattr(bench, "build_trainer", fake_build_trainer)
    result = tmp_path / "r.json"
    opts = bench.parse(["--child", "llama3b-4k-mb4", "--result", str(result), "--cpu", "--warmup", "1", "--steps", "1"])
    assert bench.child_main(opts) == 0
    data = json.loads(result.read_text())
    assert data["oom"] is True and data["at"] == "warm-up step 1: backward" and "error" not in data
    assert data["message"].startswith("CUDA out of memory")


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
def test_a_tiny_case_trains_through_the_subprocess_on_cpu(tmp_path):
    """The measuring subprocess end to end on a shrunk Llama (CPU: no memory figures, a wiring check)."""
    proc = run(
        "--tiny",
        "--cpu",
        "--case",
        "llama3b-4k-mb1-gc",
        "--warmup",
        "1",
        "--steps",
        "1",
        "--out",
        str(tmp_path),
        env={**ENV, "CUDA_VISIBLE_DEVICES": ""},
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "axolotl-llama-3b-8xa100-80g" / "measured.json").read_text())
    (case,) = data["cases"]
    assert case["tokens_per_s"] > 0 and case["oom"] is False and "tiny" in case["settings"]
    assert case["geometry"]["seq_len"] == 64 and len(case["step_times_s"]) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs an NVIDIA GPU")
def test_one_real_case_on_the_gpu(tmp_path):
    """Llama-3.2-3B at 4k, micro-batch 1, checkpointing + Liger (~26 GiB): measured next to the planner."""
    proc = run("--case", "llama3b-4k-mb1-gc-liger", "--warmup", "1", "--steps", "2", "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "axolotl-llama-3b-8xa100-80g" / "measured.json").read_text())
    assert DOCUMENTED_TOP - {"peak_allocated_gib", "peak_reserved_gib"} <= set(data)
    (case,) = data["cases"]
    assert case["oom"] is False and "error" not in case, case
    assert 0 < case["peak_allocated_gib"] <= case["peak_reserved_gib"]
    assert case["tokens_per_s"] > 0 and case["planner_gib"] > 0 and isinstance(case["error_pct"], float)
