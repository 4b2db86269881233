"""Read a recipe's training data and check every record before training starts.

Three formats (recipe `data.format`):
- llava_json: a JSON list of {id, image?, conversations: [{from: human|gpt, value}]}, `<image>` in a
  human turn, image paths relative to `data.image_folder` (ShareGPT4V, DocOwl, MiniCPM-V, TinyChart);
- chat_jsonl: one {"messages": [{role: system|user|assistant, content}]} per line;
- rec_jsonl: one {image, problem, solution: [x1, y1, x2, y2]} per line (VLM-R1's REC task).

Records come out in one shape: {"messages": [...], "images": [Path, ...]} for supervised data (user
content as a list of {"type": "image"} / {"type": "text"} parts for vision-language models) and
{"image": Path, "problem": str, "solution": [4 floats]} for REC. A malformed record raises DataError
naming the file and line (JSON list: the record's index and the line it starts on).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

IMAGE = "<image>"
LLAVA_ROLES = {"human": "user", "gpt": "assistant"}
CHAT_ROLES = ("system", "user", "assistant")


class DataError(Exception):
    """A record the run cannot train on; the entrypoint prints it and exits 2."""

    def __init__(self, file: Path, where: str, what: str):
        super().__init__(f"{file}: {where}: {what}")


def _json_lines(path: Path) -> Iterator[tuple[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"line {number}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(path, f"line {number}", f"not valid JSON ({exc.msg}, column {exc.colno})") from None


def _json_list(path: Path) -> Iterator[tuple[str, Any]]:
    """The elements of a top-level JSON list, each with its index and the line it starts on."""
    text = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    line, counted, pos = 1, 0, _skip_space(text, 0)

    def where(index: int, at: int) -> str:
        nonlocal line, counted
        line += text.count("\n", counted, at)
        counted = at
        return f"record {index} (line {line})"

    if not text.startswith("[", pos):
        raise DataError(path, where(0, pos), "llava_json must be a JSON list of records")
    pos = _skip_space(text, pos + 1)
    index = 0
    while not text.startswith("]", pos):
        label = where(index, pos)
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DataError(path, label, f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})") from None
        yield label, record
        index += 1
        pos = _skip_space(text, pos)
        if text.startswith(",", pos):
            pos = _skip_space(text, pos + 1)
        elif not text.startswith("]", pos):
            raise DataError(path, where(index, pos), "expected ',' or ']' after the record")


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _image(path: Path, where: str, folder: Path | None, name: Any) -> Path:
    if not isinstance(name, str) or not name:
        raise DataError(path, where, f"'image' must be a file name, got {name!r}")
    if folder is None:
        raise DataError(path, where, "the record has an image but the recipe sets no data.image_folder")
    image = folder / name
    if not image.is_file():
        raise DataError(path, where, f"image {image} does not exist")
    return image


def _llava(path: Path, where: str, record: Any, folder: Path | None) -> dict[str, Any]:
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list) or not record["conversations"]:
        raise DataError(path, where, "expected {id, image, conversations: [{from, value}, ...]}")
    images = [_image(path, where, folder, record["image"])] if record.get("image") is not None else []
    messages, placeholders = [], 0
    for turn_index, turn in enumerate(record["conversations"]):
        if not isinstance(turn, dict) or turn.get("from") not in LLAVA_ROLES or not isinstance(turn.get("value"), str):
            raise DataError(path, where, f"conversations[{turn_index}] must be {{from: human|gpt, value: text}}, got {turn!r}"[:300])
        role = LLAVA_ROLES[turn["from"]]
        expected = "user" if turn_index % 2 == 0 else "assistant"
        if role != expected:
            raise DataError(path, where, f"conversations[{turn_index}] is from {turn['from']}; turns must alternate human, gpt, ...")
        if role == "assistant" and IMAGE in turn["value"]:
            raise DataError(path, where, f"conversations[{turn_index}]: {IMAGE} belongs in a human turn")
        placeholders += turn["value"].count(IMAGE)
        messages.append({"role": role, "content": _parts(turn["value"])})
    if placeholders != len(images):
        raise DataError(path, where, f"{placeholders} {IMAGE} placeholder(s) for {len(images)} image(s)")
    if messages[-1]["role"] != "assistant":
        raise DataError(path, where, "the conversation must end with a gpt turn (the answer to train on)")
    return {"messages": messages, "images": images}


def _parts(value: str) -> list[dict[str, str]]:
    """'<image>\\nWhat is it?' -> [{type: image}, {type: text, text: 'What is it?'}], in order."""
    if IMAGE not in value:
        return [{"type": "text", "text": value}]
    parts: list[dict[str, str]] = []
    for i, text in enumerate(value.split(IMAGE)):
        if i:
            parts.append({"type": "image"})
        if text.strip("\n"):
            parts.append({"type": "text", "text": text.strip("\n")})
    return parts


def _chat(path: Path, where: str, record: Any) -> dict[str, Any]:
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        raise DataError(path, where, 'expected {"messages": [{"role": ..., "content": ...}, ...]}')
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES or not isinstance(m.get("content"), str):
            raise DataError(path, where, f"messages[{i}] must be {{role: system|user|assistant, content: text}}, got {m!r}"[:300])
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(path, where, "no assistant message: nothing to train on")
    return {"messages": [{"role": m["role"], "content": m["content"]} for m in messages], "images": []}


def _rec(path: Path, where: str, record: Any, folder: Path | None) -> dict[str, Any]:
    if not isinstance(record, dict) or not {"image", "problem", "solution"} <= set(record):
        raise DataError(path, where, "expected {image, problem, solution: [x1, y1, x2, y2]}")
    box = record["solution"]
    if not isinstance(box, list) or len(box) != 4 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box):
        raise DataError(path, where, f"solution must be [x1, y1, x2, y2] numbers, got {box!r}"[:300])
    if not (box[0] < box[2] and box[1] < box[3]):
        raise DataError(path, where, f"solution {box} is not a box with x1 < x2 and y1 < y2")
    if not isinstance(record["problem"], str) or not record["problem"].strip():
        raise DataError(path, where, "problem must be the referring expression (text)")
    return {"image": _image(path, where, folder, record["image"]), "problem": record["problem"], "solution": [float(v) for v in box]}


def read(recipe, split: str = "train") -> list[dict[str, Any]]:
    """Every record of the recipe's train (or eval) file, checked; raises DataError on the first bad one."""
    data = recipe.data
    path = recipe.path(data.train_file if split == "train" else data.eval_file)
    folder = recipe.path(data.image_folder) if data.image_folder else None
    if not path.is_file():
        raise DataError(path, f"data.{split}_file", "does not exist")
    if data.format == "llava_json":
        records = [_llava(path, where, r, folder) for where, r in _json_list(path)]
    elif data.format == "chat_jsonl":
        records = [_chat(path, where, r) for where, r in _json_lines(path)]
    else:
        records = [_rec(path, where, r, folder) for where, r in _json_lines(path)]
    if not records:
        raise DataError(path, f"data.{split}_file", "holds no records")
    return records
