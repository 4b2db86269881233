"""The training program a launch runs (`deepspeed main.py`, `torchrun fastchat/train/train_lora.py`), read with `ast`
and never run, where it lies beside the script: the defaults of its own arguments (argparse `add_argument(...,
default=...)`, dataclass fields), and whether its Trainer can keep evaluation logits (a `compute_metrics`, or a
`prediction_step` of its own).

A flag the script does not pass takes the program's default, not TrainingArguments': DeepSpeed-Chat's main.py trains
fp16 at 16 x 512 tokens by default, where TrainingArguments would say fp32, 8 and the review's 2048.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path

from vramfit.review.sources import entry_functions, label, locate, parsed_classes


@dataclass
class Program:
    path: Path
    label: str
    text: str
    defaults: dict[str, tuple[object, int]] = field(default_factory=dict)  # argument name -> (default, line)
    switches: frozenset[str] = frozenset()  # arguments argparse takes bare (action store_true / store_false)
    parses: frozenset[str] = frozenset()  # the classes its HfArgumentParser / TrlParser fills (SFTConfig, ModelArguments)
    declared: frozenset[str] = frozenset()  # every argument name it declares, with or without a literal default
    device_map: object = None  # its model load's device_map / max_memory (vramfit.review.device_map.DeviceMap), where it passes one

    @property
    def keeps_eval_logits(self) -> bool:
        """Trainer.evaluate keeps logits only with compute_metrics, or when a prediction_step of the program's returns them."""
        return "compute_metrics" in self.text or "def prediction_step" in self.text


def find(program: str, script: Path, cwd: Path | None = None) -> Program | None:
    """The program's source, where it lies beside the script (or above it, or in the current directory); None otherwise."""
    if not program:
        return None
    written = program.split(" ", 1)
    if written[0] == "-m" and len(written) > 1:  # python -m package.module
        written = [written[1].replace(".", "/") + ".py"]
    if not written[0].endswith(".py"):
        return None
    path = locate(written[0], script, cwd)
    if path is None:
        return None
    from vramfit import inputs
    from vramfit.problems import ConfigError

    try:
        text = inputs.read_text(path, "script")
        tree = ast.parse(text)
    except (ConfigError, OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    from vramfit.review import device_map

    defaults = _defaults(tree)
    return Program(
        path,
        label(path),
        text,
        defaults,
        frozenset(_switches(tree)),
        frozenset(parsed_classes(tree)),
        frozenset(_declared(tree)),
        device_map.read(tree, text),
    )


def _defaults(tree: ast.AST) -> dict[str, tuple[object, int]]:
    """argparse's `add_argument("--name", default=...)` (store_true: False) and dataclass fields `name: T = value` /
    `= field(default=value)`, with literal values only."""
    out: dict[str, tuple[object, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]
            if not flags:
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            name = flags[0][2:].replace("-", "_")
            if isinstance(kw.get("action"), ast.Constant) and kw["action"].value in ("store_true", "store_false"):
                out.setdefault(name, (kw["action"].value == "store_false", node.lineno))
            elif "default" in kw:
                value = _literal(kw["default"])
                if value is not _NONE:
                    out.setdefault(name, (value, node.lineno))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    value = item.value
                    if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
                        value = next((k.value for k in value.keywords if k.arg == "default"), None)
                    literal = _literal(value) if value is not None else _NONE
                    if literal is not _NONE:
                        out.setdefault(item.target.id, (literal, item.lineno))
    return out


def _switches(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            action = next((k.value for k in node.keywords if k.arg == "action"), None)
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]
            if flags and isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
                out.add(flags[0])
    return out


def _declared(tree: ast.AST) -> set[str]:
    """The argument names a program declares: argparse `add_argument("--name")`, dataclass fields, and the parameters of
    a function its command line fills (fastcore's `@call_parse`, `fire.Fire(fn)`: sources.entry_functions)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]
            out.update(f[2:].replace("-", "_") for f in flags)
        elif isinstance(node, ast.ClassDef):
            out.update(i.target.id for i in node.body if isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name))
    for node in entry_functions(tree):
        out.update(a.arg for a in [*node.args.args, *node.args.kwonlyargs])
    return out


_NONE = object()


def _literal(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, RecursionError):
        return _NONE


# Packages whose argument classes the review may import to read their fields (installed libraries, never the user's code).
_LIBRARIES = ("trl", "transformers", "peft")


def parser_fields(text: str) -> tuple[frozenset[str], str | None]:
    """(the fields of the dataclasses a program's `TrlParser((...))` / `HfArgumentParser((...))` is built from, the first
    of those classes whose fields cannot be known here) - read with ast, never run: a class imported from an installed
    library (`from trl.experimental.nash_md import NashMDConfig`) is looked up in it, a class the program defines gives
    its annotated fields and its bases'. A class the installed library lacks (a newer TRL's) is named, not guessed."""
    return _parser_fields(text)


@functools.lru_cache(maxsize=64)
def _parser_fields(text: str) -> tuple[frozenset[str], str | None]:
    import dataclasses
    import importlib

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return frozenset(), None
    imported: dict[str, str] = {}
    local: dict[str, ast.ClassDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in _LIBRARIES:
            for alias in node.names:
                imported[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.ClassDef):
            local[node.name] = node
    out: set[str] = set()
    missing: list[str] = []

    def add(name: str, depth: int = 0) -> None:
        if name in local and depth < 8:
            cls = local[name]
            out.update(n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
            for base in cls.bases:
                add(getattr(base, "id", ""), depth + 1)
        elif name in imported:
            try:
                cls = getattr(importlib.import_module(imported[name]), name)
            except Exception:  # noqa: BLE001 - a class the installed library does not have: its fields stay unknown
                missing.append(f"{imported[name]}.{name}")
                return
            if dataclasses.is_dataclass(cls):
                out.update(f.name for f in dataclasses.fields(cls))

    for name in sorted(parsed_classes(tree)):
        add(name)
    return frozenset(out), (missing[0] if missing else None)
