"""VLM-R1's REC rewards."""

from __future__ import annotations

from hypothesis import given, strategies as st

from vramfit.train.rewards import answer_format_reward, iou, iou_accuracy_reward, predicted_box

BOX = [10, 20, 50, 60]


def test_box_is_read_from_the_answer_tag_first():
    assert predicted_box("<think>[0, 0, 1, 1]</think><answer>[10, 20.5, 50, 60]</answer>") == [10, 20.5, 50, 60]
    assert predicted_box("the box is [10,20,50,60].") == [10, 20, 50, 60]
    assert predicted_box("<answer>no box</answer> [1, 2, 3, 4]") is None
    assert predicted_box("[1, 2, 3]") is None


def test_iou_accuracy_needs_more_than_half_overlap():
    completions = ["<answer>[10, 20, 50, 60]</answer>", "<answer>[12, 22, 50, 60]</answer>", "<answer>[30, 40, 70, 80]</answer>", "no answer"]
    assert iou_accuracy_reward(completions, [BOX] * 4) == [1.0, 1.0, 0.0, 0.0]


def test_conversational_completions():
    completion = [{"role": "assistant", "content": "<think>left</think> <answer>[10, 20, 50, 60]</answer>"}]
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "<think>x</think><answer>[1, 1, 2, 2]</answer>"}]}]
    assert iou_accuracy_reward([completion, parts], [BOX, BOX]) == [1.0, 0.0]
    assert answer_format_reward([completion, parts]) == [1.0, 1.0]


def test_format_is_think_then_answer_and_nothing_else():
    assert answer_format_reward(
        [
            "<think>a\nb</think>\n<answer>[1, 2, 3, 4]</answer>",
            "<answer>x</answer>",
            "<think>a</think><answer>x</answer> trailing",
            "<answer>x</answer><think>a</think>",
        ]
    ) == [1.0, 0.0, 0.0, 0.0]


boxes = st.tuples(st.floats(0, 100), st.floats(0, 100), st.floats(1, 50), st.floats(1, 50)).map(lambda t: [t[0], t[1], t[0] + t[2], t[1] + t[3]])


@given(boxes, boxes)
def test_iou_is_a_symmetric_overlap_ratio(a, b):
    assert 0.0 <= iou(a, b) <= 1.0
    assert abs(iou(a, b) - iou(b, a)) < 1e-9
    assert abs(iou(a, a) - 1.0) < 1e-9


def test_text_answer_match_reward():
    from vramfit.train.rewards import answer_match_reward

    completions = [
        "<think>x</think><answer> Alpha  beta.</answer>",
        "<answer>alpha gamma</answer>",
        "alpha beta",
        [{"role": "assistant", "content": "<think>y</think> <answer>alpha beta</answer>"}],
    ]
    assert answer_match_reward(completions, ["alpha beta"] * 4) == [1.0, 0.0, 1.0, 1.0]


def test_text_grpo_prompt_is_the_turns_before_the_last_answer():
    from vramfit.train.grpo import text_dataset
    from vramfit.train.rewards import TEXT_INSTRUCTION

    records = [
        {
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Repeat: a b"}, {"role": "assistant", "content": "a b"}],
            "images": [],
        }
    ]
    row = text_dataset(records)[0]
    assert row["solution"] == "a b"
    assert row["prompt"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"Repeat: a b {TEXT_INSTRUCTION}"}]
    assert records[0]["messages"][1]["content"] == "Repeat: a b"  # the record itself is not modified
