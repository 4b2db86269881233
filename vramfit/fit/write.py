"""`vramfit fit --write NAME`: the winner as a recipe folder, readable top to bottom.

recipes/NAME/recipe.yaml carries the runbook header (Hardware / Command / Expect / Story) and a trade-off
comment on every searched knob (what it buys, what it costs, and what fit measured for the alternative);
launch.sh is the tree's one launch script; README.md holds why (the ranking), what it costs, and the
plan block that `python -m vramfit.docs` keeps current. The folder is validated after writing; a folder
that does not validate is removed again (nothing half-written is left) and the problems are reported.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from vramfit.fit.search import Result, deepspeed_path

TRADE_OFFS = {
    "deepspeed": {
        "zero2": "ZeRO-2: gradients + optimizer states sharded, weights replicated; reduce-scatter every micro-batch",
        "zero2_offload_optimizer": "ZeRO-2 + optimizer in host RAM: Adam runs on the CPU (slow), GPU keeps weights + gradient buckets",
        "zero3": "ZeRO-3: weights too are sharded; every forward/backward gathers them (more traffic, least memory without offload)",
        "zero3_offload_optimizer": "ZeRO-3 + optimizer in host RAM: CPU Adam and PCIe traffic every step",
        "zero3_offload_optimizer_params": "ZeRO-3 + optimizer and weights in host RAM: the least GPU memory, the slowest",
        "none": "no DeepSpeed: FSDP via training.fsdp (or plain DDP)",
    },
    "fsdp": {
        "fsdp": "FSDP full shard: weights, gradients, optimizer states sharded; all-gather per layer each forward/backward, reduce-scatter each micro-batch",
        "fsdp2": "FSDP2 (fully_shard) full shard: same memory and traffic as FSDP1 in the planner; per-parameter sharding",
        "fsdp_offload": "FSDP full shard + CPU offload: shards, gradients and the optimizer step on the host (PCIe + CPU AdamW every step)",
        "fsdp2_offload": "FSDP2 full shard + CPU offload: shards, gradients and the optimizer step on the host",
    },
    "per_device_train_batch_size": "larger: fewer, larger kernels and fewer reduce-scatters; more activation memory",
    "gradient_accumulation_steps": "micro-batches per optimizer step; micro x accumulation x GPUs = global_batch_size",
    "gradient_checkpointing": "true: recompute each layer's forward in backward (~+1 forward of FLOPs), activations ~ layer inputs only",
    "use_liger_kernel": "Liger: fused RMSNorm/SwiGLU/RoPE and linear cross-entropy: no [tokens x vocab] logits, less traffic",
    "attn_implementation": "flash/sdpa: no seq^2 score matrix; eager materialises it (memory and bandwidth)",
    "optim": "8-bit / paged optimizers (bitsandbytes) shrink Adam's 8 B/param states to ~2 B; paged states can spill to host",
    "steps_per_generation": "micro-batches per generate call: larger = bigger generation batch (KV cache), fewer generate calls",
    "use_vllm": "vLLM generates (colocated: its own 16-bit weights + KV cache on every training GPU); false: HF generate on the policy",
    "vllm_gpu_memory_utilization": "vLLM's share of each card: larger = more sequences decode at once (KV cache), less room for training",
    "vllm_enable_sleep_mode": "true: vLLM's weights go to host RAM outside generation (memory back for training; a wake-up copy per generate)",
}
OTHER_COMMENTS = {  # keys this writer sets that the search does not: what they trade, said once
    "learning_rate": "the writer's default for the method (full 1e-5, LoRA 1e-4, GRPO 1e-6); tune for your data",
    "beta": "KL weight to a reference model; > 0 keeps a frozen reference copy (memory, one more forward)",
    "num_generations": "completions per prompt: the group GRPO normalises rewards over; the generation batch must divide by it",
    "max_completion_length": "KV cache, logits and generation time grow linearly with it",
    "max_length": "tokens per sample (text + image); activations grow linearly, attention FLOPs quadratically",
    "max_pixels": "image tokens = max_pixels / 784 (28 x 28 px each): vision FLOPs and activations grow with it",
    "warmup_steps": "< 1: a fraction of the total steps (transformers 5)",
    "gradient_checkpointing_kwargs": "non-reentrant: works with ZeRO-3 parameter gathering",
    "fsdp_config": "version 1: FullyShardedDataParallel; 2: fully_shard (FSDP2); auto_wrap wraps each decoder layer (_no_split_modules)",
}
DEFAULT_HOST_RAM_GIB = 1024  # a written recipe must name its node's RAM; stated in the header when assumed
TRAINING_DEFAULTS = {  # the written recipe's non-searched training arguments (this writer's choices, in the README)
    "full": {"learning_rate": 1.0e-5},
    "lora": {"learning_rate": 1.0e-4},
    "qlora": {"learning_rate": 1.0e-4},
    "grpo": {"learning_rate": 1.0e-6, "beta": 0.0},
}


def _value(v: Any) -> str:
    return yaml.safe_dump(v, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def _alternatives(result: Result, knob: str) -> str:
    rows = [r for r in result.rejected if r["knob"] == knob]
    if knob in result.pins:
        return "pinned by the user"
    if not rows:
        return ""
    parts = []
    for r in rows[:3]:
        v = r["value"]
        v = ("true" if v else "false") if isinstance(v, bool) else v
        parts.append(f"{v}: {_brief(r['reason'])}")
    return "fit: " + "; ".join(parts)


def _brief(reason: str) -> str:
    if reason.startswith("does not fit"):
        return reason.split(", with")[0].replace("does not fit: lowest peak", "OOM, lowest peak")
    if "same predicted step" in reason:
        return "same predicted step time"
    if "slower" in reason:
        return reason.split("slower: ")[1].split(" vs")[0] + " (slower)"
    return reason.split(",")[0]


def _recipe_data(result: Result, request, args, name: str) -> dict[str, Any]:
    """The recipe as a dict, in file order, with the winner's knobs."""
    from vramfit.planner import params

    win = result.winner
    s = win.setup
    k = win.knobs
    if request.recipe is not None:
        data = request.recipe.resolved_dict()
        data["name"] = name
        data.pop("source", None)
    else:
        config = params.read_config(s.model_config)
        repo = _repo_root()
        rel = os.path.relpath(Path(s.model_config).resolve(), repo)
        model: dict[str, Any] = {
            "id": config.get("_model") or config.get("_name_or_path") or Path(rel).stem,
            "architecture": (config.get("architectures") or ["?"])[0],
            "config": rel,
        }
        vlm = s.images_per_sample > 0
        if s.lora:
            model["train"] = {"llm": False, "projector": bool(s.train_projector), "vision_tower": bool(s.train_vision)}
            model["lora"] = {
                "r": s.lora_r,
                "alpha": 2 * s.lora_r,
                "dropout": s.lora_dropout,
                "target_modules": s.lora_targets if isinstance(s.lora_targets, str) else list(s.lora_targets),
            }
        elif vlm:
            model["train"] = {"llm": True, "projector": True, "vision_tower": bool(s.train_vision)}
        if s.quantization:
            half = "bfloat16" if s.precision.startswith("bf16") else "float16"
            model["quantization"] = {
                "bits": 4,
                "quant_type": "nf4",
                "double_quant": True,
                "compute_dtype": half,
                "quant_storage": half if s.zero.stage == 3 else "uint8",
            }
        fmt = args.data_format or ("llava_json" if vlm else "chat_jsonl")
        data_block: dict[str, Any] = {
            "format": fmt,
            "train_file": f"data/{name}/train.{'json' if fmt == 'llava_json' else 'jsonl'}",
            "max_length": s.seq_len,
            "images_per_sample": s.images_per_sample,
        }
        if vlm:
            data_block["image_folder"] = f"data/{name}/images"
        if vlm and _arch_has_pixels(s):
            data_block["max_pixels"] = s.image_tokens * 28 * 28
        training = {
            **TRAINING_DEFAULTS.get(s.method, {}),
            "lr_scheduler_type": "cosine",
            "warmup_steps": 0.03,
            "num_train_epochs": 1,
            ("bf16" if s.precision.startswith("bf16") else "fp16"): True,
            "logging_steps": 1,
            "save_strategy": "steps",
            "save_steps": 500,
            "save_total_limit": 1,
            "report_to": "none",
            "seed": 42,
        }
        if s.method == "grpo":
            training.update({"num_generations": s.num_generations, "max_completion_length": s.max_completion_length})
        data = {
            "name": name,
            "summary": "",
            "method": "lora" if s.method == "qlora" and False else s.method,
            "model": model,
            "hardware": {"gpu": s.gpu, "gpus_per_node": s.gpus_per_node, "nodes": s.nodes, "host_ram_gib": s.host_ram_gib or DEFAULT_HOST_RAM_GIB},
            "launcher": "accelerate",
            "deepspeed": "",
            "global_batch_size": result.global_batch,
            "training": training,
            "data": data_block,
            "env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        }
    preset = k["deepspeed"]
    t = data["training"]
    for key in ("fsdp", "fsdp_config"):
        t.pop(key, None)
    if preset.startswith("fsdp"):
        data["deepspeed"] = "none"
        # TrainingArguments.fsdp is typed `str | None` (the option string; transformers 5 warns it prefers True,
        # which the tree's type check refuses); auto_wrap wraps by the model's _no_split_modules.
        t["fsdp"] = "full_shard auto_wrap" + (" offload" if preset.endswith("_offload") else "")
        t["fsdp_config"] = {"version": 2 if preset.startswith("fsdp2") else 1}
        if s.fsdp_sharding != "full_shard":
            t["fsdp_config"]["sharding_strategy"] = s.fsdp_sharding.upper()
    else:
        data["deepspeed"] = deepspeed_path(preset)
    data["global_batch_size"] = result.global_batch
    data["model"]["attn_implementation"] = k["attn_implementation"]
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing", "use_liger_kernel"):
        t[key] = k[key]
    if k["gradient_checkpointing"]:
        t["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    else:
        t.pop("gradient_checkpointing_kwargs", None)
    t["optim"] = k["optim"]
    if "steps_per_generation" in k:
        t["steps_per_generation"] = k["steps_per_generation"]
    if "use_vllm" in k:
        t["use_vllm"] = k["use_vllm"]
        for key in ("vllm_gpu_memory_utilization", "vllm_enable_sleep_mode"):
            if k.get(key) is not None and k["use_vllm"]:
                t[key] = k[key]
            elif not k["use_vllm"]:
                t.pop(key, None)
    g = s.gpu_spec
    data["summary"] = (
        f"{data['model']['id'].split('/')[-1]} {s.method} on {s.nodes * s.gpus_per_node} x {g.label}: "
        f"chosen by fit ({_zero_words(k['deepspeed'])}, micro-batch {k['per_device_train_batch_size']} x "
        f"{k['gradient_accumulation_steps']} accumulation)"
    )
    return data


def _arch_has_pixels(s) -> bool:
    from vramfit.planner import params

    return bool(params.summary(s.model_config).image.get("per_28px_square"))


def _zero_words(preset: str) -> str:
    if preset.startswith("fsdp"):
        return ("FSDP2" if preset.startswith("fsdp2") else "FSDP") + " full shard" + (" + CPU offload" if preset.endswith("_offload") else "")
    return (
        preset.replace("zero", "ZeRO-").replace("_offload_optimizer_params", " + optimizer/param offload").replace("_offload_optimizer", " + optimizer offload")
    )


def _repo_root() -> Path:
    from vramfit.paths import repo_root

    return repo_root(Path.cwd())


SECTION_COMMENTS = {
    "model": "### model",
    "hardware": "### hardware",
    "training": "### train (transformers.TrainingArguments / trl names)",
    "data": "### data",
    "env": "### environment",
    "launcher": "### launch",
}


def render_yaml(data: dict[str, Any], result: Result, header: str) -> str:
    """The recipe text: header, then every key in order, a trade-off comment on every searched knob."""
    lines = [header]
    comments = _knob_comments(result)
    for key, value in data.items():
        if key in SECTION_COMMENTS or key == "launcher":
            lines.append("")
            lines.append(SECTION_COMMENTS[key])
        if key == "global_batch_size":
            lines.append("")
            k = result.winner.knobs
            b = result.base
            lines.append(
                f"### batch: {k['per_device_train_batch_size']} x {k['gradient_accumulation_steps']} x {b.world} GPUs = {result.global_batch} (kept exactly by fit)"
            )
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += _block(value, 1, comments, key)
        else:
            comment = comments.get(key) if key == "deepspeed" else None
            lines.append(_with_comment(f"{key}: {_value(value)}", comment))
    return "\n".join(lines) + "\n"


def _block(node: dict[str, Any], depth: int, comments: dict[str, str], section: str) -> list[str]:
    out = []
    pad = "  " * depth
    for key, value in node.items():
        if isinstance(value, dict) and value and not (section == "training" and key == "gradient_checkpointing_kwargs"):
            out.append(f"{pad}{key}:")
            out += _block(value, depth + 1, comments, section)
            continue
        comment = comments.get(key) if section in ("training", "model") else None
        comment = comment or OTHER_COMMENTS.get(key)
        out.append(_with_comment(f"{pad}{key}: {_value(value)}", comment))
    return out


def _with_comment(line: str, comment: str | None) -> str:
    if not comment:
        return line
    return f"{line:<40} # {comment}"


def _knob_comments(result: Result) -> dict[str, str]:
    win = result.winner
    out = {}
    fsdp = win.knobs["deepspeed"].startswith("fsdp")
    for knob, text in TRADE_OFFS.items():
        if knob == "fsdp":
            if fsdp:
                alt = _alternatives(result, "deepspeed")
                out["fsdp"] = text[win.knobs["deepspeed"]] + (f". {alt}" if alt else "")
            continue
        if knob not in win.knobs:
            continue
        value = "none" if knob == "deepspeed" and fsdp else win.knobs[knob]
        base = text[value] if isinstance(text, dict) else text
        alt = "" if knob == "deepspeed" and fsdp else _alternatives(result, knob)
        out[knob] = base + (f". {alt}" if alt else "")
    return out


def header(name: str, data: dict[str, Any], result: Result, command: str) -> str:
    win = result.winner
    hw = data["hardware"]
    g = result.base.gpu_spec
    bar = "# " + "=" * 101
    ram = f"{hw['host_ram_gib']:g} GiB host RAM" + (" (assumed; pass --host-ram-gib)" if result.base.host_ram_gib is None else "")
    return "\n".join(
        [
            bar,
            f"# {name}: {data['summary']}",
            f"# Hardware:  {hw['nodes']} node{'s' if hw['nodes'] > 1 else ''} x {hw['gpus_per_node']} x {g.label} ({'bf16' if g.bf16 else 'fp16'}), {ram}",
            f"# Command:   make run RECIPE={name}   (CPU smoke: make run RECIPE={name} SMOKE=1)",
            f"# Expect:    planner peak {win.plan.per_gpu_peak_gib:.1f} of {win.plan.gpu_memory_gib:.1f} GiB per GPU; predicted "
            f"{win.time.seconds:.2f} s/step, {win.time.tokens_per_s:,.0f} tokens/s ({result.flops_source} FLOPs; README.md)",
            "# Story:     written by fit --write (the command and the ranking: README.md), then reviewed; every",
            "#            searched knob below says what it trades and what fit predicted for the alternative.",
            bar,
        ]
    )


def readme(name: str, data: dict[str, Any], result: Result, command: str) -> str:
    from vramfit.fit.search import _short

    win = result.winner
    g = result.base.gpu_spec
    rows = ["| # | configuration (diff from the base) | peak GiB | margin GiB | s/step | tokens/s |", "|---|---|---|---|---|---|"]
    for i, c in enumerate(result.ranked[:10]):
        rows.append(
            f"| {i + 1} | `{_short(result.diff(c)) or '(the base)'}`{'' if c.writable else ' (not writable)'} | "
            f"{c.plan.per_gpu_peak_gib:.1f} | {c.margin_gib:.1f} | {c.time.seconds:.2f} | {c.time.tokens_per_s:,.0f} |"
        )
    rejected = [f"- `{r['knob']}={r['value']}`: {r['reason']}" for r in result.rejected]
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in win.time.parts.items())
    world = result.base.world
    gpu_hours = world * win.time.seconds / win.time.tokens_per_step * 1e9 / 3600
    return "\n".join(
        [
            f"# {name}",
            "",
            f"{data['summary']}.",
            "",
            "```bash",
            f"make run  RECIPE={name}            # real run",
            f"make run  RECIPE={name} DRY_RUN=1  # the exact command, environment and resolved DeepSpeed JSON",
            f"make run  RECIPE={name} SMOKE=1    # tiny model, 2 ranks, runs on CPU",
            f"make plan RECIPE={name}            # predicted peak per GPU and host RAM",
            "```",
            "",
            "## Why this configuration",
            "",
            f"Written by `{command}`: {len(result.candidates)} configurations planned and timed, {len(result.ranked)} fit; "
            f"the global batch ({result.global_batch}) is the same in every row. Ranked by predicted step time:",
            "",
            *rows,
            "",
            "Every alternative not chosen, and why:",
            "",
            *rejected,
            "",
            "## What it costs",
            "",
            f"- predicted step: **{win.time.seconds:.2f} s** ({parts}); {win.time.tokens_per_s:,.0f} tokens/s over {world} GPUs at the "
            f"length cap ({win.time.tokens_per_step:,} tokens per step)",
            f"- {gpu_hours:,.1f} {g.name} GPU-hours per billion tokens at that rate",
            f"- the step-time model and its stated efficiencies: `vramfit/fit/steptime.py`; FLOPs: {result.flops_source}. "
            "It is a prediction, not a measurement: padding, data loading, logging and Python overheads are not in it.",
            *(f"- note: {n}" for n in result.notes),
            "",
            "## Memory it expects",
            "",
            "<!-- plan:start -->",
            "<!-- plan:end -->",
            "",
        ]
    )


def write(name: str, result: Result, request, args) -> Path:
    """Write recipes/NAME/; validate it (the folder is removed again if it does not validate)."""
    import shlex
    import sys

    from vramfit import docs
    from vramfit.paths import all_recipe_files, recipes_dir
    from vramfit.problems import ConfigError
    from vramfit.recipe import load
    from vramfit.validate import validate

    folder = recipes_dir() / name
    command = "vramfit fit " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["fit"] else f"vramfit fit ... --write {name}"
    data = _recipe_data(result, request, args, name)
    folder.mkdir(parents=True)
    try:
        (folder / "recipe.yaml").write_text(render_yaml(data, result, header(name, data, result, command)))
        launch = next((p.parent / "launch.sh" for p in all_recipe_files() if p.parent != folder and (p.parent / "launch.sh").is_file()), None)
        if launch is not None:
            shutil.copy2(launch, folder / "launch.sh")
        text = readme(name, data, result, command)
        (folder / "README.md").write_text(text)
        validate(folder / "recipe.yaml", [], plan=True)
        recipe = load(folder / "recipe.yaml")
        (folder / "README.md").write_text(docs._replace(text, docs.PLAN, docs.plan_block(recipe)))
    except (ConfigError, OSError, ValueError):
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder
