"""Reading a log as users have it: any size, several ranks interleaved, colour codes, progress bars.

The file is read in fixed chunks and split into lines; nothing else of it is kept, so memory stays
bounded whatever the size. A runaway line (no newline for more than a chunk) is passed on in
chunk-sized pieces, and only its first MAX_TEXT characters are ever matched.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

from vramfit.doctor.patterns import ANSI, CONTROL, HOST_PREFIX, LABEL_PREFIX, NOISE_PREFIX, RANK_PREFIX

CHUNK = 1 << 20
MAX_TEXT = 4096  # characters of one line kept for matching; OOM messages are ~600


def read_lines(stream: BinaryIO) -> Iterator[tuple[list[bytes], int]]:
    """Yield batches of lines (without their newline) and the NUL bytes among them."""
    tail = b""
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8", "replace")
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        if len(tail) > CHUNK:
            lines.append(tail)
            tail = b""
        yield lines, chunk.count(b"\0")
    if tail:
        yield [tail], 0


def clean(raw: bytes) -> str:
    """Decoded text without colour codes or control characters."""
    text = raw[: MAX_TEXT * 2].decode("utf-8", "replace")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    return CONTROL.sub("", text)[:MAX_TEXT]


def split_prefix(text: str) -> tuple[str, int | None, str, str]:
    """'10.0.0.5: [rank3]:[E1206 18:44:12.7 ProcessGroupNCCL.cpp:607] msg' -> ('10.0.0.5: [rank3]:', 3, 'msg', ...):
    stream key, rank, message, and the message with the logger's own prefix still on (for banners that are
    only recognisable by it). Prefixes that change every line (timestamps, viewer line numbers) are not
    part of the key."""
    key, rank, host_done = "", None, False
    with_noise = text
    for _ in range(4):
        before = text
        if not host_done:
            match = HOST_PREFIX.match(text)
            host_done = True
            if match:
                key, text = match.group(0), text[match.end() :]
                with_noise = text
                continue
        match = RANK_PREFIX.match(text) or (LABEL_PREFIX.match(text) if rank is None else None)
        if match and rank is None:
            rank = int(match.group(match.lastindex))
            key, text = key + match.group(0), text[match.end() :]
            with_noise = text
            continue
        if match and RANK_PREFIX.match(text):  # srun label around a torchrun prefix: "0: [rank0]: ..."
            rank = int(match.group(2))
            key, text = key + match.group(0), text[match.end() :]
            with_noise = text
            continue
        match = NOISE_PREFIX.match(text)
        if match and match.end():
            text = text[match.end() :]
        if text == before:
            break
    return key.strip(), rank, text, with_noise
