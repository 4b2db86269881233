"""Issue 19: one problem format, did-you-mean, show, quoted numbers, library facts, quiet imports, the run summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def vramfit(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramfit.cli", *argv], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_mistyped_recipe_name_gets_did_you_mean_and_exit_2_in_every_command(capsys):
    from vramfit.cli import main

    for argv in (["show", "vlm-r1-h2"], ["validate", "vlm-r1-h2"], ["plan", "vlm-r1-h2"], ["slurm", "vlm-r1-h2"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "vramfit: 1 problem; nothing was launched or written." in err, argv
        assert "error: vlm-r1-h2: no recipe named 'vlm-r1-h2'" in err and "Did you mean 'vlm-r1-h20'?" in err, argv
        assert "Traceback" not in err and "FileNotFoundError" not in err


def test_json_problems_are_one_object_on_stdout(capsys):
    from vramfit.cli import main

    assert main(["plan", "vlm-r1-h2", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["exit_code"] == 2 and out["problems"][0]["severity"] == "error"
    assert out["problems"][0]["fix"].startswith("see `vramfit list`")


def test_doctor_bad_input_uses_the_shared_renderer(tmp_path, capsys):
    from vramfit.cli import main

    assert main(["doctor", str(tmp_path / "missing.log")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vramfit: 1 problem; nothing was launched or written.\n  error: ") and "no such file. Fix:" in err


def test_show_applies_overrides_and_exits_2_on_a_broken_batch_equation(capsys):
    from vramfit.cli import main

    assert main(["show", "vlm-r1-h20", "per_device_train_batch_size=2"]) == 2
    captured = capsys.readouterr()
    assert "with per_device_train_batch_size=2 applied" in captured.out
    assert "  per_device_train_batch_size: 2\n" in captured.out  # the resolved recipe, not a blank line
    assert "global batch       = 48" in captured.out and "BROKEN: recipe says global_batch_size 96" in captured.out
    assert "2 x 4 x 6 = 48 != global_batch_size 96" in captured.err and "Fix: set gradient_accumulation_steps: 8" in captured.err
    assert main(["show", "vlm-r1-h20", "per_device_train_batch_size=2", "gradient_accumulation_steps=8"]) == 0


def test_show_json_has_the_derived_numbers(capsys):
    from vramfit.cli import main

    assert main(["show", "vlm-r1-h20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    derived = {row["name"]: row["value"] for row in out["derived"]}
    assert derived["global batch"] == "96" and derived["ranks"] == "6" and out["problems"] == []


def test_a_word_for_a_number_is_told_to_write_a_number(capsys):
    from vramfit.cli import main

    assert main(["validate", "vlm-r1-h20", "learning_rate=abc", "--no-plan"]) == 2
    err = capsys.readouterr().err
    assert "'abc' is a string where a number belongs. Fix: write a number, e.g. learning_rate: 1e-06 (the GRPOConfig default)." in err
    assert "without quotes" not in err


def test_a_quoted_number_is_a_number_under_training_as_under_hardware():
    """YAML `learning_rate: "2e-5"` (and PyYAML reads a bare 2e-5 as text too) is a number, as `gpus_per_node: "6"` is."""
    from vramfit.checks import training_args
    from vramfit.paths import find_recipe
    from vramfit.recipe import Recipe, load

    recipe = load(find_recipe("vlm-r1-h20"))
    data = recipe.resolved_dict()
    data["hardware"]["gpus_per_node"] = "6"
    data["training"].update(learning_rate="2e-5", per_device_train_batch_size="4")
    quoted = Recipe.model_validate({**data, "source": recipe.source})
    problems, args = training_args.check(quoted, "recipe.yaml")
    assert not problems.items and quoted.hardware.gpus_per_node == 6
    assert quoted.training["learning_rate"] == 2e-5 and quoted.training["per_device_train_batch_size"] == 4
    assert args.learning_rate == 2e-5 and args.per_device_train_batch_size == 4


def test_library_defaults_are_read_from_the_installed_dataclasses(tmp_path, monkeypatch):
    import dataclasses

    from transformers import TrainingArguments
    from trl import GRPOConfig

    from vramfit import libraries

    monkeypatch.setenv("VRAMFIT_CACHE_DIR", str(tmp_path))
    hf, grpo = libraries.argument_defaults(None), libraries.argument_defaults("grpo")
    for cls, table in ((TrainingArguments, hf), (GRPOConfig, grpo)):
        fields = {f.name: f.default for f in dataclasses.fields(cls) if f.init}
        assert set(table) == set(fields)
        for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "logging_steps"):
            assert table[key] == fields[key], key
    assert grpo["num_generations"] == GRPOConfig.num_generations
    cached = list(tmp_path.glob("arguments-*.json"))
    assert len(cached) == 2  # keyed by the installed versions, in the user's cache, never the repository
    assert not list(REPO.glob("arguments-*.json"))


def test_the_cache_is_keyed_by_library_versions(tmp_path, monkeypatch):
    from vramfit import libraries

    monkeypatch.setenv("VRAMFIT_CACHE_DIR", str(tmp_path))
    calls = []
    assert libraries.cached("probe", lambda: calls.append(1) or {"a": 1}) == {"a": 1}
    assert libraries.cached("probe", lambda: calls.append(1) or {"a": 2}) == {"a": 1} and len(calls) == 1
    monkeypatch.setattr(libraries, "installed_versions", lambda: {"transformers": "999"})
    assert libraries.cached("probe", lambda: calls.append(1) or {"a": 3}) == {"a": 3} and len(calls) == 2


@pytest.mark.parametrize(
    "per_device,processes,accum,steps,given,expected",
    [
        (4, 6, 4, None, None, 96),  # steps_per_generation defaults to the accumulation (TRL 1.16)
        (4, 6, 4, 1, None, 24),
        (2, 2, 8, None, 64, 64),  # generation_batch_size given wins
    ],
)
def test_one_grpo_generation_batch(per_device, processes, accum, steps, given, expected):
    from vramfit.libraries import grpo_generation_batch

    assert grpo_generation_batch(per_device, processes, accum, steps, given) == expected


def test_help_list_and_show_import_no_training_library():
    code = (
        "import sys\nfrom vramfit.cli import main\n"
        "for argv in (['list'], ['show', 'vlm-r1-h20']):\n    assert main(argv) == 0\n"
        "heavy = sorted(m for m in ('torch', 'deepspeed', 'transformers', 'trl', 'vramfit.planner', 'vramfit.doctor', 'vramfit.review') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow  # > 3 s: out of make test-fast's edit loop, in make test
def test_plan_does_not_import_deepspeed_to_silence_it(tmp_path):
    """Quieting imports nothing; `plan` validates as `validate` does (issue 15), and a cold validation builds
    DeepSpeed's own parser, so only a warm plan (the verdict in the validate cache) can go without deepspeed."""
    env = {**os.environ, "VRAMFIT_CACHE_DIR": str(tmp_path / "cache")}
    quiet = "import sys\nfrom vramfit import libraries\nlibraries.quiet()\nassert 'deepspeed' not in sys.modules\n"
    done = subprocess.run([sys.executable, "-c", quiet], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    code = (
        "import sys\nfrom vramfit.cli import main\nassert main(['plan', 'vlm-r1-h20']) in (0, 1)\n"
        "print(any(m in sys.modules for m in ('deepspeed', 'trl', 'transformers', 'torch')))\n"
    )
    cold = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert cold.returncode == 0, cold.stderr
    warm = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.strip().splitlines()[-1] == "False", "a warm plan imported a training library (it is fed the validate cache)"


def test_quiet_filters_the_deepspeed_collective_warnings_and_verbose_keeps_them():
    code = (
        "import warnings, os, sys\nfrom vramfit import libraries\n"
        "libraries.set_verbose(sys.argv[1] == '1')\nlibraries.quiet()\n"
        "warnings.warn('`torch.distributed.reduce_scatter_tensor` is deprecated. Please use x', FutureWarning)\n"
        "warnings.warn('a warning a user can act on', UserWarning)\n"
        "import logging\nlogging.basicConfig()\nlog = logging.getLogger('transformers.utils.generic')\n"
        "log.warning('`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`.')\n"
        "log.warning('a log line a user can act on')\n"
    )
    quiet = subprocess.run([sys.executable, "-c", code, "0"], capture_output=True, text=True, timeout=60)
    loud = subprocess.run([sys.executable, "-c", code, "1"], capture_output=True, text=True, timeout=60)
    assert "reduce_scatter_tensor" not in quiet.stderr and "a warning a user can act on" in quiet.stderr
    assert "use_cache=True" not in quiet.stderr and "a log line a user can act on" in quiet.stderr
    assert "reduce_scatter_tensor" in loud.stderr and "use_cache=True" in loud.stderr


def test_the_run_summary_reads_the_output_folder(tmp_path):
    from vramfit.train import summary

    out = tmp_path / "output"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "COMPLETE").write_text(json.dumps({"step": 2, "world_size": 2}))
    rows = [
        {"step": 1, "loss": 0.5, "reward": 0.25, "num_tokens": 900.0},
        {"step": 2, "loss": 0.1, "reward": 0.75, "num_tokens": 2000.0},
        {"step": 2, "train_runtime": 4.0},
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "summary.json").write_text(json.dumps({"steps": 2, "max_steps": 2, "peak_memory_bytes": [None, None]}))
    text = summary.render(out, tmp_path / "train.log", "vlm-r1-h20", "grpo", 0, 31.0, argv=["run", "vlm-r1-h20", "--smoke"])
    assert "vramfit: run finished: vlm-r1-h20" in text
    assert "steps        2 of 2" in text and "reward       0.25 -> 0.75" in text and "loss         0.5 -> 0.1" in text
    assert "tokens/s     500 (2,000 tokens in 4.0 s of training)" in text and "wall time    31 s" in text
    assert "peak memory  n/a on CPU" in text and "checkpoint-2" in text
    assert "next         vramfit run vlm-r1-h20 --smoke --resume" in text
    (out / "summary.json").write_text(json.dumps({"steps": 2, "peak_memory_bytes": [3 * 2**30, 2**31]}))
    text = summary.render(out, tmp_path / "train.log", "vlm-r1-h20", "grpo", 0, 31.0, argv=["run", "vlm-r1-h20"])
    assert "GPU0 3.0 GiB, GPU1 2.0 GiB" in text
    failed = summary.render(out, tmp_path / "train.log", "vlm-r1-h20", "grpo", 1, 5.0, argv=["run", "vlm-r1-h20", "--overwrite"])
    assert "run failed (launcher exit code 1)" in failed and "vramfit doctor" in failed
    assert "vramfit run vlm-r1-h20 --resume   # resume from checkpoint-2" in failed


