"""Conversations to training tensors: answers labelled, everything else masked, batches padded.

The model's own chat template renders the conversation. Rendering each prefix of the conversation
(and the prefix plus the assistant header) splits the text into segments that belong to the prompt
(labels -100) or to an assistant answer (trained). Segments holding image placeholders go through
the processor with their images, so image tokens are expanded exactly as at inference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image

IGNORE_INDEX = -100
# Processor outputs with one value per token (padded with 0); every other output of an image segment
# is an image tensor (pixel_values, image_grid_thw, ...), concatenated over the batch.
TOKEN_KEYS = ("mm_token_type_ids", "token_type_ids")


class Encoder:
    """One record's {"messages", "images"} -> input_ids, labels, attention_mask (+ image tensors)."""

    def __init__(self, processing, max_length: int):
        self.processing = processing  # a processor (vision-language model) or a tokenizer
        self.tokenizer = getattr(processing, "tokenizer", processing)
        self.image_token = getattr(processing, "image_token", None)
        self.image_token_id = getattr(processing, "image_token_id", None)
        self.max_length = max_length

    def render(self, messages: list[dict], generation_prompt: bool = False) -> str:
        return self.processing.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def segments(self, messages: list[dict]) -> list[tuple[str, bool]]:
        """(text, is_answer) pieces whose concatenation is the rendered conversation."""
        pieces, done = [], ""
        for i, message in enumerate(messages):
            ends = [(self.render(messages[:i], generation_prompt=True), False)] if message["role"] == "assistant" else []
            ends.append((self.render(messages[: i + 1]), message["role"] == "assistant"))
            for text, is_answer in ends:
                if not text.startswith(done):
                    raise ValueError(
                        "the chat template does not render a conversation as the start of its continuation, so prompts and answers cannot be told apart"
                    )
                if len(text) > len(done):
                    pieces.append((text[len(done) :], is_answer))
                done = text
        return pieces

    def __call__(self, messages: list[dict], images: list[Image.Image]) -> dict[str, torch.Tensor]:
        ids: list[int] = []
        labels: list[int] = []
        per_token: dict[str, list[int]] = {}
        image_tensors: dict[str, list[torch.Tensor]] = {}
        remaining = list(images)
        bos = self.tokenizer.bos_token
        for index, (text, is_answer) in enumerate(self.segments(messages)):
            # The first piece gets the tokenizer's BOS unless the template wrote it already.
            special = index == 0 and not (bos and text.startswith(bos))
            count = text.count(self.image_token) if self.image_token and remaining else 0
            if count:
                out = self.processing(text=[text], images=remaining[:count], add_special_tokens=special, return_tensors="pt")
                remaining = remaining[count:]
                piece = out.pop("input_ids")[0].tolist()
                out.pop("attention_mask", None)
                extra = {k: out.pop(k)[0].tolist() for k in TOKEN_KEYS if k in out}
                for key, value in out.items():
                    image_tensors.setdefault(key, []).append(value)
            else:
                piece = self.tokenizer(text, add_special_tokens=special)["input_ids"]
                extra = {}
            for key in set(per_token) | set(extra):
                per_token.setdefault(key, [0] * len(ids)).extend(extra.get(key, [0] * len(piece)))
            ids.extend(piece)
            labels.extend(piece if is_answer else [IGNORE_INDEX] * len(piece))
        if remaining:
            raise ValueError(f"{len(remaining)} image(s) without a placeholder in the rendered prompt")
        if len(ids) > self.max_length and self.image_token_id in ids[self.max_length :]:
            raise ValueError(
                f"data.max_length {self.max_length} cuts into the image tokens ({len(ids)} tokens in all); raise data.max_length or lower the image resolution"
            )
        n = min(len(ids), self.max_length)
        sample = {"input_ids": torch.tensor(ids[:n]), "labels": torch.tensor(labels[:n]), "attention_mask": torch.ones(n, dtype=torch.long)}
        sample.update({k: torch.tensor(v[:n]) for k, v in per_token.items()})
        sample.update({k: torch.cat(v) for k, v in image_tensors.items()})
        return sample


class SupervisedDataset(torch.utils.data.Dataset):
    """Records from `data.read`, encoded on access (images are opened lazily, in the loader)."""

    def __init__(self, records: list[dict[str, Any]], encoder: Encoder, source: str):
        self.records, self.encoder, self.source = records, encoder, source

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        record = self.records[index]
        images = [Image.open(path).convert("RGB") for path in record["images"]]
        try:
            return self.encoder(record["messages"], images)
        except ValueError as exc:
            raise ValueError(f"{self.source}: record {index}: {exc}") from exc


@dataclass
class Collator:
    """Right-pads the per-token tensors; concatenates image tensors (pixel_values, image_grid_thw, ...)."""

    pad_token_id: int

    def __call__(self, samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        length = max(len(s["input_ids"]) for s in samples)
        pad_values = {"input_ids": self.pad_token_id, "labels": IGNORE_INDEX}
        batch: dict[str, torch.Tensor] = {}
        for key in dict.fromkeys(k for s in samples for k in s):
            if key in ("input_ids", "labels", "attention_mask", *TOKEN_KEYS):
                fill = pad_values.get(key, 0)
                rows = [s.get(key, torch.zeros_like(s["input_ids"])) for s in samples]
                batch[key] = torch.stack([torch.cat([r, r.new_full((length - len(r),), fill)]) for r in rows])
            else:  # image tensors of the samples that have images
                batch[key] = torch.cat([s[key] for s in samples if key in s])
        return batch
