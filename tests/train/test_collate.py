"""Conversations to tensors: only assistant answers are labelled, images expand in place, batches pad."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from vramfit.train.collate import IGNORE_INDEX, Collator, Encoder
from vramfit.train.model import load_processing

CHAT = [
    {"role": "user", "content": "Repeat after me: alpha beta"},
    {"role": "assistant", "content": "alpha beta"},
    {"role": "user", "content": "Again: kilo"},
    {"role": "assistant", "content": "kilo"},
]


def _answers(tokenizer, sample) -> str:
    labelled = sample["input_ids"][sample["labels"] != IGNORE_INDEX]
    return tokenizer.decode(labelled)


def test_chat_labels_only_the_answers(smoke_recipe):
    tokenizer = load_processing(smoke_recipe("axolotl-llama-3b-8xa100-80g"))
    sample = Encoder(tokenizer, 256)(CHAT, [])
    assert _answers(tokenizer, sample) == "alpha beta<|eot_id|>kilo<|eot_id|>"
    assert sample["input_ids"][0] == tokenizer.bos_token_id and (sample["input_ids"] == tokenizer.bos_token_id).sum() == 1
    assert tokenizer.decode(sample["input_ids"]) == tokenizer.apply_chat_template(CHAT, tokenize=False)
    assert sample["labels"].shape == sample["input_ids"].shape == sample["attention_mask"].shape


def test_truncation_keeps_the_first_tokens(smoke_recipe):
    tokenizer = load_processing(smoke_recipe("axolotl-llama-3b-8xa100-80g"))
    full = Encoder(tokenizer, 256)(CHAT, [])
    short = Encoder(tokenizer, 12)(CHAT, [])
    assert torch.equal(short["input_ids"], full["input_ids"][:12]) and torch.equal(short["labels"], full["labels"][:12])


def test_template_that_is_not_a_prefix_is_refused(smoke_recipe):
    tokenizer = load_processing(smoke_recipe("axolotl-llama-3b-8xa100-80g"))
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}{{ messages | length }}"
    with pytest.raises(ValueError, match="does not render a conversation as the start of its continuation"):
        Encoder(tokenizer, 256).segments(CHAT)


def _llava_messages(text="What colour is the square?", answer="The square is red."):
    return [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


def test_llava_image_tokens_expand_and_stay_unlabelled(smoke_recipe):
    processor = load_processing(smoke_recipe("sharegpt4v-7b-8xa100-40g"))
    image = Image.new("RGB", (40, 30), "red")
    sample = Encoder(processor, 256)(_llava_messages(), [image])
    image_tokens = sample["input_ids"] == processor.image_token_id
    assert image_tokens.sum() == 4  # 28 px / patch 14 = 2 x 2 patches; CLIP's CLS dropped ("default")
    assert (sample["labels"][image_tokens] == IGNORE_INDEX).all()
    assert _answers(processor.tokenizer, sample) == " The square is red.</s>"
    assert sample["input_ids"][0] == processor.tokenizer.bos_token_id
    assert sample["pixel_values"].shape == (1, 3, 28, 28)


def test_max_length_that_cuts_the_image_is_refused(smoke_recipe):
    processor = load_processing(smoke_recipe("sharegpt4v-7b-8xa100-40g"))
    with pytest.raises(ValueError, match="cuts into the image tokens"):
        Encoder(processor, 4)(_llava_messages(), [Image.new("RGB", (40, 30))])


def test_qwen_respects_max_pixels_and_keeps_token_types(smoke_recipe):
    recipe = smoke_recipe("vlm-r1-h20")
    processor = load_processing(recipe)
    assert processor.image_processor.size["longest_edge"] == recipe.data.max_pixels == 56 * 56
    sample = Encoder(processor, 256)(_llava_messages(), [Image.new("RGB", (448, 448), "blue")])
    # 448 x 448 px resized to 56 x 56: 4 x 4 patches of 14 px, merged 2 x 2 into 4 tokens.
    assert sample["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert (sample["input_ids"] == processor.image_token_id).sum() == 4
    assert sample["mm_token_type_ids"].shape == sample["input_ids"].shape
    assert sample["mm_token_type_ids"][sample["input_ids"] == processor.image_token_id].eq(1).all()


def test_collator_pads_right_and_concatenates_images(smoke_recipe):
    processor = load_processing(smoke_recipe("sharegpt4v-7b-8xa100-40g"))
    encoder = Encoder(processor, 256)
    short = encoder(_llava_messages(answer="Red."), [Image.new("RGB", (28, 28))])
    long = encoder(_llava_messages(answer="The square in the picture is red."), [Image.new("RGB", (28, 28))])
    batch = Collator(processor.tokenizer.pad_token_id)([short, long])
    n = len(short["input_ids"])
    assert batch["input_ids"].shape == (2, len(long["input_ids"]))
    assert (batch["input_ids"][0, n:] == processor.tokenizer.pad_token_id).all()
    assert (batch["labels"][0, n:] == IGNORE_INDEX).all() and (batch["attention_mask"][0, n:] == 0).all()
    assert batch["pixel_values"].shape == (2, 3, 28, 28)