def test_validate_json_is_one_object_with_each_verdict(capsys):
    from vramfit.cli import main

    assert main(["validate", "vlm-r1-h20", "per_device_train_batch_size=3", "--no-plan", "--json"]) == 2
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["exit_code"] == 2 and out["recipes"][0]["ok"] is False and not captured.err
    assert out["recipes"][0]["problems"][0]["key"] == "global_batch_size"


def _imports(path: Path) -> set[str]:
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_recipe_does_not_import_checks():
    """The schema is below the checks: vramfit.checks imports vramfit.recipe, never the reverse (no cycle)."""
    assert not {m for m in _imports(REPO / "vramfit" / "recipe.py") if m.startswith("vramfit.checks")}
    assert "vramfit.recipe" in _imports(REPO / "vramfit" / "checks" / "recipe_rules.py")


def test_cached_validation_gives_the_same_verdict(tmp_path, monkeypatch):
    from vramfit.problems import ConfigError
    from vramfit.validate import validate

    monkeypatch.setenv("VRAMFIT_CACHE_DIR", str(tmp_path))
    verdicts = []
    for cache in (False, True, True):  # uncached, cache filled, cache read
        with pytest.raises(ConfigError) as caught:
            validate("vlm-r1-h20", ["learning_rate=abc", "warmup_steps=-1"], plan=False, cache=cache)
        verdicts.append([str(p) for p in caught.value.problems.items])
    assert verdicts[0] == verdicts[1] == verdicts[2] and len(verdicts[0]) == 2
    assert len(list(tmp_path.glob("validation-*.json"))) == 1
    ok = validate("vlm-r1-h20", ['learning_rate="2e-5"'], plan=False, cache=True)
    again = validate("vlm-r1-h20", ['learning_rate="2e-5"'], plan=False, cache=True)
    assert ok.recipe.training["learning_rate"] == again.recipe.training["learning_rate"] == 2e-5
    assert again.deepspeed == ok.deepspeed and again.deepspeed["train_micro_batch_size_per_gpu"] == 4


