"""Supervised finetuning (methods full, lora, qlora) on the Hugging Face Trainer."""

from __future__ import annotations

from pathlib import Path

from transformers import Trainer
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

from vramfit.train import data, modality
from vramfit.train.callbacks import quiet_printer
from vramfit.train.collate import Collator, Encoder, SupervisedDataset
from vramfit.train.model import is_vision_language, load_model, load_processing, trainable_summary


def build_trainer(recipe, args, callbacks: list) -> Trainer:
    processing = load_processing(recipe)
    encoder = Encoder(processing, recipe.data.max_length)
    # Every record is checked before the model is loaded: a bad file fails in seconds, not hours.
    train_set = SupervisedDataset(data.read(recipe, "train"), encoder, recipe.data.train_file)
    eval_set = SupervisedDataset(data.read(recipe, "eval"), encoder, recipe.data.eval_file) if recipe.data.eval_file else None
    model = load_model(recipe, args)
    if args.process_index == 0:
        print(f"vramfit: trainable parameters: {trainable_summary(model)}", flush=True)
        if args.use_liger_kernel:
            print(f"vramfit: Liger kernels applied to the {model.config.model_type} model", flush=True)
    if is_deepspeed_zero3_enabled() and is_vision_language(model.config):
        # ZeRO-3 gathers parameters collectively: a text-only batch must run the vision tower too.
        installed = modality.install(model)
        if args.process_index == 0:
            print(
                "vramfit: ZeRO-3: text-only batches run the vision tower on a zero image"
                if installed
                else f"vramfit: ZeRO-3: no zero-image hook for model type '{model.config.model_type}'; "
                "a text-only batch on one rank while another has images can hang",
                flush=True,
            )
    tokenizer = getattr(processing, "tokenizer", processing)
    return Trainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=Collator(tokenizer.pad_token_id),
        processing_class=processing,
        callbacks=callbacks,
    )


def train(recipe, args, output_dir: Path, callbacks: list) -> None:
    trainer = build_trainer(recipe, args, callbacks)
    quiet_printer(trainer)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    # ZeRO-3: the JSONs set stage3_gather_16bit_weights_on_model_save, so this writes full weights;
    # LoRA: the adapter (and the modules saved whole).
    trainer.save_model(str(output_dir))
