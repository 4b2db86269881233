"""Run a recipe's smoke variant and read what the run left behind (used by the tests in this folder)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.parent.name for p in (REPO / "recipes").glob("*/recipe.yaml"))
VRAMFIT = [sys.executable, "-m", "vramfit.cli"]
# Filled by the smoke tests, printed at the end of the session (conftest.py).
WALL_TIMES: dict[str, float] = {}


@dataclass
class Run:
    name: str
    run_dir: Path
    result: subprocess.CompletedProcess
    seconds: float

    @property
    def output(self) -> Path:
        return self.run_dir / "output"

    @property
    def log(self) -> str:
        """The run's output for a failure message, without the libraries' deprecation-warning noise."""
        noise = ("Warning:", "warnings.warn(", "return func(")
        lines = (self.result.stdout + self.result.stderr).splitlines()
        return "\n".join(line for line in lines if not any(n in line for n in noise))[-8000:]

    def metrics(self) -> list[dict]:
        return [json.loads(line) for line in (self.output / "metrics.jsonl").read_text().splitlines() if line.strip()]

    def losses(self) -> list[float]:
        return [m["loss"] for m in self.metrics() if "loss" in m and "train_loss" not in m]

    def params(self) -> dict[str, dict]:
        return json.loads((self.output / "param_check.json").read_text())["params"]


def smoke(name: str, run_dir: Path, timeout: int = 420) -> Run:
    """`vramfit run NAME --smoke --run-dir RUN_DIR`, as a user runs it (make run RECIPE=NAME SMOKE=1)."""
    start = time.time()
    result = subprocess.run([*VRAMFIT, "run", name, "--smoke", "--run-dir", str(run_dir)], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return Run(name, run_dir, result, time.time() - start)


def finite(values) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def write_run(name: str, run_dir: Path, extra: list[str], cpu: bool | None = None) -> Path:
    """The smoke variant's run directory, with `extra` overrides applied after the smoke's own (more
    steps, another learning rate), written by the runner's own code. Returns the run directory."""
    from vramfit import launch as launcher, run
    from vramfit.train import smoke
    from vramfit.validate import validate

    source = REPO / "recipes" / name / "recipe.yaml"
    cpu = run.gpus_present() < 2 if cpu is None else cpu
    base = validate(source, plan=False).recipe
    validated = validate(source, [*smoke.prepare(base, run_dir, cpu=cpu), *extra], plan=False)
    gpus = validated.recipe.hardware.gpus_per_node
    run.write_run_dir(validated, run_dir, launcher.Topology(1, gpus, master_port=launcher.free_port()))
    return run_dir


def launch(name: str, run_dir: Path, extra: list[str], cpu: bool | None = None, timeout: int = 420) -> Run:
    """write_run, then the launcher command it wrote, as `vramfit run` starts it."""
    import os

    start = time.time()
    write_run(name, run_dir, extra, cpu)
    argv = json.loads((run_dir / "launch.json").read_text())["argv"]
    env = json.loads((run_dir / "env.json").read_text())
    result = subprocess.run(argv, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout)
    return Run(name, run_dir, result, time.time() - start)


def relative(path: Path) -> str:
    """A path as recipes spell them: relative to the repository (the validator refuses absolute ones)."""
    import os

    return os.path.relpath(path, REPO)


# Llava takes image features from the encoder layers, never through the tower's final LayerNorm, so
# a trained vision tower's post_layernorm gets no gradient and stays as it was.
UNUSED = ("post_layernorm",)
QLORA = [
    "method=qlora",
    "model.lora.r=8",
    "model.lora.alpha=16",
    "model.lora.target_modules=all-linear",
    "model.quantization.bits=4",
    "model.quantization.quant_storage=bfloat16",
]  # ZeRO-3 shards bf16-stored weights


def _load_back(run, recipe):
    """The saved model as a user would load it: full weights, or the base model plus the LoRA adapter."""
    import transformers

    cls = getattr(transformers, recipe.model.architecture)
    if recipe.model.lora is None:
        return cls.from_pretrained(run.output)
    from peft import PeftModel

    return PeftModel.from_pretrained(cls.from_pretrained(run.run_dir / "smoke" / "model"), run.output)


def check_run(run: Run) -> None:
    """What every smoke run must leave behind: finite losses, moved trained and unmoved frozen
    parameters, a complete checkpoint and final weights that load back."""
    from vramfit.recipe import Recipe
    from vramfit.train.callbacks import fingerprint

    assert run.result.returncode == 0, run.log
    recipe = Recipe.model_validate(json.loads((run.run_dir / "recipe.json").read_text()))

    # The tiny model, each shrunk value next to the real one.
    shrunk = json.loads((run.run_dir / "smoke_model.json").read_text())
    assert any(key.endswith("num_hidden_layers") and small == 2 for key, (small, real) in shrunk.items()), shrunk

    # Losses (and for GRPO the rewards) logged and finite for every step.
    # the end-of-training log carries train_loss (train_runtime is in every step's log once input tokens are counted)
    metrics = [m for m in run.metrics() if "train_loss" not in m and "eval_loss" not in m]
    steps = recipe.training["max_steps"]
    assert [m["step"] for m in metrics] == list(range(1, steps + 1)), metrics
    assert finite(run.losses()) and len(run.losses()) == steps
    if recipe.method == "grpo":
        task = "answer_match_reward" if recipe.data.format == "chat_jsonl" else "iou_accuracy_reward"
        for reward in (f"rewards/{task}/mean", "rewards/answer_format_reward/mean", "reward_std"):
            assert finite([m[reward] for m in metrics]), reward
        assert any(m["reward_std"] > 0 for m in metrics), "no group had differing rewards: nothing to learn from"
    if recipe.data.eval_file:
        evals = [m["eval_loss"] for m in run.metrics() if "eval_loss" in m]
        assert evals and finite(evals)

    # Optimizer steps moved what trains and nothing else; the parts that train are the recipe's.
    params = run.params()
    assert all(p["finite"] for p in params.values())
    frozen_changed = [n for n, p in params.items() if not p["trainable"] and p["changed"]]
    assert not frozen_changed, frozen_changed
    unchanged = [n for n, p in params.items() if p["trainable"] and not p["changed"] and not any(u in n for u in UNUSED)]
    assert not unchanged, unchanged
    train, lora = recipe.model.train, recipe.model.lora is not None
    expected = {"llm"} if train.llm and not lora else set()
    expected |= {"lora"} if lora else set()
    if "vision_config" in json.loads((run.run_dir / "smoke" / "model" / "config.json").read_text()):
        expected |= {"projector"} if train.projector else set()
        expected |= {"vision_tower"} if train.vision_tower is not False else set()
    assert {p["part"] for p in params.values() if p["trainable"]} == expected

    # A complete checkpoint, and final weights that load back with the trained values.
    checkpoint = run.output / f"checkpoint-{steps}"
    assert json.loads((checkpoint / "COMPLETE").read_text())["world_size"] == recipe.world_size
    loaded = fingerprint(_load_back(run, recipe))
    for name, p in params.items():
        if p["trainable"]:
            assert all(math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-3) for x, y in zip(loaded[name], p["after"])), name
