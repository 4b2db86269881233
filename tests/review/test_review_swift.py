"""ms-swift launches (`swift sft|rlhf`) read with ms-swift's own argument classes and defaults (the mirror's
swift/arguments/*.py): what trains of a multimodal model, the image-size variables, its tuner types, device_map runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramfit.review.reviewer import review

from review_support import find


def script(tmp_path: Path, line: str, name: str = "train.sh") -> str:
    path = tmp_path / name
    path.write_text(line + "\n")
    return str(path)


VL = "swift sft --model Qwen/Qwen2.5-VL-3B-Instruct --max_length 1024 --per_device_train_batch_size 1"


@pytest.mark.parametrize(
    "flags, llm, vision, projector",
    [
        ("", True, False, False),  # TunerArguments: freeze_llm False, freeze_vit True, freeze_aligner True
        ("--freeze_vit false --freeze_aligner false", True, True, True),
        ("--freeze_llm true --freeze_aligner false", False, False, True),
    ],
)
def test_ms_swift_full_trains_what_its_freeze_switches_leave(tmp_path, flags, llm, vision, projector):
    line = f"NPROC_PER_NODE=2 MAX_PIXELS=200704 {VL} --tuner_type full {flags}"
    result = review([script(tmp_path, line)], gpu="a100-80g")
    s = result.plan.setup
    assert (s.method, s.train_llm, bool(s.train_vision), s.train_projector) == ("full", llm, vision, projector)
    assert not find(result, text="own argument (not")  # freeze_* are read, not "read, not reviewed"


@pytest.mark.parametrize("flags, vision_lora", [("", False), ("--freeze_vit false", True)])
def test_ms_swift_lora_all_linear_adapts_the_vit_only_when_it_is_unfrozen(tmp_path, flags, vision_lora):
    line = f"NPROC_PER_NODE=2 MAX_PIXELS=200704 {VL} --tuner_type lora --target_modules all-linear {flags}"
    s = review([script(tmp_path, line)], gpu="a100-80g").plan.setup
    # get_multimodal_target_regex: the LLM's linears, the ViT's only with freeze_vit false, the aligner never in full
    assert s.method == "lora" and s.lora_vision_tower is vision_lora and not s.train_projector


def test_a_freeze_switch_is_shown_and_fixed_as_written(tmp_path):
    line = f"NPROC_PER_NODE=2 MAX_PIXELS=200704 {VL} --tuner_type full --freeze_vit false"
    result = review([script(tmp_path, line)], gpu="a100-80g")
    [diff] = find(result, key="--freeze_vit", source="recipe-diff")
    assert diff.what.startswith("False here, True in recipe") and diff.fix == "--freeze_vit true"


@pytest.mark.parametrize(
    "env, tokens",
    [
        ("IMAGE_MAX_TOKEN_NUM=1024", 1024),  # qwen_vl_utils >= 0.0.14: tokens per image, whatever the patch size
        ("MAX_PIXELS=1048576", 1024),  # 1024 x 32 x 32 px: Qwen3-VL's patch 16, merge 2
        ("", 16384),  # ms-swift's docs: IMAGE_MAX_TOKEN_NUM default 16384 ("IMAGE_MAX_TOKEN_NUM * 32 * 32" px)
    ],
)
def test_ms_swift_image_size_variables_of_a_qwen3_vl(tmp_path, env, tokens):
    line = f"NPROC_PER_NODE=2 {env} swift sft --model Qwen/Qwen3-VL-4B-Instruct --tuner_type lora --max_length 2048"
    result = review([script(tmp_path, line)], gpu="h100")
    assert result.plan.setup.image_tokens == tokens
    [said] = find(result, key="--image-tokens", text="planned at the maximum the files allow")
    assert f"({tokens:,} per image)" in said.what and "(pixels / 1024)" in said.fix


def test_a_negative_save_total_limit_keeps_every_checkpoint_and_is_no_error(tmp_path):
    # ms-swift's examples/megatron/benchmark/deepspeed.sh: --save_total_limit -1 (transformers: <= 0 deletes none)
    line = "CUDA_VISIBLE_DEVICES=0 swift sft --model Qwen/Qwen2.5-0.5B-Instruct --tuner_type lora --save_total_limit -1"
    result = review([script(tmp_path, line)], gpu="a100-80g")
    assert not find(result, key="--save_total_limit") and result.exit_code == 0


@pytest.mark.parametrize("tuner, method", [("adapter", "lora"), ("boft", "lora"), ("bone", "lora"), ("llamapro", "full")])
def test_ms_swift_tuners_the_planner_has_no_model_of_are_said_and_incomplete(tmp_path, tuner, method):
    line = f"CUDA_VISIBLE_DEVICES=0 swift sft --model Qwen/Qwen2.5-0.5B-Instruct --tuner_type {tuner} --max_length 1024"
    result = review([script(tmp_path, line)], gpu="a100-80g")
    [said] = find(result, key="--tuner_type", text=f"ms-swift's {tuner} tuner")
    assert result.plan.setup.method == method and result.exit_code == 3 and "incomplete" in said.what


def test_ms_swift_without_tuner_type_runs_lora_with_its_own_defaults(tmp_path):
    line = "CUDA_VISIBLE_DEVICES=0 swift sft --model Qwen/Qwen2.5-0.5B-Instruct --max_length 1024"
    result = review([script(tmp_path, line)], gpu="a100-80g")
    s = result.plan.setup
    assert s.method == "lora" and s.lora_r == 8 and s.lora_targets != () and not find(result, text="PEFT's defaults")
    assert find(result, key="--tuner_type", text="ms-swift's default tuner_type lora")


@pytest.mark.parametrize("env, processes", [("CUDA_VISIBLE_DEVICES=0,1,2,3", 1), ("NPROC_PER_NODE=2 CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", 2)])
def test_ms_swift_processes_that_see_several_gpus_are_planned_on_the_busiest_gpu_of_the_device_map(tmp_path, env, processes):
    # swift/cli/main.py: torchrun only with NPROC_PER_NODE; swift/utils/env.py is_mp(): visible GPUs // processes >= 2.
    # Full Qwen2.5-7B does not fit one 24 GB card; over 4 GPUs per process each holds about a quarter of it
    line = f"{env} swift sft --model Qwen/Qwen2.5-7B-Instruct --tuner_type full --max_length 1024"
    result = review([script(tmp_path, line)], gpu="rtx4090")
    s = result.plan.setup
    assert s.gpus_per_node == processes and s.device_map_gpus == 4 and s.device_map_gpu is not None
    assert result.exit_code == 0 and not find(result, text="upper bound")
    assert find(result, key="CUDA_VISIBLE_DEVICES", severity="info", text="planned per GPU of the split")
    assert any("device_map over 4 GPUs" in n and "planned is the busiest, GPU" in n for n in result.plan.notes)


def test_accelerate_launching_swift_cli_sft_with_fsdp_activation_checkpointing(tmp_path):
    # ms-swift's examples/train/multi-gpu/fsdp2_lora: accelerate runs swift/cli/sft.py (what `swift sft` runs) under an
    # FSDP config that checkpoints activations, with the Trainer's own --gradient_checkpointing false beside it
    (tmp_path / "fsdp2.json").write_text(
        '{"distributed_type": "FSDP", "mixed_precision": "bf16", "num_processes": 2, '
        '"fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_activation_checkpointing": true, "fsdp_version": 2}}'
    )
    line = (
        "CUDA_VISIBLE_DEVICES=0,1 accelerate launch --config_file fsdp2.json swift/cli/sft.py --model Qwen/Qwen2.5-0.5B-Instruct "
        "--tuner_type lora --gradient_checkpointing false --max_length 2048 --model_author swift"
    )
    result = review([script(tmp_path, line)], gpu="a100-80g")
    assert result.plan.setup.engine == "fsdp" and result.plan.setup.gradient_checkpointing
    assert not find(result, text="source is not beside the script") and find(result, key="--model_author", text="swift sft's own argument")


@pytest.mark.parametrize(
    "suffix, quantization", [("-AWQ", "awq-int4"), ("-GPTQ-Int4", "gptq-int4"), ("-bnb-4bit", "nf4"), ("-GPTQ-Int8", None), ("-NVFP4", None), ("", None)]
)
def test_a_quantized_checkpoint_answered_by_its_bases_table_config_keeps_its_4_bit_weights(tmp_path, suffix, quantization):
    # ms-swift's examples/train/qlora/awq: Qwen/Qwen2.5-7B-Instruct-AWQ, whose config.json has quantization_config awq 4-bit;
    # an NVFP4 (ModelOpt) checkpoint - axolotl's qwen3-next nvfp4 example - is no format the planner models: 16 bits, said
    line = f"CUDA_VISIBLE_DEVICES=0 swift sft --model Qwen/Qwen2.5-0.5B-Instruct{suffix} --tuner_type lora --max_length 1024"
    result = review([script(tmp_path, line)], gpu="a100-80g")
    assert result.plan.setup.quantization == quantization
    said = find(result, key="--model", text="without the checkpoint's quantization_config")
    assert bool(said) is bool(suffix)
    if suffix == "-NVFP4":
        assert "an upper bound of the weights" in said[0].what and not said[0].fix


def test_a_quantized_moe_checkpoint_named_by_its_folder_keeps_its_experts_at_their_stored_bits(tmp_path):
    # modelscope/ms-swift#6405: an org__name folder of an AWQ Qwen3-30B-A3B: every expert's linears are stored 4-bit
    folder = "/home/test/.cache/huggingface/hub/cpatonn-mirror__Qwen3-30B-A3B-Thinking-2507-AWQ"
    line = f"NPROC_PER_NODE=4 swift sft --model {folder} --train_type lora --max_length 512 --gradient_checkpointing true"
    result = review([script(tmp_path, line)], gpu="rtx3090", gpus=4)
    assert result.plan.setup.quantization == "awq-int4" and result.plan.setup.quantize_moe_experts
    [said] = find(result, key="--model", text="names a checkpoint quantized as AWQ")
    assert "qwen3_moe experts included" in said.what and "model_configs/hub/qwen3-30b-a3b.json" in said.what
    assert find(result, key="--model", text="with the config of Qwen/Qwen3-30B-A3B")
    assert result.plan.parameters["quantized"] > 0.97 * result.plan.parameters["total"]  # the experts too (29.9 of 30.5 B)
    assert result.plan.breakdown["weights"] < 20  # 30.5 B at 4 bits with LoRA beside, not the experts' 16 bits (55.6 GiB)


def test_ms_swift_modules_to_save_trains_the_embeddings_and_head_beside_lora(tmp_path):
    # ms-swift's examples/train/new_special_tokens: --modules_to_save embed_tokens lm_head (TunerArguments, nargs '+')
    line = "CUDA_VISIBLE_DEVICES=0 swift sft --model Qwen/Qwen2.5-0.5B-Instruct --tuner_type lora --modules_to_save embed_tokens lm_head"
    result = review([script(tmp_path, line)], gpu="a100-80g")
    assert result.plan.setup.modules_to_save == ("embed_tokens", "lm_head") and not find(result, severity="error")


def test_ms_swift_grpo_of_the_whole_model_follows_the_freeze_switches_too(tmp_path):
    line = (
        "NPROC_PER_NODE=2 MAX_PIXELS=200704 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-VL-3B-Instruct --tuner_type full "
        "--freeze_vit false --num_generations 4 --per_device_train_batch_size 4 --max_completion_length 512"
    )
    s = review([script(tmp_path, line)], gpu="a100-80g").plan.setup
    assert (s.method, s.train_llm, bool(s.train_vision), s.train_projector) == ("grpo", True, True, False)


def test_ms_swift_sequence_parallel_size_is_planned_per_gpu_not_an_upper_bound(tmp_path):
    """ms-swift --sequence_parallel_size 4 (swift/sequence_parallel): each GPU holds a quarter of every sample's tokens; the
    review plans that (planner.sequence_parallel) instead of warning that sequence parallelism is not modelled."""
    line = "NPROC_PER_NODE=4 swift sft --model Qwen/Qwen2.5-0.5B-Instruct --tuner_type full --max_length 32768 --attn_impl flash_attn"
    whole = review([script(tmp_path, line, "whole.sh")], gpu="a100-80g")
    split = review([script(tmp_path, line + " --sequence_parallel_size 4", "split.sh")], gpu="a100-80g")
    assert split.plan.setup.sequence_parallel == 4 and whole.plan.setup.sequence_parallel == 1
    assert not find(split, text="does not model") and not find(split, text="upper bound")
    acts = [r.plan.phase_breakdowns["train"]["activations"] for r in (whole, split)]
    assert acts[1] == pytest.approx(acts[0] / 4, rel=0.05)
    assert any("sequence parallelism over 4 GPUs" in n for n in split.plan.notes)


def test_an_evaluation_above_the_card_under_sequence_parallelism_is_an_upper_bound_warning(tmp_path):
    """The sequence split is planned for training only: an evaluation that exceeds the card under --sequence_parallel_size
    is said as an upper bound (a warning), not an error (ms-swift's sequence_parallel_reranker.sh example, published to run)."""
    line = (
        "NPROC_PER_NODE=4 swift sft --model Qwen/Qwen2.5-0.5B-Instruct --tuner_type full --max_length 32768 --attn_impl flash_attn"
        " --eval_strategy steps --eval_steps 50 --per_device_eval_batch_size 64 --prediction_loss_only false"
    )
    result = review([script(tmp_path, line + " --sequence_parallel_size 4", "split.sh")], gpu="a100-80g")
    [ev] = find(result, text="evaluation peaks above training")
    assert ev.severity == "warning" and "without the sequence split over 4 GPUs" in ev.what


@pytest.mark.parametrize(
    "flags, head, labels, sequences",
    [
        ("--task_type embedding --loss_type infonce", "embedding", None, 2),  # anchor + positive, no vocabulary logits
        ("--task_type reranker --loss_type listwise_reranker", "seq_cls", 1, 8),  # MAX_POSITIVE_SAMPLES 1 x (1 + 7)
        ("--task_type generative_reranker --loss_type pointwise_reranker", "generative_reranker", None, 8),
        ("--task_type seq_cls --num_labels 265", "seq_cls", 265, 1),  # the script's num_labels, not the config's
        ("--num_labels 3", "seq_cls", 3, 1),  # model_meta.py: num_labels without task_type -> seq_cls
    ],
)
def test_ms_swift_task_types_are_planned_with_the_head_they_build(tmp_path, flags, head, labels, sequences):
    """swift sft --task_type (swift/model/register.py get_model): embedding and generative_reranker patch the causal LM's
    lm_head, reranker and seq_cls load a sequence classifier; an embedding / reranker sample is several sequences of one
    batch (swift/template/base.py): no vocabulary-wide logits, every sequence of the forward planned."""
    line = f"swift sft --model Qwen/Qwen3-Embedding-0.6B --tuner_type full --max_length 512 --per_device_train_batch_size 4 {flags}"
    result = review([script(tmp_path, line)], gpu="a100-80g")
    s = result.plan.setup
    assert (s.head, s.sequences_per_sample) == (head, sequences)
    if labels is not None:
        assert s.num_labels == labels
    assert result.plan.phase_breakdowns["train"].get("logits", 0.0) < 0.05  # GiB; the causal LM's would be ~2.3
    assert find(result, severity="info", key="--task_type" if "task_type" in flags else "--num_labels", text="planned as")


def test_ms_swift_reranker_groups_follow_its_environment(tmp_path):
    line = (
        "MAX_POSITIVE_SAMPLES=2 MAX_NEGATIVE_SAMPLES=3 swift sft --model Qwen/Qwen3-Reranker-0.6B --task_type generative_reranker "
        "--max_length 512 --per_device_train_batch_size 2"
    )
    result = review([script(tmp_path, line)], gpu="a100-80g")
    assert result.plan.setup.sequences_per_sample == 8  # 2 x (1 + 3)
    assert find(result, key="--task_type", text="MAX_POSITIVE_SAMPLES=2, MAX_NEGATIVE_SAMPLES=3")


def test_ms_swift_reward_model_is_a_one_label_classifier_since_3_0_2(tmp_path):
    """swift rlhf --rlhf_type rm: `_init_rm` sets task_type seq_cls, num_labels 1 (swift/arguments/rlhf_args.py, v3.0.2 on);
    chosen + rejected in one batch, no lm_head logits."""
    line = "swift rlhf --rlhf_type rm --model Qwen/Qwen2.5-0.5B-Instruct --max_length 1024 --per_device_train_batch_size 2"
    s = review([script(tmp_path, line)], gpu="a100-80g").plan.setup
    assert (s.head, s.num_labels, s.sequences_per_sample) == ("seq_cls", 1, 2)


def test_an_embedding_run_of_unknown_length_at_the_model_s_context_is_a_worst_case_warning(tmp_path):
    """ms-swift's sequence_parallel_emb.sh as published (no --max_length: planned at the model's 32,768 tokens): with the
    embedding head the padding-free worst case is a warning that fits at shorter samples, not a vocabulary-logits error."""
    line = (
        "CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 swift sft --model Qwen/Qwen3-Embedding-0.6B --task_type embedding "
        "--model_type qwen3_emb --tuner_type full --per_device_train_batch_size 256 --loss_type infonce "
        "--sequence_parallel_size 4 --padding_free true --attn_impl flash_attn"
    )
    result = review([script(tmp_path, line)], gpu="h100")
    assert result.exit_code == 0
    [worst] = find(result, severity="warning", key="--padding_free")
    assert "512 x 32,768" in worst.what  # 256 samples x (anchor + positive)


# Qwen2.5-Omni-7B's Talker and token2wav vocoder, built from the published config on the meta device (the table's sidecar
# model_configs/hub/qwen2.5-omni-7b.source.json gives the same counts from a build of the whole model)
OMNI_AUDIO_OUTPUT = 1_351_360_256 + 449_051_264


@pytest.mark.parametrize("env, loaded", [("", True), ("ENABLE_AUDIO_OUTPUT=1", True), ("ENABLE_AUDIO_OUTPUT=0", False)])
def test_ms_swift_plans_the_omni_talker_and_vocoder_it_loads(tmp_path, env, loaded):
    # swift/model/models/qwen.py Qwen2_5OmniLoader: the whole Qwen2_5OmniForConditionalGeneration is loaded, and with
    # config.enable_audio_output (published: true; ENABLE_AUDIO_OUTPUT overrides it) it builds the Talker and vocoder
    # beside the Thinker the planner builds: frozen weights, whole on each GPU under ZeRO-2
    line = f"NPROC_PER_NODE=2 {env} swift sft --model Qwen/Qwen2.5-Omni-7B --tuner_type lora --max_length 512 --per_device_train_batch_size 1 --deepspeed zero2"
    result = review([script(tmp_path, line)], gpu="a100-80g")
    s = result.plan.setup
    assert s.resident_frozen == (OMNI_AUDIO_OUTPUT if loaded else 0)
    from vramfit.planner import states

    assert states.resident_frozen_bytes(s) == (2 * OMNI_AUDIO_OUTPUT if loaded else 0)
    assert states.resident_frozen_bytes(s.replace(zero=s.zero.__class__(stage=3), engine="deepspeed")) == (
        OMNI_AUDIO_OUTPUT if loaded else 0
    )  # ZeRO-3 over 2 ranks


@pytest.mark.parametrize("rlhf_type", ["grpo", "ppo", "dpo"])
def test_swift_rlhf_reads_max_length_whatever_trl_config_its_rlhf_type_maps_to(tmp_path, rlhf_type):
    """--max_length is ms-swift's TemplateArguments' (inherited by RLHFArguments as by SftArguments), not the TRL config's:
    GRPOConfig and PPO's TrainingArguments have none, and it was said to be 'read, not reviewed' and 'not set' (planned at
    the model's 32,768 tokens, or GRPO's 512-token prompt default). GRPO cuts the prompt there (_init_grpo: left truncation)."""
    line = f"swift rlhf --rlhf_type {rlhf_type} --model Qwen/Qwen2.5-0.5B-Instruct --max_length 2048 --per_device_train_batch_size 4"
    result = review([script(tmp_path, line + (" --num_generations 4" if rlhf_type == "grpo" else ""))], gpu="a100-80g")
    assert result.plan.setup.seq_len == 2048
    assert not find(result, key="--max_length", text="own argument") and not find(result, key="--max_length", text="not set")
