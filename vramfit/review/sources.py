"""Each input file read into what it says: settings as the user wrote them, launcher, hardware, the
files it points to.

Kinds: a shell launch script (torchrun / deepspeed / accelerate launch / python / axolotl train),
a DeepSpeed JSON, an accelerate config YAML, an axolotl YAML, a LitGPT fine-tuning config (vramfit.review.litgpt),
an llm-foundry (Composer) training YAML (vramfit.review.llmfoundry)
and a TrainingArguments-style JSON or YAML. A launch command is split into launcher and program arguments by the launcher's own argument
parser (torch.distributed.run, deepspeed.launcher.runner, accelerate's `launch`), so a launcher flag
means here what it means there. Files the script names (`--deepspeed x.json`, accelerate's
`--config_file`, axolotl's config) are read too: a PATH given on the command line with the same file
name first, then next to the script and in the folders above it, then in the current directory.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from vramfit.problems import ConfigError, Problems, did_you_mean
from vramfit.review import device_map, litgpt, llmfoundry, shell, verl
from vramfit.review.findings import Finding
from vramfit.review.python_literals import assigned_literals as _python_literals, literal as _literal, unreached_lines as _unreached

SHELL_SUFFIXES = {".sh", ".bash", ".zsh", ".slurm", ".sbatch", ".job"}
# Top-level keys that only a DeepSpeed JSON has.
_DEEPSPEED_KEYS = {
    "zero_optimization",
    "train_micro_batch_size_per_gpu",
    "train_batch_size",
    "zero_allow_untested_optimizer",
    "steps_per_print",
    "wall_clock_breakdown",
    "activation_checkpointing",
    "gradient_clipping",
}
_ACCELERATE_KEYS = {"compute_environment", "distributed_type"}  # `accelerate config` always writes both
_AXOLOTL_KEYS = {
    "base_model",
    "micro_batch_size",
    "sequence_len",
    "datasets",
    "adapter",
    "num_epochs",
    "base_model_config",
    "lora_target_linear",
    "val_set_size",
    "sample_packing",
    "flash_attention",
    "plugins",
}
# How a script names the launcher (module run with `python -m`, or command).
SWIFT_TRAIN = ("sft", "pt", "rlhf")
# ms-swift's named DeepSpeed presets (swift/llm/ds_config): --deepspeed zero2, zero3_offload, ...
DEEPSPEED_PRESET = re.compile(r"(?:default-)?zero([0-3])(_offload)?")
# A DeepSpeed JSON's file name that says its ZeRO stage: zero3.json, ds_z2_config.json, zero_stage_1.json, stage3.json
_NAMED_STAGE = re.compile(r"(?<![a-z0-9])(?:zero|z|stage|zero_stage|zerostage)[_-]?([0-3])(?![0-9])")


def zero_from_name(written: str) -> tuple[int, bool, bool] | None:
    """(stage, optimizer offloaded, parameters offloaded) as a DeepSpeed JSON's file name says them, for a JSON the
    review cannot read; None where the name does not say the stage unambiguously (ds_config.json, zero2_vs_zero3.json)
    or names an offload it cannot place (NVMe, parameters below stage 3). A name that says `offload` without saying what
    offloads the optimizer, and at stage 3 the parameters too, as the published *offload JSONs do (LLaVA's and
    Qwen2-VL-Finetune's scripts/zero3_offload.json, LLaMA-Factory's ds_z3_offload_config.json, ms-swift's presets)."""
    stem = Path(written).name.lower().rsplit(".", 1)[0]
    stages = {int(m.group(1)) for m in _NAMED_STAGE.finditer(stem)}
    if len(stages) != 1 or "nvme" in stem:
        return None
    [stage] = stages
    if "offload" not in stem:
        return stage, False, False
    tail = stem[stem.index("offload") :]
    params = "param" in tail and "optim" not in tail
    optimizer = "optim" in tail and "param" not in tail
    if params or optimizer:
        both = False
    else:
        both = stage == 3  # `offload`, `offload_all`, `cpuoffload`: everything the stage can offload
        optimizer = True
    if (params or both) and stage < 3:
        return None  # DeepSpeed offloads parameters at stage 3 only: the name says something the file cannot be
    return stage, optimizer or both, params or both


_MODULE_LAUNCHERS = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torch.distributed.launch",
    "deepspeed.launcher.runner": "deepspeed",
    "accelerate.commands.launch": "accelerate",
    "axolotl.cli.train": "axolotl",
}


# `python -m` tools that install or inspect, never train (`python3 -m pip install flash-attn` before the launch).
_TOOL_MODULES = frozenset({"pip", "pip3", "ensurepip", "venv", "virtualenv", "uv", "site", "compileall", "json.tool", "http.server", "torch.utils.collect_env"})


class NotReviewed(Exception):
    """A launch vramfit reads but cannot review (Megatron): said as a finding, and the review is incomplete (exit 3)."""

    def __init__(self, finding: Finding):
        super().__init__(finding.what)
        self.finding = finding


@dataclass
class Setting:
    key: str  # as written: "--per_device_train_batch_size", "micro_batch_size"
    value: Any  # shell: the words after the flag ([] for a bare flag); files: the parsed value
    file: str
    line: int | None = None


@dataclass
class Reference:
    role: str  # the kind of file named: "deepspeed", "accelerate", "axolotl" or "training_args" (TRL's --config)
    written: str  # the path as the file writes it
    setting: Setting
    source: "Source | None" = None  # once read
    # a DeepSpeed JSON not found whose file name says its ZeRO stage: (stage, optimizer offloaded, parameters offloaded)
    named: tuple[int, bool, bool] | None = None


@dataclass
class Source:
    path: Path
    label: str  # how findings name the file
    kind: str  # shell | deepspeed | accelerate | axolotl | training_args | litgpt | llmfoundry
    text: str
    document: Any = None  # parsed JSON / YAML
    settings: list[Setting] = field(default_factory=list)
    launcher: str | None = None
    program: str = ""  # the training script or module the launch command runs
    launch_line: int | None = None
    # "gpus_per_node" / "nodes" -> (count, the flag that says so)
    hardware: dict[str, tuple[int, str]] = field(default_factory=dict)
    # GPUs the launch can see (CUDA_VISIBLE_DEVICES lists them) where its launcher starts one rank per visible GPU
    # unless told otherwise (deepspeed; accelerate, whose config usually says as many): the fallback for
    # gpus_per_node when nothing states it
    visible_gpus: int | None = None
    # GPUs one process spreads its model over with device_map (ms-swift: a process that sees several GPUs), where known
    device_map_gpus: int | None = None
    # a Python file's model load: its device_map and max_memory (vramfit.review.device_map.DeviceMap), where it passes one
    device_map: Any = None
    seen_gpus: int | None = None  # GPUs a plain `python train.py` sees (its CUDA_VISIBLE_DEVICES), where listed
    # accelerate settings in its config-file vocabulary (num_processes, mixed_precision, deepspeed_config: {...})
    accelerate: dict[str, Any] = field(default_factory=dict)
    references: list[Reference] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # the launch command's environment, as far as the script sets it
    trainer: str = ""  # the trainer the program runs, where the file says (sft, dpo, grpo, ...): picks TRL's config class
    missing: list[str] = field(default_factory=list)  # files it names that were not found: the review is incomplete
    launch_lines: list[int] = field(default_factory=list)  # every launch command's line (a script may hold several)
    cwd: Path | None = None  # where the launch runs, when a `cd` in the script says (relative paths are read from there first)
    srun: bool = False  # the launch runs under srun: Slurm starts its tasks (a bare `python` is then not one process)

    def line_of(self, key: str, after: int = 1) -> int | None:
        """First line at or after `after` that writes `key` (a flag, or the last part of a dotted key)."""
        leaf = key.rsplit(".", 1)[-1]
        pattern = (
            re.compile(rf"(^|[\s'\"]){re.escape(leaf)}(?=[\s='\"]|$)") if key.startswith("-") else re.compile(rf"^\s*-?\s*[\"']?{re.escape(leaf)}[\"']?\s*:")
        )
        for number, text in enumerate(self.text.splitlines()[after - 1 :], start=after):
            if pattern.search(text):
                return number
        return None


