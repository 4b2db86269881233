"""Every launch knob (vramfit/planner/knobs.py): accepted as the libraries spell it, and moving the
plan in the direction and by the amount the library's own code says."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from vramfit.planner import params, states, training
from vramfit.planner.activations import FP32
from vramfit.planner.knobs import BNB_DEFAULTS, VLLM_DEFAULTS
from vramfit.planner.setup import Setup
from vramfit.problems import ConfigError

from planner_support import REPO, recipe_path

plan = importlib.import_module("vramfit.planner.plan")  # the module (vramfit.planner.plan is also the function)

LLAMA = REPO / "model_configs" / "llama-3.2-3b.json"  # 3.2 B, tied embeddings, 24 q / 8 kv heads
VLM = REPO / "model_configs" / "qwen2.5-vl-3b-instruct.json"
GIB = 2**30


def setup(*items, gpus=8, nodes=1, gpu="a100-80g", config=LLAMA, deepspeed=None) -> Setup:
    return Setup.from_args(config, gpu, gpus, nodes, deepspeed, list(items))


def counts(s: Setup):
    arch = params.summary(s.model_config)
    return arch, params.count(arch, plan.lora_targets(s, arch))


def gib(p, key, phase="train"):
    return p.phase_breakdowns[phase].get(key, 0.0)


# ---------------------------------------------------------------------------------------- FSDP
def test_fsdp_full_shard_shards_fp32_states_over_the_world():
    s = setup("fsdp=full_shard auto_wrap", "bf16=true")
    assert s.engine == "fsdp" and s.fsdp_sharding == "full_shard" and s.fsdp_version == 1
    arch, c = counts(s)
    st = states.gpu_states(s, c, arch)
    # accelerate upcasts FSDP parameters to fp32 under mixed precision: 4 B weights, 4 B grads, 8 B moments, / 8
    assert st.weights == pytest.approx(c.trainable * 4 / 8)
    assert st.gradients == pytest.approx(c.trainable * 4 / 8)
    assert st.optimizer == pytest.approx(c.trainable * 8 / 8)
    # FSDP2 (fully_shard) keeps the same states; the root stays gathered in both
    s2 = setup("fsdp=full_shard auto_wrap", "fsdp_config.version=2", "bf16=true")
    assert s2.fsdp_version == 2
    assert states.gpu_states(s2, c, arch) == st


def test_fsdp_shard_grad_op_keeps_the_whole_model_gathered():
    full = setup("fsdp=full_shard", "bf16=true")
    grad_op = setup("fsdp=shard_grad_op", "bf16=true")
    arch, c = counts(full)
    a, b = states.gpu_states(full, c, arch), states.gpu_states(grad_op, c, arch)
    assert b.weights == a.weights and b.gradients == a.gradients
    assert b.gathered == pytest.approx(c.total * 2)  # every unit unsharded in bf16 until its backward
    assert b.gathered > a.gathered
    # FSDP2 spelling of the same strategy
    assert setup("fsdp=full_shard", "fsdp_config.reshard_after_forward=false").fsdp_sharding == "shard_grad_op"


def test_hybrid_shard_shards_within_the_node_only():
    full = setup("fsdp=full_shard", "bf16=true", gpus=4, nodes=2)
    hybrid = setup("fsdp=hybrid_shard", "bf16=true", gpus=4, nodes=2)
    arch, c = counts(full)
    assert states.gpu_states(hybrid, c, arch).weights == pytest.approx(2 * states.gpu_states(full, c, arch).weights)
    # accelerate's spelling: sharding_strategy by name or its 1-based number (4 = HYBRID_SHARD)
    assert setup("fsdp_config.sharding_strategy=4", gpus=4, nodes=2).fsdp_sharding == "hybrid_shard"
    assert setup("fsdp_config.fsdp_sharding_strategy=HYBRID_SHARD", gpus=4, nodes=2).fsdp_sharding == "hybrid_shard"


def test_fsdp_cpu_offload_moves_states_to_the_host():
    on = plan.plan(setup("fsdp=full_shard auto_wrap offload", "bf16=true"))
    off = plan.plan(setup("fsdp=full_shard auto_wrap", "bf16=true"))
    assert gib(on, "weights") == 0 and gib(on, "gradients") == 0 and gib(on, "optimizer_states") == 0
    assert on.host_breakdown["offloaded_states"] > 0 and "offloaded_states" not in off.host_breakdown
    assert setup("fsdp=full_shard", "fsdp_config.offload_params=true").fsdp_offload


def test_fsdp_and_deepspeed_together_is_refused():
    with pytest.raises(ConfigError, match="FSDP and DeepSpeed"):
        setup("fsdp=full_shard", deepspeed=str(REPO / "deepspeed_configs" / "zero3.json"))


# ----------------------------------------------------------------------------------- precision
def test_pure_bf16_halves_weights_grads_and_moments_against_fp32_master():
    master = setup("bf16=true", "dtype=float32", gpus=1)
    pure = setup("dtype=bfloat16", gpus=1)  # HF Trainer without bf16/fp16: no autocast, bf16 weights train
    assert master.precision == "bf16" and master.master_fp32 and pure.precision == "bf16-true"
    assert setup("bf16=full", gpus=1).precision == "bf16-true"  # axolotl
    arch, c = counts(master)
    m, p = states.gpu_states(master, c, arch), states.gpu_states(pure, c, arch)
    assert m.weights == pytest.approx(c.trainable * 4) and p.weights == pytest.approx(c.trainable * 2)
    assert m.gradients == pytest.approx(c.trainable * 4) and p.gradients == pytest.approx(c.trainable * 2)
    assert m.optimizer == pytest.approx(c.trainable * 8) and p.optimizer == pytest.approx(c.trainable * 4)


# -------------------------------------------------------------------------------- quantization
def test_bitsandbytes_defaults_are_the_library_defaults():
    from transformers import BitsAndBytesConfig

    cfg = BitsAndBytesConfig(load_in_4bit=True)
    assert cfg.bnb_4bit_quant_type == BNB_DEFAULTS["bnb_4bit_quant_type"]
    assert cfg.bnb_4bit_use_double_quant == BNB_DEFAULTS["bnb_4bit_use_double_quant"]
    assert str(cfg.bnb_4bit_quant_storage).replace("torch.", "") == BNB_DEFAULTS["bnb_4bit_quant_storage"]


@pytest.mark.parametrize(
    "items, kind, per_param",
    [
        (("method=qlora",), "nf4", states.QUANT_BYTES["nf4"]),
        (("method=qlora", "bnb_4bit_use_double_quant=true"), "nf4", states.QUANT_BYTES["nf4-dq"]),
        (("method=lora", "load_in_4bit=true"), "fp4", states.QUANT_BYTES["nf4"]),  # BitsAndBytesConfig default fp4
        (("method=lora", "load_in_8bit=true"), "int8", states.QUANT_BYTES["int8"]),
        (("method=lora", "quant_method=gptq"), "gptq-int4", states.QUANT_BYTES["gptq-int4"]),
        (("method=lora", "quant_method=awq"), "awq-int4", states.QUANT_BYTES["awq-int4"]),
    ],
)
def test_quantized_base_weights_take_their_format_bytes(items, kind, per_param):
    s = setup(*items, "bf16=true", gpus=1, gpu="rtx4090")
    assert s.quantization == kind
    arch, c = counts(s)
    plain = setup("method=lora", "bf16=true", gpus=1, gpu="rtx4090")
    _, c0 = counts(plain)
    delta = states.gpu_states(plain, c0, arch).weights - states.gpu_states(s, c, arch).weights
    assert c.quantized > 0
    assert delta == pytest.approx(c.quantized * (2 - per_param), rel=1e-9)


def test_double_quantization_saves_the_paper_constant():
    arch, c = counts(setup("method=qlora"))
    a = states.gpu_states(setup("method=qlora", gpus=1), c, arch).weights
    b = states.gpu_states(setup("method=qlora", "bnb_4bit_use_double_quant=true", gpus=1), c, arch).weights
    # QLoRA sec. 3: 32/64 = 0.5 bits -> 8/64 + 32/(64*256) = 0.127 bits per parameter
    assert (a - b) * 8 / c.quantized == pytest.approx(0.5 - 0.127, abs=1e-3)


def test_quant_storage_bfloat16_lets_fsdp_shard_the_packed_weights():
    uint8 = setup("method=qlora", "fsdp=full_shard", "bf16=true")
    bf16 = setup("method=qlora", "fsdp=full_shard", "bf16=true", "bnb_4bit_quant_storage=bfloat16")
    arch, c = counts(uint8)
    delta = states.gpu_states(uint8, c, arch).weights - states.gpu_states(bf16, c, arch).weights
    assert delta == pytest.approx(c.quantized * 0.5 * (1 - 1 / 8))


@pytest.mark.parametrize("version, keeps", [("0.41.1", True), ("0.43", True), ("0.43.2", False), ("0.50.2", False), (None, False)])
def test_bitsandbytes_before_0_43_2_keeps_each_4bit_linear_input(version, keeps):
    """bitsandbytes MatMul4Bit kept `ctx.tensors = (A, B)` until 9e75374 (#1270, first in 0.43.2): with
    LoRA dropout on q, v every layer then also keeps its two norm outputs (inputs of q/k/v and of
    gate/up) and the down projection's input - 2 x (2h + f) bytes a token; the attention output is
    kept by SDPA either way. Unset = the pinned release, which keeps none."""
    items = ["method=qlora", "lora_target_modules=q_proj,v_proj", "lora_dropout=0.05", "bf16=true", "per_device_train_batch_size=2", "seq_len=1024"]
    new = setup(*items, gpus=1)
    s = setup(*items, *([f"bitsandbytes_version={version}"] if version else []), gpus=1)
    assert s.quant_keeps_input is keeps
    arch = params.summary(s.model_config)
    st = arch.stacks["text"]
    _, c = counts(s)
    per_layer = training.layer_bytes(st, training.text_mode(s, arch, c, "text"), s.seq_len)[0]
    base = training.layer_bytes(st, training.text_mode(new, arch, c, "text"), new.seq_len)[0]
    assert per_layer - base == (2 * (2 * st.hidden + st.ffn) if keeps else 0)
    assert not setup("method=lora", "bitsandbytes_version=0.41.1", gpus=1).quant_keeps_input  # no 4-bit linears
    with pytest.raises(ConfigError, match="bitsandbytes_version.*not a version"):
        setup("method=qlora", "bitsandbytes_version=latest", gpus=1)
    if version == "0.41.1":  # a recipe says it in its planner: section
        from vramfit.recipe import load

        path = recipe_path("llama-3.1-70b-qlora-8xa100-80g")
        assert Setup.from_recipe(load(path, ["planner.bitsandbytes_version=0.41.1"])).quant_keeps_input
        assert not Setup.from_recipe(load(path)).quant_keeps_input


def test_autocast_keeps_16bit_copies_of_fp32_weights_through_the_forward():
    """autocast_mode.cpp `cached_cast`: over fp32 trained weights (dtype=float32 with bf16) the 16-bit
    copy of each linear weight is cached until the autocast region - the forward and the loss - exits;
    the untied input embedding is a lookup, not cast. None over 16-bit weights or under DeepSpeed."""
    items = ["bf16=true", "per_device_train_batch_size=1", "seq_len=1024"]
    amp, loaded16 = setup(*items, "dtype=float32", gpus=1), setup(*items, gpus=1)
    arch, c = counts(amp)
    whole, _ = training.autocast_weight_copies(amp, arch, c)
    lookup = arch.groups["embed"] if arch.groups.get("lm_head") else 0  # Llama-3.2-3B ties them: the head casts it
    assert whole == 2 * (c.trainable_base - lookup) and whole > 0
    assert training.autocast_weight_copies(loaded16, arch, c) == (0.0, 0.0)
    assert training.autocast_weight_copies(setup(*items, "dtype=float32", gpus=8, deepspeed="zero2"), arch, c) == (0.0, 0.0)
    a, b = (training.train_peak(x, arch, c, x.seq_len)["activations"] for x in (amp, loaded16))
    assert a - b == pytest.approx(whole)


def test_torch_before_2_keeps_the_gradients_through_the_forward():
    """torch 2.0 made nn.Module.zero_grad set gradients to None; before it the Trainer's `model.zero_grad()`
    zeroed them in place, so the next forward ran beside all of them."""
    items = ["bf16=true", "per_device_train_batch_size=1", "seq_len=1024", "optim=adamw_torch_fused"]
    now, old = setup(*items, gpus=1), setup(*items, "torch_version=1.13.1", gpus=1)
    assert old.gradients_kept and not now.gradients_kept and not setup(*items, "torch_version=2.0", gpus=1).gradients_kept
    arch, c = counts(now)
    whole = states.gpu_states(now, c, arch).gradients
    assert gib(plan.plan(old), "gradients") * GIB == pytest.approx(whole)
    assert gib(plan.plan(now), "gradients") * GIB < whole  # activations fall as gradients rise
    with pytest.raises(ConfigError, match="torch_version.*not a version"):
        setup(*items, "torch_version=two", gpus=1)


def test_quantized_full_fine_tuning_is_refused():
    with pytest.raises(ConfigError, match="trains every weight"):
        setup("load_in_4bit=true")


# ------------------------------------------------------------------------------------------ LoRA
def test_modules_to_save_trains_a_copy_of_the_embeddings():
    base = setup("method=lora")
    saved = setup("method=lora", "modules_to_save=embed_tokens,lm_head")
    arch, c0 = counts(base)
    _, c1 = counts(saved)
    # PEFT ModulesToSaveWrapper: a trainable copy of embed_tokens; Llama-3.2-3B ties lm_head to it
    assert c1.trainable - c0.trainable == arch.groups["embed"] == arch.vocab * arch.text.hidden
    assert c1.lm_head_trainable and not c0.lm_head_trainable
    assert plan.plan(saved).per_gpu_peak_gib > plan.plan(base).per_gpu_peak_gib


def test_lora_on_the_embeddings_adds_rank_times_vocab_plus_hidden():
    base = setup("method=lora", "lora_target_modules=q_proj,v_proj")
    emb = setup("method=lora", "lora_target_modules=q_proj,v_proj,embed_tokens")
    arch = params.summary(LLAMA)
    assert plan.embedding_lora(emb, arch) == 16 * (arch.vocab + arch.text.hidden)
    assert plan.embedding_lora(base, arch) == 0
    assert plan.plan(emb).parameters["lora_and_copies"] - plan.plan(base).parameters["lora_and_copies"] == 16 * (arch.vocab + arch.text.hidden)


def test_all_linear_with_and_without_the_vision_tower():
    both = setup("method=lora", config=VLM, gpus=1)
    llm = setup("method=lora", "lora_vision_tower=false", config=VLM, gpus=1)
    arch, c_both = counts(both)
    _, c_llm = counts(llm)
    vision = sum(16 * (lin.in_features + lin.out_features) for lin in arch.linears if lin.group == "vision")
    assert vision > 0 and c_both.lora - c_llm.lora == vision
    assert c_both.vision_grad_layers > 0 and c_llm.vision_grad_layers == 0


def test_projector_frozen_or_trained():
    frozen = setup("method=lora", config=VLM, gpus=1)
    trained = setup("method=lora", "train_projector=true", config=VLM, gpus=1)
    arch, c0 = counts(frozen)
    _, c1 = counts(trained)
    assert arch.groups["projector"] > 0 and c1.trainable - c0.trainable == arch.groups["projector"]


# ------------------------------------------------------------------------------- activations
def test_activation_offloading_keeps_five_checkpoints_on_the_gpu_and_the_rest_on_the_host():
    items = ("bf16=true", "gradient_checkpointing=true", "per_device_train_batch_size=4", "seq_len=4096")
    on, off = plan.plan(setup(*items, "activation_offloading=true")), plan.plan(setup(*items))
    arch = params.summary(LLAMA)
    layer_input = 4 * 4096 * arch.text.hidden * 2 / GIB
    assert gib(off, "activations") - gib(on, "activations") == pytest.approx((arch.text.layers - 5) * layer_input, rel=1e-6)
    s_on = setup(*items, "activation_offloading=true")
    host = training.offloaded_activation_bytes(s_on, arch, params.count(arch, s_on), 4096) / GIB
    assert host == pytest.approx((arch.text.layers - 5) * layer_input, rel=1e-6)
    assert gib(on, "logits") == gib(off, "logits")  # lm_head is exempt (NoOpManager)
    assert setup(*items[:1], "gradient_checkpointing=offload").activation_offloading  # axolotl


def test_packing_drops_the_padding_mask_so_sdpa_keeps_gqa_heads_unrepeated():
    items = ("bf16=true", "per_device_train_batch_size=2", "seq_len=4096")
    padded, packed = plan.plan(setup(*items)), plan.plan(setup(*items, "packing=true"))
    arch = params.summary(LLAMA)
    t = arch.text
    repeated = 2 * (t.heads - t.kv_heads) * t.head_dim * 2  # k and v expanded to every query head, bf16
    saved = t.layers * repeated * 2 * 4096 / GIB
    assert gib(padded, "activations") - gib(packed, "activations") == pytest.approx(saved, rel=1e-6)


def test_typical_length_is_planned_beside_the_cap_and_the_verdict_uses_the_cap():
    items = ("bf16=true", "per_device_train_batch_size=4", "seq_len=8192", "typical_length=1024")
    p = plan.plan(setup(*items, "padding_free=true"))
    cap = plan.plan(setup(*items[:-1], "padding_free=true"))
    assert p.per_gpu_peak_gib == cap.per_gpu_peak_gib and p.typical["seq_len"] == 1024
    assert p.typical["per_gpu_peak_gib"] < p.per_gpu_peak_gib
    assert any("verdict uses the cap" in n for n in p.notes)
    packed = plan.plan(setup(*items, "packing=true"))
    assert packed.typical["per_gpu_peak_gib"] == packed.per_gpu_peak_gib  # packing fills to the cap


@pytest.mark.parametrize("kernel", ["cce", "chunked", "liger"])
def test_fused_and_chunked_losses_lower_the_logits_peak(kernel):
    items = ("bf16=true", "per_device_train_batch_size=4", "seq_len=4096")
    torch_loss = gib(plan.plan(setup(*items)), "logits")
    fused = gib(plan.plan(setup(*items, f"loss_kernel={kernel}")), "logits")
    assert fused < torch_loss
    if kernel == "cce":
        arch = params.summary(LLAMA)
        tokens = 4 * 4096
        head_grad = arch.vocab * arch.text.hidden * 2  # full fine-tuning: the (tied) head trains
        assert fused == pytest.approx((tokens * FP32 + tokens * arch.text.hidden * 2 + head_grad) / GIB)
        assert setup(*items, "cut_cross_entropy=true").loss_kernel == "cce"  # axolotl


def test_chunked_loss_keeps_the_bf16_logits_and_fp32_log_probs():
    items = ("bf16=true", "per_device_train_batch_size=4", "seq_len=4096")
    arch = params.summary(LLAMA)
    tokens = 4 * 4096
    chunk = tokens // 8
    expected = tokens * arch.vocab * (2 + 4) + chunk * arch.vocab * 4
    assert gib(plan.plan(setup(*items, "loss_kernel=chunked")), "logits") == pytest.approx(expected / GIB)


def test_optimizer_in_backward_frees_gradients_as_it_goes():
    items = ("dtype=bfloat16",)
    plain, inbwd = setup(*items, gpus=1), setup(*items, "optimizer_in_bwd=true", gpus=1)
    arch, c = counts(plain)
    a, b = states.gpu_states(plain, c, arch), states.gpu_states(inbwd, c, arch)
    assert a.gradients == pytest.approx(c.trainable * 2)
    assert b.gradients == pytest.approx(arch.largest_module * 2) and b.step == 0
    with pytest.raises(ConfigError, match="gradient accumulation"):
        setup(*items, "optimizer_in_bwd=true", "gradient_accumulation_steps=4", gpus=1)


# ---------------------------------------------------------------------------------------- GRPO
def test_vllm_defaults_are_trl_defaults():
    from trl import GRPOConfig

    fields = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    for key, value in VLLM_DEFAULTS.items():
        assert fields[key] == value


def test_colocated_vllm_holds_its_share_of_the_card_on_every_phase():
    items = ("method=grpo", "use_vllm=true", "per_device_train_batch_size=8")
    co = plan.plan(setup(*items, "vllm_gpu_memory_utilization=0.5", gpu="h100"))
    share = 0.5 * co.gpu_memory_gib
    assert all(b["vllm"] == pytest.approx(share) for b in co.phase_breakdowns.values())
    server = plan.plan(setup(*items, "vllm_mode=server", gpu="h100"))
    assert all("vllm" not in b for b in server.phase_breakdowns.values())
    assert co.per_gpu_peak_gib - server.per_gpu_peak_gib == pytest.approx(share, rel=1e-6)
    sleep = plan.plan(setup(*items, "vllm_gpu_memory_utilization=0.5", "vllm_enable_sleep_mode=true", gpu="h100"))
    assert "vllm" not in sleep.phase_breakdowns["train"] and sleep.phase_breakdowns["generation"]["vllm"] == pytest.approx(share)


# ------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "item, message",
    [
        ("vllm_gpu_memory_utilisation=0.3", "Did you mean 'vllm_gpu_memory_utilization'"),
        ("fsdp_config.verison=2", "Did you mean 'version'"),
        ("fsdp=full_shard sharded", "unknown FSDP option 'sharded'"),
        ("vllm_gpu_memory_utilization=1.5", "fraction"),
        ("loss_kernel=fast", "one of torch, liger, cce, chunked"),
        ("fsdp_config.version=3", "not 1 or 2"),
        ("bnb_4bit_quant_storage=int4", "one of uint8"),
        ("lora_target_modules=(q_proj", "'(q_proj' is not a valid regex"),
        ("modules_to_save=embed_token", "Did you mean 'embed_tokens'"),
    ],
)
def test_bad_knobs_are_refused_with_the_key_and_a_fix(item, message):
    with pytest.raises(ConfigError) as err:
        setup("method=lora", item)
    assert message in str(err.value.problems.items[0])


# ---------------------------------------------------------------------------------- recipes
def test_recipe_planner_section_reaches_the_plan_and_stays_strict():
    from vramfit.recipe import load

    path = recipe_path("axolotl-llama-3b-8xa100-80g")
    recipe = load(path, ["planner.loss_kernel=cce", "planner.activation_offloading=true", "planner.packing=true", "planner.typical_length=512"])
    s = Setup.from_recipe(recipe)
    assert s.loss_kernel == "cce" and s.activation_offloading and s.packing and s.padding_free and s.typical_seq_len == 512
    assert Setup.from_recipe(load(path)).loss_kernel == "torch"  # the recipe as published is unchanged
    with pytest.raises(ConfigError, match="Did you mean 'loss_kernel'"):
        load(path, ["planner.loss_kernal=cce"])


def test_recipe_fsdp_training_keys_switch_the_engine():
    from vramfit.recipe import load

    recipe = load(
        recipe_path("axolotl-llama-3b-8xa100-80g"), ["deepspeed=none", "training.fsdp=full_shard auto_wrap offload", "training.fsdp_config={version: 2}"]
    )
    s = Setup.from_recipe(recipe)
    assert s.engine == "fsdp" and s.fsdp_version == 2 and s.fsdp_offload and s.zero.stage == 0


def test_torch_compile_keeps_what_the_partitioner_saves():
    items = ("dtype=bfloat16", "per_device_train_batch_size=2", "seq_len=4096")
    eager, compiled = plan.plan(setup(*items, gpus=1)), plan.plan(setup(*items, "torch_compile=true", gpus=1))
    arch = params.summary(LLAMA)
    t = arch.text
    # per layer and token: each RMSNorm drops its fp32 copy and the 16-bit input of `weight * x` is the
    # only one left (2 norms), the gated MLP drops act(gate) (recomputed)
    saved = t.layers * (t.norms_per_layer * FP32 * t.hidden + 2 * t.ffn) * 2 * 4096 / GIB
    assert gib(eager, "activations") - gib(compiled, "activations") == pytest.approx(saved, rel=1e-6)
    # HF compiles the loss inside the model: 16-bit logits + their 16-bit gradient instead of fp32 copies
    assert gib(compiled, "logits") < gib(eager, "logits")
    tune = setup(*items, "compile=true", gpus=1)  # torchtune: layers only, unless the loss is the chunked one
    assert tune.compile_layers and not tune.compile_loss
    assert setup(*items, "compile=true", "loss_kernel=chunked", gpus=1).compile_loss


@pytest.mark.parametrize(
    "items, code",
    [
        (["per_device_train_batch_size=1", "seq_len=1024", "bf16=true", "fsdp=full_shard auto_wrap"], 0),
        (["per_device_train_batch_size=64", "seq_len=8192", "bf16=true", "fsdp=full_shard"], 1),
        (["fsdp=full_shard sharded"], 2),
        (["method=lora", "lora_target_modules=[q"], 2),
    ],
)
def test_plan_exit_codes_with_knobs(items, code, capsys):
    import argparse

    from vramfit.planner import cli

    parser = argparse.ArgumentParser(prog="vramfit plan")
    cli.add_arguments(parser)
    args = parser.parse_args(["--model-config", str(LLAMA), "--gpu", "a100-80g", "--gpus", "8", *items])
    assert cli.run(args) == code
    out, err = capsys.readouterr()
    if code == 2:
        assert "Traceback" not in err and "Fix:" in err


# ------------------------------------------------------------------------- vision inputs
@pytest.fixture(scope="module")
def stock_qwen2vl(tmp_path_factory):
    """A stock transformers Qwen2-VL config (class defaults, small widths): no private keys."""
    import json

    from transformers import Qwen2VLConfig

    cfg = Qwen2VLConfig(
        text_config={
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 1000,
        },
        vision_config={"depth": 2, "embed_dim": 64, "hidden_size": 256, "num_heads": 4},
    )
    path = tmp_path_factory.mktemp("stock") / "config.json"
    path.write_text(json.dumps(cfg.to_dict()))
    return path


def test_stock_qwen2vl_config_takes_the_processor_max_pixels(stock_qwen2vl):
    from vramfit.planner.setup import QWEN2VL_MAX_PIXELS

    s = setup("method=lora", config=stock_qwen2vl, gpus=1)
    assert s.image_tokens == QWEN2VL_MAX_PIXELS // 28**2 == 1280 and s.vision_patches == 4 * 1280
    small = setup("method=lora", "max_pixels=200704", config=stock_qwen2vl, gpus=1)
    assert small.image_tokens == 256


def test_video_frames_add_tokens_per_temporal_group(stock_qwen2vl):
    from vramfit.planner.setup import QWEN2VL_VIDEO_MAX_PIXELS

    s = setup("method=lora", "frames_per_sample=16", "images_per_sample=0", config=stock_qwen2vl, gpus=1)
    per_group = QWEN2VL_VIDEO_MAX_PIXELS // 28**2
    assert s.image_tokens == 8 * per_group and s.images_per_sample == 1  # 16 frames / temporal_patch_size 2
    with pytest.raises(ConfigError, match="no video geometry"):
        setup("frames_per_sample=8")


def test_model_config_fixes_offer_the_knobs_and_each_fits():
    from vramfit.planner.plan import plan_args

    p = plan_args(
        LLAMA, "rtx4090", 1, overrides=["dtype=bfloat16", "per_device_train_batch_size=8", "seq_len=4096", "method=lora", "gradient_checkpointing=true"]
    )
    assert not p.ok and p.fixes
    keys = {k for f in p.fixes for k in f["overrides"]}
    assert keys & {"loss_kernel", "activation_offloading", "per_device_train_batch_size"}
    for f in p.fixes:
        assert f["per_gpu_peak_gib"] <= p.gpu_memory_gib * 0.95


def test_every_external_published_row_is_accepted_as_a_user_would_type_it():
    """benchmarks/external_figures.jsonl and heldout2_figures.jsonl: each row names its source and what was published, and its
    overrides go through `vramfit plan --model-config` unchanged (the benchmark prints the errors)."""
    import json

    from planner_support import SHARED

    rows = [
        json.loads(line)
        for name in ("external_figures.jsonl", "heldout2_figures.jsonl")  # both read by planner_accuracy.py's one loader
        for line in (REPO / "benchmarks" / name).read_text().splitlines()
        if line.strip()
    ]
    assert len(rows) >= 20 and len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["source_url"].startswith("https://github.com/") and "/blob/" in r["source_url"] and r["published"]
        assert r["metric"] in ("allocated", "reserved", "nvidia-smi", "unstated") and r["measured_gib"] > 0
        config = r["model_config"]
        path = SHARED / config.removeprefix("shared/") if config.startswith("shared/") else REPO / config
        if not path.is_file():
            pytest.skip(f"{path} not present")
        s = Setup.from_args(path, r["gpu"], r["gpus"], r.get("nodes", 1), None, r["overrides"])
        assert s.seq_len > 0


# ------------------------------------------------------------------------------------ head
LLAMA8 = REPO / "model_configs" / "llama-3.1-8b.json"  # untied lm_head: 128,256 x 4,096


@pytest.mark.parametrize("head, auto", [("seq_cls", "AutoModelForSequenceClassification"), ("token_cls", "AutoModelForTokenClassification")])
def test_classification_head_has_the_parameters_transformers_builds(head, auto):
    """The score head replaces lm_head: the count equals the class transformers builds (meta device), for an untied and
    a tied model."""
    import json

    import torch
    import transformers

    for config, labels in ((LLAMA8, 1), (LLAMA, 2)):
        s = setup("bf16=true", f"head={head}", f"num_labels={labels}", config=config)
        arch = training.with_head(params.summary(s.model_config), s)
        raw = {k: v for k, v in json.loads(config.read_text()).items() if not k.startswith("_")}
        cfg = transformers.AutoConfig.for_model(**raw)
        cfg.num_labels = labels
        with torch.device("meta"):
            model = getattr(transformers, auto).from_config(cfg)
        assert arch.total == sum(p.numel() for p in model.parameters())
        assert arch.vocab == labels and not arch.tied_embeddings


def test_classification_head_plans_no_vocabulary_wide_logits():
    """transformers GenericForSequenceClassification: score over [batch, seq, hidden] -> [batch, seq, num_labels], the loss
    on the pooled [batch, num_labels]: the logits term is num_labels wide, and the untied lm_head's states are gone."""
    items = ("bf16=true", "per_device_train_batch_size=4", "max_length=4096", "gradient_checkpointing=true")
    lm = plan.plan(setup(*items, config=LLAMA8, gpus=1))
    rm = plan.plan(setup(*items, "head=seq_cls", "num_labels=1", config=LLAMA8, gpus=1))
    tokens, vocab, hidden = 4 * 4096, 128256, 4096
    assert gib(lm, "logits") * GIB == pytest.approx(tokens * vocab * 3 * FP32)  # kept log-probs and two fp32 gradients
    assert gib(rm, "logits") * GIB < tokens * 64  # bytes per token, not per token x vocabulary
    # full fine-tuning on one GPU: the lm_head's weights and states leave, a 1 x hidden score comes
    per_param = gib(lm, "weights") * GIB / lm.parameters["total"]
    assert (gib(lm, "weights") - gib(rm, "weights")) * GIB == pytest.approx(per_param * (vocab - 1) * hidden, rel=1e-6)
    assert rm.parameters["total"] == lm.parameters["total"] - (vocab - 1) * hidden


def test_classification_head_trains_under_lora_and_ignores_the_causal_lm_loss_kernels():
    """PEFT's SEQ_CLS task type adds the score to modules_to_save; Liger's fused linear cross-entropy patches the causal LM's
    forward only, so it changes nothing for a score head."""
    s = setup("method=lora", "task_type=SEQ_CLS", "num_labels=1", gpus=1)
    assert (s.head, s.num_labels) == ("seq_cls", 1)
    p = plan.plan(s)
    assert p.parameters["lora_and_copies"] > plan.plan(setup("method=lora", gpus=1)).parameters["lora_and_copies"]
    liger = plan.plan(setup("method=lora", "task_type=SEQ_CLS", "num_labels=1", "use_liger_kernel=true", gpus=1))
    assert gib(liger, "logits") == pytest.approx(gib(p, "logits"))


def test_head_defaults_and_refusals():
    import transformers

    s = setup("head=token_cls")
    assert s.num_labels == transformers.PretrainedConfig().num_labels  # the config's, else transformers' default
    assert setup().head == "lm"
    for item, message in (
        ("head=value", "is not one of lm, seq_cls, token_cls, embedding, generative_reranker"),
        ("task_type=QUESTION_ANS", "is not a PEFT or ms-swift task type"),
        ("num_labels=0", "num_labels"),
    ):
        with pytest.raises(ConfigError, match=message):
            setup(item)


def test_recipe_planner_head_reaches_the_setup():
    from vramfit.recipe import load

    path = recipe_path("axolotl-llama-3b-8xa100-80g")
    s = Setup.from_recipe(load(path, ["planner.head=seq_cls", "planner.num_labels=1"]))
    assert (s.head, s.num_labels) == ("seq_cls", 1)
    with pytest.raises(ConfigError):
        load(path, ["planner.head=classifier"])


# ---------------------------------------------------------------------------------- torch's default optimizer
@pytest.mark.parametrize("version, optim", [("2.5.1", "adamw_torch"), ("2.7", "adamw_torch"), ("2.8.0", None), (None, None)])
def test_torch_before_2_8_defaults_the_trainer_to_multi_tensor_adamw(version, optim):
    """transformers training_args.py: default_optim is adamw_torch, adamw_torch_fused only on torch >= 2.8."""
    from vramfit.libraries import argument_default

    items = [f"torch_version={version}"] if version else []
    assert setup(*items).optimizer == (optim or argument_default(None, "optim"))
    assert setup(*items, "optim=adamw_torch_fused").optimizer == "adamw_torch_fused"  # the files' choice stands


def test_zero3_step_with_multi_tensor_adamw_holds_its_intermediate_beside_the_fp32_gradient():
    """DeepSpeed stage3.py: the sub-group's 16-bit flat gradient and its fp32 copy (6 B / param), then the wrapped torch
    AdamW's step on that fp32 partition: the foreach path's exp_avg_sq_sqrt beside the fp32 gradient (8 B / param)."""
    fused = setup("bf16=true", "optim=adamw_torch_fused", config=LLAMA8, deepspeed="zero3")
    foreach = setup("bf16=true", "optim=adamw_torch", config=LLAMA8, deepspeed="zero3")
    arch, c = counts(fused)
    sub = min(c.trainable / 8, fused.zero.sub_group_size)
    assert states.gpu_states(fused, c, arch).step == pytest.approx(sub * (FP32 + 2))
    assert states.gpu_states(foreach, c, arch).step == pytest.approx(sub * 2 * FP32)


# ------------------------------------------------------------------------------ sequence parallelism
def test_sequence_parallel_plans_each_gpus_share_of_the_sequence():
    """ms-swift's sequence parallelism splits every sample's tokens over N ranks (pad_and_split_inputs): the layers'
    kept activations and the logits of one GPU are those of seq_len / N tokens; the model states are unchanged."""
    items = ("bf16=true", "per_device_train_batch_size=2", "seq_len=16384", "attn_implementation=flash_attention_2")
    whole, split = plan.plan(setup(*items)), plan.plan(setup(*items, "sequence_parallel=4"))
    assert gib(split, "activations") == pytest.approx(gib(whole, "activations") / 4, rel=1e-6)
    assert gib(split, "logits") == pytest.approx(gib(whole, "logits") / 4, rel=1e-6)
    for key in ("weights", "gradients", "optimizer_states"):
        assert gib(split, key) == gib(whole, key)
    assert any("each GPU holds 4,096 of every sample's 16,384 tokens" in n for n in split.notes)
    assert not any("sequence parallelism" in n for n in whole.notes)


def test_sequence_parallel_eager_scores_still_span_every_key():
    """Ulysses gives each rank every query of heads / N: eager's fp32 score rows span all seq_len keys, so the split run
    keeps more than a whole run at seq_len / N would."""
    items = ("bf16=true", "per_device_train_batch_size=1", "attn_implementation=eager")
    split = plan.plan(setup(*items, "seq_len=8192", "sequence_parallel=4"))
    short = plan.plan(setup(*items, "seq_len=2048"))
    arch = params.summary(LLAMA)
    t = arch.text
    scores = t.layers * (FP32 + 2) * t.heads * (8192 - 2048) * 2048 / GIB  # per query token: nh x keys, fp32 + bf16 copy
    assert gib(split, "activations") - gib(short, "activations") == pytest.approx(scores, rel=0.02)


def test_sequence_parallel_knob_from_a_recipe_and_bad_values():
    from vramfit.recipe import load

    recipe = load(recipe_path("axolotl-llama-3b-8xa100-80g"), ["planner.sequence_parallel=4"])
    assert Setup.from_recipe(recipe).sequence_parallel == 4
    with pytest.raises(ConfigError) as err:
        setup("sequence_parallel=two")
    assert "sequence_parallel" in str(err.value.problems.items[0])


def test_ms_swift_chunked_sequence_parallel_loss_keeps_the_16bit_logits_and_one_fp32_chunk():
    """CELOSS_PARALLEL_SIZE (ms-swift ChunkedCrossEntropyLoss, only under sequence parallelism): the whole bf16 logits are
    saved and the fp32 upcast / log-softmax / their gradients exist for one chunk of tokens at a time."""
    items = ("bf16=true", "per_device_train_batch_size=1", "seq_len=32768", "sequence_parallel=4", "attn_implementation=flash_attention_2")
    whole, chunked = plan.plan(setup(*items)), plan.plan(setup(*items, "celoss_parallel_size=2048"))
    vocab, hidden = params.summary(LLAMA).vocab, params.summary(LLAMA).text.hidden
    tokens = 8192  # the GPU's share
    expected = max(tokens * vocab * 2 + 2048 * vocab * 3 * FP32, tokens * vocab * 2 + tokens * hidden * 2 + vocab * hidden * 2)
    assert gib(chunked, "logits") == pytest.approx(expected / GIB, rel=1e-6)
    assert gib(chunked, "logits") < gib(whole, "logits") / 2
    no_sp = plan.plan(setup(*items[:3], "attn_implementation=flash_attention_2", "celoss_parallel_size=2048"))
    assert gib(no_sp, "logits") == gib(plan.plan(setup(*items[:3], "attn_implementation=flash_attention_2")), "logits")


def test_audio_output_on_a_model_without_speech_modules_is_bad_input():
    from vramfit.planner import knobs
    from vramfit.problems import Problems

    problems = Problems()
    assert knobs.audio_output_fields({"audio_output": True}, REPO / "model_configs/hub/qwen3-8b.json", problems, "f") == {}
    assert [p.key for p in problems.errors] == ["audio_output"]
    problems = Problems()  # the Omni stand-in: its published config's Talker and vocoder
    out = knobs.audio_output_fields({"audio_output": True}, REPO / "model_configs/hub/stand-ins/qwen2.5-omni-7b.json", problems, "f")
    assert not problems and out["resident_frozen"] == 1_351_360_256 + 449_051_264


def test_training_arguments_that_change_no_memory_are_accepted_and_said():
    """Keys copied from a script (TrainingArguments, TRL's configs and ModelConfig, PEFT's LoraConfig) are accepted:
    those that change no memory term are named as not used, TRL's older / ModelConfig spellings are read as meant,
    and a misspelt one is still refused with the real name suggested."""
    base = setup("method=lora", "lora_r=64", "max_length=4096", gpus=1)
    s = setup("use_peft=true", "lora_r=64", "lora_alpha=128", "learning_rate=2e-5", "max_seq_length=4096", gpus=1)
    assert (s.method, s.seq_len, s.lora_r) == (base.method, base.seq_len, base.lora_r) == ("lora", 4096, 64)
    assert any("lora_alpha, learning_rate: training arguments that change no term" in n for n in s.notes)
    assert any("max_seq_length as max_length" in n and "use_peft=true as method=lora" in n for n in s.notes)
    dora = setup("method=lora", "use_dora=true", "lora_modules_to_save=lm_head", gpus=1)
    assert dora.modules_to_save == ("lm_head",)
    assert any(n.startswith("use_dora: training arguments that change memory in ways the planner does not model") for n in dora.notes)
    with pytest.raises(ConfigError) as refused:
        setup("lora_alpah=3")
    assert "Did you mean 'lora_alpha'?" in str(refused.value.problems.items[0].what)
