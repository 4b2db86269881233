"""GRPO for vision-language models on TRL's GRPOTrainer: VLM-R1's referring-expression task.

Each prompt is an image and a referring expression; the policy answers with a bounding box and is
rewarded for IoU accuracy and for the <think>/<answer> format (vramfit.train.rewards).
"""
from __future__ import annotations

from pathlib import Path

from trl import GRPOTrainer

from vramfit.train import data
from vramfit.train.callbacks import quiet_printer
from vramfit.train.model import load_model, load_processing, trainable_summary
from vramfit.train.rewards import INSTRUCTION, answer_format_reward, iou_accuracy_reward


def rec_dataset(records: list[dict]):
    """TRL's conversational prompt format; the image column is decoded to PIL lazily by `datasets`."""
    import datasets

    rows = [{"prompt": [{"role": "user", "content": f"{r['problem']} {INSTRUCTION}"}],
             "image": str(r["image"]), "solution": r["solution"]} for r in records]
    return datasets.Dataset.from_list(rows).cast_column("image", datasets.Image())


def train(recipe, args, output_dir: Path, callbacks: list) -> None:
    processor = load_processing(recipe)
    dataset = rec_dataset(data.read(recipe, "train"))
    model = load_model(recipe, args)
    if args.process_index == 0:
        print(f"vramfit: trainable parameters: {trainable_summary(model)}", flush=True)
    trainer = GRPOTrainer(model=model, reward_funcs=[iou_accuracy_reward, answer_format_reward], args=args,
                          train_dataset=dataset, processing_class=processor, callbacks=callbacks)
    quiet_printer(trainer)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model(str(output_dir))