def label(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        parts = path.parts
        if "site-packages" in parts:  # a file an installed library ships (TRL's accelerate configs): named as in its package
            return "/".join(parts[len(parts) - parts[::-1].index("site-packages") :])
        return str(path)


def read_all(paths: list[str], launch: int = 0, known: Callable[[str], bool] | None = None) -> list[Source]:
    """Every PATH and every file they name, read; ConfigError (exit 2) when one cannot be read. `known`: the argument
    names the review reads (vramfit.review.mapping.known_key), for a YAML key written without its space (see NO_SPACE)."""
    problems = Problems()
    sources = []
    for n, given in enumerate(paths):
        try:
            sources.append(read(Path(given), launch=launch if n == 0 else 0, known=known))
        except ConfigError as error:
            problems.extend(error.problems)
    if problems:
        raise ConfigError(problems)
    for source in list(sources):
        _follow(source, sources, problems, known)
    if problems:
        raise ConfigError(problems)
    program = next((s for s in sources if s.kind == "program"), None)
    if program is not None and not any(s.kind in ("shell", "axolotl", "training_args", "litgpt", "llmfoundry", "verl") for s in sources):
        # a program given without the command line or config file that gives its arguments: nothing says how it runs
        raise NotReviewed(
            Finding(
                "info",
                program.label,
                "",
                "has no launch command in its docstring and takes its arguments from the command line or a config file "
                "(its argument parser), and no launch script or config file was given with it: not reviewed",
                f"pass the launch script, or the config file it is given: vramfit review {program.label} path/to/config.yaml.",
            )
        )
    return sources


def _follow(source: Source, sources: list[Source], problems: Problems, known: Callable[[str], bool] | None = None) -> None:
    for ref in source.references:
        given = [s for s in sources if s.path.name == Path(ref.written).name and s is not source]
        found = given[0] if given else None
        if found is None:
            candidate = locate(ref.written, source.path, source.cwd)
            folders = [*([source.cwd] if source.cwd is not None else []), source.path.parent, *list(source.path.parent.resolve().parents)[:3], Path.cwd()]
            there = next((f / ref.written for f in folders if _exists(f / os.path.expanduser(ref.written))), None)
            if candidate is None and there is not None:  # there, but not a regular file (a FIFO, a folder): bad input
                try:
                    read(there, kind=ref.role)
                except ConfigError as error:
                    problems.extend(error.problems)
                    continue
            if candidate is None:  # a path relative to the working directory the script is run from: the review goes on, incomplete
                what = f"names {ref.written}, which is not next to the script, in the folders above it, or in the current directory " + (
                    f"(looked in {', '.join(label(f) or '.' for f in dict.fromkeys(folders))})"
                )
                named = zero_from_name(ref.written) if ref.role == "deepspeed" else None
                if named is not None:  # planned from its name (mapping: _deepspeed), the verdict said as a bound (reviewer)
                    ref.named = named
                    stage, optimizer, params = named
                    offload = (
                        " with " + " and ".join(w for w, on in (("the optimizer", optimizer), ("the parameters", params)) if on) + " offloaded to the CPU"
                        if optimizer or params
                        else " without offload"
                    )
                    source.notes.append(
                        Finding(
                            "info",
                            source.label,
                            ref.setting.key,
                            f"{what}; memory planned from its file name: ZeRO stage {stage}{offload}, the launch's precision and "
                            "batch, and DeepSpeed's defaults for every other setting (buckets, overlap_comm, stage 3 prefetch); "
                            "its other settings are not reviewed",
                            f"pass the file as another PATH: vramfit review {source.label} path/to/{Path(ref.written).name}.",
                            line=ref.setting.line,
                        )
                    )
                    continue
                source.missing.append(f"{ref.written} ({ref.role} settings) not found")
                source.notes.append(
                    Finding(
                        "info",
                        source.label,
                        ref.setting.key,
                        f"{what}; its settings are not reviewed" + ("; memory not planned" if ref.role in ("deepspeed", "accelerate") else ""),
                        f"pass the file as another PATH: vramfit review {source.label} path/to/{Path(ref.written).name}.",
                        line=ref.setting.line,
                    )
                )
                continue
            try:
                found = read(candidate, kind=ref.role, known=known)
            except ConfigError as error:
                problems.extend(error.problems)
                continue
            if moved(ref.written, candidate):
                source.notes.append(
                    Finding(
                        "info",
                        source.label,
                        ref.setting.key,
                        f"names {ref.written}, which is not on this machine: read {label(candidate)}, the file at the same place in this checkout",
                        f"if the run used another file, pass it as another PATH: vramfit review {source.label} path/to/{Path(ref.written).name}.",
                        line=ref.setting.line,
                    )
                )
            sources.append(found)
            _follow(found, sources, problems, known)
        ref.source = found


def _exists(path: Path) -> bool:
    try:
        return path.exists() or path.is_symlink()
    except OSError:
        return False


def locate(written: str, beside: Path, cwd: Path | None = None) -> Path | None:
    """The file a script names: an absolute path as written; a relative one from the working directory the script
    names, beside it, in the folders above it, then here. An absolute path that is not on this machine (another
    machine's checkout: /kaggle/working/LLaMA-Factory/examples/deepspeed/ds_z2_config.json) is looked for by its tail
    of two or more parts the same way, longest first (`moved`)."""
    path = Path(os.path.expanduser(written))
    folders = [*([cwd] if cwd is not None else []), beside.parent, *list(beside.parent.resolve().parents)[:3], Path.cwd()]
    if path.is_absolute():
        if path.is_file():
            return path
        tails = [Path(*path.parts[i:]) for i in range(1, len(path.parts) - 1)]
        return next((folder / tail for tail in tails for folder in folders if (folder / tail).is_file()), None)
    for folder in folders:
        if (folder / path).is_file():
            return folder / path
    return None


def _cd_target(script: Path, target: str) -> Path:
    """Where a relative `cd` in a script leads: from the folder the script is run from. That is the script's own
    folder, or, for a script kept in a subfolder and run from its repository's root (VLM-R1's run_scripts/*.sh:
    `cd src/open-r1-multimodal`), a folder above it: the first of them (as `locate` looks) that has the target;
    the script's own folder when none has it."""
    beside = script.resolve().parent
    for folder in [beside, *list(beside.parents)[:3], Path.cwd()]:
        if (folder / target).is_dir():
            return folder / target
    return beside / target


def moved(written: str, found: Path) -> bool:
    """Whether `locate` found an absolute path's file by its tail, somewhere else than written."""
    path = Path(os.path.expanduser(written))
    return path.is_absolute() and not path.is_file() and found != path


def read(path: Path, kind: str | None = None, launch: int = 0, known: Callable[[str], bool] | None = None) -> Source:
    """One file; `launch`: which of a script's launch commands (0: the first) its settings are read from; `known`: see
    read_all."""
    problems = Problems()
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError:
        exists, is_dir = True, False  # a path too long: the input layer names it
    if not exists:
        problems.add(str(path), "", "no such file", "check the path (a launch script, DeepSpeed JSON, accelerate or axolotl YAML).")
    elif is_dir:
        problems.add(str(path), "", "is a directory", "pass the launch script or config file inside it.")
    else:
        try:
            from vramfit import inputs

            text = inputs.read_text(path, "script")
        except ConfigError as error:
            problems.extend(error.problems)
        except (OSError, UnicodeDecodeError) as exc:
            problems.add(str(path), "", f"cannot be read ({exc.__class__.__name__}: {exc})", "check the file's permissions and that it is UTF-8 text.")
    if problems:
        raise ConfigError(problems)
    suffix = path.suffix.lower()
    if kind is None and (suffix in SHELL_SUFFIXES or text.startswith("#!")):
        kind = "shell"
    if kind == "shell":
        return _read_shell(path, text, launch=launch)
    if kind is None and suffix == ".py":
        return _read_python(path, text, launch)
    if kind is None and suffix == ".ipynb":
        return _read_notebook(path, text, launch)
    if kind == "deepspeed" and suffix not in (".json", ".yaml", ".yml"):
        # DeepSpeed (hjson.load, runtime/config.py) and accelerate (json.load, HfDeepSpeedConfig) read the file they are
        # given as JSON whatever its name: open-instruct's `stage3_no_offloading_accelerate.conf`
        suffix = ".json"
    repaired: list[Finding] = []
    try:
        document = _parse_document(path, text, suffix)
    except ConfigError as error:
        twice = _keys_twice(path, text, suffix, error)
        document, repaired = twice if twice is not None else _without_the_space(path, text, suffix, error, known)
    if not isinstance(document, dict):
        problems.add(
            label(path),
            "",
            f"must hold a mapping of keys, got {type(document).__name__}",
            "pass a launch script, a DeepSpeed JSON, an accelerate config, an axolotl YAML or a TrainingArguments file.",
        )
        raise ConfigError(problems)
    if kind is None and litgpt.is_config(document):
        return _read_litgpt(path, text, document)
    if kind is None and verl.is_config(document):  # a Hydra config over verl's ppo_trainer: read with its launch script
        return Source(path, label(path), "verl_config", text, document)
    if kind is None and llmfoundry.is_config(document):
        return _read_llmfoundry(path, text, document)
    kind = kind or _kind_of(document, suffix)
    skipped = _not_reviewed(document) if kind in ("axolotl", "training_args") else None
    if skipped is not None:
        first, what, fix = skipped
        raise NotReviewed(Finding("info", label(path), first, what, fix, line=Source(path, label(path), kind, text, document).line_of(first)))
    source = Source(path, label(path), kind, text, document, notes=repaired)
    if kind == "accelerate":
        _read_accelerate(source)
    elif kind in ("axolotl", "training_args"):
        source.settings = [Setting(k, v, source.label, source.line_of(k)) for k, v in document.items()]
        if isinstance(document.get("deepspeed"), str):
            source.references.append(Reference("deepspeed", document["deepspeed"], source.settings[list(document).index("deepspeed")]))
        _commented_accelerate_config(source)
    return source


def _commented_accelerate_config(source: Source) -> None:
    """A config whose own comment gives the command that launches it with an accelerate config (LLaMA-Factory's
    examples/ascend/*fsdp*.yaml: `# accelerate launch --config_file examples/accelerate/fsdp2_config.yaml src/train.py
    examples/ascend/qwen3_full_sft_fsdp2.yaml`): that accelerate config is read with it, as for the command itself, where
    it lies here and no other file names one; said. A comment whose command does not name this file is not its launch."""
    lines = source.text.splitlines()
    for start, line in enumerate(lines):
        if not re.match(r"^\s*#\s*accelerate\s+launch\b", line):
            continue
        command, end = [], start
        while end < len(lines) and lines[end].lstrip().startswith("#"):
            part = lines[end].lstrip()[1:].strip()
            command.append(part.rstrip("\\").strip())
            if not part.endswith("\\"):
                break
            end += 1
        words = " ".join(command).split()
        if source.path.name not in {os.path.basename(w) for w in words} or "--config_file" not in words[:-1]:
            continue
        written = words[words.index("--config_file") + 1]
        if locate(written, source.path, source.cwd) is None:
            return
        setting = Setting("--config_file", written, source.label, start + 1 + next((i for i, c in enumerate(command) if "--config_file" in c), 0))
        source.references.append(Reference("accelerate", written, setting))
        source.notes.append(
            Finding(
                "info",
                source.label,
                "--config_file",
                f"read {written}, the accelerate config of the launch command this file's comment gives (line {start + 1})",
                "pass the launch script or the accelerate config you use, if another.",
                line=setting.line,
            )
        )
        return


# A YAML line `key:value`: a key written without the space YAML needs after its colon. YAML reads the line as one plain
# string, not a key (`model_name_or_path:~/Qwen2-72B-Instruct`, hiyouga/LlamaFactory#4311 as pasted), and a file with a
# mapping around it does not parse: the run stops when it loads the file. What the line means is clear where the key is
# one the file's reader takes, and the review goes on with the space added, saying so (an error: the file as written
# does not load).
NO_SPACE = re.compile(r"^(?P<indent>[ \t]*)(?P<key>[A-Za-z_][\w\-]*):(?P<value>[^\s#].*?)\s*$")


def _without_the_space(path: Path, text: str, suffix: str, error: ConfigError, known: Callable[[str], bool] | None) -> tuple[Any, list[Finding]]:
    """(the document read with a space added after each `known` key written `key:value`, an error finding per line) for
    a YAML file that does not parse; `error` raised again where that is not the cause (another syntax error, an unknown
    key, a value that is a URL or a time, no YAML)."""
    first = error.problems.items[0] if error.problems.items else None
    if suffix not in (".yaml", ".yml") or known is None or first is None or not first.what.startswith("is not valid YAML"):
        raise error
    lines = text.splitlines(keepends=True)
    fixed: list[tuple[int, str, str]] = []
    for number, line in enumerate(lines, start=1):
        match = NO_SPACE.match(line.rstrip("\r\n"))
        if match is None or not known(match["key"]):
            continue
        fixed.append((number, match["key"], match["value"]))
        lines[number - 1] = f"{match['indent']}{match['key']}: {match['value']}" + line[len(line.rstrip("\r\n")) :]
    if not fixed:
        raise error
    try:
        from vramfit import inputs

        document = inputs.parse_yaml("".join(lines), label(path))
    except ConfigError:
        raise error from None
    said = re.fullmatch(r"is not valid YAML(?: at (?P<at>line \d+, column \d+))? \((?P<why>.*)\)", first.what, re.S)
    stops = f"YAML: {said['why']}" + (f", at {said['at']}" if said["at"] else "") if said else first.what
    findings = [
        Finding(
            "error",
            label(path),
            key,
            f"'{key}:{value}' has no space after the colon, so YAML reads the line as one string, not the key {key}, and the "
            f"file does not load ({stops}): the run fails when it reads its config, before training starts; "
            f"the rest of this review reads the line as '{key}: {value}'",
            f"add a space after the colon: {key}: {value}.",
            line=number,
        )
        for number, key, value in fixed
    ]
    return document, findings


def _keys_twice(path: Path, text: str, suffix: str, error: ConfigError) -> tuple[Any, list[Finding]] | None:
    """(the document as PyYAML loads it, a finding per key written twice) for a YAML config whose only fault is a key
    given twice in one mapping; None otherwise. The trainers load their YAML with yaml.safe_load (HfArgumentParser's
    parse_yaml_file, axolotl, LLaMA-Factory), which keeps the last value and says nothing: open-instruct's published
    configs repeat `gradient_checkpointing: true` and `checkpointing_steps`. The same value twice changes nothing; two
    values are a warning naming the one the run gets."""
    first = error.problems.items[0] if error.problems.items else None
    if suffix not in (".yaml", ".yml") or first is None or "appears twice in one mapping" not in first.what:
        return None
    twice: list[tuple[Any, int, Any, Any]] = []

    class LastWins(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key, value = self.construct_object(key_node, deep=True), self.construct_object(value_node, deep=True)
                try:
                    if key in seen:
                        twice.append((key, key_node.start_mark.line + 1, seen[key], value))
                    seen[key] = value
                except TypeError:  # an unhashable key: the strict loader's own message stands
                    raise error from None
            return super().construct_mapping(node, deep=deep)

    try:
        document = yaml.load(text, Loader=LastWins)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError:
        raise error from None
    from vramfit import inputs

    document = inputs.check_structure(document, label(path))
    findings = [
        Finding(
            "info" if old == new else "warning",
            label(path),
            str(key),
            f"is written twice in one mapping (the second at line {line})"
            + (f", both {new!r}: YAML keeps the last, the same" if old == new else f": {old!r}, then {new!r}; YAML keeps the last, so the run gets {new!r}"),
            "keep one of them" + ("." if old == new else f" (the run uses {new!r})."),
            line=line,
        )
        for key, line, old, new in twice
    ]
    return document, findings


def _parse_document(path: Path, text: str, suffix: str) -> Any:
    problems = Problems()
    if suffix == ".json":
        try:
            from vramfit import inputs

            return inputs.parse_json(text, label(path))
        except json.JSONDecodeError as exc:
            problems.add(label(path), "", f"is not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})", "fix the JSON syntax.")
    elif suffix in (".yaml", ".yml"):
        try:
            from vramfit import inputs

            return inputs.parse_yaml(text, label(path))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problems.add(label(path), "", f"is not valid YAML{where} ({getattr(exc, 'problem', exc)})", "fix the YAML syntax.")
    elif _LOG.search(text):  # a crash log given to the review: the doctor reads those
        problems.add(
            label(path),
            "",
            "is a log of a run, not a launch script or config",
            f"read it with `vramfit doctor {label(path)}`; review the script that launched the run.",
        )
    else:
        problems.add(
            label(path),
            "",
            f"cannot tell what kind of file '{suffix or path.name}' is",
            "pass a launch script (.sh, or a file starting with #!), a .json or a .yaml/.yml file.",
        )
    raise ConfigError(problems)


# what a pasted run log holds (a Python traceback, an out-of-memory message, NCCL's or a Slurm's error lines)
_LOG = re.compile(r"Traceback \(most recent call last\)|OutOfMemoryError|CUDA out of memory|CUDA error:|NCCL (?:WARN|INFO|error)|slurmstepd: error")


# Keys that say a config trains (an export config has none of them).
_TRAINS = {"stage", "do_train", "per_device_train_batch_size", "micro_batch_size", "train_dataset", "dataset", "datasets"}
# Keys only LLaMA-Factory's v1 config has (examples/v1/: `model:`, `model_class:`, `dist_config: {name: fsdp2}`, ...).
_LLAMAFACTORY_V1 = {"model_class", "dist_config", "kernel_config", "quant_config", "sample_backend"}


def _not_reviewed(document: dict) -> tuple[str, str, str] | None:
    """A YAML/JSON config vramfit reads but does not review: (its first telling key, what it is, the fix) - a training
    config in a format vramfit does not read (LLaMA-Factory v1, LitGPT pretraining, torchtune), or an export config that trains
    nothing."""
    keys = set(document)
    unread = "which vramfit does not read yet: not reviewed (this is no fault of the file)"
    if "model" in keys and keys & _LLAMAFACTORY_V1 and "model_name_or_path" not in keys:
        first = next(k for k in document if k in _LLAMAFACTORY_V1)
        return (
            first,
            f"a LLaMA-Factory v1 config ({', '.join(k + ':' for k in document if k in _LLAMAFACTORY_V1 | {'model'})}), {unread}",
            "review the same run written for `llamafactory-cli train` (model_name_or_path:, stage:, finetuning_type:, "
            "per_device_train_batch_size:), or plan it with vramfit plan.",
        )
    export = next((d for d in (document, *[v for v in document.values() if isinstance(v, dict)]) if "export_dir" in d), None)
    if export is not None and not keys & _TRAINS:
        return (
            "export_dir" if export is document else next(k for k, v in document.items() if v is export),
            f"an export config (export_dir: {export['export_dir']}): LLaMA-Factory merges and saves a model with it "
            "(`llamafactory-cli export`); nothing trains, so there is no training memory to review",
            "review the training config that produced the adapter.",
        )
    if litgpt.is_pretrain(document):
        first = next(k for k in document if k in ("model_name", "model_config", "initial_checkpoint_dir", "tokenizer_dir"))
        return (
            first,
            f"a LitGPT pretraining config (`litgpt pretrain`: model_name:, train:), {unread}",
            "plan the run with vramfit plan (the model, precision, train.micro_batch_size and train.max_seq_length); LitGPT's "
            "fine-tuning configs (checkpoint_dir:) are reviewed.",
        )
    # torchtune (recipes/configs/*.yaml, `tune run RECIPE --config`): components named by `_component_`
    components = [k for k, v in document.items() if isinstance(v, dict) and "_component_" in v]
    if components:
        return (
            components[0],
            f"a torchtune config ({', '.join(k + ': _component_' for k in components[:3])}), {unread}",
            "plan the run with vramfit plan (the model, the method, batch_size and the sequence length).",
        )
    return None


def _read_litgpt(path: Path, text: str, document: dict) -> Source:
    """A LitGPT fine-tuning config (vramfit.review.litgpt): its keys as settings (sections' keys dotted: train.micro_batch_size),
    the GPUs its devices / num_nodes state; what LitGPT's command line or setup refuses is bad input (exit 2)."""
    source = Source(path, label(path), "litgpt", text, document)
    problems = litgpt.check(document, source.label)
    if problems:
        raise ConfigError(problems)
    which = litgpt.script(document, path)
    if which == "adapter":
        raise NotReviewed(
            Finding(
                "info",
                source.label,
                "checkpoint_dir",
                "a LitGPT config for finetune_adapter (the file's name; it takes no lora_* keys), whose adapter method vramfit does not "
                "plan yet: not reviewed (this is no fault of the file)",
                "plan it with vramfit plan as LoRA (the frozen model, the micro-batch and train.max_seq_length).",
                line=source.line_of("checkpoint_dir"),
            )
        )
    source.program = f"litgpt finetune_{which}"
    for key, value in document.items():
        if key in ("train", "eval", "log") and isinstance(value, dict):
            after = source.line_of(key) or 1
            source.settings += [Setting(f"{key}.{k}", v, source.label, source.line_of(k, after)) for k, v in value.items()]
        else:
            source.settings.append(Setting(key, value, source.label, source.line_of(key)))
    devices, nodes = document.get("devices", 1), document.get("num_nodes", 1)
    if isinstance(devices, int) and devices > 0:  # -1 / auto: every GPU the node has (--gpus)
        source.hardware["gpus_per_node"] = (devices, "devices")
    source.hardware["nodes"] = (nodes, "num_nodes")
    return source


def _read_llmfoundry(path: Path, text: str, document: dict) -> Source:
    """An llm-foundry (Composer) training YAML (vramfit.review.llmfoundry): its `${...}` interpolations resolved, its keys as
    settings (model:, fsdp_config: and optimizer: keys dotted: fsdp_config.sharding_strategy); what llm-foundry or Composer
    refuses at start is bad input (exit 2)."""
    resolved = llmfoundry.resolve(document)
    source = Source(path, label(path), "llmfoundry", text, resolved)
    problems = llmfoundry.check(resolved, source.label)
    if problems:
        raise ConfigError(problems)
    source.program = "composer scripts/train/train.py"
    for key, value in resolved.items():
        if key in ("model", "fsdp_config", "optimizer") and isinstance(value, dict):
            after = source.line_of(key) or 1
            for k, v in value.items():
                if key == "model" and k == "attn_config" and isinstance(v, dict):
                    inner = source.line_of(k, after) or after
                    source.settings += [Setting(f"model.attn_config.{a}", b, source.label, source.line_of(a, inner)) for a, b in v.items()]
                else:
                    source.settings.append(Setting(f"{key}.{k}", v, source.label, source.line_of(k, after)))
        else:
            source.settings.append(Setting(key, value, source.label, source.line_of(key)))
    return source


def _kind_of(document: dict, suffix: str) -> str:
    keys = set(document)
    if suffix == ".json" and (keys & _DEEPSPEED_KEYS or {"fp16", "bf16"} & keys and isinstance(document.get("bf16", document.get("fp16")), dict)):
        return "deepspeed"
    if suffix in (".yaml", ".yml") and isinstance(document.get("zero_optimization"), dict):
        return "deepspeed"  # a DeepSpeed config kept as YAML, which the program loads and hands to DeepSpeed as a dict
    if keys & _ACCELERATE_KEYS:
        return "accelerate"
    if keys & _AXOLOTL_KEYS:
        return "axolotl"
    return "training_args"


# ----------------------------------------------------------------------------------------------- shell


_SHELLS = {"bash", "sh", "zsh", "dash", "source", "."}
_SCRIPT_SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch")


def _called_script(path: Path, script: "shell.Script", depth: int) -> Source | None:
    """A wrapper with no launch of its own that runs another script (`bash scripts/finetune.sh ARGS`, `./train.sh`,
    `source run.sh`): that script read in its place, its positional parameters ($1, ${2:-default}) the call's words
    and the wrapper's variables its environment, and the call said. Two levels at most; None when no called script
    is here."""
    if depth >= 2:
        return None
    for command in script.commands:
        argv = command.argv
        name = os.path.basename(argv[0]) if argv else ""
        words = argv[1:] if name in _SHELLS else argv
        while words and words[0].startswith("-") and name in _SHELLS:  # `bash -x run.sh`
            words = words[1:]
        if name == "sbatch":  # `sbatch [options] job.slurm ARGS`: Slurm runs the job script (its #SBATCH lines read there)
            words = next((argv[i:] for i in range(1, len(argv)) if argv[i].endswith(_SCRIPT_SUFFIXES)), [])
        if not words or not words[0].endswith(_SCRIPT_SUFFIXES):
            continue
        found = locate(words[0], path, Path(command.cwd) if command.cwd and Path(command.cwd).is_absolute() else None)
        if found is None or found.resolve() == path.resolve():
            continue
        from vramfit import inputs

        try:
            text = inputs.read_text(found, "script")
        except (ConfigError, OSError, UnicodeDecodeError):
            continue
        variables = {**{k: v for k, v in script.variables.items() if k != shell.SCRIPT_DIR}, **command.environment}
        variables.update({str(n): word for n, word in enumerate(words[1:10], start=1)})
        inner = shell.parse(text, variables=variables, script_dir=str(found.resolve().parent))
        source = _read_shell(found, text, inner, depth=depth + 1)
        source.notes.append(
            Finding(
                "info",
                label(path),
                words[0],
                f"this script has no launch of its own: it runs {words[0]}, whose launch is reviewed"
                + (f" with its arguments {' '.join(words[1:])}" if words[1:] else ""),
                line=command.line,
            )
        )
        return source
    return None


def _read_shell(path: Path, text: str, script: "shell.Script | None" = None, launch: int = 0, depth: int = 0) -> Source:
    source = Source(path, label(path), "shell", text)
    script = script or shell.parse(text, script_dir=str(path.resolve().parent))
    for line, words in script.stray:
        source.notes.append(
            Finding(
                "warning",
                source.label,
                words[0],
                f"'{' '.join(words)[:120]}' is a command of its own: the command above ended before it (a comment inside the "
                "command, or a line without its trailing `\\`), so these arguments are never passed",
                "remove the comment from inside the command and end every continued line with `\\`.",
                line=line,
            )
        )
    for line, quote, flag in script.unclosed:
        source.notes.append(
            Finding(
                "error",
                source.label,
                flag,
                f'the quote {quote} opened here is never closed: bash stops with "unexpected EOF while looking for matching '
                f"`{quote}'\" and runs nothing (reviewed as if it closed at the end of the command)",
                f"close the quote: end the value with {quote}.",
                line=line,
            )
        )
    for line, text, name in script.bad:
        arithmetic = re.fullmatch(r"\$\{([A-Za-z_]\w*\s*[-+*/%][^}]*)\}", text)
        source.notes.append(
            Finding(
                "warning",
                source.label,
                name or text,
                f"{text} is a bad substitution: bash stops this "
                + (
                    f'assignment with "bad substitution" and goes on, so ${name} stays unset and every ${name} below expands to nothing'
                    if name
                    else 'command with "bad substitution" and goes on without running it'
                ),
                f"write $(({arithmetic.group(1)})) for arithmetic." if arithmetic else "correct the expansion (${NAME}, ${NAME:-default}, $((arithmetic))).",
                line=line,
            )
        )
    launches = [(c, _launcher_of(c.argv)) for c in script.commands]
    launches = [(c, found) for c, found in launches if found is not None]
    if not launches and (called := _called_script(path, script, depth)) is not None:
        return called
    if not launches and any(c.argv and os.path.basename(c.argv[0]) == "megatron" for c in script.commands):
        line = next(c.line for c in script.commands if c.argv and os.path.basename(c.argv[0]) == "megatron")
        raise NotReviewed(
            Finding(
                "info",
                source.label,
                "megatron",
                "launches Megatron-SWIFT (`megatron sft|rlhf`: tensor / pipeline / expert parallel), which vramfit does not plan "
                "yet: not reviewed (this is no fault of the script)",
                "review the `swift sft` / `swift rlhf` variant of the run, or plan it with Megatron's own memory estimates.",
                line=line,
            )
        )
    unreviewed = next(((c, _UNREVIEWED[key]) for c in script.commands for key in _unreviewed_keys(c.argv) if key in _UNREVIEWED), None)
    if not launches and unreviewed is not None:
        command, (what, fix) = unreviewed
        config = next((w.split("=", 1)[-1] for w in command.argv[1:] if w.endswith((".yaml", ".yml"))), None)
        raise NotReviewed(
            Finding(
                "info",
                source.label,
                " ".join(command.argv[: 3 if command.argv[1:2] == ["-m"] else 2]),
                f"launches {what}, which vramfit does not read: not reviewed (this is no fault of the script)",
                fix.format(config=config or "CONFIG.yaml") + ".",
                line=command.line,
            )
        )
    if not launches:
        problems = Problems()
        problems.add(source.label, "", _no_training_launch(script.commands), "pass the script that starts training.")
        raise ConfigError(problems)
    source.launch_lines = [c.line for c, _ in launches]
    command, (launcher, tokens) = launches[min(launch, len(launches) - 1)]
    source.launcher, source.launch_line, source.env = launcher, command.line, command.environment
    if command.cwd is not None:
        source.cwd = Path(command.cwd) if Path(command.cwd).is_absolute() else _cd_target(path, command.cwd)
    args = _split_launch(source, launcher, tokens, command)
    if launcher == "python" and verl.is_entry(source.program):
        _read_verl(source, args, command)
        return source
    _program_settings(source, args, command.line)
    source.srun = "srun" in command.srun
    if "gpus_per_node" not in source.hardware and "ntasks-per-node" in command.srun and launcher == "python":
        _count(source, "gpus_per_node", command.srun["ntasks-per-node"], "srun --ntasks-per-node")
    elif "gpus_per_node" not in source.hardware and source.srun and "ntasks-per-node" in script.sbatch and launcher == "python":
        # srun inherits the allocation's tasks per node (#SBATCH --ntasks-per-node)
        _count(source, "gpus_per_node", script.sbatch["ntasks-per-node"], "#SBATCH --ntasks-per-node")
    if "nodes" not in source.hardware and "nodes" in command.srun:
        _count(source, "nodes", command.srun["nodes"], "srun --nodes")
    for key, directive in (("gpus_per_node", "gpus-per-node"), ("nodes", "nodes")):
        if key not in source.hardware and directive in script.sbatch:
            _count(source, key, script.sbatch[directive], f"#SBATCH --{directive}")
    return source


def _word_line(source: Source, word: str, after: int) -> int | None:
    """The first line at or after `after` where a command-line word (a Hydra override's key=) is written."""
    key = re.escape(word.split("=", 1)[0])
    pattern = re.compile(rf"(^|[\s'\"]){key}(?==)")
    for number, text in enumerate(source.text.splitlines()[after - 1 :], start=after):
        if pattern.search(text):
            return number
    return None


def _read_verl(source: Source, args: list[str], command: shell.Command) -> None:
    """A verl launch (vramfit.review.verl): its Hydra overrides applied over verl's ppo_trainer.yaml (and over the config
    --config-name names, where it is found), the composed config as the source's document, each override a setting; the
    GPUs trainer.n_gpus_per_node x trainer.nnodes (Ray places one worker per GPU). What verl refuses at start is bad
    input (exit 2); a Megatron run is not reviewed."""
    overrides, flags, stray = verl.parse(args)
    source.kind = "verl"
    config = verl.defaults()
    name = flags.get("--config-name") or flags.get("-cn")
    name = name.removesuffix(".yaml") if name else name  # Hydra takes the name with or without its suffix
    if name and name != "ppo_trainer":
        if "megatron" in name:
            raise NotReviewed(
                Finding(
                    "info",
                    source.label,
                    "--config-name",
                    f"launches verl with its Megatron config ({name}: tensor / pipeline / expert parallel workers), which vramfit "
                    "does not plan: not reviewed (this is no fault of the script)",
                    "review the FSDP variant of the run (actor_rollout_ref.actor.strategy=fsdp), or use verl's own memory logs.",
                    line=source.launch_line,
                )
            )
        folder = flags.get("--config-path") or flags.get("-cp") or ""
        written = f"{folder.rstrip('/')}/{name}.yaml" if folder and not shell.UNRESOLVED.search(folder) else f"{name}.yaml"
        found = locate(written, source.path, source.cwd) or locate(f"config/{name}.yaml", source.path, source.cwd)
        if found is None:
            source.missing.append(f"{name}.yaml (the Hydra config --config-name names) not found")
        else:
            try:
                document = yaml.safe_load(found.read_text())
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                document = None
            if isinstance(document, dict):
                mine = {k: v for k, v in document.items() if k not in ("defaults", "hydra")}
                verl.merge(config, mine)
                source.notes.append(
                    Finding("info", source.label, "--config-name", f"read {label(found)} under the command line's overrides", line=source.launch_line)
                )
    after = source.launch_line or 1
    # a value the script leaves to its environment (`trainer.n_gpus_per_node=$SLURM_GPUS_PER_NODE`): verl's default is
    # planned in its place, said
    # (the model's path stays as written: its folder's name may still name the model)
    # (the models' paths stay as written, the actor's and the critic's: a folder's name may still name the model)
    unresolved = [
        o for o in overrides if isinstance(o.value, str) and shell.UNRESOLVED.search(o.value) and o.key not in (f"{verl.MODEL}.path", "critic.model.path")
    ]
    verl.apply(config, [o for o in overrides if o not in unresolved])
    source.document = config
    for o in overrides:
        source.settings.append(Setting(o.op + o.key, o.value, source.label, _word_line(source, o.word, after)))
    for o in unresolved:
        if o.key in verl.PLANNED:
            source.notes.append(
                Finding(
                    "info",
                    source.label,
                    o.key,
                    f"its value {o.value!r} is set when the script runs: planned at verl's default ({verl.get(config, o.key)!r})"
                    + (", or the GPUs you pass" if o.key in ("trainer.n_gpus_per_node", "trainer.nnodes") else ""),
                    "write the value in the script, or pass --gpus / --nodes.",
                    line=_word_line(source, o.word, after),
                )
            )
    # `"${ACTOR_CONFIG[@]}"`: overrides in a bash array (shell.parse reads `ACTOR_CONFIG=( ... )` as the word "(") or a
    # variable the review does not expand; `$@`: the caller's own, unknown here
    hidden = [w for w in stray if w == "(" or (shell.UNRESOLVED.search(w) and w not in ("$@", "$*"))]
    if hidden:
        source.missing.append("overrides in bash arrays or variables the review does not expand: the run's settings may differ")
        source.notes.append(
            Finding(
                "info",
                source.label,
                "",
                'the launch passes overrides through bash arrays or variables ("${NAME[@]}") that the review does not expand: '
                "planned without them, at verl's defaults where nothing else sets a key (the review is incomplete)",
                "write the overrides on the command line to review them.",
                line=source.launch_line,
            )
        )
    source.notes.extend(
        Finding(
            "info",
            source.label,
            word,
            "not a Hydra override (key=value) or flag: verl's command line would refuse it",
            "write it as key=value.",
            line=_word_line(source, word, after) or source.launch_line,
        )
        for word in stray
        if not shell.UNRESOLVED.search(word) and word != "("
    )
    strategy = verl.get(config, f"{verl.ACTOR}.strategy")
    if strategy == "megatron":
        setting = next((s for s in source.settings if s.key == f"{verl.ACTOR}.strategy"), None)
        raise NotReviewed(
            Finding(
                "info",
                source.label,
                f"{verl.ACTOR}.strategy",
                "megatron: verl's Megatron workers (tensor / pipeline / expert parallel) are not planned by vramfit: not reviewed "
                "(this is no fault of the script)",
                "review the FSDP variant of the run (actor_rollout_ref.actor.strategy=fsdp), or use verl's own memory logs.",
                line=setting.line if setting else source.launch_line,
            )
        )
    where = {o.key: o.word for o in overrides}
    problems = verl.check(config, source.label, where)
    if problems:
        raise ConfigError(problems)
    for key, field_ in (("gpus_per_node", "trainer.n_gpus_per_node"), ("nodes", "trainer.nnodes")):
        if not any(o.key == field_ for o in unresolved):  # left to the environment: the GPUs the review is given
            source.hardware[key] = (verl.get(config, field_), field_)
    source.program = source.program.removeprefix("-m ")


# Argument classes whose calls in a Python file carry training settings: name -> the trainer they configure.
PYTHON_CONFIGS = {
    "TrainingArguments": "",
    "Seq2SeqTrainingArguments": "",
    "SFTConfig": "sft",
    "DPOConfig": "dpo",
    "GRPOConfig": "grpo",
    "KTOConfig": "kto",
    "ORPOConfig": "orpo",
    "RewardConfig": "reward",
    "GKDConfig": "gkd",
    "CPOConfig": "cpo",
    "PPOConfig": "ppo",
    "RLOOConfig": "rloo",
    "OnlineDPOConfig": "online_dpo",
    "BCOConfig": "bco",
}


def _read_notebook(path: Path, text: str, launch: int = 0) -> Source:
    """A Jupyter notebook (nbformat 4 JSON), never run: its shell commands (IPython's `!cmd` lines, joined over a trailing
    `\\` as IPython joins them; `%%bash` / `%%sh` cells; `%env NAME=value`) read as a launch script, else its Python
    cells (those that parse) read as a .py file. Lines keep the notebook file's line numbers where Jupyter wrote one
    source line per JSON line (its own format), else they are numbered in reading order."""
    import ast

    problems = Problems()
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as exc:
        notebook = None
        problems.add(
            label(path),
            "",
            f"is not a Jupyter notebook's JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            "pass the notebook as saved by Jupyter, or its launch script.",
        )
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if notebook is not None and not isinstance(cells, list):
        problems.add(label(path), "cells", "is not a Jupyter notebook: no list of cells", "pass the notebook as saved by Jupyter, or its launch script.")
    if problems:
        raise ConfigError(problems)
    file_lines = text.split("\n")
    at, numbered, exact = 0, 0, True
    shell_lines: list[tuple[int, str]] = []
    python_cells: list[list[tuple[int, str]]] = []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        body = cell.get("source", "")
        parts = [str(part) for part in body] if isinstance(body, list) else [str(body)]
        lines = "".join(parts).split("\n")
        # Jupyter writes the cell's keys in order, "source" last, then one JSON string per line of a listed source
        key = next((i for i in range(at, len(file_lines)) if re.match(r'\s*"source":\s*[\["]', file_lines[i])), None)
        if key is not None:
            at = key + 1
        listed = isinstance(body, list) and key is not None and len(parts) == len(lines) - (lines[-1] == "")
        exact = exact and listed and all(json.dumps(part)[1:-1] in file_lines[key + 1 + i] for i, part in enumerate(parts) if key + 1 + i < len(file_lines))
        if cell.get("cell_type") != "code":
            continue
        where = []
        for i in range(len(lines)):
            numbered += 1
            where.append(key + 2 + i if exact else numbered)
        first = lines[0].strip().split()[0] if lines and lines[0].strip() else ""
        if first in ("%%bash", "%%sh") or (first == "%%script" and lines[0].split()[1:2] in (["bash"], ["sh"])):
            shell_lines += list(zip(where[1:], lines[1:]))
            continue
        if first.startswith("%%") and first not in ("%%capture", "%%time", "%%timeit"):
            continue  # %%writefile, %%html, ...: the cell is not Python
        code: list[tuple[int, str]] = []
        joined = False  # a `!` command continued over `\` lines
        for n, line in zip(where, lines):
            stripped = line.strip()
            if joined:
                shell_lines.append((n, line))
            elif stripped.startswith("!"):
                # each `!` runs in a shell of its own: its `export` dies with it (`%env` is the notebook's way)
                shell_lines.append((n, "" if re.match(r"!\s*export\s", stripped) else stripped[1:]))
            elif re.match(r"%env\s+[A-Za-z_]\w*[=\s]", stripped):
                name, _, value = stripped[4:].strip().partition("=") if "=" in stripped else stripped[4:].strip().partition(" ")
                shell_lines.append((n, f"export {name.strip()}={value.strip()}"))
            elif not stripped.startswith(("%", "?")) and not stripped.endswith("?"):
                code.append((n, line))
            joined = (joined or stripped.startswith("!")) and line.rstrip().endswith("\\")
        try:  # IPython syntax a cell may still hold (top-level await, ...): a cell Python cannot parse is not read
            ast.parse("\n".join(line for _, line in code))
            python_cells.append(code)
        except (SyntaxError, ValueError):
            pass

    def padded(lines: list[tuple[int, str]]) -> str:
        at_line = dict(lines)
        return "\n".join(at_line.get(n, "") for n in range(1, max(at_line, default=0) + 1)) + "\n"

    shell_text = padded(shell_lines)
    script = shell.parse(shell_text, script_dir=str(path.resolve().parent))
    if any(_launcher_of(c.argv) for c in script.commands):
        return _read_shell(path, shell_text, script, launch)
    return _read_python(path, padded([line for cell in python_cells for line in cell]), launch)


def _read_python(path: Path, text: str, launch: int = 0) -> Source:
    """A training script, read with `ast` (never run): the launch commands its docstring shows (TRL's examples),
    else its `TrainingArguments(...)` / `SFTConfig(...)` calls with literal keyword values."""
    import ast

    problems = Problems()
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        problems.add(label(path), "", f"is not valid Python at line {exc.lineno} ({exc.msg})", "pass the launch script, or fix the file.")
        raise ConfigError(problems) from None
    doc = ast.get_docstring(tree, clean=False) or ""
    if doc and tree.body and isinstance(tree.body[0], ast.Expr):
        start = tree.body[0].lineno
        # the docstring as written, not its value: Python drops a `\` + newline inside the literal, which would join
        # a command's lines (and shift every line number after it)
        raw = ast.get_source_segment(text, tree.body[0].value) or ""
        quotes = re.match(r"^[rRuU]?(\"\"\"|\'\'\'|\"|\')", raw)
        if quotes and raw.endswith(quotes.group(1)):
            doc = raw[quotes.end() : len(raw) - len(quotes.group(1))]
        script = shell.parse(doc, first_line=start, script_dir=str(path.resolve().parent))
        if any(_launcher_of(c.argv) for c in script.commands):
            # a docstring's usage text shows alternatives line by line ("For LLaVA-NeXT, use:\n    --model_name_or_path ..."):
            # those are not cut off from a command. Arguments right under a command's last option line are: that line lost its `\`.
            lines = doc.split("\n")
            script.stray = [(line, words) for line, words in script.stray if 0 < line - start < len(lines) and lines[line - start - 1].strip().startswith("-")]
            source = _read_shell(path, text, script, launch)
            if any(os.path.basename(w) == path.name for c in script.commands for w in c.argv):  # it launches this file
                _code_settings(tree, source, path)
                source.device_map = device_map.read(tree, text)
            source.notes.append(
                Finding(
                    "info",
                    source.label,
                    "",
                    f"read the launch command{'s' if len([c for c in script.commands if _launcher_of(c.argv)]) > 1 else ''} "
                    "of the script's docstring (its usage example)",
                    line=source.launch_line,
                )
            )
            return source
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and called(node) in PYTHON_CONFIGS]
    if not calls:
        return _program_source(path, text, tree)
    call = calls[0]
    name = called(call)
    source = Source(path, label(path), "training_args", text, program=f"{path.name} ({name})", launch_line=call.lineno)
    source.trainer = PYTHON_CONFIGS[name]
    source.device_map = device_map.read(tree, text)
    literals = _python_literals(tree)
    for key, value, line in _call_arguments(call, literals, source):
        source.settings.append(Setting(key, value, source.label, line))
        if key == "deepspeed" and isinstance(value, str):
            source.references.append(Reference("deepspeed", value, source.settings[-1]))
    source.settings += _python_setup(tree, literals, source, {s.key for s in source.settings})
    if len(calls) > 1:
        source.notes.append(Finding("info", source.label, "", f"{len(calls)} argument calls; reviewed the first (line {call.lineno})", line=call.lineno))
    return source


def parsed_classes(tree: ast.AST) -> set[str]:
    """The class names given to an `HfArgumentParser(...)` / `TrlParser(...)` call (alone or in a tuple or list)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and called(node) in ("HfArgumentParser", "TrlParser"):
            for arg in [*node.args, *(k.value for k in node.keywords if k.arg == "dataclass_types")]:
                for item in arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg]:
                    if isinstance(item, ast.Name):
                        out.add(item.id)
                    elif isinstance(item, ast.Attribute):
                        out.add(item.attr)
    return out


def _program_source(path: Path, text: str, tree) -> Source:
    """A training program whose arguments come from its command line or the config file it is given (`TrlParser((ModelConfig,
    ScriptArguments, SFTConfig))` with `--config recipe.yaml`, argparse): kind "program", read beside the files that
    give its arguments - the trainer of the config class it parses into, what its own code fixes (its BitsAndBytesConfig,
    LoraConfig). A Python file with no parser either (an mmengine / XTuner config, a module) is not reviewed."""
    import ast

    from vramfit.review import trainers

    if not any(isinstance(n, ast.Call) and called(n) in _PARSERS for n in ast.walk(tree)):
        raise NotReviewed(
            Finding(
                "info",
                label(path),
                "",
                "has no launch command in its docstring, no TrainingArguments(...) / SFTConfig(...) call and no argument "
                "parser: not a training script vramfit reads (an mmengine / XTuner config, a module); not reviewed",
                "pass the shell script or command that starts training.",
            )
        )
    source = Source(path, label(path), "program", text, program=path.name)
    source.trainer = trainers.from_classes(parsed_classes(tree)) or ""
    source.settings = _python_setup(tree, _python_literals(tree), source, set())
    source.device_map = device_map.read(tree, text)
    for node in ast.walk(tree):  # BitsAndBytesConfig(bnb_4bit_quant_storage=model_kwargs["torch_dtype"]): the dtype the model loads in
        if isinstance(node, ast.Call) and called(node) == "BitsAndBytesConfig":
            for kw in node.keywords:
                if kw.arg in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage") and "torch_dtype" in (ast.get_source_segment(text, kw.value) or ""):
                    if not any(s.key == kw.arg for s in source.settings):
                        source.settings.append(Setting(kw.arg, LOADING_DTYPE, source.label, kw.value.lineno))
    return source


LOADING_DTYPE = "<torch_dtype>"  # a BitsAndBytesConfig dtype the program sets to the dtype the model loads in (its torch_dtype argument)


def _call_arguments(call, literals: dict[str, Any], source: Source, wanted: set[str] | None = None):
    """(name, value, line) of a call's keywords (those in `wanted`, else all), a `**config` dict spread into it included
    (`TrainingArguments(**training_config)`); a value computed when the script runs is said, not reviewed."""
    import ast

    pairs = []
    for kw in call.keywords:
        if kw.arg is None:  # **name: the literal dict the name holds
            target = literals.get(kw.value.id) if isinstance(kw.value, ast.Name) else kw.value
            if isinstance(target, ast.Dict):
                pairs += [(k.value, v) for k, v in zip(target.keys, target.values) if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        else:
            pairs.append((kw.arg, kw.value))
    for key, node in pairs:
        if wanted is not None and key not in wanted:
            continue
        try:
            yield key, _literal(node, literals), node.lineno
        except (ValueError, SyntaxError, TypeError):
            source.notes.append(Finding("info", source.label, key, f"{key} is computed when the script runs; not reviewed", line=node.lineno))


def called(node) -> str:
    """The name a call is made by: `f(...)` -> "f", `a.b.f(...)` -> "f"; "" for anything else."""
    import ast

    return node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""


# What a script's own calls set beside its argument class: the model it loads, its LoRA and bitsandbytes configs, and the
# length / packing it hands an SFTTrainer (TRL before 0.12 took them there).
_LORA_KEYS = {
    "r": "lora_r",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "target_modules": "lora_target_modules",
    "target_parameters": "lora_target_parameters",
}
_BNB_KEYS = {"load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"}
_TRAINER_KEYS = {"max_seq_length", "packing"}
# unsloth's model classes (unsloth/models/loader.py: FastLanguageModel, FastModel and its FastVisionModel / FastTextModel)
# and the defaults of their from_pretrained / get_peft_model (unslothai/unsloth 015bdef0, as in its 2025 releases):
# 4-bit loading unless told otherwise (full_finetuning turns 4 / 8-bit off), max_seq_length 2048 (which unsloth's
# patched TRL trainers take as the trainer's length when the config sets none: models/rl.py), LoRA r 16 / alpha 16 on
# the seven projections, use_gradient_checkpointing "unsloth" (checkpointing with the checkpoints offloaded to host RAM,
# what axolotl calls `gradient_checkpointing: offload`).
_UNSLOTH_MODELS = ("FastLanguageModel", "FastModel", "FastVisionModel", "FastTextModel")
_UNSLOTH_LOAD = {"model_name": None, "max_seq_length": 2048, "load_in_4bit": True, "load_in_8bit": False, "load_in_16bit": False, "full_finetuning": False}
_UNSLOTH_PEFT = {
    "r": 16,
    "lora_alpha": 16,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "use_gradient_checkpointing": "unsloth",
}


# switches a call sets only where it runs: under an `if` the arguments decide (`if model_args.load_in_4bit:
# BitsAndBytesConfig(load_in_4bit=True, ...)`) they are the arguments', not the script's; its other fields hold when it runs
_BRANCH_SWITCHES = ("load_in_4bit", "load_in_8bit", "use_peft")


def _python_setup(tree, literals: dict[str, Any], source: Source, taken: set[str]) -> list[Setting]:
    out = _python_calls(tree, literals, source, taken)
    unreached = _unreached(tree, literals)
    return [s for s in out if not (s.key in _BRANCH_SWITCHES and any(a <= (s.line or 0) <= b for a, b in unreached))]


def _python_calls(tree, literals: dict[str, Any], source: Source, taken: set[str]) -> list[Setting]:
    import ast

    out: list[Setting] = []
    seen = set(taken)
    prepared: list = []  # prepare_model_for_kbit_training(...) calls

    def add(key: str, value: Any, line: int) -> None:
        if key not in seen:
            seen.add(key)
            out.append(Setting(key, value, source.label, line))

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = called(node)
        owner = node.func.value.id if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) else ""
        if name == "from_pretrained" and (owner.startswith("AutoModel") or owner.endswith(("ForCausalLM", "ForConditionalGeneration"))):
            if node.args:
                try:
                    model = _literal(node.args[0], literals)
                except (ValueError, SyntaxError, TypeError):
                    continue
                if isinstance(model, str):
                    add("model_name_or_path", model, node.lineno)
                    # load_in_8bit / load_in_4bit: transformers 4's own from_pretrained switches (before BitsAndBytesConfig;
                    # alpaca-lora and its forks load `load_in_8bit=True`)
                    for key, value, line in _call_arguments(
                        node, literals, source, {"attn_implementation", "torch_dtype", "dtype", "load_in_8bit", "load_in_4bit"}
                    ):
                        add(key, value, line)
        elif name == "from_pretrained" and owner in _UNSLOTH_MODELS:
            _unsloth_load(node, literals, source, add, seen)
        elif name == "get_peft_model" and owner in _UNSLOTH_MODELS:
            _unsloth_peft(node, literals, source, add)
        elif name in _KBIT_PREPARE:
            prepared.append(node)
        elif name == "LoraConfig":
            add("use_peft", True, node.lineno)
            for key, value, line in _call_arguments(node, literals, source, set(_LORA_KEYS)):
                add(_LORA_KEYS[key], value, line)
        elif name == "BitsAndBytesConfig":
            for key, value, line in _call_arguments(node, literals, source, _BNB_KEYS):
                add(key, value, line)
        elif (name == "tokenizer" or name.endswith(("_tokenizer", "processor"))) and any(
            kw.arg == "truncation" and isinstance(kw.value, ast.Constant) and kw.value.value is True for kw in node.keywords
        ):
            # tokenizer(text, truncation=True, max_length=340, padding="max_length"): every sample cut (and padded) to it
            for _, value, line in _call_arguments(node, literals, source, {"max_length"}):
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    add("model_max_length", value, line)
        elif name.endswith("Trainer") and name not in PYTHON_CONFIGS:
            for key, value, line in _call_arguments(node, literals, source, _TRAINER_KEYS):
                add(key, value, line)
            for kw in node.keywords:  # SFTTrainer(model="Qwen/Qwen2.5-0.5B"): TRL loads a model given by name
                named = literals.get(kw.value.id) if isinstance(kw.value, ast.Name) else kw.value
                if kw.arg == "model" and isinstance(named, ast.Constant) and isinstance(named.value, str):
                    add("model_name_or_path", named.value, kw.value.lineno)
    quantized = any(s.key in ("load_in_4bit", "load_in_8bit") and s.value is True for s in out)
    for node in prepared:
        # PEFT's prepare_model_for_kbit_training (and its older name prepare_model_for_int8_training, peft e536616
        # utils/other.py) turns gradient checkpointing on for a 4- / 8-bit model unless use_gradient_checkpointing=False
        given = {key: value for key, value, _ in _call_arguments(node, literals, source, {"use_gradient_checkpointing"})}
        if quantized and given.get("use_gradient_checkpointing", _kbit_prepare_checkpointing()) is True:
            add("gradient_checkpointing", True, node.lineno)
    return out


_KBIT_PREPARE = ("prepare_model_for_kbit_training", "prepare_model_for_int8_training")


@functools.lru_cache(maxsize=1)
def _kbit_prepare_checkpointing() -> bool:
    """PEFT's own default for use_gradient_checkpointing (True in every release, the installed one read)."""
    import inspect

    try:
        import peft

        return inspect.signature(peft.prepare_model_for_kbit_training).parameters["use_gradient_checkpointing"].default is True
    except Exception:  # noqa: BLE001 - peft absent or changed: its documented default
        return True


def _unsloth_load(node, literals: dict[str, Any], source: Source, add, seen: set[str]) -> None:
    """`FastLanguageModel.from_pretrained(model_name=..., max_seq_length=..., load_in_4bit=..., ...)`: the model, how its
    weights load and the length unsloth hands the trainer, with unsloth's defaults for what the call leaves out (said)."""
    given = {key: value for key, value, _ in _call_arguments(node, literals, source, set(_UNSLOTH_LOAD))}
    if node.args:
        try:
            given.setdefault("model_name", _literal(node.args[0], literals))
        except (ValueError, SyntaxError, TypeError):
            pass
    values = {**_UNSLOTH_LOAD, **given}
    if isinstance(values["model_name"], str):
        add("model_name_or_path", values["model_name"], node.lineno)
    if values["full_finetuning"] is True:
        pass  # unsloth loads 16-bit weights for full fine-tuning, whatever load_in_4bit / load_in_8bit say
    elif values["load_in_8bit"] is True:
        add("load_in_8bit", True, node.lineno)
    elif values["load_in_4bit"] is True and values["load_in_16bit"] is not True:
        add("load_in_4bit", True, node.lineno)
    if not {"max_length", "max_seq_length"} & seen and isinstance(values["max_seq_length"], int):
        add("max_seq_length", values["max_seq_length"], node.lineno)
    defaults = [f"{k} {_UNSLOTH_LOAD[k]}" for k in ("load_in_4bit", "max_seq_length") if k not in given and not values["full_finetuning"]]
    if defaults:
        source.notes.append(
            Finding(
                "info",
                source.label,
                "from_pretrained",
                f"unsloth's {node.func.value.id}.from_pretrained defaults (unsloth/models/loader.py) for what the call leaves out: {', '.join(defaults)}",
                line=node.lineno,
            )
        )


def _unsloth_peft(node, literals: dict[str, Any], source: Source, add) -> None:
    """`FastLanguageModel.get_peft_model(model, r=..., target_modules=..., use_gradient_checkpointing=...)`: LoRA with
    unsloth's defaults; "unsloth" checkpointing keeps the layer checkpoints in host RAM (activation offloading)."""
    given = {key: value for key, value, _ in _call_arguments(node, literals, source, set(_UNSLOTH_PEFT))}
    values = {**_UNSLOTH_PEFT, **given}
    add("use_peft", True, node.lineno)
    for key in ("r", "lora_alpha", "target_modules"):
        add(_LORA_KEYS[key], values[key], node.lineno)
    checkpointing = values["use_gradient_checkpointing"]
    if checkpointing in (True, "unsloth"):
        add("gradient_checkpointing", True, node.lineno)
        if checkpointing == "unsloth":
            add("activation_offloading", True, node.lineno)
    elif checkpointing is False:
        add("gradient_checkpointing", False, node.lineno)


_PARSERS = ("HfArgumentParser", "TrlParser", "ArgumentParser", "H4ArgumentParser")


def entry_functions(tree) -> list:
    """The functions a program's command line fills: `fire.Fire(train)` (alpaca-lora, Platypus, llama-recipes'
    finetuning.py) and fastcore's `@call_parse`."""
    import ast

    entries = {n.args[0].id for n in ast.walk(tree) if isinstance(n, ast.Call) and called(n) == "Fire" and n.args and isinstance(n.args[0], ast.Name)}
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (
            node.name in entries
            or any(
                called(d) == "call_parse" if isinstance(d, ast.Call) else getattr(d, "id", getattr(d, "attr", "")) == "call_parse" for d in node.decorator_list
            )
        )
    ]


