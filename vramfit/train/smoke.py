"""The smoke variant of a recipe: its real entrypoint, launcher and DeepSpeed JSON, on a tiny model.

`prepare(recipe, run_dir, cpu)` writes under run_dir/smoke/:
- model/: the recipe's architecture class shrunk to 2 layers and a small width, random weights,
  with a tokenizer built here (byte-level BPE from the `tokenizers` library, the family's special
  tokens and chat template) and, for vision-language models, a processor built from the PIL image
  processors (no torchvision);
- data/: a small generated dataset in the recipe's own format, images written as PNG files;
and run_dir/smoke_model.json: every shrunk value with the real one, {"text_config.hidden_size": [64, 4096]}.
It returns the `key=value` overrides the runner applies to the recipe before validating it.

The data is learnable (the answer follows from the prompt or the image), so the same setup with
more steps shows the stack learning. GRPO needs rewards that differ within a group to move the
policy at all; an instruct checkpoint answers in the task's format often enough, a random one never
does, so the GRPO smoke policy is first taught the answer format with a few supervised steps.
"""

from __future__ import annotations

import copy
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramfit.paths import repo_root

SEED = 1234
TRAIN_RECORDS, EVAL_RECORDS = 32, 8
IMAGE_PX = 112  # smoke images; vision towers see 28 px (2 x 2 patches of 14), Qwen2.5-VL max_pixels below
SMOKE_MAX_PIXELS = 56 * 56  # Qwen2.5-VL: 4 x 4 patches -> 4 image tokens after the 2 x 2 merge
SMOKE_MAX_LENGTH = 256
SFT_STEPS, GRPO_STEPS = 3, 2
FORMAT_STEPS = 50  # GRPO: about half of the sampled answers then have the <think>/<answer> format

TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 28, "projection_dim": 32}
QWEN_VISION = {"hidden_size": 32, "intermediate_size": 64, "depth": 2, "num_heads": 2, "fullatt_block_indexes": [1]}

COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 80, 220), "yellow": (230, 210, 40)}
WORDS = "alpha beta gamma delta kilo lima echo tango".split()
REC_PROBLEM = "Please provide the bounding box coordinate of the region this sentence describes: the {} square."

