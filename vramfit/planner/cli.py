"""`vramfit plan`: the memory planner on the command line.

    vramfit plan RECIPE [key=value ...] [--json] [--plot FILE.png]
    vramfit plan --model-config PATH/config.json --gpu NAME --gpus N [--nodes N] [--deepspeed FILE|preset] [key=value ...]

Exit codes: 0 fits (GPU and host RAM), 1 does not fit (the verdict is printed either way), 2 bad
input, 3 answered but part of it could not be computed (named on stderr). Nothing heavy is imported at module level: `vramfit --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EPILOG = """\
recipe mode: overrides are validated like the recipe file - a dotted path (data.max_pixels=1003520,
deepspeed=deepspeed_configs/zero3_offload_optimizer.json, hardware.host_ram_gib=128) or a bare
Hugging Face / TRL argument name (per_device_train_batch_size=2), which resolves to training.<name>.

--model-config mode keys (Hugging Face / TRL names first, then planner keys):
  per_device_train_batch_size=N  gradient_accumulation_steps=N  gradient_checkpointing=true|false
  use_liger_kernel=true|false    optim=adamw_torch_fused|adamw_torch|adamw_bnb_8bit|adamw_8bit|
                                 paged_adamw_32bit|paged_adamw_8bit|sgd|...
  bf16=true|false  fp16=true|false (neither: fp32)
  per_device_eval_batch_size=N  prediction_loss_only=true|false  eval_accumulation_steps=N
  eval_strategy=steps|epoch|no  (evaluation is planned when set, or when an eval key is given)
  num_generations=N  max_completion_length=N  max_prompt_length=N (prompt tokens, text + image)
  beta=X  steps_per_generation=N  dataloader_num_workers=N  attn_implementation=flash_attention_2|sdpa|eager
  method=full|lora|qlora|grpo (default full; qlora = LoRA on an nf4 base)
  seq_len=N / max_length=N (tokens per sample, text + image; default 2048, GRPO prompt 512)
  lora_r=N (16)  lora_dropout=X (0.05)  lora_target_modules=all-linear|<regex>|q_proj,v_proj
  lora_target_parameters=experts.gate_up_proj,experts.down_proj (PEFT target_parameters: lora.ParamWrapper)
  max_pixels=N (Qwen2-VL family, default the model's 12845056)
  max_slice_nums=N (MiniCPM-V)  images_per_sample=N  train_vision=true|false
  host_ram_gib=X (node size, to check host RAM)  eval_samples=N  expandable_segments=true|false
  deepspeed=FILE|preset (same as --deepspeed)
  any other field of TrainingArguments, TRL's configs / ModelConfig or PEFT's LoraConfig (learning_rate,
  lora_alpha, ...) is accepted and said as not used; max_seq_length (TRL before 0.20) is max_length,
  use_peft=true is method=lora
launch knobs (docs/planner.md "Launch knobs"):
  fsdp="full_shard auto_wrap [offload]"|shard_grad_op|hybrid_shard|no_shard  fsdp_config.version=2
  fsdp_config.reshard_after_forward=false  fsdp_config.offload_params=true  fsdp_config.sharding_strategy=...
  dtype=bfloat16 (no bf16/fp16: pure bf16) | dtype=float32 bf16=true (fp32 master)  bf16=full (axolotl)
  load_in_4bit / load_in_8bit=true  bnb_4bit_quant_type=nf4|fp4  bnb_4bit_use_double_quant=true
  bnb_4bit_quant_storage=bfloat16  quant_method=gptq|awq  modules_to_save=embed_tokens,lm_head
  lora_vision_tower=false  train_projector=true|false  activation_offloading=true  packing=true
  padding_free=true  typical_length=N (planned beside the cap; the verdict uses the cap)
  loss_kernel=torch|liger|cce|chunked  cut_cross_entropy=true  torch_compile=true  compile=true (torchtune)
  mixer_kernels=fused|torch (Mamba / gated-delta-rule layers: mamba-ssm, causal-conv1d, flash-linear-attention
    kernels, the default; or transformers' torch fallback, what runs without those packages)
  optimizer_in_bwd=true  use_vllm=true vllm_mode=colocate|server vllm_gpu_memory_utilization=0.3
  vllm_enable_sleep_mode=true  max_tiles=N (InternVL)  frames_per_sample=N video_max_pixels=N (Qwen2-VL)
  bitsandbytes_version=0.41.1 (the run's bitsandbytes; before 0.43.2 each 4-bit linear keeps its input)
  torch_version=1.13.1 (the run's torch; before 2.0 zero_grad() keeps the gradients through the forward)
  accelerate_version=1.10.1 (the run's accelerate; before 1.11.0 FSDP2 accumulation reduce-scatters every micro-batch)
  sync_each_batch=true (accelerate: FSDP reduces every micro-batch; default: unsharded gradients under no_sync)
  fsdp_lora_units=layer (FSDP1 use_orig_params, LoRA inside its layer's unit as Lightning Fabric wraps litgpt)
  autocast_adapter_dtype=true (PEFT: fp32 adapters on pure 16-bit weights, each keeping an fp32 copy of its input)
  keeps_previous_output=true (the loop holds the last step's logits into the next forward: LitGPT's fit)
  quantize_lm_head=true (lm_head quantized with the base, as Lightning's BitsandbytesPrecision does for LitGPT)
  quantize_moe_experts=true (the fused 3-D MoE expert tensors quantized with the base: axolotl quantize_moe_experts)
  grpo_whole_logits=true (GRPO log-probs from the model's whole logits, as verl computes them; default TRL's fused head)
  offload_outside_update=weights,optimizer (states in host RAM outside the update: verl param_offload / optimizer_offload)
  sequence_parallel=N (ms-swift --sequence_parallel_size, axolotl context_parallel_size: each GPU holds max_length / N
    tokens of every sample)  celoss_parallel_size=N (ms-swift CELOSS_PARALLEL_SIZE: its chunked sequence-parallel loss)
  audio_output=true (Qwen2.5-Omni: its Talker and vocoder loaded beside the Thinker, frozen: ms-swift's ENABLE_AUDIO_OUTPUT)
  device_map_gpus=N (one process spreads the model's layers over N GPUs with device_map="auto": ms-swift without
    NPROC_PER_NODE, a plain `python train.py` loading with device_map="auto"; planned on the busiest GPU of
    accelerate's balanced split); device_map_policy=sequential (GPU 0 filled first), device_map_max_memory_gib=G
    (from_pretrained's max_memory cap on each GPU)
  unfrozen_parameters="^lm_head;model.layers.3.mlp.down_proj" (full fine-tuning of only the weights whose names the
    regexes match, re.match, the rest frozen: axolotl unfrozen_parameters, Spectrum YAMLs)
  head=lm|seq_cls|token_cls|embedding|generative_reranker  num_labels=N  task_type=SEQ_CLS (PEFT) or
    embedding|reranker|generative_reranker|seq_cls (ms-swift)  negatives=N positives=N (an embedding / reranker
    sample's sequences in one batch: 2 + negatives; positives x (1 + negatives), ms-swift's defaults 1 and 7)
  trainer=sft|dpo|orpo|cpo|reward|kto (TRL: dpo/orpo/cpo/reward run chosen + rejected, 2 x the micro-batch)
  ref_model=copy|none|precomputed (dpo/kto; default as TRL: none with LoRA or precompute_ref_log_probs=true)
  fused_lm_head=false (a TRL before the DPO/KTO fused log-prob head: whole logits of the 2 x micro-batch)
  trainer=gkd teacher_model=Qwen/Qwen2-1.5B-Instruct (GKD: a frozen teacher, id or config.json, whole on every GPU
    unless ZeRO-3 shards it; the loss's full-vocabulary tensors; on-policy generation for lmbda=0.5 of the steps,
    max_new_tokens=128; beta=0.5; seq_kd=true; gkd_loss=swift for ms-swift's loss, teacher_model_server=URL, teacher_deepspeed=zero3)
  trainer=ppo critic_model=Qwen/Qwen2-1.5B reward_model_path=Qwen/Qwen2-1.5B (PPO: the critic, a value model trained
    beside the policy with its own optimizer states, sharded as the policy; default the reward model's, else the policy's
    config; critic_model=none for none; a frozen reward model; the policy's reference copy; critic_update=separate
    (OpenRLHF, verl: its own update phase) or joint (TRL's PPOTrainer: one backward), critic_micro_batch=N,
    critic_gradient_checkpointing=true, critic_offload_outside_update=weights,optimizer (verl), rollout_vllm=colocate
    with rollout_vllm_gpu_memory_utilization=0.5 rollout_vllm_sleep=true (OpenRLHF --colocate_all_models);
    rollout_micro_batch=4 max_new_tokens=1024 (experience making: generate, then the no-grad forwards with whole logits))

examples:
  vramfit plan vlm-r1-h20
  vramfit plan sharegpt4v-7b-8xa100-40g per_device_train_batch_size=8 gradient_accumulation_steps=1 --plot peak.png
  vramfit plan --model-config model_configs/llama-3.2-3b.json --gpu a100-80g --gpus 8 --deepspeed zero3 \\
      per_device_train_batch_size=4 seq_len=4096 bf16=true gradient_checkpointing=true
  vramfit plan axolotl-llama-3b-8xa100-80g --trace   (activations traced on the model code, fake tensors)

exit codes: 0 fits, 1 does not fit, 2 bad input, 3 answered but a term could not be computed
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Predict the per-GPU peak and host RAM of a recipe before launch, explain it, and list the smallest fixes."
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "items", nargs="*", metavar="RECIPE|key=value", help="a recipe name or path, then key=value overrides (with --model-config: overrides only)"
    )
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    parser.add_argument("--plot", metavar="FILE.png", help="write the breakdown per phase as a stacked bar chart (PNG)")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="trace the training step's activations on the model code with fake tensors (CPU, no GPU; "
        "cached under the user cache dir) instead of modelling them",
    )
    model = parser.add_argument_group("without a recipe")
    model.add_argument("--model-config", metavar="PATH", help="a model config.json (e.g. model_configs/llama-3.2-3b.json)")
    model.add_argument("--gpu", help="GPU name from the catalogue (a100-80g, h100, h20, ...)")
    model.add_argument("--gpus", type=int, help="GPUs per node")
    model.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    model.add_argument("--deepspeed", metavar="FILE|preset", help="a DeepSpeed JSON or a preset name from deepspeed_configs/ (zero3)")


def run(args: argparse.Namespace) -> int:
    from vramfit.problems import EXIT_FAILED, EXIT_OK, ConfigError, Problems

    problems = Problems()
    if args.plot:
        plot = Path(args.plot)
        if plot.suffix.lower() != ".png":
            problems.add("vramfit plan", "--plot", f"'{args.plot}' is not a .png file name", "write --plot plan.png.")
        elif not plot.parent.exists():
            problems.add("vramfit plan", "--plot", f"folder '{plot.parent}' does not exist", "create it or plot into an existing folder.")
    try:
        if problems:
            raise ConfigError(problems)
        result = _plan(args)
    except ConfigError as error:
        from vramfit.problems import report

        return report(error, as_json=args.json)  # the one problem format of every command
    if args.json:
        import json

        print(json.dumps({**result.to_json(), "incomplete": result.incomplete}, indent=2))
    else:
        print(result.render())
    if args.plot:
        result.plot(args.plot)
        if not args.json:
            print(f"plot: {args.plot}")
    if not result.ok:
        return EXIT_FAILED
    if result.incomplete:
        from vramfit.problems import EXIT_INCOMPLETE

        print(f"incomplete: not computed: {'; '.join(result.incomplete)}", file=sys.stderr)
        return EXIT_INCOMPLETE
    return EXIT_OK


def _plan(args):
    from vramfit.problems import ConfigError, Problems

    items = list(args.items)
    if args.model_config:
        from vramfit.planner.plan import plan_args

        problems = Problems()
        if not args.gpu:
            problems.add("vramfit plan", "--gpu", "--model-config needs the GPU", "add --gpu a100-80g (see `vramfit list` for names).")
        if not args.gpus:
            problems.add("vramfit plan", "--gpus", "--model-config needs the number of GPUs per node", "add --gpus 8.")
        stray = [i for i in items if "=" not in i]
        if stray:
            problems.add(
                "vramfit plan",
                stray[0],
                f"'{stray[0]}' is not key=value (with --model-config there is no RECIPE)",
                "drop it, or plan the recipe without --model-config.",
            )
        if problems:
            raise ConfigError(problems)
        return plan_args(args.model_config, args.gpu, args.gpus, args.nodes, args.deepspeed, items, trace=args.trace)
    targets = [i for i in items if "=" not in i]
    overrides = [i for i in items if "=" in i]
    if len(targets) != 1:
        raise ConfigError(
            Problems(
                [
                    _problem(
                        "vramfit plan",
                        "RECIPE",
                        f"plan takes one RECIPE, got {len(targets)} ({', '.join(targets) or 'none'})",
                        "name one recipe (vramfit list), or use --model-config PATH --gpu NAME --gpus N.",
                    )
                ]
            )
        )
    from vramfit import libraries
    from vramfit.planner.plan import plan_recipe
    from vramfit.validate import validate

    libraries.quiet()  # a cold validation imports DeepSpeed, which would print its accelerator line into --json

    # Validated exactly as `vramfit validate` does before anything is computed (the fit verdict is plan's own),
    # with its cached verdict: a recipe validated before is not re-checked by TrainingArguments / DeepSpeed.
    # The plan is fed what validation resolved (arguments, DeepSpeed "auto" values), kept in that cache.
    validated = validate(targets[0], overrides, plan=False, cache=True)
    return plan_recipe(validated.recipe, trace=args.trace, resolved=validated.resolved)


def _problem(file: str, key: str, what: str, fix: str):
    from vramfit.problems import Problem

    return Problem(file, key, what, fix)


def plan_fixes(recipe: str, fixes: list[Any]) -> list[tuple[Any, float | None, bool]]:
    """Price override fixes for `vramfit doctor`: (overrides as priced, predicted peak GiB, fits) for
    each, each planned as the recipe loaded with those overrides. Fixes are dicts or key=value lists.

    A batch split read from a log (per-device batch down, accumulation up) is rebased on the recipe's
    own numbers, so that the recipe's global batch is kept: accumulation = the recipe's per-device x
    accumulation / the new per-device. A split that does not lower the recipe's per-device batch, or
    does not divide its samples per rank, does not apply (peak None)."""
    from vramfit.checks.recipe_rules import micro_and_accumulation
    from vramfit.planner.plan import plan_recipe, with_overrides
    from vramfit.problems import ConfigError
    from vramfit.validate import validate

    # The doctor has validated the recipe (a recipe that does not validate is the caller's error); its resolved
    # arguments and DeepSpeed JSON, from the validate cache, feed every priced fix as they feed `vramfit plan`.
    validated = validate(recipe, plan=False, cache=True)
    micro, accumulation = micro_and_accumulation(validated.recipe)
    out = []
    for overrides in fixes:
        if isinstance(overrides, dict) and {"per_device_train_batch_size", "gradient_accumulation_steps"} <= set(overrides):
            new = int(overrides["per_device_train_batch_size"])
            if new >= micro or (micro * accumulation) % new:
                out.append((overrides, None, False))
                continue
            overrides = {**overrides, "gradient_accumulation_steps": micro * accumulation // new}
        try:
            p = plan_recipe(with_overrides(validated.recipe, overrides), fixes=False, resolved=validated.resolved)
        except ConfigError:  # a fix written for another setup (a key this recipe does not have)
            out.append((overrides, None, False))
            continue
        out.append((overrides, p.per_gpu_peak_gib, p.ok))
    return out
