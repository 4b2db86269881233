"""Measured GPU memory and throughput per recipe, next to the planner's prediction (issue 8).

Every case trains real architecture sizes (model_configs/*.json) from random weights on ONE GPU,
through the same stack the recipes use (transformers Trainer / TRL GRPOTrainer / DeepSpeed), and
records for the steps after the warm-up:

- peak allocated (`torch.cuda.max_memory_allocated`) and reserved (`max_memory_reserved`), in GiB;
- tokens/s over the timed steps (`torch.cuda.synchronize` at every step boundary);
- the planner's prediction for the same settings on one GPU (`Setup.from_args(model_config, gpu,
  gpus=1, deepspeed, overrides)`, gpu = the catalogue card matching the device) and its error:
  planner allocated vs measured allocated (`Plan.measure("allocated")`: both count tensors only).

Cases (see `--list`):
- Llama-3.2-3B full finetune at 4k, micro-batch 1 / 2 / 4, gradient checkpointing off / on,
  Liger off / on (12; recipe axolotl-llama-3b-8xa100-80g);
- Qwen2.5-VL-3B GRPO at the vlm-r1-h20 recipe's generation settings (TRL GRPOTrainer, a generated
  REC prompt of exactly data.max_length tokens with a max_pixels image, a constant reward);
- LLaVA-1.5-7B (ShareGPT4V architecture) at 2048 tokens with 576 image tokens: LoRA, full finetune,
  and both under single-rank DeepSpeed ZeRO-3 with parameter + optimizer offload
  (deepspeed_configs/zero3_offload_optimizer_params.json; recipe sharegpt4v-7b-8xa100-40g).

Each case runs in its own subprocess (fresh CUDA context; an OOM is recorded as
{"oom": true, "at": <phase>}, never a crash of the benchmark). `--emulate 40,80,96` also checks
fit / OOM on smaller cards with `torch.cuda.set_per_process_memory_fraction(card / device)` next to
the planner's verdict for that card.

Usage:
    python benchmarks/gpu_memory.py --list                 # cases, settings, planner predictions (CPU)
    python benchmarks/gpu_memory.py --dry-run              # + build every model on the meta device (CPU)
    python benchmarks/gpu_memory.py --all                  # measure everything (GPU, ~17 min estimated on an H100)
    python benchmarks/gpu_memory.py --case llama3b-4k-mb1-gc-liger --steps 3 --out /tmp/bench
    python benchmarks/gpu_memory.py --all --emulate 40,80,96
    python benchmarks/gpu_memory.py --compare              # measured.json vs analytic planner vs trace (CPU)

Results: recipes/<recipe>/measured.json for the recipe each case belongs to (or <--out>/<recipe>/
measured.json); `python -m vramfit.docs` then shows the recipe's own case in its README.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

GIB = 2**30
EXIT_NO_CUDA = 2
PLANNER_TARGET_PCT = 10.0  # the planner within 10% of the measured peak allocated, every case
LIGER_PEAK_TARGET = 0.40  # Liger: Llama-3.2-3B at 4k peak >= 40% lower, throughput not lower
DEFAULT_CARD = "h100"  # the planner's card for --list / --dry-run (no device to match)
# --emulate: a card size (GiB on the box) or a catalogue name -> the catalogue card.
EMULATE_CARDS = {"16": "t4", "24": "rtx4090", "32": "v100-32g", "40": "a100-40g", "48": "l40s", "80": "a100-80g", "96": "h20", "141": "h200"}
OFFLOAD_JSON = "deepspeed_configs/zero3_offload_optimizer_params.json"
# LLaVA-1.5's own LoRA finetune (haotian-liu/LLaVA scripts/v1_5/finetune_lora.sh): r 128, alpha 256,
# every linear of the LLM (find_all_linear_names skips the vision tower and projector); the
# projector trains in full (mm_projector_lr), not as a PEFT copy.
LLAVA_LORA = {"r": 128, "alpha": 256, "dropout": 0.05, "targets": r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"}
EMULATE_SCHEDULE = (1, 1)  # warm-up, timed steps of a capped re-run
TIMEOUT_S = 1200  # one case, wall clock (subprocess killed past it)
SEED = 1234


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    name: str
    recipe: str  # the recipe folder whose measured.json gets the result
    kind: str  # causal_lm | llava | grpo
    model_config: str
    micro_batch: int
    seq_len: int  # tokens per sample (GRPO: prompt tokens, image tokens included)
    gradient_checkpointing: bool
    liger: bool = False
    method: str = "full"  # full | lora | grpo
    deepspeed: str | None = None
    # The recipe's own settings, whose peak is measured.json's top-level figure (vramfit/docs.py shows
    # it): 1 = first choice, 2 = the fallback when the first OOMs or is skipped, 0 = not.
    recipe_own: int = 0
    warmup: int = 3
    steps: int = 5
    estimate_s: int = 60  # device seconds on an H100, subprocess start to exit
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def settings(self) -> dict[str, Any]:
        s: dict[str, Any] = {
            "model_config": self.model_config,
            "method": self.method,
            "seq_len": self.seq_len,
            "per_device_train_batch_size": self.micro_batch,
            "gradient_checkpointing": self.gradient_checkpointing,
            "use_liger_kernel": self.liger,
            "precision": "bf16",
            "gpus": 1,
            "engine": f"deepspeed ({Path(self.deepspeed).name})" if self.deepspeed else "single GPU (no DeepSpeed)",
        }
        s.update(self.extra)
        return s


def _recipe(name: str):
    from vramfit.recipe import load

    return load(REPO / "recipes" / name / "recipe.yaml")


@functools.lru_cache(maxsize=1)
def build_cases() -> dict[str, Case]:
    """Every case, with the settings read from the recipes they belong to."""
    cases: list[Case] = []

    llama = _recipe("axolotl-llama-3b-8xa100-80g")
    t = llama.training
    seq = llama.data.max_length  # 4096
    own = (int(t["per_device_train_batch_size"]), bool(t["gradient_checkpointing"]), bool(t["use_liger_kernel"]))
    for mb in (1, 2, 4):
        for gc in (False, True):
            for liger in (False, True):
                name = f"llama3b-4k-mb{mb}" + ("-gc" if gc else "") + ("-liger" if liger else "")
                cases.append(
                    Case(
                        name,
                        llama.name,
                        "causal_lm",
                        llama.model.config,
                        mb,
                        seq,
                        gc,
                        liger,
                        recipe_own=int((mb, gc, liger) == own),
                        estimate_s=25 + 4 * mb + (3 * mb if gc else 0),
                    )
                )

    grpo = _recipe("vlm-r1-h20")
    g = grpo.training
    cases.append(
        Case(
            "qwen2.5vl-3b-grpo",
            grpo.name,
            "grpo",
            grpo.model.config,
            int(g["per_device_train_batch_size"]),
            grpo.data.max_length,
            bool(g.get("gradient_checkpointing", True)),
            method="grpo",
            recipe_own=1,
            warmup=1,
            steps=2,
            estimate_s=240,
            extra={
                "gradient_accumulation_steps": int(g["gradient_accumulation_steps"]),
                "num_generations": int(g["num_generations"]),
                "max_completion_length": int(g["max_completion_length"]),
                "beta": float(g.get("beta", 0.0)),
                "temperature": float(g.get("temperature", 1.0)),
                "max_pixels": int(grpo.data.max_pixels),
                "images_per_sample": 1,
                "train_vision": grpo.model.train.vision_tower is True,
                "completions_per_generate": int(g["per_device_train_batch_size"]) * int(g.get("steps_per_generation") or g["gradient_accumulation_steps"]),
            },
        )
    )

    llava = _recipe("sharegpt4v-7b-8xa100-40g")
    lt = llava.training
    mb, seq, gc = int(lt["per_device_train_batch_size"]), llava.data.max_length, bool(lt["gradient_checkpointing"])
    lora = {
        "lora_r": LLAVA_LORA["r"],
        "lora_alpha": LLAVA_LORA["alpha"],
        "lora_dropout": LLAVA_LORA["dropout"],
        "lora_target_modules": LLAVA_LORA["targets"],
        "train_projector": True,
    }
    image = {"images_per_sample": 1, "image_tokens": 576, "train_vision": False}
    cases += [
        Case("llava7b-2k-lora", llava.name, "llava", llava.model.config, mb, seq, gc, method="lora", estimate_s=70, extra={**image, **lora}),
        Case("llava7b-2k-full", llava.name, "llava", llava.model.config, mb, seq, gc, recipe_own=2, estimate_s=90, extra=image),
        Case(
            "llava7b-2k-lora-zero3-offload",
            llava.name,
            "llava",
            llava.model.config,
            mb,
            seq,
            gc,
            method="lora",
            deepspeed=OFFLOAD_JSON,
            warmup=2,
            steps=3,
            estimate_s=180,
            extra={**image, **lora},
        ),
        Case(
            "llava7b-2k-full-zero3-offload",
            llava.name,
            "llava",
            llava.model.config,
            mb,
            seq,
            gc,
            deepspeed=OFFLOAD_JSON,
            recipe_own=1,
            warmup=2,
            steps=3,
            estimate_s=420,
            extra=image,
        ),
    ]
    return {c.name: c for c in cases}


# ----------------------------------------------------------------------------------------------
# The planner's prediction
# ----------------------------------------------------------------------------------------------
def planner_overrides(case: Case, attn: str, expandable: bool) -> dict[str, Any]:
    """The case's settings as `vramfit plan --model-config` keys (Setup.from_args)."""
    o: dict[str, Any] = {
        "per_device_train_batch_size": case.micro_batch,
        "gradient_checkpointing": case.gradient_checkpointing,
        "bf16": True,
        "attn_implementation": attn,
        "expandable_segments": expandable,
    }
    e = case.extra
    if case.kind == "causal_lm":
        o.update(seq_len=case.seq_len, use_liger_kernel=case.liger)
    elif case.kind == "llava":
        o.update(seq_len=case.seq_len, images_per_sample=1)
        if case.method == "lora":
            o.update(
                method="lora",
                lora_r=e["lora_r"],
                lora_dropout=e["lora_dropout"],
                lora_target_modules=e["lora_target_modules"],
                train_projector=e["train_projector"],
            )  # the planner leaves the projector frozen under LoRA unless told
    elif case.kind == "grpo":
        o.update(
            method="grpo",
            max_prompt_length=case.seq_len,
            gradient_accumulation_steps=e["gradient_accumulation_steps"],
            num_generations=e["num_generations"],
            max_completion_length=e["max_completion_length"],
            beta=e["beta"],
            max_pixels=e["max_pixels"],
            images_per_sample=1,
            train_vision=e["train_vision"],
        )
    return o