def fire_value(word: str) -> Any:
    """A command-line word as fire gives it to the function (fire/parser.py `DefaultParseValue` / `_LiteralEval`): a
    Python literal, with bare words inside it taken as strings (`[gate_proj, up_proj]` -> ["gate_proj", "up_proj"]);
    the word itself where it is none."""
    import ast

    try:
        root = ast.parse(word, mode="eval")
    except (SyntaxError, ValueError):
        return word
    if isinstance(root.body, ast.BinOp):
        return word
    for node in ast.walk(root):
        for name, child in ast.iter_fields(node):
            if isinstance(child, list):
                child[:] = [ast.Constant(c.id) if isinstance(c, ast.Name) and c.id not in ("True", "False", "None") else c for c in child]
            elif isinstance(child, ast.Name) and child.id not in ("True", "False", "None"):
                setattr(node, name, ast.Constant(child.id))
    try:
        return ast.literal_eval(root)
    except (ValueError, SyntaxError, TypeError, RecursionError):
        return word


def entry_bindings(tree, settings: list[Setting]) -> dict[str, Any]:
    """The parameters of the function the command line fills (`entry_functions`), bound as the run binds them: the
    command line's value where it gives `--name` (or `--name-with-dashes`, which fire reads the same; a bare `--flag` is
    True), the parameter's default otherwise - as nodes `python_literals.literal` reads. Names the function's code passes
    on (`from_pretrained(base_model, ...)`, `TrainingArguments(per_device_train_batch_size=micro_batch_size)`,
    `tokenizer(..., max_length=cutoff_len)`) are then the run's values, not "computed when the script runs"."""
    import ast

    given = {}
    for setting in settings:
        words = setting.value if isinstance(setting.value, list) else [setting.value]
        given[setting.key.lstrip("-").replace("-", "_")] = fire_value(str(words[0])) if words else True
    out: dict[str, Any] = {}
    for function in entry_functions(tree):
        positional = function.args.args
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(function.args.defaults) :]], function.args.defaults))
        defaults.update({a.arg: d for a, d in zip(function.args.kwonlyargs, function.args.kw_defaults) if d is not None})
        for arg in [*positional, *function.args.kwonlyargs]:
            if arg.arg in given:
                try:
                    out[arg.arg] = ast.parse(repr(given[arg.arg]), mode="eval").body
                except (SyntaxError, ValueError):
                    continue
            elif arg.arg in defaults:
                out[arg.arg] = defaults[arg.arg]
    return out


def _code_settings(tree, source: Source, path: Path) -> None:
    """A script launched by its docstring's command: what its own code fixes where the command line cannot - the model,
    LoRA and bitsandbytes settings of its calls (`_python_setup`), and, where no argument parser reads the command line,
    the literal keywords of its `SFTConfig(...)` / `TrainingArguments(...)` call. Values the command line gives are kept;
    the settings are written as the command's words."""
    import ast

    literals = {**_python_literals(tree), **entry_bindings(tree, source.settings)}
    taken = {s.key.lstrip("-").replace("-", "_") for s in source.settings}
    found = _python_setup(tree, literals, source, taken)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    if not any(called(n) in _PARSERS for n in calls):
        configs = [n for n in calls if called(n) in PYTHON_CONFIGS]
        if configs:
            taken |= {s.key for s in found}
            found += [Setting(k, v, source.label, line) for k, v, line in _call_arguments(configs[0], literals, source) if k not in taken | {"output_dir"}]
            source.trainer = source.trainer or PYTHON_CONFIGS[called(configs[0])]

    def as_words(value) -> list[str] | None:  # how the command line would spell it; a dict value has no such spelling
        values = value if isinstance(value, list) else [value]
        return [str(v) for v in values] if all(isinstance(v, (str, int, float, bool)) for v in values) else None

    words = [Setting(f"--{s.key}", w, s.file, s.line) for s in found if (w := as_words(s.value)) is not None]
    if words:
        source.settings.extend(words)
        source.notes.append(
            Finding(
                "info",
                source.label,
                "",
                f"read from {path.name}'s own code (it fixes them whatever the command line says): "
                + ", ".join(f"{w.key.lstrip('-')} {' '.join(w.value)}" for w in words),
                line=words[0].line,
            )
        )


def program_code(source: Source, text: str, path: Path) -> list[Finding]:
    """A launch script's program that takes no arguments (no argument parser: `python train.py` whose model, LoRA and
    `TrainingArguments(...)` are written in its code): what its code fixes, read into the launch as `_code_settings`
    reads a docstring's command; the notes it adds. A program with a parser gives its defaults (vramfit.review.program)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    if any(isinstance(n, ast.Call) and called(n) in _PARSERS for n in ast.walk(tree)):
        return []
    before, settings = len(source.notes), len(source.settings)
    _code_settings(tree, source, path)
    own = label(path)  # the lines are the program's, not the launch script's: its settings keep no line, its note names it
    for setting in source.settings[settings:]:
        setting.line = None
    added = source.notes[before:]
    del source.notes[before:]
    for note in added:
        note.file = own
    return added


# Commands that run another command given later in their words (a container, privileges): the launch is inside.
_WRAPPING = {"sudo", "docker", "docker-compose", "podman", "singularity", "apptainer", "enroot", "nvidia-docker"}
# POSIX / util-linux utilities that run the command after them unchanged (`nohup swift sft ...`, `nice -n 10 torchrun ...`,
# `numactl --interleave=all deepspeed ...`): looked through the same way
_WRAPPING |= {"nohup", "nice", "setsid", "stdbuf", "taskset", "numactl", "timeout", "time"}
# Environment managers whose `run` subcommand runs the command after it in their environment (`uv run accelerate launch ...`).
_RUNNERS = {"uv", "poetry", "pipenv", "pdm", "pixi", "hatch", "conda", "mamba", "micromamba", "rye"}


# Training launchers vramfit knows and does not read: (what it is, the fix, {config}: the YAML its command names). A
# script whose only launch is one of these is incomplete (exit 3), not bad input.
_UNREVIEWED = {
    ("tune", "run"): ("torchtune (`tune run RECIPE --config ...`)", "plan it with `vramfit plan --model-config` and the config's settings"),
    ("litgpt",): ("LitGPT's command line", "review its config file instead: vramfit review {config} --gpus N"),
    ("composer",): ("Composer's launcher (llm-foundry)", "review its YAML instead: vramfit review {config} --gpus N"),
    ("xtuner", "train"): ("XTuner (`xtuner train CONFIG.py`)", "plan it with `vramfit plan --model-config` and the config's settings"),
    ("nemo",): ("NVIDIA NeMo's command line", "plan it with `vramfit plan --model-config` and the recipe's settings"),
    ("colossalai", "run"): ("ColossalAI's launcher", "plan it with `vramfit plan --model-config` and the script's settings"),
    # hiyouga/EasyR1 (examples/*.sh): verl's fork, `python3 -m verl.trainer.main config=examples/config.yaml worker.actor...`,
    # whose OmegaConf schema (data / algorithm / worker / trainer, verl/trainer/config.py) is not verl's Hydra ppo_trainer
    ("-m", "verl.trainer.main"): ("EasyR1 (`python3 -m verl.trainer.main config=...`)", "plan it with `vramfit plan --model-config` and {config}'s settings"),
}


def _unreviewed_keys(argv: list[str]) -> list[tuple[str, ...]]:
    name = os.path.basename(argv[0]) if argv else ""
    module = [("-m", argv[2])] if re.fullmatch(r"python[\d.]*", name) and argv[1:2] == ["-m"] and len(argv) > 2 else []
    return [(name, *argv[1:2]), (name,), *module]


# MPI launchers: `-np N` processes in all, `-npernode N` / `-N N` per node (Open MPI, MPICH, Horovod's horovodrun)
_MPI = {"mpirun", "mpiexec", "horovodrun", "oshrun"}


# The trainers' own commands that run no training (ms-swift swift/cli/main.py ROUTE_MAPPING: infer, deploy, export, eval,
# app, web-ui, sample, merge-lora, rollout; LLaMA-Factory launcher.py: chat, export, api, webchat, eval; axolotl cli/main.py:
# inference, merge-lora, merge-sharded-fsdp-weights, preprocess, quantize, evaluate, vllm-serve), and the servers' own
NOT_TRAINING = {
    "swift": {"infer", "deploy", "export", "eval", "app", "web-ui", "sample", "merge-lora", "rollout"},
    "llamafactory-cli": {"chat", "export", "api", "webchat", "eval"},
    "lmf": {"chat", "export", "api", "webchat", "eval"},
    "axolotl": {"inference", "merge-lora", "merge-sharded-fsdp-weights", "preprocess", "quantize", "evaluate", "vllm-serve"},
    "vllm": {"serve"},
    "lmdeploy": {"serve", "chat"},
}


def _no_training_launch(commands) -> str:
    """What a script without a training launch runs instead, said plainly: an inference / serving / export command of a
    trainer, other commands, or none at all (comments only)."""
    ran = [c for c in commands if c.argv]
    other = next(
        (c for c in ran if os.path.basename(c.argv[0]) in NOT_TRAINING and c.argv[1:2] and c.argv[1] in NOT_TRAINING[os.path.basename(c.argv[0])]), None
    )
    if other is not None:
        said = f"{os.path.basename(other.argv[0])} {other.argv[1]}"
        return (
            f"runs `{said}` (line {other.line}), which serves, runs inference with, evaluates or exports a model: it trains "
            "nothing, so there is no training launch to review (torchrun, deepspeed, accelerate launch, axolotl train, "
            "swift sft|rlhf, llamafactory-cli train, or python script.py)"
        )
    if not ran:
        return "runs no command (comments and assignments only): there is no training launch to review"
    names = ", ".join(dict.fromkeys(f"`{os.path.basename(c.argv[0])}` (line {c.line})" for c in ran[:3]))
    return (
        f"has no launch command (torchrun, deepspeed, accelerate launch, axolotl train, swift sft|rlhf, "
        f"llamafactory-cli train, or python script.py); it runs {names}"
    )


# Shell steps a job launcher's command line may start with before its launch (`-- source env.sh && torchrun ...`)
_SHELL_STEPS = {"source", ".", "cd", "export", "set", "ulimit", "echo", "mkdir", "pip", "uv"}


def _launcher_of(argv: list[str]) -> tuple[str, list[str]] | None:
    name = os.path.basename(argv[0])
    if name not in ("torchrun", "deepspeed", "accelerate") and "--" in argv[1:]:
        # a job launcher given its command after `--` (`python mason.py --cluster ... -- accelerate launch ...`,
        # `ray job submit ... -- python train.py`): the command after it is the launch, where it is one
        after = argv.index("--", 1) + 1
        found = _launcher_of(argv[after:]) if after < len(argv) else None
        if found is not None:
            return found
        if after < len(argv) and argv[after] in _SHELL_STEPS:
            # `python mason.py ... -- source setup.sh \&\& python train.py ...` (open-instruct): the job launcher hands a
            # command line to the cluster, whose launch the shell reader finds after the `&&`; the launcher is none itself
            return None
    if name in _WRAPPING or (name in _RUNNERS and argv[1:2] == ["run"]):  # `sudo -E docker-compose run --rm trainer torchrun ...`,
        # `uv run accelerate launch ...`: the first launcher among its words
        for i in range(1, len(argv)):
            if name in _RUNNERS and argv[i].endswith(".py"):  # `uv run [options] train.py`: runs it with the environment's python
                return _launcher_of(["python", *argv[i:]])
            if os.path.basename(argv[i]) not in _WRAPPING and (found := _launcher_of(argv[i:])) is not None:
                return found
        return None
    if name in ("torchrun", "deepspeed"):
        return name, argv[1:]
    if name in _MPI:  # `mpirun -np 8 python train.py`: MPI starts the processes (DeepSpeed's mpi_discovery reads their ranks)
        program = next((i for i in range(1, len(argv)) if re.fullmatch(r"python[\d.]*", os.path.basename(argv[i]))), None)
        found = _launcher_of(argv[program:]) if program is not None else None
        if found is not None and found[0] == "python":
            return "mpi", [*argv[1:program], "--", *found[1]]
        return found
    if name == "accelerate" and argv[1:2] == ["launch"]:
        return "accelerate", argv[2:]
    if name == "axolotl" and argv[1:2] == ["train"]:
        return "axolotl", argv[2:]
    if name == "swift" and argv[1:2] and argv[1] in SWIFT_TRAIN:  # ms-swift: `swift sft|pt|rlhf --flag value ...`
        return "swift", argv[1:]
    if name in ("llamafactory-cli", "lmf") and argv[1:2] == ["train"]:  # LLaMA-Factory: a YAML, or flags
        return "llamafactory", argv[2:]
    if name == "trl" and argv[1:2] and argv[1] in trl_commands():  # TRL's CLI: `trl sft|dpo|grpo|... --flag value`
        return "trl", argv[1:]
    if not re.fullmatch(r"python[\d.]*", name):
        return None
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "-m" and i + 1 < len(argv):
            module = argv[i + 1]
            if module in _MODULE_LAUNCHERS:
                return _MODULE_LAUNCHERS[module], argv[i + 2 :]
            if module in _TOOL_MODULES or ("-m", module) in _UNREVIEWED:
                return None
            return "python", argv[i:]
        if argv[i] == "-c":
            return None
        i += 2 if argv[i] in ("-W", "-X") else 1
    if i < len(argv) and argv[i].endswith(".py"):
        return "python", argv[i:]
    return None


def _launcher_parse(launcher: str):
    if launcher == "torchrun":
        from torch.distributed.run import parse_args
    elif launcher == "torch.distributed.launch":
        from torch.distributed.launch import parse_args
    elif launcher == "deepspeed":
        from deepspeed.launcher.runner import parse_args
    else:
        from accelerate.commands.launch import launch_command_parser

        parse_args = launch_command_parser().parse_args
    return parse_args


@functools.lru_cache(maxsize=None)
def launcher_options(launcher: str) -> tuple[str, ...]:
    """The launcher's own option names, read from its --help (accelerate's help hides options
    according to sys.argv, so it is asked as if run bare)."""
    out = io.StringIO()
    argv, sys.argv = sys.argv, [launcher]
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            _launcher_parse(launcher)(["--help"])
    finally:
        sys.argv = argv
    return tuple(sorted(set(re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", out.getvalue())) - {"--help"}))


def _parse_quietly(launcher: str, tokens: list[str]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return _launcher_parse(launcher)(tokens), ""
    except SystemExit:
        return None, " ".join(err.getvalue().strip().splitlines()[-1:]).split("error:", 1)[-1].strip()


def _split_launch(source: Source, launcher: str, tokens: list[str], command: shell.Command) -> list[str]:
    """Launcher settings into `source`; returns the program's arguments."""
    if launcher == "python":
        source.program = " ".join(tokens[:2]) if tokens[0] == "-m" else tokens[0]
        source.seen_gpus = _visible_gpus(command)  # one process: the GPUs a device_map="auto" spreads the model over
        return tokens[2:] if tokens[0] == "-m" else tokens[1:]
    if launcher == "axolotl":
        # `axolotl train x.yaml --launcher torchrun|accelerate -- <launcher arguments>`: those go to the launcher underneath
        tokens, under = (tokens[: tokens.index("--")], tokens[tokens.index("--") + 1 :]) if "--" in tokens else (tokens, [])
        chosen = next((tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "--launcher"), None)
        tokens = _without(tokens, ["--launcher"], always_value=True)
        if chosen in ("torchrun", "accelerate") and under:
            _split_launch(source, chosen, [*under, "axolotl.cli.train"], command)
        source.program = "axolotl train"
        return tokens
    if launcher == "swift":  # torchrun underneath: NPROC_PER_NODE / NNODES from the command's environment
        source.program = f"swift {tokens[0]}"
        for key, name in (("gpus_per_node", "NPROC_PER_NODE"), ("nodes", "NNODES")):
            if name in command.environment:
                _count(source, key, command.environment[name], name)
        visible = _visible_gpus(command)
        if visible == 1:  # one device and no NPROC_PER_NODE: a single process
            source.visible_gpus = 1
        processes = int(command.environment["NPROC_PER_NODE"]) if command.environment.get("NPROC_PER_NODE", "").isdigit() else None
        if visible and visible // (processes or 1) >= 2:
            # swift/cli/main.py starts torchrun only with NPROC_PER_NODE (else one process), and swift/utils/env.py `is_mp()`:
            # a process that sees two or more GPUs spreads its model over them with device_map (naive model parallelism)
            source.visible_gpus = processes or 1
            source.device_map_gpus = visible // (processes or 1)
        return tokens[1:]
    if launcher == "mpi":
        options, program = tokens[: tokens.index("--")], tokens[tokens.index("--") + 1 :]
        values = {o: options[i + 1] for i, o in enumerate(options[:-1]) if o.startswith("-")}
        per_node = next((values[o] for o in ("-npernode", "--npernode", "-N", "-ppn", "--map-by-ppr") if o in values), None)
        total = next((values[o] for o in ("-np", "-n", "--np", "--n") if o in values), None)
        if per_node is not None:
            _count(source, "gpus_per_node", per_node, "mpirun -npernode")
        elif total is not None and not any(o in values for o in ("-H", "--host", "-hostfile", "--hostfile", "-f")):
            _count(source, "gpus_per_node", total, "mpirun -np")  # one host: every process on this node
        source.launcher = "mpi"
        return _split_launch(source, "python", program, command)
    if launcher == "trl":
        source.launcher = "accelerate"
        return _split_launch(source, "accelerate", _trl_launch(tokens[0], tokens[1:], source.path.parent), command)
    if launcher == "llamafactory":
        source.program = "llamafactory-cli train"
        if "NPROC_PER_NODE" in command.environment:
            _count(source, "gpus_per_node", command.environment["NPROC_PER_NODE"], "NPROC_PER_NODE")
        if "NNODES" in command.environment:  # cli.py: torchrun --nnodes $NNODES (its multi-node launch, with NODE_RANK / MASTER_ADDR)
            _count(source, "nodes", command.environment["NNODES"], "NNODES")
        # without NPROC_PER_NODE, llamafactory-cli starts torchrun over every GPU it sees (cli.py: get_device_count()),
        # one process where it sees one
        source.visible_gpus = _visible_gpus(command)
        if tokens and tokens[0].endswith((".yaml", ".yml", ".json")):
            source.references.append(
                Reference("training_args", tokens[0], Setting(tokens[0], tokens[0], source.label, source.line_of(tokens[0], command.line)))
            )
            return tokens[1:]
        return tokens
    ns, error = _parse_quietly(launcher, tokens)
    for _ in range(len(tokens)):
        if ns is not None:
            break
        invalid = re.match(r"argument (\S+): invalid .* value: '(.*)'$", error)
        if error.startswith("unrecognized arguments:"):
            unknown = error.split(":", 1)[1].split()
            for flag in unknown:
                name = flag.split("=", 1)[0]
                source.notes.append(
                    Finding(
                        "warning",
                        source.label,
                        name,
                        f"unknown flag {name}: not a TrainingArguments/GRPOConfig/launcher argument ({launcher} refuses it)."
                        f"{did_you_mean(name, launcher_options(launcher))}",
                        f"remove {name} or correct its name.",
                        line=source.line_of(name, command.line),
                    )
                )
            tokens = _without(tokens, unknown)
        elif invalid and shell.UNRESOLVED.search(invalid.group(2)):  # set when the job runs ($SLURM_NODEID): not ours to check
            tokens = _without(tokens, invalid.group(1).split("/"), always_value=True)
        else:
            break
        ns, error = _parse_quietly(launcher, tokens)
    if ns is None:
        problems = Problems()
        problems.add(source.label, launcher, f"{launcher} refuses the launch command at line {command.line} ({error})", "correct the launcher arguments.")
        raise ConfigError(problems)
    if launcher in ("deepspeed", "accelerate"):
        source.visible_gpus = _visible_gpus(command)
    if launcher in ("torchrun", "torch.distributed.launch"):
        source.program = _swift_entry(ns.training_script)
        _count(source, "gpus_per_node", ns.nproc_per_node, _written(tokens, "--nproc_per_node", "--nproc-per-node"))
        _count(source, "nodes", str(ns.nnodes).split(":")[-1], _written(tokens, "--nnodes"))
        return list(ns.training_script_args)
    if launcher == "deepspeed":
        source.program = ns.user_script
        include = re.fullmatch(r"localhost:([\d,]+)", ns.include or "")
        if include:
            _count(source, "gpus_per_node", str(len(include.group(1).split(","))), "--include")
        elif ns.num_gpus > 0:
            _count(source, "gpus_per_node", str(ns.num_gpus), _written(tokens, "--num_gpus", "--num_accelerators"))
        if ns.num_nodes > 0:
            _count(source, "nodes", str(ns.num_nodes), "--num_nodes")
        _hostfile(source, ns, tokens, command)
        return list(ns.user_args)
    source.program = _swift_entry(ns.training_script)  # accelerate
    settings = {k: getattr(ns, k) for k in ns.nondefault if k not in ("training_script", "training_script_args", "module", "config_file")}
    _accelerate_settings(source, settings, tokens)
    if ns.config_file and shell.UNRESOLVED.search(ns.config_file):
        flag = _written(tokens, "--config_file", "--config-file")
        source.missing.append(f"{ns.config_file} (accelerate settings) set when the script runs")
        source.notes.append(
            Finding(
                "info",  # the review is incomplete (exit 3): nothing here is the script's fault
                source.label,
                flag,
                f"its value {ns.config_file!r} is set when the script runs (an argument or a "
                "variable the script does not define), so the accelerate config was not read; memory not planned",
                f"pass the config as another PATH: vramfit review {source.label} path/to/config.yaml.",
                line=source.line_of(flag, command.line),
            )
        )
    elif ns.config_file:
        flag = _written(tokens, "--config_file", "--config-file")
        source.references.append(Reference("accelerate", ns.config_file, Setting(flag, ns.config_file, source.label, source.line_of(flag, command.line))))
    return list(ns.training_script_args)


def _without(tokens: list[str], flags: list[str], always_value: bool = False) -> list[str]:
    """The tokens less `flags` (and the value after one written `--flag value`: always, or when it
    does not look like the script)."""
    out, skip = [], False
    for i, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        if token in flags or token.split("=", 1)[0] in flags:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
            skip = "=" not in token and (always_value or (not nxt.startswith("-") and not nxt.endswith(".py") and i + 2 < len(tokens)))
            continue
        out.append(token)
    return out


def _written(tokens: list[str], *names: str) -> str:
    """How the script spells the flag (for messages): the first of `names` it uses."""
    for token in tokens:
        for name in names:
            if token == name or token.startswith(name + "="):
                return name
    return names[0]


@functools.lru_cache(maxsize=None)
def trl_commands() -> frozenset[str]:
    """The training commands of the installed TRL's CLI (trl/cli/commands: each a TrainingCommand running
    trl/scripts/<name>.py under `accelerate launch`)."""
    try:
        from trl.cli.commands import get_commands
        from trl.cli.commands.training import TrainingCommand
    except ImportError:  # a TRL before trl/cli/commands (0.x): its CLI's training commands then
        return frozenset({"sft", "dpo", "kto", "grpo"})
    return frozenset(c.name for c in get_commands() if isinstance(c, TrainingCommand))