# One bad input per command (and argparse's own usage errors): every one is told in the one problem format.
BAD_INPUT = [
    ["list", "extra"],
    ["show", "vlm-r1-h2"],
    ["show", "vlm-r1-h20", "vlm-r1-h20"],
    ["validate", "vlm-r1-h20", "learning_rate=abc"],
    ["plan", "vlm-r1-h2"],
    ["plan", "--nope"],
    ["run", "vlm-r1-h20", "--nodes", "7"],
    ["run", "vlm-r1-h20", "vlm-r1-h20"],
    ["slurm", "vlm-r1-h2"],
    ["fit"],
    ["review", "/nonexistent/run.sh"],
    ["cp", "vlm-r1-h2", "new-name"],
    ["cp", "vlm-r1-h20"],
    ["doctor", "/nonexistent/train.log"],
    ["frobnicate"],
]
HAS_JSON = {"show", "validate", "plan", "fit", "review", "doctor"}
PROBLEM_LINE = r"  (error|warning): \S[^:]*: (\S+: )?.+[.?] Fix: .+"


@pytest.mark.parametrize("argv", BAD_INPUT, ids=" ".join)
def test_every_command_tells_bad_input_in_the_one_format(argv, capsys):
    import re

    from vramfit.cli import main

    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    lines = captured.err.rstrip("\n").split("\n")
    if argv[0] == "validate":  # its verdict per recipe (`ok NAME` on stdout, `FAIL NAME` here), then the problems
        assert lines.pop(0) == f"FAIL {argv[1]}"
    assert re.fullmatch(r"vramfit: \d+ problems?; nothing was launched or written\.", lines[0]), captured.err
    assert lines[1:] and all(re.fullmatch(PROBLEM_LINE, line) for line in lines[1:]), captured.err
    assert not captured.out
    if argv[0] in HAS_JSON:
        assert main([*argv, "--json"]) == 2
        captured = capsys.readouterr()
        data = json.loads(captured.out)  # one JSON object on stdout, nothing on stderr
        assert not captured.err
        problems = data["problems"] if "problems" in data else [p for r in data["recipes"] for p in r["problems"]]
        assert data["exit_code"] == 2 and problems
        assert all(set(p) == {"severity", "file", "key", "what", "fix", "text"} for p in problems)