def predict(case: Case, gpu: str, attn: str = "sdpa", expandable: bool = True, host_ram_gib: float | None = None) -> dict[str, Any]:
    """The planner's numbers for `case` on one `gpu` (catalogue name)."""
    from vramfit.planner import Setup, plan

    overrides = planner_overrides(case, attn, expandable)
    if host_ram_gib:
        overrides["host_ram_gib"] = float(host_ram_gib)
    ds = str(REPO / case.deepspeed) if case.deepspeed else None
    p = plan(Setup.from_args(REPO / case.model_config, gpu, 1, deepspeed=ds, overrides=overrides))
    return {
        "gpu": gpu,
        "allocated_gib": p.measure("allocated"),
        "reserved_gib": p.measure("reserved"),
        "device_gib": p.per_gpu_peak_gib,
        "peak_phase": p.peak_phase,
        "fits": p.fits,
        "card_gib": p.gpu_memory_gib,
        "host_ram_gib": p.host_ram_gib,
        "host_ram_fits": p.host_ram_fits,
        "parameters": p.parameters,
        "overrides": overrides,
    }


def card_for_device(name: str, total_gib: float) -> str:
    """The catalogue card for a CUDA device: by name when its size agrees, else the nearest size."""
    from benchmarks.calibration import scenario_gpu
    from vramfit.hardware import CATALOGUE

    try:
        gpu = scenario_gpu(name)
        if abs(CATALOGUE[gpu].memory_gib - total_gib) <= 0.05 * total_gib:
            return gpu
    except KeyError:
        pass
    return min(CATALOGUE, key=lambda g: abs(CATALOGUE[g].memory_gib - total_gib))


def emulated_card(text: str) -> str:
    from vramfit.hardware import CATALOGUE

    key = text.strip().lower().removesuffix("gb").removesuffix("g")
    if text.strip().lower() in CATALOGUE:
        return text.strip().lower()
    if key in EMULATE_CARDS:
        return EMULATE_CARDS[key]
    raise argparse.ArgumentTypeError(f"--emulate: unknown card '{text}' (use sizes {', '.join(EMULATE_CARDS)} or catalogue names {', '.join(CATALOGUE)})")


# ----------------------------------------------------------------------------------------------
# Building a case (shared by --dry-run on the meta device and the measuring subprocess)
# ----------------------------------------------------------------------------------------------
def load_config(path: str | Path):
    """A model_configs/*.json as a transformers config: `_` keys dropped, AutoConfig.for_model."""
    from transformers import AutoConfig

    def clean(node):
        if isinstance(node, dict):
            return {k: clean(v) for k, v in node.items() if not k.startswith("_") and k != "torch_dtype"}
        return node

    values = clean(json.loads((REPO / path).read_text()))
    return AutoConfig.for_model(values.pop("model_type"), **values)


@dataclass
class Geometry:
    """What a case really feeds the model (checked by --dry-run, recorded with the result)."""

    seq_len: int
    image_tokens: int = 0
    completion_len: int = 0
    prompt_len: int = 0
    tokens_per_step: int = 0


TINY = {"seq_len": 64, "grpo_prompt": 128, "grpo_completion": 8, "grpo_pixels": 56 * 56, "vocab": 512}


def build_model(case: Case, device: str, tiny: bool, attn: str, zero3: bool = False):
    """The model with random weights, frozen / LoRA / Liger as the case says; returns (model, config, extras)."""
    import torch
    import transformers

    from vramfit.train import smoke

    config = load_config(case.model_config)
    extras: dict[str, Any] = {}
    if case.kind == "grpo":
        tokenizer = smoke.build_tokenizer(config.model_type, smoke.corpus())
        if tiny:
            smoke.shrink(config, len(tokenizer), "bfloat16")
        smoke.set_token_ids(config, tokenizer)
        extras["tokenizer"] = tokenizer
    elif tiny:
        smoke.shrink(config, TINY["vocab"], "bfloat16")
        if case.kind == "llava":
            config.image_token_id = TINY["vocab"] - 2
            config.pad_token_id = TINY["vocab"] - 1
    dtype = torch.float32 if tiny else torch.bfloat16
    cls = {"causal_lm": transformers.AutoModelForCausalLM, "llava": transformers.AutoModelForImageTextToText, "grpo": transformers.AutoModelForImageTextToText}[
        case.kind
    ]
    torch.manual_seed(SEED)
    # On the device directly (no CPU copy); under ZeRO-3 from_config builds it inside zero.Init instead.
    with contextlib.nullcontext() if zero3 else torch.device(device):
        model = cls.from_config(config, dtype=dtype, attn_implementation=attn)
        if case.kind == "llava":
            model = _llava_trainable(model, case)
    if case.liger and not tiny:
        from vramfit.train.model import apply_liger

        apply_liger(model, None)  # the entrypoint's own patch (liger-kernel's instance patch)
    return model, config, extras


