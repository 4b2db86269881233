"""`vramfit fit`: the fastest configuration that fits, found without a trial launch.

    vramfit fit RECIPE [--gpu X] [--gpus N] [--nodes M] [--seq-len L] [--global-batch-size B] [key=value pins ...]
    vramfit fit --model-config PATH --gpu X --gpus N [--nodes M] [--method full|lora|qlora|grpo] [--seq-len L]
                [--global-batch-size B] [--host-ram-gib H] [key=value pins ...] [--json] [--write NAME]

Exit codes: 0 a configuration fits (printed, ranked), 1 nothing fits (the closest candidates and every
family's reason are printed), 2 bad input (nothing searched or written).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

EPILOG = """\
pins: key=value, never changed by the search. The searched knobs, spelt as in a recipe:
  deepspeed=none|zero1|zero2|zero2_offload_optimizer|zero3|zero3_offload_optimizer|zero3_offload_optimizer_params
  deepspeed=fsdp|fsdp_offload|fsdp2|fsdp2_offload (FSDP full shard; or pin fsdp=... / fsdp_config.KEY=...)
  use_vllm=true|false  vllm_gpu_memory_utilization=0.3  vllm_enable_sleep_mode=true|false (GRPO; vllm_mode=server pinned as typed)
  per_device_train_batch_size=N  gradient_accumulation_steps=N  gradient_checkpointing=true|false
  use_liger_kernel=true|false  attn_implementation=flash_attention_2|sdpa|eager
  optim=adamw_torch_fused|adamw_8bit|paged_adamw_8bit|...  steps_per_generation=N (GRPO)
Any other key is passed on as in `vramfit plan` (recipe: a dotted path or a training argument;
--model-config: the keys of `vramfit plan --help`) and kept as given.

The global batch is kept exactly: micro-batch x accumulation x GPUs = --global-batch-size (default:
the recipe's; with --model-config 8 per GPU, the Trainer's default micro-batch).

exit codes: 0 found, 1 nothing fits, 2 bad input.

examples:
  vramfit fit axolotl-llama-3b-8xa100-80g
  vramfit fit axolotl-llama-3b-8xa100-80g --gpu h100 gradient_checkpointing=true --json
  vramfit fit --model-config model_configs/llama-3.1-8b.json --gpu h100 --gpus 8 --seq-len 4096 \\
      --global-batch-size 64 --write llama-3.1-8b-8xh100
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Search the fastest configuration that fits: ZeRO stage or FSDP, offload, micro-batch x accumulation, "
        "checkpointing, Liger, attention, 8-bit optimizers; for GRPO the generation batch and the vLLM share."
    )
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("items", nargs="*", metavar="RECIPE|key=value", help="a recipe, then key=value pins")
    parser.add_argument("--model-config", metavar="PATH", help="a model config.json instead of a recipe")
    parser.add_argument("--gpu", help="GPU name from the catalogue (vramfit/hardware.py)")
    parser.add_argument("--gpus", type=int, help="GPUs per node")
    parser.add_argument("--nodes", type=int, help="nodes (default 1, or the recipe's)")
    parser.add_argument("--method", choices=("full", "lora", "qlora", "grpo"), help="with --model-config (default full)")
    parser.add_argument("--seq-len", type=int, help="tokens per sample (text + image; GRPO: prompt tokens)")
    parser.add_argument("--global-batch-size", type=int, help="samples (GRPO: completions) per optimizer step, kept exactly")
    parser.add_argument("--host-ram-gib", type=float, help="host RAM per node, to check offload")
    parser.add_argument("--top", type=int, default=10, help="ranked rows to print (default 10)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--write", metavar="NAME", help="write the winner as recipes/NAME/ (recipe.yaml, launch.sh, README.md)")
    parser.add_argument(
        "--data-format", choices=("chat_jsonl", "llava_json", "rec_jsonl"), help="with --write and --model-config: the dataset format of the written recipe"
    )


@dataclass
class Request:
    base: Any
    base_knobs: dict[str, Any]
    pins: dict[str, Any]
    global_batch: int
    recipe: Any = None
    label: str = ""
    notes: tuple[str, ...] = ()


def run(args) -> int:
    from vramfit.problems import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, ConfigError

    try:
        request = build(args)
        from vramfit.fit.search import search

        result = search(request.base, request.global_batch, request.pins, request.base_knobs, request.label)
        result.notes[:0] = list(request.notes)
        written = None
        if args.write and result.winner is not None:
            from vramfit.fit.write import write

            written = write(args.write, result, request, args)
    except ConfigError as error:
        from vramfit.problems import report

        return report(error, as_json=args.json, code=EXIT_BAD_INPUT)  # the one problem format of every command
    from vramfit.fit import render

    if args.json:
        import json

        data = render.to_json(result, top=args.top)
        if written:
            data["written"] = str(written)
        print(json.dumps(data, indent=2))
    else:
        print(render.table(result, top=args.top))
        if written:
            print(f"\nwrote {written}/ (recipe.yaml, launch.sh, README.md); next: vramfit validate {args.write}")
        elif args.write:
            why = "the configurations that fit are not writable as a recipe (see the notes)" if result.ranked else "no configuration fits"
            print(f"\nnothing written: {why}", file=sys.stderr)
    return EXIT_OK if result.winner is not None or (result.ranked and not args.write) else EXIT_FAILED


# Keys passed on as typed (the planner parses them) that also hold a searched knob still: FSDP's own
# spelling holds the engine, vllm_mode holds vLLM on or off.
HOLDING = ("fsdp", "vllm_mode")


def _split_pins(items: list[str], problems, label: str) -> tuple[dict[str, Any], list[str]]:
    """key=value items -> (searched knobs pinned, other overrides kept as typed)."""
    from vramfit.fit.search import FSDP_ALL, KNOBS, PRESETS, UNWRITABLE, preset_from_text
    from vramfit.recipe import parse_value

    pins, rest = {}, []
    for item in items:
        key, _, text = item.partition("=")
        key = key.strip().removeprefix("training.")
        if key == "model.attn_implementation":
            key = "attn_implementation"
        if key in HOLDING or key.startswith("fsdp_config."):
            pins[key] = parse_value(text)
            rest.append(item)
            continue
        if key not in KNOBS:  # the searched knobs are what a pin may hold
            rest.append(item)
            continue
        value = parse_value(text)
        if key == "deepspeed":
            value = preset_from_text(text)
            if value not in (*UNWRITABLE, *PRESETS, *FSDP_ALL):
                problems.add(label, "deepspeed", f"'{text}' is not a preset the search knows", f"pin one of: {', '.join((*UNWRITABLE, *PRESETS, *FSDP_ALL))}.")
                continue
        elif key == "vllm_gpu_memory_utilization":
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1:
                problems.add(label, key, f"{text!r} is not a fraction in (0, 1] ({key}={text})", f"write {key}=0.5.")
                continue
            value = float(value)
        elif key in ("use_vllm", "vllm_enable_sleep_mode"):
            if not isinstance(value, bool):
                problems.add(label, key, f"{text!r} is not true or false ({key}={text})", f"write {key}=true or {key}=false.")
                continue
        elif key in ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation"):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems.add(label, key, f"{text!r} is not a positive whole number ({key}={text})", f"write {key}=<N>.")
                continue
        elif key in ("gradient_checkpointing", "use_liger_kernel"):
            if not isinstance(value, bool):
                problems.add(label, key, f"{text!r} is not true or false ({key}={text})", f"write {key}=true or {key}=false.")
                continue
        elif key == "attn_implementation" and value not in ("flash_attention_2", "sdpa", "eager"):
            problems.add(label, key, f"{text!r} is not an attention implementation", "write flash_attention_2, sdpa or eager.")
            continue
        pins[key] = value
    return pins, rest


def build(args) -> Request:
    from vramfit.hardware import CATALOGUE
    from vramfit.problems import ConfigError, Problems, did_you_mean

    problems = Problems()
    label = "vramfit fit"
    items = list(args.items)
    if args.gpu is not None and args.gpu not in CATALOGUE:
        problems.add(label, "--gpu", f"unknown GPU '{args.gpu}'.{did_you_mean(args.gpu, CATALOGUE)}", f"use one of: {', '.join(CATALOGUE)}.")
    for flag, value in (
        ("--gpus", args.gpus),
        ("--nodes", args.nodes),
        ("--seq-len", args.seq_len),
        ("--global-batch-size", args.global_batch_size),
        ("--host-ram-gib", args.host_ram_gib),
    ):
        if value is not None and value <= 0:
            problems.add(label, flag, f"must be positive ({flag} {value})", f"pass a positive {flag}.")
    if args.write:
        from vramfit.recipe import NAME_RE

        if not NAME_RE.match(args.write):
            problems.add(
                label,
                "--write",
                f"'{args.write}' does not follow <model>[-<method>]-[<N>x]<gpu>[-<variant>]",
                "use e.g. llama-3.1-8b-8xh100 (the GPU name from the catalogue).",
            )
        else:
            from vramfit.paths import recipes_dir

            if (recipes_dir() / args.write).exists():
                problems.add(
                    str(recipes_dir() / args.write), "--write", "already exists; nothing is overwritten", "pick a new name or remove that folder yourself."
                )
    pins, rest = _split_pins([i for i in items if "=" in i], problems, label)
    targets = [i for i in items if "=" not in i]
    if problems:
        raise ConfigError(problems)
    if args.model_config:
        request = _from_model_config(args, pins, rest, targets, problems, label)
    else:
        request = _from_recipe(args, pins, rest, targets, problems, label)
    _check_batch(request, problems, label)
    if problems:
        raise ConfigError(problems)
    return request


def _from_recipe(args, pins, rest, targets, problems, label) -> Request:
    from vramfit.fit.search import deepspeed_path, knobs_of
    from vramfit.paths import find_recipe
    from vramfit.planner.setup import Setup
    from vramfit.problems import ConfigError
    from vramfit.recipe import load

    if len(targets) != 1:
        problems.add(
            label,
            "RECIPE",
            f"fit takes one RECIPE, got {len(targets)} ({', '.join(targets) or 'none'})",
            "name one recipe (vramfit list), or use --model-config PATH --gpu NAME --gpus N.",
        )
        raise ConfigError(problems)
    path = find_recipe(targets[0])
    original = load(path)
    overrides = []
    for item in rest:  # FSDP's keys are training arguments; FSDP replaces the recipe's DeepSpeed JSON
        key = item.partition("=")[0].strip()
        if key == "fsdp" or key.startswith("fsdp_config."):
            overrides.append(f"training.{item.strip()}")
            if "deepspeed=none" not in overrides and "deepspeed" not in pins:
                overrides.append("deepspeed=none")
        else:
            overrides.append(item)
    if args.method and args.method != original.method:
        problems.add(
            str(path),
            "method",
            f"the recipe is {original.method}, --method asks {args.method}",
            "drop --method, or fit --model-config with the method you want.",
        )
        raise ConfigError(problems)
    for flag, key in (
        ("gpu", "hardware.gpu"),
        ("gpus", "hardware.gpus_per_node"),
        ("nodes", "hardware.nodes"),
        ("host_ram_gib", "hardware.host_ram_gib"),
        ("seq_len", "data.max_length"),
        ("global_batch_size", "global_batch_size"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides.append(f"{key}={value}")
    for key, value in pins.items():
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if key in HOLDING or key.startswith("fsdp_config."):
            continue  # already in the overrides as typed
        if key == "deepspeed":
            if value in ("none", "zero1") or value.startswith("fsdp"):
                if value.startswith("fsdp"):
                    overrides.append("deepspeed=none")
                continue  # applied to the Setup below: no recipe spells them
            overrides.append(f"deepspeed={deepspeed_path(value)}")
        elif key == "attn_implementation":
            overrides.append(f"model.attn_implementation={text}")
        else:
            overrides.append(f"{key}={text}")
    recipe = load(path, overrides)
    base = Setup.from_recipe(recipe)
    base_knobs = knobs_of(Setup.from_recipe(original))
    if pins.get("deepspeed") in ("none", "zero1") or str(pins.get("deepspeed", "")).startswith("fsdp"):
        base = _with_preset(base, pins["deepspeed"])
    return Request(base, base_knobs, pins, recipe.global_batch_size, recipe, recipe.name)


def _with_preset(base, name: str):
    from vramfit.fit.search import FSDP_ALL, apply, knobs_of, preset_zero
    from vramfit.planner import params
    from vramfit.planner.setup import _hidden_size

    if name in FSDP_ALL:
        return apply(base, {**knobs_of(base), "deepspeed": name}, {name: preset_zero("none", 0)} | _fsdp_zeros())
    zero = preset_zero(name, _hidden_size(params.read_config(base.model_config)))
    return base.replace(zero=zero, engine="deepspeed" if zero.stage else ("ddp" if base.world > 1 else "single"), fsdp_offload=False)


def _fsdp_zeros():
    from vramfit.fit.search import FSDP_ALL
    from vramfit.planner.setup import Zero

    return {n: Zero(offload_optimizer=True, offload_params=True) if n.endswith("_offload") else Zero() for n in FSDP_ALL}


def _from_model_config(args, pins, rest, targets, problems, label) -> Request:
    from vramfit.fit.search import deepspeed_path, knobs_of
    from vramfit.hardware import CATALOGUE
    from vramfit.planner.setup import HF_DEFAULTS, Setup
    from vramfit.problems import ConfigError

    if targets:
        problems.add(
            label, targets[0], f"'{targets[0]}' is not key=value (with --model-config there is no RECIPE)", "drop it, or fit the recipe without --model-config."
        )
    if not args.gpu:
        problems.add(label, "--gpu", "--model-config needs the GPU", "add --gpu h100 (names: vramfit/hardware.py).")
    if not args.gpus:
        problems.add(label, "--gpus", "--model-config needs the number of GPUs per node", "add --gpus 8.")
    if problems:
        raise ConfigError(problems)
    method = args.method or "full"
    overrides = [f"method={method}", *rest]
    keys = {i.split("=", 1)[0] for i in rest}
    notes = []
    if not keys & {"bf16", "fp16"}:
        bf16 = CATALOGUE[args.gpu].bf16
        overrides.append("bf16=true" if bf16 else "fp16=true")
        notes.append(
            f"precision: {'bf16' if bf16 else 'fp16'} mixed precision assumed ({args.gpu} {'has' if bf16 else 'has no'} bf16); pin bf16= / fp16= to change"
        )
    if "expandable_segments" not in keys:
        overrides.append("expandable_segments=true")
        notes.append("allocator: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True assumed (recipes written by fit set it)")
    if method in ("lora", "qlora") and "lora_target_modules" not in keys and _is_vlm(args.model_config):
        overrides.append(f"lora_target_modules={VLM_LLM_TARGETS}")
        notes.append("LoRA targets: the LLM's linear layers only (not the vision tower's); pin lora_target_modules= to change")
    if args.seq_len:
        overrides.append(f"seq_len={args.seq_len}")
    if args.host_ram_gib:
        overrides.append(f"host_ram_gib={args.host_ram_gib}")
    knob_items = []
    for key, value in pins.items():
        if key == "deepspeed" or key in HOLDING or key.startswith("fsdp_config."):
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        knob_items.append(f"{key}={text}")
    preset = pins.get("deepspeed")
    ds = deepspeed_path(preset) if preset and preset not in ("none", "zero1") and not preset.startswith("fsdp") else None
    base = Setup.from_args(args.model_config, args.gpu, args.gpus, args.nodes or 1, ds, [*overrides, *knob_items])
    if preset in ("none", "zero1") or (preset or "").startswith("fsdp"):
        base = _with_preset(base, preset)
    defaults = Setup.from_args(args.model_config, args.gpu, args.gpus, args.nodes or 1, None, overrides)
    world = args.gpus * (args.nodes or 1)
    gbs = args.global_batch_size or HF_DEFAULTS["per_device_train_batch_size"] * world
    if not args.global_batch_size:
        notes.append(
            f"global batch: {gbs} = {HF_DEFAULTS['per_device_train_batch_size']} per GPU (the Trainer's default micro-batch) x {world} GPUs; pass --global-batch-size"
        )
    return Request(base, knobs_of(defaults), pins, gbs, None, base.label, tuple(notes))


VLM_LLM_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


def _is_vlm(path) -> bool:
    from vramfit.planner import params

    try:
        return bool(params.summary(__import__("pathlib").Path(path)).groups.get("vision"))
    except Exception:  # an unreadable config is reported by Setup.from_args with its file and fix
        return False


def _check_batch(request: Request, problems, label: str) -> None:
    base, gbs = request.base, request.global_batch
    world = base.world
    if gbs % world:
        problems.add(
            label,
            "global_batch_size",
            f"{gbs} does not divide over {world} GPUs ({gbs} / {world} = {gbs / world:.2f})",
            f"use a multiple of {world}, e.g. --global-batch-size {max(world, gbs // world * world)}.",
        )
        return
    per_rank = gbs // world
    micro, ga = request.pins.get("per_device_train_batch_size"), request.pins.get("gradient_accumulation_steps")
    if micro and per_rank % micro:
        problems.add(
            label,
            "per_device_train_batch_size",
            f"the pinned micro-batch {micro} does not divide the {per_rank} samples per GPU (global {gbs} / {world} GPUs)",
            "pin a divisor of the per-GPU share, or change --global-batch-size.",
        )
    if ga and per_rank % ga:
        problems.add(
            label,
            "gradient_accumulation_steps",
            f"the pinned accumulation {ga} does not divide the {per_rank} samples per GPU",
            "pin a divisor of the per-GPU share, or change --global-batch-size.",
        )
    if micro and ga and micro * ga != per_rank:
        problems.add(
            label,
            "gradient_accumulation_steps",
            f"micro-batch x accumulation = {micro} x {ga} = {micro * ga} != {per_rank} samples per GPU (global {gbs} / {world} GPUs)",
            f"pin only one of them, or make their product {per_rank}.",
        )
    if base.method == "grpo" and gbs % base.num_generations:
        problems.add(
            label,
            "global_batch_size",
            f"{gbs} completions do not divide into groups of num_generations {base.num_generations}",
            f"use a multiple of {base.num_generations}.",
        )
