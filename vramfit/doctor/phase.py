"""Which phase of training a traceback died in, from its frames (file, function), outermost first.

Two layers: a *context* (model load, evaluation, generation, checkpoint save) says what the run was
doing and wins when present, outermost first (GRPO's evaluation generates, but the knob is eval's);
otherwise the innermost *step* phase: backward beats optimizer step beats forward, because gradient
checkpointing re-runs forward inside backward.
"""
from __future__ import annotations

CONTEXT = {
    "model_load": {
        "from_pretrained", "_load_pretrained_model", "load_state_dict", "_load_state_dict_into_meta_model",
        "_load_state_dict_into_zero3_model", "load_checkpoint_in_model", "load_checkpoint_and_dispatch",
        "deepspeed_init", "_prepare_deepspeed", "_configure_zero_optimizer", "_configure_optimizer",
        "_configure_distributed_model", "_post_init_method", "_convert_to_zero_parameters",
        "_create_fp32_partitions", "_setup_for_real_optimizer", "initialize_optimizer_states",
        "_load_from_checkpoint", "load_checkpoint", "_load_checkpoint", "_load_zero_checkpoint",
        "_load_optimizer_and_scheduler",
    },
    "checkpoint_save": {
        "save_model", "_save_checkpoint", "save_checkpoint", "_save", "save_pretrained", "save_state",
        "_save_optimizer_and_scheduler", "save_16bit_model", "_zero3_consolidated_16bit_state_dict",
        "_save_zero_checkpoint",
    },
    "evaluation": {"evaluate", "_evaluate", "evaluation_loop", "prediction_step", "predict", "prediction_loop"},
    "generation": {
        "generate", "_generate", "_generate_and_score_completions", "_generate_single_turn", "_sample",
        "_beam_search", "_greedy_search",
    },
}
BACKWARD = {
    "backward", "_engine_run_backward", "run_backward", "reduce_partition_and_remove_grads",
    "reduce_ready_partitions_and_remove_grads", "reduce_independent_p_g_buckets_and_remove_grads",
}
OPTIMIZER = {
    "_optimizer_step", "_take_model_step", "optimizer_step", "clip_grad_norm_", "unscale_and_clip_grads",
    "_multi_tensor_adamw", "_single_tensor_adamw", "_multi_tensor_adam", "_single_tensor_adam",
}
FORWARD = {"forward", "_call_impl", "_wrapped_call_impl", "compute_loss", "training_step"}


def _context(path: str, func: str) -> str | None:
    for phase, names in CONTEXT.items():
        if func in names:
            return phase
    if func in ("__init__", "initialize") and "deepspeed" in path:  # DeepSpeedEngine / ZeRO optimizer setup
        return "model_load"
    return None


def _step(path: str, func: str) -> str | None:
    if func in BACKWARD:
        return "backward"
    if func in OPTIMIZER or (func == "step" and any(s in path for s in ("optim", "deepspeed", "accelerate"))):
        return "optimizer_step"
    if func in FORWARD:
        return "forward"
    return None


def phase_of(frames) -> str:
    """'backward', 'evaluation', ... or 'unknown' for frames [(path, function), ...] outermost first."""
    for path, func in frames:
        context = _context(path, func)
        if context:
            return context
    found = {_step(path, func) for path, func in frames}
    return next((p for p in ("backward", "optimizer_step", "forward") if p in found), "unknown")