def _llava_trainable(model, case: Case):
    """LLM + projector train, CLIP frozen (the recipe's model.train); LoRA: adapters on the LLM, the projector in full."""
    from vramfit.train.model import part_of

    if case.method == "lora":
        from peft import LoraConfig, get_peft_model

        e = case.extra
        model = get_peft_model(
            model,
            LoraConfig(
                r=e["lora_r"], lora_alpha=e["lora_alpha"], lora_dropout=e["lora_dropout"], target_modules=e["lora_target_modules"], task_type="CAUSAL_LM"
            ),
        )
        for name, param in model.named_parameters():
            if part_of(name) == "projector":
                param.requires_grad = True
        return model
    for name, param in model.named_parameters():
        param.requires_grad = part_of(name) != "vision_tower"
    return model


def count_parameters(model) -> dict[str, int]:
    total = trainable = 0
    for p in model.parameters():
        n = p.ds_numel if hasattr(p, "ds_numel") else p.numel()
        total += n
        trainable += n if p.requires_grad else 0
    return {"total": total, "trainable": trainable}


class TokenData:
    """Random fixed-length training samples (torch Dataset protocol); LLaVA samples carry one image."""

    def __init__(self, n: int, seq: int, vocab: int, dtype, image=None):
        import torch

        g = torch.Generator().manual_seed(SEED)
        self.ids = torch.randint(3, min(vocab, 32000) - 2, (n, seq), generator=g)
        self.labels = self.ids.clone()
        self.image = image  # (token id, tokens, pixel shape)
        self.dtype = dtype
        if image:
            token, count, _ = image
            self.ids[:, 1 : 1 + count] = token
            self.labels[:, : 1 + count] = -100
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        item = {"input_ids": self.ids[i], "labels": self.labels[i]}
        if self.image:
            g = torch.Generator().manual_seed(SEED + i)
            item["pixel_values"] = torch.randn(self.image[2], generator=g).to(self.dtype)
        return item


def llava_geometry(config, case: Case, tiny: bool) -> tuple[int, int, int]:
    """(image token id, LLM tokens per image, image side in px) for a LLaVA config."""
    vision = config.vision_config
    tokens = (vision.image_size // vision.patch_size) ** 2  # CLS dropped (select_strategy "default")
    return config.image_token_id, tokens, vision.image_size


def grpo_prompts(case: Case, config, tokenizer, tiny: bool):
    """The processor, the REC prompt padded to exactly `seq_len` prompt tokens and its image."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from vramfit.train import smoke
    from vramfit.train.rewards import INSTRUCTION

    max_pixels = TINY["grpo_pixels"] if tiny else case.extra["max_pixels"]
    target = TINY["grpo_prompt"] if tiny else case.seq_len
    processor = smoke.build_processor(config, tokenizer)
    processor.image_processor = Qwen2VLImageProcessorPil(size={"shortest_edge": 56 * 56, "longest_edge": max_pixels})
    # An image of exactly max_pixels in whole 28 px cells (the worst case the recipe allows), aspect 5:4.
    cell = 28
    cells = max_pixels // (cell * cell)
    w = max(c for c in range(1, int(math.sqrt(cells * 1.25)) + 1) if cells % c == 0)
    image = Image.new("RGB", (w * cell, cells // w * cell), (245, 245, 245))
    base = smoke.REC_PROBLEM.format("red") + " " + INSTRUCTION

    def length(text: str) -> tuple[int, int]:
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        out = processor.apply_chat_template([msgs], add_generation_prompt=True, tokenize=True, return_dict=True, processor_kwargs={"images": [[image]]})
        ids = list(out["input_ids"][0])
        return len(ids), sum(1 for t in ids if t == config.image_token_id)

    n0, image_tokens = length(base)
    filler = max(0, target - n0)
    text = base + " a" * filler
    for _ in range(4):  # " a" is one token each; correct if the tokenizer merged any
        n, _ = length(text)
        if n == target or filler == 0:
            break
        filler += target - n
        text = base + " a" * max(0, filler)
    prompt_len, _ = length(text)
    return processor, text, image, Geometry(seq_len=prompt_len, image_tokens=image_tokens, prompt_len=prompt_len)


def grpo_dataset(text: str, image, rows: int):
    import datasets

    return datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": text}], "image": image} for _ in range(rows)])


def constant_reward(completions, **kwargs) -> list[float]:
    """Memory does not depend on the reward: a constant one (advantages 0, the KL term still trains)."""
    return [0.0] * len(completions)


# ----------------------------------------------------------------------------------------------
# --dry-run: every case's model on the meta device and its inputs, no GPU
# ----------------------------------------------------------------------------------------------
def dry_run_case(case: Case, attn: str) -> dict[str, Any]:
    import torch

    model, config, extras = build_model(case, "meta", tiny=False, attn=attn)
    counts = count_parameters(model)
    if case.kind == "grpo":
        _, _, _, geo = grpo_prompts(case, config, extras["tokenizer"], tiny=False)
        geo.completion_len = case.extra["max_completion_length"]
    elif case.kind == "llava":
        token, tokens, side = llava_geometry(config, case, False)
        data = TokenData(1, case.seq_len, config.get_text_config().vocab_size, torch.bfloat16, (token, tokens, (3, side, side)))
        geo = Geometry(seq_len=int(data[0]["input_ids"].numel()), image_tokens=int((data[0]["input_ids"] == token).sum()))
    else:
        geo = Geometry(seq_len=case.seq_len)
    return {"parameters": counts, "geometry": geo.__dict__, "model": type(model).__name__}


# ----------------------------------------------------------------------------------------------
# The measuring subprocess
# ----------------------------------------------------------------------------------------------
def is_oom(exc: BaseException) -> bool:
    import torch

    text = str(exc)
    return (
        isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in text or "CUDA_ERROR_OUT_OF_MEMORY" in text
    )


def where_in(exc: BaseException) -> str:
    """The part of a training step a traceback died in."""
    frames = traceback.extract_tb(exc.__traceback__)
    names = [(f.name, f.filename.replace("\\", "/")) for f in frames]
    if any(n in ("generate", "_sample") for n, _ in names):
        return "generation"
    if any(n == "_generate_and_score_completions" for n, _ in names):
        return "scoring (old / reference log-probs)"
    if any(n in ("backward", "_engine_run_backward") for n, _ in names):
        return "backward"
    if any(n == "step" and ("optim" in f or "deepspeed" in f) for n, f in names) or any("adam" in n.lower() for n, _ in names):
        return "optimizer step"
    if any(n == "forward" for n, _ in names):
        return "forward"
    return ""


class Phase:
    """The subprocess's current phase, mirrored to a file so a hard crash still says where."""

    def __init__(self, path: Path | None):
        self.path, self.now = path, "start"

    def set(self, text: str) -> None:
        self.now = text
        if self.path:
            self.path.write_text(text)


def make_meter(warmup: int, steps: int, cuda: bool, phase: Phase):
    import torch
    from transformers import TrainerCallback

    class Meter(TrainerCallback):
        """Step times (synchronised) and the peaks before / after the warm-up."""

        def __init__(self):
            self.times: list[float] = []
            self.last = None
            self.warm_peak = (0, 0)
            self.steady = None
            self.final_peak = None

        def _sync(self):
            if cuda:
                torch.cuda.synchronize()
            return time.perf_counter()

        def on_train_begin(self, args, state, control, **kw):
            self.last = self._sync()
            phase.set("warm-up step 1" if warmup else "timed step 1")

        def on_step_end(self, args, state, control, **kw):
            now = self._sync()
            n = state.global_step
            if n > warmup:
                self.times.append(now - self.last)
            if n == warmup and cuda:
                self.warm_peak = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
                self.steady = torch.cuda.memory_allocated()  # weights + optimizer states, gradients freed
                torch.cuda.reset_peak_memory_stats()
            if n == warmup + steps and cuda:
                self.final_peak = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
            nxt = n + 1
            phase.set(f"warm-up step {nxt}" if nxt <= warmup else f"timed step {nxt - warmup}")
            self.last = now  # a step runs from one step end to the next: its batch fetch is timed too

    return Meter()


def training_arguments(case: Case, out: str, cuda: bool, warmup: int, steps: int, ds: dict | None):
    from transformers import TrainingArguments

    kw: dict[str, Any] = dict(
        output_dir=out,
        per_device_train_batch_size=case.micro_batch,
        max_steps=warmup + steps,
        learning_rate=1e-6 if case.kind == "grpo" else 1e-5,
        lr_scheduler_type="constant",
        bf16=cuda,
        gradient_checkpointing=case.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False},
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        dataloader_num_workers=0,
        seed=42,
        use_cpu=not cuda,
        disable_tqdm=True,
        deepspeed=ds,
    )
    if case.kind == "grpo":
        from trl import GRPOConfig

        e = case.extra
        kw.update(
            gradient_accumulation_steps=e["gradient_accumulation_steps"],
            num_generations=e["num_generations"],
            max_completion_length=e["max_completion_length"],
            beta=e["beta"],
            temperature=e["temperature"],
            # every completion runs to max_completion_length: a random policy's EOS would end some early
            generation_kwargs={"min_new_tokens": e["max_completion_length"]},
        )
        return GRPOConfig(**kw)
    return TrainingArguments(**kw)


def _distributed_env() -> None:
    """One rank for DeepSpeed (accelerate builds the process group from these)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        os.environ.setdefault(key, value)


def build_trainer(case: Case, cuda: bool, tiny: bool, attn: str, warmup: int, steps: int, out: str, phase: Phase):
    """(trainer, geometry, parameter counts) for one case."""
    import torch
    from transformers import Trainer, default_data_collator

    ds = json.loads((REPO / case.deepspeed).read_text()) if case.deepspeed else None
    if ds is not None:
        _distributed_env()
        if not cuda:
            from vramfit.train import cpu_shims

            cpu_shims.install()
    device = "cuda" if cuda else "cpu"
    if tiny:
        case = _tiny(case)
    # Arguments first: with a ZeRO-3 JSON they make from_config build the model under zero.Init.
    args = training_arguments(case, out, cuda, warmup, steps, ds)
    phase.set("build model")
    model, config, extras = build_model(case, device, tiny, attn, zero3=ds is not None)
    counts = count_parameters(model)
    dtype = torch.bfloat16 if cuda else torch.float32
    samples = case.micro_batch * (warmup + steps) * args.gradient_accumulation_steps
    if case.kind == "grpo":
        import trl.trainer.grpo_trainer as grpo_trainer
        from trl import GRPOTrainer

        processor, text, image, geo = grpo_prompts(case, config, extras["tokenizer"], tiny)
        e = case.extra
        geo.completion_len = e["max_completion_length"]
        per_step = case.micro_batch * args.steps_per_generation
        geo.tokens_per_step = per_step * (geo.prompt_len + geo.completion_len)
        policy = model
        # TRL builds the beta > 0 reference model from the policy's checkpoint path; there is none (random
        # weights, no Hub), so it gets the policy's copy: the same weights TRL would load.
        original = grpo_trainer.create_model_from_path
        grpo_trainer.create_model_from_path = lambda *a, **k: __import__("copy").deepcopy(policy)
        try:
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=[constant_reward],
                args=args,
                train_dataset=grpo_dataset(text, image, max(16, samples // e["num_generations"])),
                processing_class=processor,
            )
        finally:
            grpo_trainer.create_model_from_path = original
        return trainer, geo, counts
    vocab = config.get_text_config().vocab_size
    if case.kind == "llava":
        token, tokens, side = llava_geometry(config, case, tiny)
        data = TokenData(samples, case.seq_len, vocab, dtype, (token, tokens, (3, side, side)))
        geo = Geometry(seq_len=case.seq_len, image_tokens=tokens)
    else:
        data = TokenData(samples, case.seq_len, vocab, dtype)
        geo = Geometry(seq_len=case.seq_len)
    geo.tokens_per_step = case.micro_batch * case.seq_len * args.gradient_accumulation_steps
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=default_data_collator)
    return trainer, geo, counts


def _tiny(case: Case) -> Case:
    """The same case shrunk for a CPU wiring check (2 layers, a tiny width, short sequences)."""
    from dataclasses import replace

    if case.kind == "grpo":
        return replace(
            case, seq_len=TINY["grpo_prompt"], extra={**case.extra, "max_completion_length": TINY["grpo_completion"], "max_pixels": TINY["grpo_pixels"]}
        )
    return replace(case, seq_len=TINY["seq_len"])


def child_main(opts) -> int:
    """Run one case; write its result JSON (also on OOM or error)."""
    result_path = Path(opts.result)
    phase = Phase(result_path.with_suffix(".phase"))
    case = build_cases()[opts.child]
    result: dict[str, Any] = {"name": case.name, "oom": False, "tiny": opts.tiny}
    meter = None
    try:
        import torch

        cuda = torch.cuda.is_available() and not opts.cpu
        result["cuda"] = cuda
        if cuda:
            torch.cuda.init()
            torch.cuda.set_device(0)
            torch.empty(1, device="cuda")  # create the context now: its size is measured, not the model's
            free, total = torch.cuda.mem_get_info()
            result.update(device_name=torch.cuda.get_device_name(), total_gib=total / GIB, context_gib=(total - free - torch.cuda.memory_reserved()) / GIB)
            if opts.fraction:
                torch.cuda.set_per_process_memory_fraction(opts.fraction)
                result["memory_fraction"] = opts.fraction
        with tempfile.TemporaryDirectory(prefix="gpu_memory_") as out:
            trainer, geo, counts = build_trainer(case, cuda, opts.tiny, opts.attn, opts.warmup, opts.steps, out, phase)
            result.update(geometry=geo.__dict__, parameters=counts, tiny=opts.tiny, deepspeed_engine=bool(getattr(trainer, "is_deepspeed_enabled", False)))
            meter = make_meter(opts.warmup, opts.steps, cuda, phase)
            trainer.add_callback(meter)
            phase.set("trainer setup (optimizer, DeepSpeed engine)")
            trainer.train()
        times = meter.times
        result.update(
            step_times_s=times,
            tokens_per_step=geo.tokens_per_step,
            tokens_per_s=geo.tokens_per_step * len(times) / sum(times) if times and sum(times) > 0 else None,
        )
        if cuda:
            alloc, reserved = meter.final_peak or (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
            result.update(
                peak_allocated_gib=alloc / GIB,
                peak_reserved_gib=reserved / GIB,
                run_peak_allocated_gib=max(alloc, meter.warm_peak[0]) / GIB,
                run_peak_reserved_gib=max(reserved, meter.warm_peak[1]) / GIB,
                steady_allocated_gib=(meter.steady or 0) / GIB,
            )
    except BaseException as exc:  # noqa: BLE001 - recorded, the parent goes on with the next case
        where = where_in(exc)
        at = phase.now + (f": {where}" if where else "")
        if is_oom(exc):
            result.update(oom=True, at=at, message=str(exc).splitlines()[0][:300] if str(exc) else "out of memory")
            try:
                import torch

                if torch.cuda.is_available():
                    result["peak_allocated_before_oom_gib"] = torch.cuda.max_memory_allocated() / GIB
            except Exception:  # noqa: BLE001
                pass
        else:
            result.update(error=f"{type(exc).__name__}: {exc}"[:2000], at=at, traceback=traceback.format_exc()[-4000:])
    result_path.write_text(json.dumps(result, indent=1))
    return 0


# ----------------------------------------------------------------------------------------------
# The parent: run each case in a subprocess, emulate smaller cards, write measured.json, report
# ----------------------------------------------------------------------------------------------
def run_child(case: Case, opts, fraction: float | None, workdir: Path, tag: str = "", schedule: tuple[int, int] | None = None) -> dict[str, Any]:
    """One case in a fresh process (its own CUDA context); `schedule` = (warm-up, timed) steps."""
    result = workdir / f"{case.name}{tag}.json"
    log = workdir / f"{case.name}{tag}.log"
    warmup = opts.warmup if opts.warmup is not None else case.warmup
    steps = opts.steps if opts.steps is not None else case.steps
    if schedule:
        warmup, steps = schedule
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        case.name,
        "--result",
        str(result),
        "--warmup",
        str(warmup),
        "--steps",
        str(steps),
        "--attn",
        opts.attn,
    ]
    if fraction:
        cmd += ["--fraction", f"{fraction:.6f}"]
    if opts.tiny:
        cmd.append("--tiny")
    if opts.cpu:
        cmd.append("--cpu")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
        "PYTHONWARNINGS": "ignore",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    # One GPU per case: with several visible the Trainer would wrap the model in DataParallel.
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "0").split(",") if d.strip()]
    env["CUDA_VISIBLE_DEVICES"] = visible[0] if visible else ""
    if opts.expandable:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    started = time.perf_counter()
    with open(log, "w") as out:
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=opts.timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    wall = time.perf_counter() - started
    if result.is_file():
        data = json.loads(result.read_text())
    else:  # killed (host OOM killer, segfault, timeout): the last phase it reported
        phase_file = result.with_suffix(".phase")
        at = phase_file.read_text() if phase_file.is_file() else "start"
        tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
        data = {
            "name": case.name,
            "oom": False,
            "at": at,
            "error": f"subprocess ended without a result (exit {code}{'; past --timeout' if code == 'timeout' else ''})",
            "log_tail": tail,
        }
        if code == -9 or "Killed" in tail:
            data["error"] += "; killed, likely the host's OOM killer"
    data.update(wall_s=wall, warmup_steps=warmup, timed_steps=steps, log=str(log))
    if opts.verbose or ("error" in data and not data.get("oom")):
        if log.is_file():
            print(f"--- {case.name}{tag} log tail ---\n" + log.read_text(errors="replace")[-3000:], file=sys.stderr)
    return data


def host_memory_gib() -> tuple[float | None, float | None]:
    """(MemTotal, MemAvailable) from /proc/meminfo, GiB."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        kib = lambda k: float(info[k].split()[0]) / 2**20  # noqa: E731
        return kib("MemTotal"), kib("MemAvailable")
    except (OSError, KeyError, ValueError):
        return None, None


def attach_planner(data: dict[str, Any], case: Case, gpu: str, opts) -> None:
    prompt = (data.get("geometry") or {}).get("prompt_len")
    if case.kind == "grpo" and prompt and prompt != case.seq_len:  # plan the prompt the run really had
        from dataclasses import replace

        case = replace(case, seq_len=prompt)
    p = predict(case, gpu, opts.attn, opts.expandable)
    data.update(
        planner_gpu=gpu,
        planner_gib=p["allocated_gib"],
        planner_reserved_gib=p["reserved_gib"],
        planner_device_gib=p["device_gib"],
        planner_peak_phase=p["peak_phase"],
        planner_fits=p["fits"],
        planner_parameters=p["parameters"],
    )
    measured = data.get("peak_allocated_gib")
    data["error_pct"] = 100.0 * (p["allocated_gib"] - measured) / measured if measured else None


def emulate(case: Case, data: dict[str, Any], card: str, opts, workdir: Path) -> dict[str, Any]:
    """Fit or OOM on `card`: the allocator capped at card / device; inferred when the first run decides it."""
    from vramfit.hardware import CATALOGUE

    spec = CATALOGUE[card]
    p = predict(case, card, opts.attn, opts.expandable)
    row: dict[str, Any] = {"card": card, "card_gib": spec.memory_gib, "planner_fits": p["fits"], "planner_device_gib": p["device_gib"]}
    total = data.get("total_gib")
    if not total:
        row.update(measured="n/a", how="the unconstrained run gave no device figures")
        return row
    fraction = spec.memory_gib / total
    row["fraction"] = fraction
    peak = data.get("run_peak_reserved_gib")
    if data.get("oom"):
        if fraction <= 1:
            row.update(measured="oom", how="inferred: OOM on the whole device, a smaller cap cannot fit")
        else:
            row.update(measured="n/a", how=f"not emulable: card {spec.memory_gib:.1f} GiB > device {total:.1f} GiB")
    elif peak is None:
        row.update(measured="n/a", how="the unconstrained run did not finish")
    elif peak <= spec.memory_gib:
        row.update(measured="fits", how=f"inferred: run peak reserved {peak:.2f} GiB <= cap {spec.memory_gib:.2f} GiB")
    else:
        # Fit or OOM shows in the first two steps (the optimizer states appear in the first): 1 + 1 steps.
        capped = run_child(case, opts, fraction, workdir, tag=f"@{card}", schedule=EMULATE_SCHEDULE)
        row.update(
            how=f"run with set_per_process_memory_fraction({fraction:.4f})",
            measured="oom" if capped.get("oom") else ("fits" if capped.get("peak_reserved_gib") else "error"),
        )
        if capped.get("oom"):
            row["at"] = capped.get("at")
        if capped.get("error"):
            row["error"] = capped["error"][:300]
        for key in ("peak_allocated_gib", "peak_reserved_gib", "tokens_per_s"):
            if capped.get(key) is not None:
                row[key] = capped[key]
    context = data.get("context_gib") or 0.0
    if peak is not None and abs(spec.memory_gib - peak) < context:
        row["borderline"] = f"peak reserved within the CUDA context ({context:.2f} GiB) of the card size: a real card also holds the context, the cap does not"
    if row.get("measured") in ("fits", "oom"):
        row["agree"] = (row["measured"] == "fits") == p["fits"]
    return row


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for key, dist in (
        ("torch", "torch"),
        ("deepspeed", "deepspeed"),
        ("transformers", "transformers"),
        ("trl", "trl"),
        ("peft", "peft"),
        ("liger_kernel", "liger-kernel"),
    ):
        try:
            out[key] = version(dist)
        except PackageNotFoundError:
            out[key] = None
    return out


def driver_version() -> str | None:
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
        if text:
            return text.splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import torch

        return f"CUDA runtime {torch.version.cuda}" if torch.version.cuda else None
    except Exception:  # noqa: BLE001
        return None


CASE_KEYS = ("name", "settings", "peak_allocated_gib", "peak_reserved_gib", "tokens_per_s", "planner_gib", "error_pct", "oom")
EXTRA_KEYS = (
    "at",
    "skipped",
    "error",
    "planner_gpu",
    "planner_reserved_gib",
    "planner_device_gib",
    "planner_peak_phase",
    "planner_fits",
    "run_peak_allocated_gib",
    "run_peak_reserved_gib",
    "steady_allocated_gib",
    "peak_allocated_before_oom_gib",
    "step_times_s",
    "tokens_per_step",
    "warmup_steps",
    "timed_steps",
    "geometry",
    "parameters",
    "planner_parameters",
    "context_gib",
    "total_gib",
    "memory_fraction",
    "deepspeed_engine",
    "emulated",
    "wall_s",
)
SCOPE = (
    "one GPU, random weights, the recipe's micro-batch / sequence / checkpointing / Liger / generation settings; "
    "the engine is each case's own (see settings.engine), not the recipe's multi-GPU launch"
)


