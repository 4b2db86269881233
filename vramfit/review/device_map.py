"""The `device_map` (and `max_memory`) a Python training file loads its model with, read with `ast` (never run), and what
it means for the launch that runs the file.

`AutoModelForCausalLM.from_pretrained(..., device_map=...)` (transformers 5.23 `check_and_set_device_map` /
`integrations.accelerate._get_device_map`):
- "auto" / "balanced" / "balanced_low_0": accelerate's `get_balanced_memory` then `infer_auto_device_map` place whole
  layers over every GPU the process sees (vramfit/planner/device_map.py plans that split); "sequential":
  `get_max_memory` (each GPU's whole memory, or `max_memory`) then `infer_auto_device_map`: GPU 0 is filled first;
- a dict `{"": local_rank}` / `{"": Accelerator().process_index}`, an int, "cuda" / "cuda:N", `torch.device(...)`, TRL's
  `get_kbit_device_map()`: the whole model on one device, one GPU per process;
- a dict of several modules: a hand-written split, planned as accelerate's balanced split over the GPUs it names.
`max_memory={0: "20GiB", 1: "20GiB"}` caps what accelerate places on each GPU: `get_balanced_memory` takes
min(balanced share, cap) for every GPU but the last; only the GPUs it names are used.

In a single process (`python train.py`, `accelerate launch --num_processes 1`) a spreading map spreads the model over
the GPUs the process sees (CUDA_VISIBLE_DEVICES, else the node's). Under a distributed launcher every process sees
every GPU and spreads its own copy over them; accelerate's `Accelerator.prepare_model` (which the Trainer calls) then
refuses the run: "You can't train a model that has been loaded with `device_map='auto'` in any distributed mode"
(huggingface/accelerate#1810, first released in v0.22.0; for 4-/8-bit models #1523, v0.20.0). transformers 5.23 only
logs it (`from_pretrained`: "You've set device_map=`auto` while triggering a distributed run with torchrun"), and under
DeepSpeed ZeRO-3 it refuses any device_map ("DeepSpeed Zero-3 is not compatible with passing a `device_map`").
Scripts that switch to `{"": local_rank}` when WORLD_SIZE > 1 (alpaca-lora, artidoro/qlora, Qwen's finetune.py) are
read as such: spread in one process, one GPU per process under a distributed launcher.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from vramfit.review.python_literals import assigned_literals, unreached_lines

# device_map strings that let accelerate place the model's modules over every GPU the process sees
SPREAD = ("auto", "balanced", "balanced_low_0", "sequential")
# calls whose value is one device for this process (TRL's get_kbit_device_map: {"": PartialState().local_process_index})
ONE_DEVICE_CALLS = ("get_kbit_device_map", "device", "current_device", "get_current_device")
_MODEL_OWNER = re.compile(
    r"^(AutoModel|AutoPeftModel|FastLanguageModel|FastVisionModel|FastModel)|For(CausalLM|ConditionalGeneration|Vision2Seq|ImageTextToText)$"
)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(GiB|GB|MiB|MB|KiB|KB|B)?\s*$", re.IGNORECASE)
_UNITS = {"gib": 2**30, "gb": 10**9, "mib": 2**20, "mb": 10**6, "kib": 2**10, "kb": 10**3, "b": 1}
GIB = 2**30


@dataclass(frozen=True)
class DeviceMap:
    """What a file's model load says about devices."""

    kind: str  # "spread" (accelerate places it over the GPUs), "hand" (a dict over several GPUs), "one" (one GPU per process), "unknown"
    written: str  # the value as written (source text)
    line: int
    policy: str = ""  # the spreading string ("auto", "sequential", ...); "" otherwise
    per_process_when_distributed: bool = False  # the file switches to one GPU per process under a distributed launch
    gpus: int | None = None  # "hand": the GPUs the dict names
    max_memory_gib: float | None = None  # the cap max_memory gives every GPU it names, where literal and the same for each
    max_memory_gpus: int | None = None  # the GPUs a literal max_memory dict names (None: a comprehension over every GPU, or unread)
    max_memory_written: str = ""  # max_memory as written, where the file passes one
    max_memory_read: bool = False  # False where it is passed but computed when the script runs


