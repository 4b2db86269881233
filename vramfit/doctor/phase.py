"""Which phase of training a traceback died in, from its frames (file, function), outermost first.

Two layers: a *context* (model load and wrapping, evaluation, generation, checkpoint save) says what the
run was doing and wins when present, outermost first (GRPO's evaluation generates, but the knob is eval's);
otherwise the *step* phase: optimizer step beats backward beats forward, because gradient checkpointing
re-runs forward inside backward, and an optimizer frame is never inside backward (while interleaved ranks'
lines can put another rank's backward frame into an optimizer traceback).

The names are the libraries' own (read from the installed transformers, accelerate, peft, deepspeed, torch):
accelerate's prepare_model / _prepare_one, DistributedDataParallel's _ddp_init_helper (the Reducer's
buckets), FSDP's _auto_wrap, PEFT's load_adapter / get_peft_model, torch.optim's _init_group, the
Trainer's _load_best_model / _load_from_checkpoint / _move_model_to_device / nested_concat, vLLM's engine.
"""

from __future__ import annotations

CONTEXT = {
    "model_load": {
        "from_pretrained",
        "_load_pretrained_model",
        "load_state_dict",
        "_load_state_dict_into_meta_model",
        "_load_state_dict_into_zero3_model",
        "load_checkpoint_in_model",
        "load_checkpoint_and_dispatch",
        "deepspeed_init",
        "_prepare_deepspeed",
        "_configure_zero_optimizer",
        "_configure_optimizer",
        "_configure_distributed_model",
        "_post_init_method",
        "_convert_to_zero_parameters",
        "_create_fp32_partitions",
        "_setup_for_real_optimizer",
        "initialize_optimizer_states",
        "_load_from_checkpoint",
        "load_checkpoint",
        "_load_checkpoint",
        "_load_zero_checkpoint",
        "_load_optimizer_and_scheduler",
        "_load_best_model",
        "_move_model_to_device",
        "set_module_tensor_to_device",
        # wrapping the model for data parallelism: DDP's Reducer buckets, FSDP, accelerate, DeepSpeed
        "prepare_model",
        "_prepare_one",
        "_prepare_fsdp2",
        "_ddp_init_helper",
        "_auto_wrap",
        "_recursive_wrap",
        "_init_param_handle_from_module",
        # PEFT adapters
        "load_adapter",
        "load_peft_weights",
        "get_peft_model",
        "inject_adapter",
        "_create_and_replace",
        "from_pretrained_peft",
    },
    "checkpoint_save": {
        "save_model",
        "_save_checkpoint",
        "save_checkpoint",
        "_save",
        "save_pretrained",
        "save_state",
        "_save_optimizer_and_scheduler",
        "save_16bit_model",
        "_zero3_consolidated_16bit_state_dict",
        "_save_zero_checkpoint",
        "_save_to_state_dict",
        "consolidate_state_dict",
        "save_file",
        "save_lora",
        "_save_tp_consolidated_model",
    },
    "evaluation": {
        "evaluate",
        "_evaluate",
        "evaluation_loop",
        "prediction_step",
        "predict",
        "prediction_loop",
        "nested_concat",
        "_nested_gather",
        "validation_step",
        "_run_validation",
    },
    "generation": {
        "generate",
        "_generate",
        "_generate_and_score_completions",
        "_generate_single_turn",
        "_sample",
        "_beam_search",
        "_greedy_search",
        "unwrap_model_for_generation",
        "_move_model_to_vllm",
        "generate_completions",
    },
}
BACKWARD = {
    "backward",
    "_engine_run_backward",
    "run_backward",
    "reduce_partition_and_remove_grads",
    "reduce_ready_partitions_and_remove_grads",
    "reduce_independent_p_g_buckets_and_remove_grads",
    # DeepSpeed's gradient hooks, ZeRO-1/2 (stage_1_and_2.py) and ZeRO-3 (stage3.py, parameter_offload.py)
    "grad_handling_hook",
    "reduce_ipg_grads",
    "average_tensor",
    "allreduce_bucket",
    "allreduce_and_copy",
    "gradient_reduction_w_predivide",
    "copy_grads_in_partition",
    "async_accumulate_grad_in_cpu_via_gpu",
    "__reduce_and_partition_ipg_grads",
    "partition_grads",
    "__avg_scatter_grads",
    "pre_sub_module_backward_function",
    "_pre_backward_module_hook",
}
OPTIMIZER = {
    "_optimizer_step",
    "_take_model_step",
    "optimizer_step",
    "clip_grad_norm_",
    "unscale_and_clip_grads",
    "_multi_tensor_adamw",
    "_single_tensor_adamw",
    "_multi_tensor_adam",
    "_single_tensor_adam",
    "_init_group",
    "_fused_adamw",
    "_fused_adam",
    "unscale_",
    "_unscale_grads_",
    "unscale_gradients",
    "exp_avg",
    "exp_avg_sq",
    "_maybe_opt_step",
}
# (The Trainer's training_step is not here: it runs the forward and the backward, so a traceback that ends
# in it says neither.)
FORWARD = {
    "forward",
    "_call_impl",
    "_wrapped_call_impl",
    "compute_loss",
    # accelerate's mixed-precision wrapper upcasting the forward's outputs (the logits) to fp32
    "_convert_to_fp32",
    "convert_to_fp32",
    # ZeRO-3 gathering a module's parameters as it runs
    "pre_sub_module_forward_function",
    "_pre_forward_module_hook",
    "fetch_sub_module",
    # the loss over the logits is the end of the forward pass
    "cross_entropy",
    "log_softmax",
    "nll_loss",
    "concatenated_forward",
    "get_batch_logps",
    "_get_batch_logps",
    "selective_log_softmax",
    "loss_function",
    "ForCausalLMLoss",
    "fixed_cross_entropy",
}


WRAPPERS_INIT = ("deepspeed", "nn/parallel/distributed.py", "fully_sharded_data_parallel", "transformers/trainer.py", "peft/", "trl/trainer/")


def _context(path: str, func: str) -> str | None:
    for phase, names in CONTEXT.items():
        if func in names:
            return phase
    if func in ("__init__", "initialize") and (any(part in path for part in WRAPPERS_INIT) or path.endswith("trainer.py")):
        return "model_load"  # DeepSpeedEngine, DDP, FSDP, the Trainer moving the model, PEFT wrapping
    if func in ("_apply", "convert", "cuda", "to_empty") and "nn/modules/module.py" in path:
        return "model_load"  # model.to(device) / .cuda(): the weights arriving on the GPU
    if "vllm/" in path and func in (
        "determine_num_available_blocks",
        "raise_if_cache_size_invalid",
        "initialize_cache",
        "check_enough_kv_cache_memory",
        "_initialize_kv_caches",
    ):
        return "generation"
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
    if any(_model_code(path) for path, _ in frames):  # inside a model's own code: its forward (or a recompute)
        found.add("forward")
    return next((p for p in ("optimizer_step", "backward", "forward") if p in found), "unknown")


def _model_code(path: str) -> bool:
    """A model's own file: transformers/models/..., remote code (transformers_modules/...), modeling_*.py."""
    return "transformers/models/" in path or "transformers_modules/" in path or "/modeling_" in path