# Chat templates of the real families, reduced to what the smoke data uses.
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
VICUNA_TEMPLATE = (  # llava-hf/llava-1.5: "USER: <image>\n... ASSISTANT: ...</s>"
    "{% for m in messages %}{{ 'USER: ' if m['role'] == 'user' else 'ASSISTANT: ' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' %}<image>\n{% else %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ ' ' if m['role'] == 'user' else eos_token }}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)
CHATML_TEMPLATE = (  # Qwen3 text models: ChatML (the thinking-mode switches of the real template left out)
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN_TEMPLATE = (  # Qwen2.5-VL's ChatML with vision tokens and its default system prompt
    "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\nYou are a helpful "
    "assistant.<|im_end|>\n{% endif %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{% if p['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class Family:
    """What a model family's tokenizer needs: special tokens, their roles, chat template, config ids."""

    specials: tuple[str, ...]
    roles: dict[str, str]
    template: str
    token_ids: dict[str, str] = field(default_factory=dict)  # config attribute -> token
    # Ordinary (not special: decoding keeps them) single tokens, so that answers fit short completions.
    words: tuple[str, ...] = ()


FAMILIES = {  # by the config's model_type
    "llama": Family(
        ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|end_of_text|>"},
        LLAMA3_TEMPLATE,
    ),
    "llava": Family(
        ("<s>", "</s>", "<unk>", "<pad>", "<image>"),
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
        VICUNA_TEMPLATE,
        {"image_token_index": "<image>"},
    ),
    "qwen3": Family(
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        CHATML_TEMPLATE,
        {},
        ("<think>", "</think>", "<answer>", "</answer>"),
    ),
    "qwen2_5_vl": Family(
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"),
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        QWEN_TEMPLATE,
        {
            "image_token_id": "<|image_pad|>",
            "video_token_id": "<|video_pad|>",
            "vision_start_token_id": "<|vision_start|>",
            "vision_end_token_id": "<|vision_end|>",
            "vision_token_id": "<|vision_pad|>",
        },
        ("<think>", "</think>", "<answer>", "</answer>"),
    ),
}


def real_config(recipe):
    """The recipe's config.json copy as a config object, and its dtype (dropped: the smoke model is float32)."""
    from transformers import AutoConfig

    def clean(node):
        if isinstance(node, dict):
            return {k: clean(v) for k, v in node.items() if not k.startswith("_") and k != "torch_dtype"}
        return node

    from vramfit import inputs

    raw = inputs.load_json(recipe.path(recipe.model.config), "model-config")
    values = clean(raw)
    return AutoConfig.for_model(values.pop("model_type"), **values), raw.get("torch_dtype", "float32")


def shrink(config, vocab_size: int, real_dtype: str) -> dict[str, list]:
    """Shrink `config` in place; returns {dotted key: [smoke value, real value]}."""
    changes: dict[str, list] = {}

    def put(node, prefix: str, key: str, value: Any) -> None:
        if getattr(node, key, None) is not None and getattr(node, key) != value:
            changes[prefix + key] = [value, copy.deepcopy(getattr(node, key))]
            setattr(node, key, value)

    text = config.get_text_config()
    prefix = "" if text is config else "text_config."
    heads = text.num_attention_heads
    for key, value in TEXT.items():
        put(text, prefix, key, value)
    if isinstance(getattr(text, "layer_types", None), list):  # one attention type per layer: follows the count
        text.layer_types = text.layer_types[: TEXT["num_hidden_layers"]]
    # Keep grouped-query attention where the real model has it.
    put(text, prefix, "num_key_value_heads", TEXT["num_attention_heads"] // 2 if text.num_key_value_heads < heads else TEXT["num_attention_heads"])
    head_dim = TEXT["hidden_size"] // TEXT["num_attention_heads"]
    put(text, prefix, "head_dim", head_dim)
    put(text, prefix, "vocab_size", vocab_size)
    rope = getattr(text, "rope_parameters", None) or {}
    if "mrope_section" in rope:  # Qwen2.5-VL: the sections split head_dim / 2 rotary frequencies
        real = rope["mrope_section"]
        scaled = [max(1, s * (head_dim // 2) // sum(real)) for s in real]
        scaled[-1] += head_dim // 2 - sum(scaled)
        changes[prefix + "rope_parameters.mrope_section"] = [scaled, real]
        text.rope_parameters = {**rope, "mrope_section": scaled}
    vision = getattr(config, "vision_config", None)
    if vision is not None:
        for key, value in (QWEN_VISION if hasattr(vision, "depth") else VISION).items():
            put(vision, "vision_config.", key, value)
        put(vision, "vision_config.", "out_hidden_size", TEXT["hidden_size"])
    changes["dtype"] = ["float32", real_dtype]
    return changes


def build_tokenizer(model_type: str, corpus: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if model_type not in FAMILIES:
        raise ValueError(
            f"the smoke variant has no tokenizer for model type '{model_type}' (known: {', '.join(FAMILIES)}); "
            "add its special tokens and chat template to vramfit.train.smoke.FAMILIES"
        )
    family = FAMILIES[model_type]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(vocab_size=448, special_tokens=list(family.specials), show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    tok.add_tokens(list(family.words))
    bos = family.roles.get("bos_token")
    if bos:  # Llama tokenizers prepend BOS when encoding (the Trainer's input starts with it)
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.token_to_id(bos))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=family.template, **family.roles)


def build_processor(config, tokenizer):
    """A processor of the model's family from PIL image processors and the local tokenizer."""
    if config.model_type == "qwen2_5_vl":
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        from vramfit.train import cpu_shims

        image_processor = Qwen2VLImageProcessorPil()
        if cpu_shims.torchvision_absent():
            return cpu_shims.processor_class("qwen2_5_vl")(image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template)
        from transformers import Qwen2_5_VLProcessor, Qwen2VLVideoProcessor

        return Qwen2_5_VLProcessor(
            image_processor=image_processor, tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(), chat_template=tokenizer.chat_template
        )
    from transformers import LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    vision = config.vision_config
    side = vision.image_size
    if vision.model_type == "clip_vision_model":  # CLIP adds a CLS token (dropped by the "default" strategy)
        image_processor, extra = CLIPImageProcessorPil(size={"shortest_edge": side}, crop_size={"height": side, "width": side}), 1
    else:
        image_processor, extra = SiglipImageProcessorPil(size={"height": side, "width": side}), 0
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=vision.patch_size,
        vision_feature_select_strategy=config.vision_feature_select_strategy,
        num_additional_image_tokens=extra,
        chat_template=tokenizer.chat_template,
    )


def set_token_ids(config, tokenizer) -> None:
    """Point the config's special-token ids (image, vision, bos/eos/pad) at the local tokenizer's."""
    for name, token in FAMILIES[config.model_type].token_ids.items():
        setattr(config, name, tokenizer.convert_tokens_to_ids(token))
    text = config.get_text_config()
    for name, token in (("bos_token_id", tokenizer.bos_token), ("eos_token_id", tokenizer.eos_token), ("pad_token_id", tokenizer.pad_token)):
        value = tokenizer.convert_tokens_to_ids(token) if token else None
        for node in (config, text):
            if node is text or hasattr(node, name):
                setattr(node, name, value)


# --- data -------------------------------------------------------------------------------------


def _square(rng: random.Random) -> tuple[str, list[int]]:
    colour = rng.choice(list(COLOURS))
    size = rng.randrange(IMAGE_PX // 4, IMAGE_PX // 2)
    x, y = rng.randrange(0, IMAGE_PX - size), rng.randrange(0, IMAGE_PX - size)
    return colour, [x, y, x + size, y + size]


def _image(path: Path, colour: str, box: list[int]) -> None:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (IMAGE_PX, IMAGE_PX), (245, 245, 245))
    ImageDraw.Draw(image).rectangle([box[0], box[1], box[2] - 1, box[3] - 1], fill=COLOURS[colour])
    image.save(path)


def rec_answer(box: list[int]) -> str:
    return f"<think>find the square</think><answer>[{box[0]}, {box[1]}, {box[2]}, {box[3]}]</answer>"


def write_dataset(fmt: str, folder: Path, rng: random.Random) -> dict[str, Path]:
    """train/eval files in the recipe's format (+ images/); returns their paths."""
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, count in (("train", TRAIN_RECORDS), ("eval", EVAL_RECORDS)):
        records = []
        for i in range(count):
            colour, box = _square(rng)
            name = f"{split}-{i}.png"
            if fmt == "chat_jsonl":
                words = " ".join(rng.choice(WORDS) for _ in range(4))
                records.append({"messages": [{"role": "user", "content": f"Repeat after me: {words}"}, {"role": "assistant", "content": words}]})
                continue
            _image(images / name, colour, box)
            if fmt == "llava_json":
                records.append(
                    {
                        "id": f"{split}-{i}",
                        "image": name,
                        "conversations": [
                            {"from": "human", "value": "<image>\nWhat colour is the square?"},
                            {"from": "gpt", "value": f"The square is {colour}."},
                        ],
                    }
                )
            else:
                records.append({"image": name, "problem": REC_PROBLEM.format(colour), "solution": box})
        path = folder / (f"{split}.json" if fmt == "llava_json" else f"{split}.jsonl")
        if fmt == "llava_json":
            path.write_text(json.dumps(records, indent=1))
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
        paths[split] = path
    paths["images"] = images
    return paths


def text_answer(words: str) -> str:
    return f"<think>repeat</think><answer>{words}</answer>"


def corpus() -> list[str]:
    """Text the tokenizer is trained on: what the generated data and templates can contain."""
    from vramfit.train.rewards import INSTRUCTION, TEXT_INSTRUCTION

    lines = [
        "USER: ASSISTANT: system user assistant You are a helpful assistant.",
        "Repeat after me: " + " ".join(WORDS),
        "What colour is the square? The square is " + " ".join(COLOURS),
        INSTRUCTION,
        TEXT_INSTRUCTION,
        text_answer(" ".join(WORDS)),
        REC_PROBLEM.format(" ".join(COLOURS)),
        rec_answer([0, 12, 34, 56]),
        rec_answer([78, 90, 100, 111]),
    ]
    return lines * 20


# --- GRPO: teach the answer format ------------------------------------------------------------


def teach_answer_format(model, processor, rec_file: Path, image_folder: Path) -> None:
    """A few supervised steps on `<think>...</think><answer>[box]</answer>` answers to the REC prompts."""
    import torch
    from PIL import Image

    from vramfit.train.collate import Collator, Encoder
    from vramfit.train.rewards import INSTRUCTION

    records = [json.loads(line) for line in rec_file.read_text().splitlines()]
    encoder = Encoder(processor, SMOKE_MAX_LENGTH)
    samples = []
    for r in records:
        messages = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"{r['problem']} {INSTRUCTION}"}]},
            {"role": "assistant", "content": [{"type": "text", "text": rec_answer(r["solution"])}]},
        ]
        samples.append(encoder(messages, [Image.open(image_folder / r["image"]).convert("RGB")]))
    collate = Collator(processor.tokenizer.pad_token_id)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(FORMAT_STEPS):
        batch = collate([samples[(step * 4 + k) % len(samples)] for k in range(4)])
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def teach_text_format(model, tokenizer, chat_file: Path) -> None:
    """Text GRPO: a few supervised steps on `<think>...</think><answer>reference</answer>` answers to the prompts
    as `vramfit.train.grpo.text_dataset` builds them."""
    import torch

    from vramfit.train.collate import Collator, Encoder
    from vramfit.train.grpo import text_dataset

    rows = text_dataset([json.loads(line) for line in chat_file.read_text().splitlines()])
    encoder = Encoder(tokenizer, SMOKE_MAX_LENGTH)
    samples = [encoder([*r["prompt"], {"role": "assistant", "content": text_answer(r["solution"])}], []) for r in rows]
    collate = Collator(tokenizer.pad_token_id)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(FORMAT_STEPS):
        batch = collate([samples[(step * 4 + k) % len(samples)] for k in range(4)])
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


# --- the overrides ----------------------------------------------------------------------------


def _relative(path: Path, root: Path) -> str:
    """Paths in recipe fields are relative to the repository root (the validator refuses absolute ones)."""
    return os.path.relpath(path.resolve(), root)


def overrides(recipe, model_dir: Path, data: dict[str, Path], cpu: bool) -> list[str]:
    """Point the recipe at the smoke model and data, on 2 ranks, for a few steps of a tiny batch."""
    from transformers.trainer_optimizer import _BITSANDBYTES_OPTIMIZERS

    root = repo_root(recipe.folder)
    t = recipe.training
    grpo = recipe.method == "grpo"
    micro = 4 if grpo else 2
    out = [
        f"model.id={model_dir.resolve()}",
        f"model.config={_relative(model_dir / 'config.json', root)}",
        "model.attn_implementation=sdpa",  # flash-attn is not a dependency
        f"data.train_file={_relative(data['train'], root)}",
        f"data.max_length={SMOKE_MAX_LENGTH}",
        "hardware.gpus_per_node=2",
        "hardware.nodes=1",
        f"per_device_train_batch_size={micro}",
        "gradient_accumulation_steps=1",
        f"global_batch_size={micro * 2}",
        f"max_steps={GRPO_STEPS if grpo else SFT_STEPS}",
        "save_strategy=steps",
        f"save_steps={GRPO_STEPS if grpo else SFT_STEPS}",
        "logging_steps=1",
        "dataloader_num_workers=0",
    ]
    if recipe.data.format != "chat_jsonl":
        out.append(f"data.image_folder={_relative(data['images'], root)}")
    if recipe.data.eval_file:
        out.append(f"data.eval_file={_relative(data['eval'], root)}")
    if t.get("eval_strategy", "no") != "no":
        out.append("eval_steps=2")
    if recipe.data.max_pixels:
        out.append(f"data.max_pixels={SMOKE_MAX_PIXELS}")
    if isinstance(recipe.model.train.vision_tower, int) and not isinstance(recipe.model.train.vision_tower, bool):
        out.append("model.train.vision_tower=1")  # 2 smoke layers: train the last
    if grpo:
        out += ["num_generations=4", "max_completion_length=24"]
        if "steps_per_generation" in t:
            out.append("steps_per_generation=1")
    if cpu:
        out += ["bf16=false", "fp16=false", "tf32=false"]
        # Liger kernels and bitsandbytes optimizers run on Triton/CUDA only; a GPU smoke keeps them.
        if t.get("use_liger_kernel"):
            out.append("use_liger_kernel=false")
        if t.get("optim") in {o.value for o in _BITSANDBYTES_OPTIMIZERS}:
            out.append("optim=adamw_torch")
    return out


def prepare(recipe, run_dir: Path, cpu: bool) -> list[str]:
    """Build the tiny model, tokenizer/processor and dataset; return the overrides for the runner."""
    import torch
    import transformers

    from vramfit.train.model import is_vision_language

    folder = run_dir / "smoke"
    model_dir, data_dir = folder / "model", folder / "data"
    rng = random.Random(SEED)
    data = write_dataset(recipe.data.format, data_dir, rng)

    config, real_dtype = real_config(recipe)
    tokenizer = build_tokenizer(config.model_type, corpus())
    changes = shrink(config, len(tokenizer), real_dtype)
    set_token_ids(config, tokenizer)
    processing = build_processor(config, tokenizer) if is_vision_language(config) else tokenizer

    torch.manual_seed(SEED)
    model = getattr(transformers, recipe.model.architecture)(config)
    if recipe.method == "grpo":
        if recipe.data.format == "chat_jsonl":
            teach_text_format(model, processing, data["train"])
        else:
            teach_answer_format(model, processing, data["train"], data["images"])
        print(f"vramfit smoke: GRPO policy taught the <think>/<answer> format ({FORMAT_STEPS} supervised steps)", flush=True)
    model.save_pretrained(model_dir)
    processing.save_pretrained(model_dir)

    (run_dir / "smoke_model.json").write_text(json.dumps(changes, indent=1) + "\n")
    params = sum(p.numel() for p in model.parameters())
    print(f"vramfit smoke: {recipe.model.architecture} with random weights, {params / 1e6:.2f}M parameters (shrunk value, real value):", flush=True)
    for key, (small, real) in changes.items():
        print(f"  {key}: {small}  # {real}")
    return overrides(recipe, model_dir, data, cpu)
