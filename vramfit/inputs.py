"""One way in for every file vramfit reads: bounded, strict, and every failure a problem naming the file.

    text = inputs.read_text(path, "recipe")          # a regular file, at most LIMITS["recipe"] bytes, UTF-8
    data = inputs.load_yaml(path, "recipe")          # + no duplicate keys, no alias bombs, bounded depth
    data = inputs.load_json(path, "deepspeed")       # + no duplicate keys (DeepSpeed's own loader refuses them)
    for line in inputs.stream_lines(path): ...       # logs: streamed, each line cut at MAX_LINE bytes

Refused, each with exit code 2 and a message `<file>: <what is wrong> (<numbers>). Fix: <edit>.`:
what is not a regular file (a directory, a FIFO, /dev/zero, a socket), a symlink loop, a path too
long, a file over its kind's size cap, bytes that are not UTF-8, duplicate keys, nesting deeper than
MAX_DEPTH, a YAML document whose aliases expand past MAX_NODES, numbers that are not finite (1e400).
Standard library and PyYAML only: the light commands (doctor, list) import it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from vramfit.problems import ConfigError, Problem

KIB, MIB = 1024, 1024 * 1024
# Size caps per kind of file. The largest published config.json files (id2label tables, nested
# vision/text configs) are a few hundred KiB; a recipe or DeepSpeed JSON is a few KiB.
LIMITS = {
    "recipe": 1 * MIB,
    "deepspeed": 1 * MIB,
    "model-config": 16 * MIB,
    "launch-template": 1 * MIB,
    "script": 4 * MIB,  # a launch script or config under review
    "marker": 64 * KIB,  # a checkpoint's COMPLETE marker
    "data": 256 * MIB,  # a dataset file the smoke run reads
    "text": 4 * MIB,
}
MAX_LINE = 64 * KIB  # a log line longer than this is cut (the rest of it is skipped)
MAX_DEPTH = 64  # nesting of mappings / lists in any config
MAX_NODES = 200_000  # a YAML document's size with every alias expanded
MAX_PATH = 4096  # PATH_MAX on Linux


def _problem(path: Any, what: str, fix: str) -> ConfigError:
    return ConfigError([Problem(str(path), "", what, fix)])


def check_path(path: Any, kind: str = "text") -> Path:
    """The path of a regular file, or ConfigError saying why not (never an OSError)."""
    text = os.fspath(path) if not isinstance(path, Path) else str(path)
    if "\x00" in text:
        raise _problem(text.replace("\x00", "\\x00"), "the path contains a NUL byte", "remove it.")
    if len(text.encode("utf-8", "surrogateescape")) > MAX_PATH:
        raise _problem(text[:80] + "...", f"the path is too long ({len(text)} characters, at most {MAX_PATH})", "use a shorter path.")
    try:
        info = os.stat(text)
    except OSError as exc:
        raise os_problem(text, exc, kind) from None
    if stat.S_ISDIR(info.st_mode):
        raise _problem(text, "is a directory, not a file", f"pass the {kind} file inside it.")
    if not stat.S_ISREG(info.st_mode):
        what = (
            "a named pipe (FIFO)"
            if stat.S_ISFIFO(info.st_mode)
            else "a character device"
            if stat.S_ISCHR(info.st_mode)
            else "a block device"
            if stat.S_ISBLK(info.st_mode)
            else "a socket"
            if stat.S_ISSOCK(info.st_mode)
            else "not a regular file"
        )
        raise _problem(text, f"is {what}, not a regular file; vramfit reads only regular files", "save the content to a file and pass that file.")
    return Path(text)


def os_problem(path: Any, exc: OSError, kind: str = "file") -> ConfigError:
    """An OSError as a problem naming the file."""
    reasons = {
        errno.ENOENT: ("no such file", "check the path."),
        errno.ENOTDIR: ("a part of the path is a file, not a folder", "check the path."),
        errno.ELOOP: ("is a symbolic link loop (too many levels of symbolic links)", "point the link at a real file."),
        errno.ENAMETOOLONG: ("the path (or one of its names) is too long", "use a shorter path."),
        errno.EACCES: ("cannot be read: permission denied", "check the file's permissions."),
        errno.EPERM: ("cannot be read: operation not permitted", "check the file's permissions."),
        errno.EISDIR: ("is a directory, not a file", f"pass the {kind} file inside it."),
    }
    what, fix = reasons.get(exc.errno, (f"cannot be read ({exc.strerror or exc})", "check the path and the file."))
    return _problem(path, what, fix)


def read_bytes(path: Any, kind: str = "text", limit: int | None = None) -> bytes:
    """A regular file's bytes, at most the kind's cap (checked on the bytes read, not the stated size)."""
    cap = limit if limit is not None else LIMITS.get(kind, LIMITS["text"])
    p = check_path(path, kind)
    try:
        with open(p, "rb") as handle:
            data = handle.read(cap + 1)
    except OSError as exc:
        raise os_problem(p, exc, kind) from None
    if len(data) > cap:
        raise _problem(p, f"is larger than a {kind} file can be (over {cap:,} bytes)", f"pass the {kind} file itself; a file this large is not one.")
    return data


def decode(data: bytes, path: Any) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _problem(path, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})", "save it as UTF-8.") from None
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark some editors write
    if "\x00" in text:
        raise _problem(path, f"contains a NUL byte (offset {text.index(chr(0))}); it is not a text file", "pass the text file itself.")
    return text


def read_text(path: Any, kind: str = "text", limit: int | None = None) -> str:
    """A regular file's text: size-capped, strict UTF-8."""
    return decode(read_bytes(path, kind, limit), path)