def _rounded(value):
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def case_record(data: dict[str, Any], case: Case) -> dict[str, Any]:
    """One entry of measured.json's "cases" (the documented keys first)."""
    settings = case.settings()
    if data.get("tiny"):
        settings["tiny"] = "shrunk model and sequences: a wiring check, not a measurement"
    rec = {"name": case.name, "settings": settings, "oom": bool(data.get("oom"))}
    for key in CASE_KEYS:
        if key not in rec:
            rec[key] = _rounded(data.get(key))
    for key in EXTRA_KEYS:
        if data.get(key) is not None:
            rec[key] = _rounded(data[key])
    return rec


def write_measured(results: list[tuple[Case, dict[str, Any]]], out_root: Path | None, environment: dict[str, Any]) -> list[Path]:
    """recipes/<recipe>/measured.json (or <out_root>/<recipe>/measured.json), one per recipe.

    A file measured on the same GPU is merged case by case (a re-run replaces its cases); a file from
    another GPU is replaced. The recipe's own case gives the top-level peaks that vramfit/docs.py shows."""
    by_recipe: dict[str, list[tuple[Case, dict[str, Any]]]] = {}
    for case, data in results:
        by_recipe.setdefault(case.recipe, []).append((case, data))
    written = []
    for recipe, items in by_recipe.items():
        folder = (out_root / recipe) if out_root else (REPO / "recipes" / recipe)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "measured.json"
        cases: dict[str, dict[str, Any]] = {}
        if path.is_file():
            try:
                old = json.loads(path.read_text())
                if old.get("gpu") == environment.get("gpu"):
                    cases = {c["name"]: c for c in old.get("cases", []) if "name" in c}
            except (json.JSONDecodeError, AttributeError):
                cases = {}
        for case, data in items:
            cases[case.name] = case_record(data, case)
        doc: dict[str, Any] = {**environment, "scope": SCOPE, "cases": list(cases.values())}
        ranked = sorted((_own_rank(recipe, c["name"]), i) for i, c in enumerate(doc["cases"]))
        usable = [doc["cases"][i] for rank, i in ranked if rank and not doc["cases"][i].get("oom") and doc["cases"][i].get("peak_allocated_gib") is not None]
        own = usable[0] if usable else None
        if own:
            doc["recipe_case"] = own["name"]
            doc["peak_allocated_gib"] = round(own["peak_allocated_gib"], 2)
            doc["peak_reserved_gib"] = round(own["peak_reserved_gib"], 2)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        written.append(path)
    return written


def _own_rank(recipe: str, name: str) -> int:
    case = build_cases().get(name)
    return case.recipe_own if case and case.recipe == recipe else 0