def read(tree: ast.AST, text: str) -> DeviceMap | None:
    """The device_map of the file's first model load (in line order; a load under a branch the file does not fix as taken
    only where no other is), or None where the load passes none (the model loads whole; the Trainer moves it to the
    process's GPU)."""
    literals = _assignments(tree)
    loads = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_model_load(n)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    if not loads:
        return None
    unreached = unreached_lines(tree, assigned_literals(tree))
    reached = [n for n in loads if not any(a <= n.lineno <= b for a, b in unreached)]
    call = (reached or loads)[0]
    node = _keyword(call, "device_map", literals)
    if not reached and len(loads) > 1:
        # every load sits under a branch the file does not settle (s1's train/sft.py: `if "70B" in config.model_name:`
        # loads with device_map="auto", its `else:` with none): which one runs, the arguments decide
        maps = [_keyword(n, "device_map", literals) for n in loads]
        written = [(ast.get_source_segment(text, m) or "").strip() if m is not None else "" for m in maps]
        if len(set(written)) > 1:
            chosen = next(i for i, m in enumerate(maps) if m is not None)
            return DeviceMap(
                "unknown",
                f"{written[chosen]} in one of {len(loads)} model loads under branches the arguments decide (line {', '.join(str(n.lineno) for n in loads)})",
                getattr(maps[chosen], "lineno", loads[chosen].lineno),
            )
    if node is None:
        return None
    kinds = _kinds(node, literals, tree, set())
    other = _other_branch_load(tree, call, reached or loads)
    if other is not None:  # `if "70B" in args.model_name: ...(device_map="auto") else: ...()` (simplescaling/s1 train/sft.py):
        # the branch taken depends on what the script is given, and the other branch loads the model another way
        alternative = _keyword(other, "device_map", literals)
        kinds += _kinds(alternative, literals, tree, set()) if alternative is not None else [("none", None)]
    written = (ast.get_source_segment(text, node) or "").strip()
    spreading = next((value for kind, value in kinds if kind == "spread"), None)
    if not isinstance(node, ast.Constant) and spreading is not None:  # a name or expression: say the value it takes
        written = f'"{spreading}" (through {written})'
    line = getattr(node, "lineno", call.lineno)
    memory = _keyword(call, "max_memory", literals)
    cap, named, memory_read = _max_memory(memory, literals) if memory is not None else (None, None, False)
    memory_fields = dict(
        max_memory_gib=cap,
        max_memory_gpus=named,
        max_memory_written=(ast.get_source_segment(text, memory) or "").strip() if memory is not None else "",
        max_memory_read=memory_read,
    )
    spread = [k for k in kinds if k[0] in ("spread", "hand")]
    one = any(k[0] == "one" for k in kinds)
    unknown = any(k[0] == "unknown" for k in kinds)
    none = any(k[0] == "none" for k in kinds)  # device_map=None: the model loads whole, the Trainer moves it to the process's GPU
    if spread and not (unknown or none):
        kind, value = spread[0]
        policy = value if kind == "spread" else ""
        gpus = value if kind == "hand" else None
        return DeviceMap(kind, written, line, policy, per_process_when_distributed=one, gpus=gpus, **memory_fields)
    if spread or unknown:  # it may spread the model, as the script's arguments or environment decide
        return DeviceMap("unknown", written, line, **memory_fields)
    if one:
        return DeviceMap("one", written, line, **memory_fields)
    return None


def _other_branch_load(tree: ast.AST, call: ast.Call, loads: list[ast.Call]) -> ast.Call | None:
    """A model load in the other branch of an `if` around `call` (both branches reachable as far as the file says)."""
    for branch in (n for n in ast.walk(tree) if isinstance(n, ast.If)):
        sides = [[c for stmt in side for c in ast.walk(stmt)] for side in (branch.body, branch.orelse)]
        for mine, theirs in (sides, sides[::-1]):
            if any(c is call for c in mine):
                other = next((c for c in theirs if isinstance(c, ast.Call) and any(c is n for n in loads)), None)
                if other is not None:
                    return other
    return None


