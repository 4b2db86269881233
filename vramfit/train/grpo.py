"""GRPO on TRL's GRPOTrainer, two tasks chosen by `data.format`:

- rec_jsonl: VLM-R1's referring-expression task. Each prompt is an image and a referring expression; the
  policy answers with a bounding box and is rewarded for IoU accuracy and the <think>/<answer> format.
- chat_jsonl: text. Each record's last assistant turn is the reference answer; the prompt is the turns
  before it, the task instruction appended to the last user turn; rewarded for an exact answer match and
  the format (vramfit.train.rewards).
"""

from __future__ import annotations

from pathlib import Path

from trl import GRPOTrainer

from vramfit.train import data
from vramfit.train.callbacks import quiet_printer
from vramfit.train.model import load_model, load_processing, trainable_summary
from vramfit.train.rewards import INSTRUCTION, TEXT_INSTRUCTION, answer_format_reward, answer_match_reward, iou_accuracy_reward


def rec_dataset(records: list[dict]):
    """TRL's conversational prompt format; the image column is decoded to PIL lazily by `datasets`."""
    import datasets

    rows = [{"prompt": [{"role": "user", "content": f"{r['problem']} {INSTRUCTION}"}], "image": str(r["image"]), "solution": r["solution"]} for r in records]
    return datasets.Dataset.from_list(rows).cast_column("image", datasets.Image())


def text_dataset(records: list[dict]):
    """Prompt = the turns before the last assistant turn (instruction appended to the last user turn);
    solution = that assistant turn's text."""
    import datasets

    rows = []
    for r in records:
        messages = r["messages"]
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        prompt = [dict(m) for m in messages[:last]]
        users = [i for i, m in enumerate(prompt) if m["role"] == "user"]
        if users:
            prompt[users[-1]]["content"] = f"{prompt[users[-1]]['content']} {TEXT_INSTRUCTION}"
        else:
            prompt.append({"role": "user", "content": TEXT_INSTRUCTION})
        rows.append({"prompt": prompt, "solution": messages[last]["content"]})
    return datasets.Dataset.from_list(rows)


def task(recipe):
    """(dataset, reward functions) for the recipe's data format."""
    records = data.read(recipe, "train")
    if recipe.data.format == "chat_jsonl":
        return text_dataset(records), [answer_match_reward, answer_format_reward]
    return rec_dataset(records), [iou_accuracy_reward, answer_format_reward]


def train(recipe, args, output_dir: Path, callbacks: list) -> None:
    processor = load_processing(recipe)
    dataset, rewards = task(recipe)
    model = load_model(recipe, args)
    if args.process_index == 0:
        print(f"vramfit: trainable parameters: {trainable_summary(model)}", flush=True)
    trainer = GRPOTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=dataset, processing_class=processor, callbacks=callbacks)
    quiet_printer(trainer)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model(str(output_dir))
