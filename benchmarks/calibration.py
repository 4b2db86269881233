"""Calibration scenarios as planner Setups: benchmark-only code (moved out of vramfit/planner/setup.py).

`scenario_setup(row, shared)` builds a `vramfit.planner.Setup` from one line of
shared/reference/calibration/scenarios.jsonl (schema: shared/reference/calibration/README.md).
Used by benchmarks/planner_accuracy.py, benchmarks/gpu_memory.py and the planner tests; the
product builds its Setups with `Setup.from_recipe` / `Setup.from_args`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit.planner.setup import Setup, Zero, _hidden_size, _loss_fp32, image_geometry

# The ZeRO blocks of the DeepSpeed JSONs the Qwen-1 and MiniCPM-V finetune scripts pass
# (QwenLM/Qwen finetune/ds_config_zero2.json; OpenBMB/MiniCPM-V finetune/ds_config_zero2.json and
# ds_config_zero3.json - the Hugging Face example configs). Accelerate-launched rows (peft) build
# their DeepSpeed config from the accelerate plugin: DeepSpeed defaults.
SCENARIO_JSON = {
    2: {"allgather_bucket_size": 2e8, "reduce_bucket_size": 2e8, "overlap_comm": True, "contiguous_gradients": True},
    3: {
        "overlap_comm": True,
        "contiguous_gradients": True,
        "sub_group_size": 1e9,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9,
    },
}


def scenario_setup(row: dict[str, Any], shared: Path | None = None) -> Setup:
    """A calibration scenario (schema: shared/reference/calibration/README.md)."""
    from vramfit.planner import params

    shared = Path(shared) if shared else Path(".")
    config_path = (shared / "reference" / row["model_config"]).resolve()
    config = params.read_config(config_path)
    arch = params.summary(config_path)
    extra = row.get("extra") or {}
    lora = row.get("lora")
    par = row["parallelism"]
    stage = {"zero1": 1, "zero2": 2, "zero3": 3}.get(par, 0)
    offload = row.get("offload", "none")
    hidden = _hidden_size(config)
    published = "Accelerate" not in row.get("framework", "")  # Qwen / MiniCPM-V pass a JSON, peft rows do not
    block = {"stage": stage, **(SCENARIO_JSON.get(stage, {}) if published else {})}
    if offload != "none":
        block["offload_optimizer"] = {"device": "cpu"}
    if offload == "optimizer+params":
        block["offload_param"] = {"device": "cpu"}
    data = {"zero_optimization": block}
    if stage and published:
        data["optimizer"] = {"type": "AdamW"}  # both JSONs name AdamW: DeepSpeed's own optimizer
    zero = Zero.from_json(data, hidden)
    trainable = str(extra.get("trainable", ""))
    vision_trained = ("vision" in trainable) if lora is None else not lora.get("vision_frozen", True)
    in_place = "no PEFT copy" in str(extra.get("modules_to_save_mechanism", ""))
    tokens, patches = image_geometry(arch, None, extra.get("max_slices"))
    targets = None
    if lora:
        targets = "all-linear" if lora.get("all_linear") and not lora.get("fused_qkv") else list(lora["targets"])
    storage = str(extra.get("bnb_4bit_quant_storage", "uint8"))
    return Setup(
        label=row["id"],
        source="scenarios.jsonl",
        model_config=config_path,
        gpu=scenario_gpu(row["gpu"]),
        gpus_per_node=int(row["num_gpus"]),
        method=row["method"],
        train_llm=row["method"] == "full",
        train_projector=row["method"] == "full" or "resampler" in (lora or {}).get("modules_to_save", []),
        train_vision=vision_trained if arch.groups["vision"] else False,
        lora_r=lora["r"] if lora else None,
        lora_targets=targets,
        # A scenario's LoRA targets name LLM modules; its vision tower trains or not by `vision_frozen` /
        # `trainable` (MiniCPM-V finetune.py: lora_target_modules r"llm\..*layers\.\d+\.self_attn\.(q_proj|k_proj)").
        lora_vision_tower=False,
        remote_code=True,  # the published runs used each repository's own model code (MiniCPM-V: trust_remote_code)
        lora_dropout=float(extra.get("lora_dropout", 0.0)),
        lora_fused_qkv=bool(lora and lora.get("fused_qkv")),
        modules_to_save=tuple(m for m in (lora or {}).get("modules_to_save", []) if m != "resampler"),
        modules_to_save_copies=not in_place,
        quantization=row.get("quantization"),
        quant_double=bool(extra.get("double_quantization", True)),
        quant_storage_float=storage != "uint8",
        frozen_fp32=str(extra.get("base_weights_dtype", "")).startswith("fp32"),
        loss_fp32=_loss_fp32(config, row["precision"], "deepspeed" if stage else par),
        precision=row["precision"],
        optimizer=scenario_optimizer(row, zero),
        attention=row.get("attention") or "sdpa",
        gradient_checkpointing=bool(row["gradient_checkpointing"]),
        liger=bool(row.get("liger")),
        seq_len=int(row["seq_len"]),
        decoder_seq_len=decoder_len(extra) if arch.encoder_decoder else None,
        micro_batch=int(row["micro_batch"]),
        gradient_accumulation_steps=int(extra.get("gradient_accumulation_steps", 1)),
        images_per_sample=1 if patches else 0,
        image_tokens=tokens,
        vision_patches=patches,
        engine="deepspeed" if stage else ("fsdp" if par == "fsdp" else ("ddp" if row["num_gpus"] > 1 else "single")),
        zero=zero,
    )


def scenario_optimizer(row: dict[str, Any], zero: Zero) -> str:
    """The optimizer implementation a scenario's stack ran (its memory differs, not its maths)."""
    name = {"adamw": "adamw_torch", "adamw_8bit": "adamw_8bit", "paged_adamw": "paged_adamw_32bit", "paged_adamw_8bit": "paged_adamw_8bit", "sgd": "sgd"}[
        row["optimizer"]
    ]
    if name == "adamw_torch" and (zero.optimizer_block or "Dec 2022" in row.get("framework", "")):
        # DeepSpeed's FusedAdam (the JSON names AdamW); torch 1.13's AdamW (Dec 2022) was single-tensor
        # by default. Neither keeps a foreach intermediate: the same memory as the fused optimizer.
        return "adamw_torch_fused"
    return name


def decoder_len(extra: dict[str, Any]) -> int:
    # The scenarios state the decoder side as "a few tokens" (class-name labels); 8 is read for it.
    value = extra.get("decoder_seq_len")
    return int(value) if isinstance(value, (int, float)) else 8


def scenario_gpu(name: str) -> str:
    """Map a published card name onto the catalogue."""
    key = name.lower().replace(" ", "").replace("-", "")
    if "24gb" in key:
        return "rtx4090"
    for part, gpu in (
        ("h100", "h100"),
        ("h200", "h200"),
        ("h20", "h20"),
        ("a10080", "a100-80g"),
        ("a100sxm480", "a100-80g"),
        ("a10040", "a100-40g"),
        ("a100sxm440", "a100-40g"),
    ):
        if part in key:
            return gpu
    raise KeyError(f"no catalogue GPU for '{name}'")