@functools.lru_cache(maxsize=None)
def _trl_script_options(name: str) -> frozenset[str]:
    """The option strings the TRL script's own parser takes (trl/scripts/<name>.py make_parser: ScriptArguments, the
    command's config class, ModelConfig), `--config` included."""
    import importlib

    try:
        parser = importlib.import_module(f"trl.scripts.{name}").make_parser()
    except Exception:  # a script the installed TRL does not have, or cannot import: every flag is the script's
        return frozenset()
    # TrlParser.parse_args_and_config reads `--config FILE` itself (trl/scripts/utils.py), with no action of its own
    return frozenset(o for action in parser._actions for o in action.option_strings) | {"--config"}


def _trl_bundled(name: str) -> str:
    """TRL's bundled accelerate config of that name (trl/accelerate_configs/NAME.yaml: zero1-3, fsdp1, fsdp2, multi_gpu,
    single_gpu), where the installed TRL has it; else the name as written (a file not found: the review says so)."""
    import importlib.resources

    try:
        bundled = importlib.resources.files("trl.accelerate_configs").joinpath(f"{name}.yaml")
    except ImportError:
        return name
    return str(bundled) if bundled.is_file() else name


def _trl_launch(name: str, args: list[str], folder: Path) -> list[str]:
    """`trl NAME ARGS` as TRL runs it (trl/cli/commands/training.py TrainingCommand.run): the flags the script's parser
    does not take go to `accelerate launch`, `--accelerate_config X` becoming `--config_file` (a file, else TRL's bundled
    trl/accelerate_configs/X.yaml: accelerate_config.py resolve_accelerate_config_argument), then trl/scripts/NAME.py with
    the script's own flags."""
    own = _trl_script_options(name)
    launch, script, i = [], [], 0
    while i < len(args):
        flag = args[i].split("=", 1)[0]
        takes_value = "=" not in args[i] and i + 1 < len(args) and not args[i + 1].startswith("--")
        words = args[i : i + 2] if takes_value else args[i : i + 1]
        if flag == "--accelerate_config" and (len(words) == 2 or "=" in args[i]):
            value = words[1] if len(words) == 2 else args[i].split("=", 1)[1]
            launch += ["--config_file", value if (folder / value).is_file() or Path(value).is_file() else _trl_bundled(value)]
        elif own and flag not in own and flag.startswith("--"):
            launch += words
        else:
            script += words
        i += len(words)
    return [*launch, f"trl/scripts/{name}.py", *script]


def _swift_entry(program: str) -> str:
    """ms-swift's command-line entry files (swift/cli/sft.py, pt.py, rlhf.py: what `swift sft` runs, launched directly by
    accelerate or torchrun) read as the `swift` command they implement, which parses its own argument classes."""
    found = re.search(r"(?:^|/)swift/cli/(sft|pt|rlhf)\.py$", program.replace("\\", "/"))
    return f"swift {found.group(1)}" if found else program


def _hostfile(source: Source, ns, tokens: list[str], command: shell.Command) -> None:
    """`deepspeed --hostfile FILE`: the nodes and GPUs per node its resource pool gives (deepspeed/launcher/runner.py
    main: one node per host, each host's `slots=N` GPUs, read with its own fetch_hostfile), where --num_nodes /
    --num_gpus / --include do not say them. Only a hostfile the command names: DeepSpeed's default /job/hostfile is the
    cluster's, not the script's."""
    flag = _written(tokens, "--hostfile", "-H")
    if not any(t in ("--hostfile", "-H") or t.startswith("--hostfile=") for t in tokens) or not ns.hostfile or shell.UNRESOLVED.search(ns.hostfile):
        return
    base = source.cwd or source.path.parent
    path = next((p for p in (base / ns.hostfile, Path(ns.hostfile)) if p.is_file()), None)
    if path is None:
        return
    from deepspeed.launcher.runner import fetch_hostfile

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            pool = fetch_hostfile(str(path))
    except (ValueError, OSError, UnicodeDecodeError):  # DeepSpeed refuses the file: its own message comes at launch
        return
    if not pool:
        return
    if "nodes" not in source.hardware:
        _count(source, "nodes", str(len(pool)), flag)
    if "gpus_per_node" not in source.hardware:
        _count(source, "gpus_per_node", str(min(pool.values())), flag)


def _visible_gpus(command: shell.Command) -> int | None:
    """How many GPUs the launch's CUDA_VISIBLE_DEVICES lists (None: unset, or not a plain list of indices)."""
    visible = command.environment.get("CUDA_VISIBLE_DEVICES", "")
    return len(visible.split(",")) if re.fullmatch(r"\d+(,\d+)*", visible) else None


def _count(source: Source, key: str, value: Any, flag: str) -> None:
    if str(value).isdigit() and int(value) > 0:
        source.hardware[key] = (int(value), flag)


def _program_settings(source: Source, args: list[str], after: int) -> None:
    """`--flag value...` groups; positional config files (axolotl) become references, and so does a
    training script's first argument when it is a YAML/JSON file: transformers' HfArgumentParser convention
    (`parse_yaml_file(sys.argv[1])` / `parse_json_file`), which LLaMA-Factory's `src/train.py x.yaml`,
    the transformers examples and many upstream scripts follow."""
    current = None
    for i, token in enumerate(args):
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            current = Setting(name, [value] if eq else [], source.label, source.line_of(name, after))
            source.settings.append(current)
        elif current is not None:
            current.value.append(token)
        elif token.endswith((".yml", ".yaml")) and (source.launcher == "axolotl" or "axolotl" in source.program):
            source.references.append(Reference("axolotl", token, Setting(token, token, source.label, source.line_of(token, after))))
        elif i == 0 and token.endswith((".yml", ".yaml", ".json")) and source.program.endswith(".py") and not shell.UNRESOLVED.search(token):
            source.references.append(Reference("training_args", token, Setting(token, token, source.label, source.line_of(token, after))))
    for setting in source.settings:
        resolved = len(setting.value) == 1 and not shell.UNRESOLVED.search(setting.value[0])
        if setting.key == "--deepspeed" and resolved and not DEEPSPEED_PRESET.fullmatch(setting.value[0]):
            source.references.append(Reference("deepspeed", setting.value[0], setting))
        elif setting.key == "--config" and resolved and setting.value[0].endswith((".yml", ".yaml")):  # TRL scripts' TrlParser
            source.references.append(Reference("training_args", setting.value[0], setting))


# ----------------------------------------------------------------------------------------------- accelerate


def _read_accelerate(source: Source) -> None:
    doc = source.document
    import dataclasses

    from accelerate.commands.config.config_args import ClusterConfig

    known = [f.name for f in dataclasses.fields(ClusterConfig)]
    for key in doc:
        if key not in known:
            source.notes.append(
                Finding(
                    "warning",
                    source.label,
                    key,
                    f"unknown key {key}: not an accelerate config key.{did_you_mean(key, known)}",
                    "remove it or correct its name.",
                    line=source.line_of(key),
                )
            )
    ds = doc.get("deepspeed_config") or {}
    options = [o[2:] for o in launcher_options("accelerate")]
    for key in ds if isinstance(ds, dict) else ():
        if key not in options:
            source.notes.append(
                Finding(
                    "warning",
                    source.label,
                    f"deepspeed_config.{key}",
                    f"unknown key {key}: accelerate launch has no such DeepSpeed option.{did_you_mean(key, options)}",
                    "remove it or correct its name.",
                    line=source.line_of(key),
                )
            )
    _accelerate_settings(source, {k: v for k, v in doc.items() if k != "deepspeed_config"}, [], ds if isinstance(ds, dict) else {})


def _accelerate_settings(source: Source, settings: dict[str, Any], tokens: list[str], deepspeed: dict | None = None) -> None:
    """accelerate's settings (config file or launch flags) in the config-file vocabulary."""
    ds = dict(deepspeed or {})
    for key in (
        "zero_stage",
        "offload_optimizer_device",
        "offload_param_device",
        "gradient_accumulation_steps",
        "gradient_clipping",
        "zero3_init_flag",
        "deepspeed_config_file",
    ):
        if key in settings and settings[key] is not None:
            ds[key] = settings[key]
    source.accelerate = {
        k: settings[k] for k in ("num_processes", "num_machines", "mixed_precision", "use_deepspeed", "distributed_type") if settings.get(k) is not None
    }
    if ds:
        source.accelerate["deepspeed_config"] = ds
    machines = settings.get("num_machines") or 1
    if settings.get("num_processes"):
        flag = _written(tokens, "--num_processes", "--num-processes") if tokens else "num_processes"
        _count(source, "gpus_per_node", str(int(settings["num_processes"]) // int(machines)), flag)
    if settings.get("num_machines"):
        _count(source, "nodes", str(settings["num_machines"]), _written(tokens, "--num_machines", "--num-machines") if tokens else "num_machines")
    if isinstance(ds.get("deepspeed_config_file"), str) and ds["deepspeed_config_file"]:
        key = "deepspeed_config.deepspeed_config_file" if not tokens else "--deepspeed_config_file"
        source.references.append(
            Reference("deepspeed", ds["deepspeed_config_file"], Setting(key, ds["deepspeed_config_file"], source.label, source.line_of(key)))
        )
