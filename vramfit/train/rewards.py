"""GRPO rewards: VLM-R1's REC task (IoU accuracy of the predicted box), the text task (the answer matches
the reference), and the think/answer format both share.

TRL calls each function with the batch's completions and the dataset's other columns as keyword
arguments (`solution` here) and logs its mean as `rewards/<function name>/mean`.
"""

from __future__ import annotations

import re

# The task's instruction appended to each referring expression (VLM-R1's QUESTION_TEMPLATE).
INSTRUCTION = (
    "First output the thinking process in <think> </think> tags and then output the final answer "
    "in <answer> </answer> tags. Output the bounding box as [x1, y1, x2, y2]."
)

# The text task's instruction, appended to the last user turn of a chat_jsonl record (the R1-style prompt).
TEXT_INSTRUCTION = "First output the thinking process in <think> </think> tags and then output the final answer in <answer> </answer> tags."

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = r"\s*(-?\d+(?:\.\d+)?)\s*"
BOX = re.compile(r"\[" + ",".join([NUMBER] * 4) + r"\]")
FORMAT = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)


def text_of(completion) -> str:
    """A completion as text: TRL passes strings, or for chat prompts [{"role": "assistant", "content": ...}]."""
    if isinstance(completion, str):
        return completion
    content = completion[-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def predicted_box(text: str) -> list[float] | None:
    """The first [x1, y1, x2, y2] inside <answer>...</answer>, or in the whole text when there is no answer tag."""
    answer = ANSWER.search(text)
    match = BOX.search(answer.group(1) if answer else text)
    return [float(v) for v in match.groups()] if match else None


def iou(a: list[float], b: list[float]) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def iou_accuracy_reward(completions, solution, **kwargs) -> list[float]:
    """1.0 when the predicted box overlaps the solution box with IoU > 0.5, else 0.0."""
    rewards = []
    for completion, box in zip(completions, solution):
        predicted = predicted_box(text_of(completion))
        rewards.append(1.0 if predicted is not None and iou(predicted, box) > 0.5 else 0.0)
    return rewards


def answer_format_reward(completions, **kwargs) -> list[float]:
    """1.0 for exactly `<think>...</think> <answer>...</answer>`, else 0.0."""
    return [1.0 if FORMAT.fullmatch(text_of(c).strip()) else 0.0 for c in completions]


def normalized(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .")


def answer_match_reward(completions, solution, **kwargs) -> list[float]:
    """Text GRPO: 1.0 when the text inside <answer>...</answer> (the whole completion when there is no tag)
    equals the reference answer, compared case- and whitespace-insensitively, else 0.0."""
    rewards = []
    for completion, reference in zip(completions, solution):
        text = text_of(completion)
        answer = ANSWER.search(text)
        got = answer.group(1) if answer else text
        rewards.append(1.0 if normalized(got) == normalized(str(reference)) else 0.0)
    return rewards