def _is_model_load(call: ast.Call) -> bool:
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "from_pretrained"):
        return False
    owner = func.value.id if isinstance(func.value, ast.Name) else func.value.attr if isinstance(func.value, ast.Attribute) else ""
    return bool(_MODEL_OWNER.search(owner))


def _assignments(tree: ast.AST) -> dict[str, list[ast.AST]]:
    """Every value assigned to each plain name in the file (`device_map = "auto"` and, under `if ddp:`, `device_map =
    {"": local_rank}`), in line order."""
    out: dict[str, list[ast.AST]] = {}
    nodes = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))), key=lambda n: n.lineno)
    for node in nodes:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is None:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                out.setdefault(target.id, []).append(node.value)
    return out


def _keyword(call: ast.Call, name: str, literals: dict[str, list[ast.AST]]) -> ast.AST | None:
    """The node a call passes as `name`, directly or in a `**kwargs` dict literal (`model_kwargs = dict(device_map=...)`)."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    for kw in call.keywords:
        if kw.arg is None:
            targets = literals.get(kw.value.id, []) if isinstance(kw.value, ast.Name) else [kw.value]
            for target in targets:
                if isinstance(target, ast.Call) and getattr(target.func, "id", None) == "dict":
                    found = next((k.value for k in target.keywords if k.arg == name), None)
                    if found is not None:
                        return found
                if isinstance(target, ast.Dict):
                    for key, value in zip(target.keys, target.values):
                        if isinstance(key, ast.Constant) and key.value == name:
                            return value
    return None


def _kinds(node: ast.AST, literals: dict[str, list[ast.AST]], tree: ast.AST, seen: set[str], depth: int = 0) -> list[tuple[str, object]]:
    """The readings a device_map expression can take: ("spread", policy), ("hand", gpus), ("one", None), ("none", None)
    (None: no map), ("unknown", None)."""
    if depth > 6:
        return [("unknown", None)]
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None:
            return [("none", None)]
        if isinstance(value, str):
            if value in SPREAD:
                return [("spread", value)]
            if re.fullmatch(r"(cuda|xpu|npu|mps|cpu)(:\d+)?", value):
                return [("one", None)]
            return [("unknown", None)]
        if isinstance(value, int) and not isinstance(value, bool):
            return [("one", None)]
        return [("unknown", None)]
    if isinstance(node, ast.Dict):
        keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
        if keys == [""]:
            return [("one", None)]  # {"": local_rank}: the whole model on this process's device
        devices = set()
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, (int, str)) and not isinstance(value.value, bool):
                devices.add(str(value.value).removeprefix("cuda:"))
            else:
                return [("unknown", None)]
        gpus = {d for d in devices if d.isdigit()}
        return [("hand", len(gpus))] if len(gpus) > 1 else [("one", None)]
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if name in ONE_DEVICE_CALLS:
            return [("one", None)]
        return [("unknown", None)]
    if isinstance(node, ast.IfExp):
        return _kinds(node.body, literals, tree, seen, depth + 1) + _kinds(node.orelse, literals, tree, seen, depth + 1)
    if isinstance(node, ast.Name) and node.id not in seen and node.id in literals:
        out = []
        for value in literals[node.id]:
            out += _kinds(value, literals, tree, seen | {node.id}, depth + 1)
        return out
    return [("unknown", None)]


def _size_gib(value: object) -> float | None:
    """accelerate's convert_file_size_to_int: an int is bytes; "20GiB", "46000MB", "40GB"."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) / GIB
    if isinstance(value, str):
        found = _SIZE.match(value)
        if found:
            return float(found.group(1)) * _UNITS[(found.group(2) or "b").lower()] / GIB
    return None


def _max_memory(node: ast.AST, literals: dict[str, list[ast.AST]]) -> tuple[float | None, int | None, bool]:
    """(the cap every named GPU gets, the GPUs named, whether it was read): a literal dict `{0: "20GiB", 1: "20GiB"}` (the
    smallest cap of its GPUs), a comprehension `{i: "40GiB" for i in range(torch.cuda.device_count())}` (every GPU), or
    a name assigned one of those once."""
    if isinstance(node, ast.Name) and len(literals.get(node.id, [])) == 1:
        node = literals[node.id][0]
    if isinstance(node, ast.DictComp):
        cap = _size_gib(node.value.value) if isinstance(node.value, ast.Constant) else None
        return cap, None, cap is not None
    if isinstance(node, ast.Dict):
        caps = []
        for key, value in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and isinstance(value, ast.Constant)):
                return None, None, False
            if isinstance(key.value, int) and not isinstance(key.value, bool):
                cap = _size_gib(value.value)
                if cap is None:
                    return None, None, False
                caps.append(cap)
        return (min(caps), len(caps), True) if caps else (None, None, False)
    return None, None, False


# launchers that start one process per GPU unless told otherwise
DISTRIBUTED = ("torchrun", "torch.distributed.launch", "deepspeed", "accelerate")


@dataclass
class Launch:
    """A Python file's spreading device_map, with what the files say of the launch that runs it (mapping.build)."""

    device_map: DeviceMap
    file: str  # the file that loads the model
    launcher: str | None  # the launch script's launcher; None: the Python file was reviewed without one
    seen: int | None  # GPUs the launch lists (CUDA_VISIBLE_DEVICES), where it does
    sharded: str  # "DeepSpeed" / "FSDP" where the files give the Trainer either, else ""
    quantized: bool


def found(sources, program, primary) -> tuple[DeviceMap, str] | None:
    """(the device_map of the Python file the review reads or the launch runs, that file's label), where one is passed."""
    holder = next((s for s in sources if getattr(s, "device_map", None) is not None), None)
    if holder is not None:
        return holder.device_map, holder.label
    if program is not None and getattr(program, "device_map", None) is not None and primary.kind == "shell":
        return program.device_map, program.label
    return None