# ---------------------------------------------------------------- structure checks


def check_structure(data: Any, path: Any, infinity: bool = False) -> Any:
    """Refuse nesting deeper than MAX_DEPTH and numbers that are not finite (with `infinity`, only NaN and
    literals too large for a float); iterative (no recursion)."""
    stack = [(data, 1, "")]
    seen = 0
    while stack:
        node, depth, where = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise _problem(path, f"holds more than {MAX_NODES:,} values", "pass a configuration file, not data.")
        if depth > MAX_DEPTH:
            raise _problem(path, f"is nested deeper than {MAX_DEPTH} levels (at {where or 'the top'})", "flatten it; no configuration nests this deep.")
        if isinstance(node, dict):
            stack.extend((v, depth + 1, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, depth + 1, f"{where}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node) and not (infinity and math.isinf(node)):
            raise ConfigError([Problem(str(path), where, f"{node} is not a finite number (a literal too large for a float, or nan)", "write a finite number.")])
    return data


# ---------------------------------------------------------------- JSON


class _Duplicate(ValueError):
    pass


def _pairs(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Infinite(text)
    return value


class _Infinite(ValueError):
    pass


def _constant(name: str):
    raise _Infinite(name)


def _infinity(name: str) -> float:
    if name == "NaN":
        raise _Infinite(name)
    return float(name)  # "Infinity" / "-Infinity"


# Kinds whose files legitimately hold the constants Infinity / -Infinity: transformers writes a
# config's float("inf") that way (json.dumps; e.g. Mamba2Config.time_step_limit = (0.0, inf), kept in
# published config.json files of Mamba-2, Falcon-H1, Bamba, Granite-4.0 hybrid and Nemotron-H).
INFINITY_KINDS = ("model-config",)


def parse_json(text: str, path: Any, infinity: bool = False) -> Any:
    try:
        data = json.loads(text, object_pairs_hook=_pairs, parse_float=_finite, parse_constant=_infinity if infinity else _constant)
    except _Duplicate as exc:
        raise _problem(path, f"key '{exc.args[0]}' appears twice in one object (JSON keeps only the last; DeepSpeed refuses it)", "keep one of them.") from None
    except _Infinite as exc:
        raise _problem(path, f"'{exc.args[0]}' is not a finite number", "write a finite number.") from None
    except json.JSONDecodeError as exc:
        raise _problem(path, f"is not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})", "fix the JSON syntax.") from None
    except RecursionError:
        raise _problem(path, f"is nested deeper than {MAX_DEPTH} levels", "flatten it; no configuration nests this deep.") from None
    if isinstance(data, int) and not isinstance(data, bool):
        pass
    return check_structure(data, path, infinity)


def load_json(path: Any, kind: str = "text", limit: int | None = None) -> Any:
    return parse_json(read_text(path, kind, limit), path, kind in INFINITY_KINDS)


# ---------------------------------------------------------------- YAML

import yaml  # noqa: E402  (after the stdlib part: PyYAML is a dependency of every command)


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (YAML 1.2 forbids them; PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            # Explicit keys only: a key that overrides one merged in with `<<: *base` is YAML's own rule.
            explicit = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
            self.flatten_mapping(node)
            seen = set()
            for key_node in explicit:
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"a mapping key must be a plain value, got {type(key).__name__}", key_node.start_mark
                    ) from None
                if key in seen:
                    raise _DuplicateYaml(key, key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _DuplicateYaml(Exception):
    def __init__(self, key, mark):
        super().__init__(key)
        self.key, self.mark = key, mark


def _expanded_size(root) -> int:
    """Nodes in the document with every alias expanded, memoized per node; refuses a node that contains itself."""
    sizes: dict[int, int] = {}
    stack = [(root, False)]
    active: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            children = _children(node)
            sizes[key] = min(1 + sum(sizes[id(c)] for c in children), MAX_NODES + 1)
            continue
        if key in sizes:
            continue
        if key in active:
            raise RecursionError("a YAML node refers to itself")
        active.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) not in sizes:
                if id(child) in active:
                    raise RecursionError("a YAML node refers to itself")
                stack.append((child, False))
    return sizes[id(root)]


def _children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def parse_yaml(text: str, path: Any) -> Any:
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_NODES:
            raise _problem(
                path, f"expands to more than {MAX_NODES:,} values through its aliases (*name)", "write the values out; a configuration needs no alias bomb."
            )
        data = loader.construct_document(node)
    except _DuplicateYaml as exc:
        raise _problem(
            path, f"key '{exc.key}' appears twice in one mapping (line {exc.mark.line + 1}; YAML would keep only the last)", "keep one of them."
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise _problem(path, f"is not valid YAML{where} ({getattr(exc, 'problem', None) or exc})", "fix the YAML syntax.") from None
    except RecursionError:
        raise _problem(
            path, f"is nested deeper than {MAX_DEPTH} levels, or refers to itself through an alias", "flatten it; no configuration nests this deep."
        ) from None
    finally:
        loader.dispose()
    return check_structure(data, path)


def load_yaml(path: Any, kind: str = "text", limit: int | None = None) -> Any:
    return parse_yaml(read_text(path, kind, limit), path)


# ---------------------------------------------------------------- logs


def bounded_lines(stream: BinaryIO, max_line: int = MAX_LINE) -> Iterator[bytes]:
    """Lines of a binary stream, each at most `max_line` bytes (the rest of an over-long line is skipped)."""
    while True:
        line = stream.readline(max_line)
        if not line:
            return
        if len(line) == max_line and not line.endswith(b"\n"):
            while True:  # skip the rest of this line, a bounded chunk at a time
                rest = stream.readline(max_line)
                if not rest or rest.endswith(b"\n"):
                    break
            line += b"\n"
        yield line


def open_log(path: Any) -> BinaryIO:
    """A log file opened for streaming (a regular file; a pipe is read through `-`, i.e. stdin)."""
    p = check_path(path, "log")
    try:
        return open(p, "rb")
    except OSError as exc:
        raise os_problem(p, exc, "log") from None