def test_launched_processes_are_told_the_accelerator_deepspeed_would_pick(monkeypatch):
    """The launcher (torchrun / accelerate / deepspeed) and every rank import DeepSpeed; on a host without a GPU
    each would warn "Setting accelerator to CPU". The runner names it for them (applied, not printed); -v does not."""
    import logging

    import torch
    from deepspeed.accelerator import real_accelerator

    from vramfit import libraries

    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    libraries.set_verbose(True)
    assert libraries.launcher_env() == {}
    libraries.set_verbose(False)
    env = libraries.launcher_env()
    if torch.cuda.is_available():  # a GPU host: DeepSpeed picks CUDA without a word
        assert env == {}
        return
    assert env == {"DS_ACCELERATOR": "cpu"}

    said: dict[str, list[str]] = {}
    handler = logging.Handler()
    logger = real_accelerator.accel_logger
    level = logger.level
    logger.setLevel(logging.INFO)  # setLevel, not the attribute: it clears the logger's isEnabledFor cache
    logger.addHandler(handler)
    try:
        for name, environ in (("without", {}), ("with", env)):  # what a launched process prints, without and with the runner's env
            said[name] = []
            handler.emit = lambda record, out=said[name]: out.append(record.getMessage())
            monkeypatch.setattr(real_accelerator, "ds_accelerator", None)
            for key, value in environ.items():
                monkeypatch.setenv(key, value)
            real_accelerator.get_accelerator()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    warned = "Setting accelerator to CPU"
    assert [m for m in said["without"] if m.startswith(warned)] and not [m for m in said["with"] if m.startswith(warned)], said


def test_the_runner_applies_the_launcher_env(monkeypatch, tmp_path):
    from vramfit import libraries, run
    from vramfit.supervise import Launch

    seen = {}
    monkeypatch.setattr(libraries, "launcher_env", lambda: {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "3"})
    monkeypatch.setattr(run, "stream", lambda launches, env: seen.update(env) or 1)
    monkeypatch.setattr(run, "diagnose", lambda log, name: None)
    (tmp_path / "train.log").write_text("")
    run._execute([Launch(["true"], tmp_path / "train.log")], {"OMP_NUM_THREADS": "1"}, "probe")
    assert seen == {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}  # the recipe's env wins