def apply(mapped, hw: dict, finding) -> list:
    """The launch decides what a spreading device_map does (module docstring), once the hardware is known: one process
    over the GPUs it sees (planner `device_map_gpus`, `device_map_policy`, `device_map_max_memory_gib`; the run's ranks
    become 1), or, under a distributed launcher, accelerate's refusal, or the file's own one-GPU-per-process map."""
    launch: Launch | None = getattr(mapped, "python_device_map", None)
    if launch is None:
        return []
    dm = launch.device_map
    out = []
    where = dict(file=launch.file, key="device_map", line=dm.line)
    ranks = hw["gpus_per_node"] * hw.get("nodes", 1)
    if launch.launcher in DISTRIBUTED and ranks > 1:
        if dm.per_process_when_distributed:
            out.append(
                finding(
                    "info",
                    what=f"device_map {dm.written}: the file loads the whole model on each process's own GPU under a distributed "
                    f"launch ({launch.launcher}, {ranks} processes), and spreads it over the GPUs only in a single process",
                    **where,
                )
            )
            return out
        pin = getattr(mapped, "accelerate_pin", None)
        first = (0, 20) if launch.quantized else (0, 22)
        older = pin is not None and pin.op == "==" and _version(pin.version) < first
        if older:
            out.append(
                finding(
                    "warning",
                    what=f"device_map={dm.written} under {launch.launcher} with {ranks} processes: every process spreads its own copy of "
                    f"the model over all the GPUs it sees, so each GPU holds a share of every copy; {pin} is older than the release "
                    f"that refuses this (accelerate v0.{first[1]}.0), so it runs, with no memory saved over data parallelism",
                    fix='load it on each process\'s own GPU: device_map={"": PartialState().process_index} (from accelerate import '
                    "PartialState), or run one process (python <script>) to spread the model over the GPUs.",
                    **where,
                )
            )
            return out
        out.append(
            finding(
                "error",
                what=f"device_map={dm.written} under {launch.launcher} with {ranks} processes: every process spreads its own copy of the "
                "model over all the GPUs it sees, and the Trainer's accelerate refuses it (\"You can't train a model that has been "
                "loaded with `device_map='auto'` in any distributed mode\": Accelerator.prepare_model, huggingface/accelerate#1810, "
                f"since v0.22.0{'; for 4-/8-bit models #1523, v0.20.0' if launch.quantized else ''})"
                + (
                    '; under DeepSpeed ZeRO-3 transformers refuses any device_map first ("DeepSpeed Zero-3 is not compatible with passing a `device_map`")'
                    if launch.sharded == "DeepSpeed"
                    else ""
                ),
                fix='load it on each process\'s own GPU: device_map={"": PartialState().process_index} (from accelerate import '
                "PartialState), or run one process (python <script>) to spread the model over the GPUs.",
                **where,
            )
        )
        return out
    gpus, said = hw["gpus_per_node"], "the node's, --gpus"
    if launch.seen:
        gpus, said = min(launch.seen, gpus), "CUDA_VISIBLE_DEVICES"
    if dm.kind == "hand" and dm.gpus:
        gpus, said = dm.gpus, "the GPUs the map names"
    if dm.max_memory_gpus:
        gpus, said = min(gpus, dm.max_memory_gpus), "the GPUs max_memory names"
    if gpus < 2:
        return out
    if launch.sharded:
        out.append(
            finding(
                "error",
                what=f"device_map={dm.written} spreads the model over the {gpus} GPUs the process sees, beside {launch.sharded}: accelerate "
                "refuses a model dispatched over several GPUs in any distributed mode, DeepSpeed and FSDP included (\"You can't train "
                "a model that has been loaded with `device_map='auto'` in any distributed mode\": Accelerator.prepare_model, "
                "huggingface/accelerate#1810)",
                fix=f'drop device_map (or load with device_map={{"": PartialState().process_index}}) to let {launch.sharded} shard the model, '
                f"or drop {launch.sharded} to spread it with device_map.",
                **where,
            )
        )
        return out
    planner = mapped.recipe.setdefault("planner", {})
    planner["device_map_gpus"] = gpus
    if dm.policy == "sequential":
        planner["device_map_policy"] = "sequential"
    if dm.max_memory_gib:
        planner["device_map_max_memory_gib"] = round(dm.max_memory_gib, 3)
    hw["gpus_per_node"] = 1  # one process: one rank, its batch per step is per_device_train_batch_size (Trainer: n_gpu 1)
    mapped.script_ranks = 1
    how = "python" if launch.launcher in (None, "python") else f"{launch.launcher} with one process"
    split = "GPU 0 filled first (sequential)" if dm.policy == "sequential" else "accelerate's balanced split"
    if dm.policy == "balanced_low_0":  # get_balanced_memory(low_zero=True): GPU 0 keeps only what the others cannot hold
        split += " (balanced_low_0 keeps GPU 0 nearly empty, which is not modelled: planned as balanced)"
    memory = ""
    if dm.max_memory_written and dm.max_memory_read:
        memory = f", max_memory {dm.max_memory_gib:g} GiB per GPU ({dm.max_memory_written})"
    out.append(
        finding(
            "info",
            what=f"device_map={dm.written} in one process ({how}): the model's layers are spread over the {gpus} GPUs it sees ({said}), "
            f"{split}{memory}, one micro-batch through the GPUs in turn; planned per GPU of the split, the busiest (the plan's note "
            "names it), as 1 rank",
            **where,
        )
    )
    if dm.max_memory_written and not dm.max_memory_read:
        out.append(
            finding(
                "info",
                what=f"max_memory={dm.max_memory_written} is computed when the script runs: not read; the split is planned without "
                "its caps (they lower what accelerate places on each GPU but the last only where below the balanced share)",
                **where,
            )
        )
    for f in mapped.findings:  # the plain-data-parallel note said every rank holds the whole model
        if f.what.startswith("no DeepSpeed JSON: reviewed as plain data parallel"):
            f.what = f"no DeepSpeed JSON: one process spreads the model, its gradients and optimizer states over its {gpus} GPUs (device_map)"
    return out


def _version(text: str) -> tuple[int, int]:
    parts = re.findall(r"\d+", text)
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 else (int(parts[0]), 0) if parts else (0, 0)
