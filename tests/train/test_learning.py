"""The stack learns, not only runs: one fixed-seed run per method family on its smoke task.

Each is the recipe's smoke variant (real entrypoint, launcher and DeepSpeed JSON, 2 ranks) with more
steps and a constant learning rate suited to a tiny random model. The tasks are learnable: repeat the
user's words (chat), name the square's colour (LLaVA conversations), answer in the <think>/<answer>
form with a box (REC GRPO).
"""

from __future__ import annotations

import statistics

import pytest

from train_support import Run, finite, launch


def _train(name: str, tmp_path, steps: int, learning_rate: float, *extra: str) -> Run:
    run = launch(
        name,
        tmp_path / "run",
        [f"max_steps={steps}", f"save_steps={steps}", f"learning_rate={learning_rate}", "lr_scheduler_type=constant", "warmup_steps=0", *extra],
    )
    assert run.result.returncode == 0, run.log
    return run


def _first_and_last(values: list[float], steps: int) -> tuple[float, float]:
    assert len(values) == steps and finite(values), values
    return statistics.fmean(values[:5]), statistics.fmean(values[-5:])


@pytest.mark.slow
def test_full_finetune_learns(tmp_path):
    run = _train("axolotl-llama-3b-8xa100-80g", tmp_path, 40, 0.003)
    first, last = _first_and_last(run.losses(), 40)
    assert last < 0.6 * first, run.losses()


@pytest.mark.slow
def test_lora_learns(tmp_path):
    run = _train("minicpmv-lora-8xa100-80g", tmp_path, 40, 0.003, "eval_steps=40")
    first, last = _first_and_last(run.losses(), 40)
    # The LLM is frozen apart from its attention adapters, lm_head included: with random weights its
    # logits stay within about +-1.3, so the loss cannot fall far below ~4.8 from ln(448) = 6.1.
    # Most of that gap closes: the adapters and the projector learn.
    assert last < first - 0.5, run.losses()


@pytest.mark.slow
def test_grpo_reward_rises(tmp_path):
    run = _train("vlm-r1-h20", tmp_path, 30, 0.002)
    rewards = [m["reward"] for m in run.metrics() if "reward" in m]
    first, last = _first_and_last(rewards, 30)
    assert last > first + 0.2, rewards