def environment_record(device_name: str | None) -> dict[str, Any]:
    return {"gpu": device_name, "driver": driver_version(), **versions(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}


# ----------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------
def _gib(value) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def print_table(rows: list[tuple[Case, dict[str, Any]]]) -> None:
    print(f"\n{'case':<32} {'peak alloc':>10} {'reserved':>9} {'tokens/s':>9} {'planner':>8} {'error':>8}  note")
    for case, d in rows:
        note = ""
        if d.get("oom"):
            note = f"OOM at {d.get('at')}"
        elif d.get("skipped"):
            note = f"skipped: {d['skipped']}"
        elif d.get("error"):
            note = f"error at {d.get('at')}: {d['error'][:80]}"
        tps = f"{d['tokens_per_s']:.0f}" if d.get("tokens_per_s") else "-"
        err = f"{d['error_pct']:+.1f}%" if isinstance(d.get("error_pct"), (int, float)) else "-"
        print(
            f"{case.name:<32} {_gib(d.get('peak_allocated_gib')):>10} {_gib(d.get('peak_reserved_gib')):>9} {tps:>9} "
            f"{_gib(d.get('planner_gib')):>8} {err:>8}  {note}"
        )
        for row in d.get("emulated") or []:
            verdict = row.get("measured")
            agree = {True: "agrees", False: "DISAGREES"}.get(row.get("agree"), "")
            print(
                f"    {row['card']:<10} {row['card_gib']:6.1f} GiB: measured {verdict:<5} planner "
                f"{'fits' if row['planner_fits'] else 'OOM':<4} ({row['planner_device_gib']:.1f} GiB) {agree}  [{row.get('how', '')}]"
            )


def check_targets(rows: list[tuple[Case, dict[str, Any]]]) -> list[str]:
    """The two targets of the issue, as lines of text (PASS / FAIL / n/a)."""
    lines = []
    measured = [(c, d) for c, d in rows if isinstance(d.get("error_pct"), (int, float))]
    bad = [f"{c.name} ({d['error_pct']:+.1f}%)" for c, d in measured if abs(d["error_pct"]) > PLANNER_TARGET_PCT]
    if not measured:
        lines.append("planner within 10% of the measured peak allocated: n/a (nothing measured)")
    else:
        verdict = "PASS" if not bad else "FAIL"
        worst = max(measured, key=lambda cd: abs(cd[1]["error_pct"]))
        lines.append(
            f"planner within {PLANNER_TARGET_PCT:.0f}% of the measured peak allocated, every case: {verdict} "
            f"({len(measured) - len(bad)}/{len(measured)} cases; worst {worst[0].name} {worst[1]['error_pct']:+.1f}%)"
            + (f"; outside: {', '.join(bad)}" if bad else "")
        )
    by_name = {c.name: d for c, d in rows}
    pairs, verdicts = [], []
    for c, d in rows:
        if c.kind != "causal_lm" or c.liger:
            continue
        on = by_name.get(c.name + "-liger")
        if on is None:
            continue
        off_peak, on_peak = d.get("peak_allocated_gib"), on.get("peak_allocated_gib")
        if d.get("oom") and on_peak:
            pairs.append(f"  {c.name}: without Liger OOM, with Liger {on_peak:.2f} GiB (fits where it did not)")
            verdicts.append(True)
            continue
        if not off_peak or not on_peak:
            pairs.append(f"  {c.name}: n/a (without {'OOM' if d.get('oom') else '-'}, with {'OOM' if on.get('oom') else '-'})")
            continue
        cut = 1 - on_peak / off_peak
        tps_off, tps_on = d.get("tokens_per_s") or 0, on.get("tokens_per_s") or 0
        ok = cut >= LIGER_PEAK_TARGET and tps_on >= tps_off
        verdicts.append(ok)
        extra = ""
        if d.get("steady_allocated_gib") and on.get("steady_allocated_gib"):
            t_off, t_on = off_peak - d["steady_allocated_gib"], on_peak - on["steady_allocated_gib"]
            if t_off > 0:
                extra = f"; above the weights + optimizer states: {t_off:.2f} -> {t_on:.2f} GiB ({1 - t_on / t_off:.0%} lower)"
        pairs.append(
            f"  {c.name}: peak {off_peak:.2f} -> {on_peak:.2f} GiB ({cut:.0%} lower), tokens/s {tps_off:.0f} -> "
            f"{tps_on:.0f} ({'not lower' if tps_on >= tps_off else 'LOWER'}): {'PASS' if ok else 'FAIL'}{extra}"
        )
    if verdicts:
        lines.append(
            f"Liger: Llama-3.2-3B at 4k peak >= {LIGER_PEAK_TARGET:.0%} lower and throughput not lower: "
            f"{'PASS' if all(verdicts) else 'FAIL'} ({sum(verdicts)}/{len(verdicts)} pairs)"
        )
        lines += pairs
    else:
        lines.append("Liger target: n/a (no Llama pair with and without Liger measured)")
    return lines


def list_cases(cases: dict[str, Case], gpu: str, attn: str, expandable: bool) -> None:
    from vramfit.hardware import CATALOGUE

    total, avail = host_memory_gib()
    print(
        f"planner: one {CATALOGUE[gpu].label} ({CATALOGUE[gpu].memory_gib:.2f} GiB), attention {attn}, "
        f"expandable_segments {expandable}; allocated / reserved / device peak in GiB"
    )
    print(f"{'case':<32} {'recipe':<30} {'alloc':>6} {'resv':>6} {'device':>6} {'fits':>4} {'host':>6} {'est s':>5}  settings")
    preds = {}
    for case in cases.values():
        p = predict(case, gpu, attn, expandable)
        preds[case.name] = p
        brief = [f"seq {case.seq_len}", f"mb {case.micro_batch}", "gc" if case.gradient_checkpointing else "no-gc"]
        if case.liger:
            brief.append("liger")
        if case.method != "full":
            brief.append(case.method)
        if case.deepspeed:
            brief.append("zero3 offload param+opt")
        if case.kind == "grpo":
            e = case.extra
            brief += [
                f"{e['completions_per_generate']} completions/generate x {e['max_completion_length']} tokens",
                f"max_pixels {e['max_pixels']}",
                f"beta {e['beta']}",
            ]
        if case.kind == "llava":
            brief.append("576 image tokens")
        own = {1: " [recipe's own]", 2: " [recipe's own if that one cannot run]"}.get(case.recipe_own, "")
        print(
            f"{case.name:<32} {case.recipe:<30} {p['allocated_gib']:6.1f} {p['reserved_gib']:6.1f} {p['device_gib']:6.1f} "
            f"{'yes' if p['fits'] else 'NO':>4} {p['host_ram_gib']:6.1f} {case.estimate_s:5d}  {', '.join(brief)}{own}"
        )
    est = sum(c.estimate_s for c in cases.values())
    print(f"\ndevice time for these cases (estimate, H100, no --emulate): ~{est / 60:.0f} min")
    if total:
        heavy = [c.name for c in cases.values() if preds[c.name]["host_ram_gib"] > (avail or total) * 0.95]
        if heavy:
            print(f"host RAM here {total:.0f} GiB ({avail:.0f} available): skipped on a host like this one: {', '.join(heavy)}")
    lines = []
    for c in cases.values():
        if c.kind == "causal_lm" and not c.liger and c.name + "-liger" in preds:
            off, on = preds[c.name]["allocated_gib"], preds[c.name + "-liger"]["allocated_gib"]
            lines.append(f"  {c.name}: {off:.1f} -> {on:.1f} GiB ({1 - on / off:.0%} lower)")
    if lines:
        print(f"planner's Liger reduction of the peak (target >= {LIGER_PEAK_TARGET:.0%}):")
        print("\n".join(lines))


def dry_run(cases: dict[str, Case], gpu: str, attn: str, expandable: bool) -> int:
    print(f"dry run: every model built on the meta device, every input built, planner on one {gpu}")
    problems = 0
    for case in cases.values():
        p = predict(case, gpu, attn, expandable)
        started = time.perf_counter()
        try:
            info = dry_run_case(case, attn)
        except Exception as exc:  # noqa: BLE001
            problems += 1
            print(f"{case.name:<32} BUILD FAILED: {type(exc).__name__}: {exc}")
            continue
        built, planned = info["parameters"], p["parameters"]
        planned_total = planned["total"] + planned["lora_and_copies"]  # the planner counts adapters apart
        same = built["total"] == planned_total and built["trainable"] == planned["trainable"]
        geo = info["geometry"]
        expect_image = {"grpo": case.extra.get("max_pixels", 0) // (28 * 28), "llava": 576}.get(case.kind, 0)
        geo_ok = geo["seq_len"] == case.seq_len and geo["image_tokens"] == expect_image
        problems += (not same) + (not geo_ok)
        shown = f"tokens {geo['seq_len']}" + (f" ({geo['image_tokens']} image)" if geo["image_tokens"] else "")
        print(
            f"{case.name:<32} {info['model']:<36} params {built['total'] / 1e9:.3f}B, trainable {built['trainable'] / 1e9:.3f}B "
            f"({'= planner' if same else 'planner: %.3fB / %.3fB' % (planned_total / 1e9, planned['trainable'] / 1e9)}); "
            f"{shown}{'' if geo_ok else ' MISMATCH'}; planner {p['allocated_gib']:.2f} GiB allocated, "
            f"{p['device_gib']:.2f} GiB device ({time.perf_counter() - started:.1f} s)"
        )
    print("dry run: " + ("ok" if not problems else f"{problems} problem(s)"))
    return 0 if not problems else 1


def measure(selected: list[Case], opts) -> int:
    cards = [emulated_card(x) for x in opts.emulate.split(",") if x.strip()] if opts.emulate else []
    total_ram, avail_ram = host_memory_gib()
    rows: list[tuple[Case, dict[str, Any]]] = []
    device_name, device_card = None, None
    workdir = Path(tempfile.mkdtemp(prefix="gpu_memory_"))
    est = sum(c.estimate_s for c in selected)
    print(f"{len(selected)} case(s), ~{est / 60:.0f} min of device time estimated (+ --emulate reruns); logs in {workdir}", flush=True)
    for case in selected:
        if not opts.tiny and total_ram:
            host = predict(case, DEFAULT_CARD, opts.attn, opts.expandable, host_ram_gib=total_ram)["host_ram_gib"]
            if host > (avail_ram or total_ram) * 0.95 and not opts.force:
                data = {
                    "name": case.name,
                    "oom": False,
                    "skipped": f"host RAM: the planner needs {host:.0f} GiB, this host has {avail_ram or total_ram:.0f} GiB available (--force runs it anyway)",
                }
                rows.append((case, data))
                print(f"[{case.name}] skipped: {data['skipped']}", flush=True)
                continue
        print(f"[{case.name}] running ...", flush=True)
        data = run_child(case, opts, None, workdir)
        if data.get("device_name") and not device_name:
            device_name, device_card = data["device_name"], card_for_device(data["device_name"], data["total_gib"])
        if not opts.tiny:
            attach_planner(data, case, device_card or DEFAULT_CARD, opts)
        if cards and not opts.tiny:
            data["emulated"] = [emulate(case, data, card, opts, workdir) for card in cards]
        rows.append((case, data))
        state = (
            ("OOM at " + str(data.get("at")))
            if data.get("oom")
            else (
                f"error at {data.get('at')}: {data['error'][:200]}"
                if data.get("error")
                else f"peak {_gib(data.get('peak_allocated_gib'))} GiB allocated, {_gib(data.get('peak_reserved_gib'))} reserved, "
                f"{data.get('tokens_per_s') or 0:.0f} tokens/s"
                + (f"; planner {data['planner_gib']:.2f} GiB ({data['error_pct']:+.1f}%)" if data.get("error_pct") is not None else "")
            )
        )
        print(f"[{case.name}] {state} ({data.get('wall_s', 0):.0f} s)", flush=True)
    if not opts.tiny:  # the planner on the device's own card (known once a case has run)
        for case, data in rows:
            if data.get("planner_gpu") != (device_card or DEFAULT_CARD):
                attach_planner(data, case, device_card or DEFAULT_CARD, opts)
    print_table(rows)
    print()
    for line in check_targets(rows):
        print(line)
    if opts.tiny:
        print("\n--tiny: shrunk models, a wiring check, not a measurement; written only under --out")
        if opts.out:
            for path in write_measured(rows, Path(opts.out), environment_record(device_name or "cpu (tiny)")):
                print(f"wrote {path}")
        return 0
    paths = write_measured(rows, Path(opts.out) if opts.out else None, environment_record(device_name))
    for path in paths:
        print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    if not opts.out:
        print("refresh the recipe READMEs with: python -m vramfit.docs")
    return 0


def measured_cases(root: Path | None) -> list[tuple[Case, dict[str, Any], str]]:
    """Every case recorded in <root or recipes>/*/measured.json: (case, its record, the GPU it ran on)."""
    cases = build_cases()
    found = []
    for path in sorted((root or REPO / "recipes").glob("*/measured.json")):
        doc = json.loads(path.read_text())
        for record in doc.get("cases", []):
            if record.get("name") in cases:
                found.append((cases[record["name"]], record, doc.get("gpu") or "?"))
    return found


def compare(root: Path | None) -> int:
    """Measured peaks (recorded by a GPU run) against the analytic planner and the fake-tensor trace,
    both computed here on the CPU with the pinned stack (issue 13: trace vs max_memory_allocated)."""
    from vramfit.planner import Setup, plan

    rows = measured_cases(root)
    if not rows:
        print(f"gpu_memory --compare: no measured.json under {root or REPO / 'recipes'}; run the cases on a GPU first", file=sys.stderr)
        return 2
    print(f"{'case':<32} {'GPU':<22} {'measured':>8} {'analytic':>8} {'err':>7} {'trace':>8} {'err':>7}  trace terms")
    errors: dict[str, list[float]] = {"analytic": [], "trace": []}
    verdicts = []
    for case, record, gpu in rows:
        ds = str(REPO / case.deepspeed) if case.deepspeed else None
        setup = Setup.from_args(
            REPO / case.model_config, card_for_device(gpu, record.get("total_gib") or 80.0), 1, deepspeed=ds, overrides=planner_overrides(case, "sdpa", True)
        )
        analytic, traced = plan(setup), plan(setup, trace=True)
        how = "traced" if any(n.startswith("trace: activations") for n in traced.notes) else "modelled (no trace)"
        a, t = analytic.measure("allocated"), traced.measure("allocated")
        m = record.get("peak_allocated_gib")
        if record.get("oom") or m is None:
            verdicts.append((case.name, traced.fits, analytic.fits))
            print(
                f"{case.name:<32} {gpu[:22]:<22} {'OOM' if record.get('oom') else '-':>8} {a:8.2f} {'':>7} {t:8.2f} {'':>7}  {how}; planner says {'fits' if traced.fits else 'does not fit'}"
            )
            continue
        ea, et = (a / m - 1) * 100, (t / m - 1) * 100
        errors["analytic"].append(abs(ea))
        if how == "traced":
            errors["trace"].append(abs(et))
        print(f"{case.name:<32} {gpu[:22]:<22} {m:8.2f} {a:8.2f} {ea:+6.1f}% {t:8.2f} {et:+6.1f}%  {how}")
    print()
    for name, errs in errors.items():
        if errs:
            errs = sorted(errs)
            print(
                f"{name}: {len(errs)} measured cases, median |error| {errs[len(errs) // 2]:.1f}%, max {errs[-1]:.1f}%, within 10%: {sum(e <= 10 for e in errs)}/{len(errs)}"
            )
    for name, t_fits, a_fits in verdicts:
        print(
            f"{name}: OOM measured; planner (trace) {'fits: WRONG' if t_fits else 'does not fit: agrees'}, analytic {'fits: WRONG' if a_fits else 'does not fit: agrees'}"
        )
    return 0


# ----------------------------------------------------------------------------------------------
def parse(argv: list[str]):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Without a GPU: --list and --dry-run. Results: recipes/<recipe>/measured.json.",
    )
    ap.add_argument("--case", action="append", default=[], metavar="NAME", help="a case to measure (repeatable)")
    ap.add_argument("--all", action="store_true", help="measure every case")
    ap.add_argument("--list", action="store_true", help="every case, its settings and the planner's prediction (CPU)")
    ap.add_argument("--dry-run", action="store_true", help="build each case's model on the meta device + planner (CPU)")
    ap.add_argument(
        "--compare",
        action="store_true",
        help="measured peaks in recipes/*/measured.json (or --out) against the analytic planner and the trace (CPU)",
    )
    ap.add_argument("--steps", type=int, default=None, help="timed steps per case (default: the case's, 5; GRPO 2)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps per case (default: the case's, 3; GRPO 1)")
    ap.add_argument("--out", default=None, help="write <out>/<recipe>/measured.json instead of recipes/<recipe>/")
    ap.add_argument("--emulate", default="", help="cards to emulate, e.g. 40,80,96 or a100-40g,h20")
    from vramfit.hardware import CATALOGUE

    ap.add_argument("--gpu", default=DEFAULT_CARD, choices=list(CATALOGUE), help="the planner's card for --list / --dry-run (default h100)")
    ap.add_argument(
        "--attn",
        default="sdpa",
        choices=("sdpa", "flash_attention_2", "eager"),
        help="attention kernel, measured and planned (default sdpa: flash-attn is not a dependency)",
    )
    ap.add_argument(
        "--no-expandable-segments",
        dest="expandable",
        action="store_false",
        help="run without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the recipes set it)",
    )
    ap.add_argument("--timeout", type=int, default=TIMEOUT_S, help="seconds per case subprocess")
    ap.add_argument("--force", action="store_true", help="run cases the planner says the host RAM cannot hold")
    ap.add_argument("--verbose", action="store_true", help="print each case's log tail")
    ap.add_argument("--tiny", action="store_true", help="CPU wiring check: shrunk models (2 layers), short sequences")
    ap.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--fraction", type=float, default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse(sys.argv[1:] if argv is None else argv)
    if opts.child:
        if opts.warmup is None or opts.steps is None:
            c = build_cases()[opts.child]
            opts.warmup = c.warmup if opts.warmup is None else opts.warmup
            opts.steps = c.steps if opts.steps is None else opts.steps
        return child_main(opts)
    if opts.compare:
        return compare(Path(opts.out) if opts.out else None)
    cases = build_cases()
    unknown = [n for n in opts.case if n not in cases]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}; see --list. Cases: {', '.join(cases)}", file=sys.stderr)
        return 2
    selected = {n: cases[n] for n in opts.case} if opts.case else cases
    if opts.list:
        list_cases(selected, opts.gpu, opts.attn, opts.expandable)
        return 0
    if opts.dry_run:
        return dry_run(selected, opts.gpu, opts.attn, opts.expandable)
    if not (opts.all or opts.case):
        print("nothing to do: pass --case NAME (repeatable), --all, --list or --dry-run (see --help)", file=sys.stderr)
        return 2
    try:
        [emulated_card(x) for x in opts.emulate.split(",") if x.strip()]
    except argparse.ArgumentTypeError as exc:
        print(exc, file=sys.stderr)
        return 2
    if opts.tiny:
        opts.cpu = opts.cpu or not _cuda_available()
    elif not _cuda_available():
        print(
            "gpu_memory: no CUDA device here, and a real run measures GPU memory. Without a GPU run\n"
            "  python benchmarks/gpu_memory.py --list      (every case, its settings and the planner's prediction)\n"
            "  python benchmarks/gpu_memory.py --dry-run   (+ each model built on the meta device)\n"
            "and on a GPU node: python benchmarks/gpu_memory.py --all",
            file=sys.stderr,
        )
        return EXIT_NO_CUDA
    return measure(list(selected.values()), opts)


def _cuda_available() -> bool:
    # NVML-based check: no CUDA context in this process (the cases' subprocesses get the whole device).
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
