"""PPO's other models (`trainer=ppo`, or a GRPO-style run given a critic: verl's `algorithm.adv_estimator=gae`).

Beyond the policy (the actor, planned as any trained model) a PPO run holds:

- The critic (`critic_model`): a value model trained beside the policy, with its own weights, gradients and optimizer
  states. It is the critic's config.json with a one-output head over every position in place of lm_head: OpenRLHF
  openrlhf/models/model.py `get_llm_for_sequence_regression` (the base model class and `value_head =
  nn.Linear(hidden, 1, bias=False)`), verl workers/fsdp_workers.py CriticWorker `_build_critic_model_optimizer`
  (`AutoModelForTokenClassification` with `num_labels = 1`), TRL's PPOTrainer value model
  (`AutoModelForSequenceClassification(num_labels=1)`, scored over every position by `get_reward`); planned as the
  token-classification head with one label (training.with_head). It is sharded, offloaded and stepped as the policy
  is (one source: states.gpu_states over the critic's own counts), LoRA and quantization included (OpenRLHF passes
  the actor's lora_rank / load_in_4bit to it; ms-swift's rlhf.py `_prepare_single_model` runs `prepare_model`, the
  tuner, on the value model).
  - `critic_update=separate` (OpenRLHF ppo_trainer.py `ppo_train`: `training_step_actor` then `training_step_critic`,
    each its own backward and `optimizer_step`; verl ray_trainer.py `fit`: `update_critic` before `update_actor`):
    the critic's forward / backward is a phase of its own (`critic_update`), beside the actor's resident states;
    outside it the critic holds its weights and optimizer states (its gradients are freed by the step: DeepSpeed
    ZeRO-1/2 and FSDP as states.py plans them; verl dp_critic.py `update_critic` ends with `zero_grad()`).
  - `critic_update=joint` (TRL PPOTrainer, which ms-swift's PPO runs: `PolicyAndValueWrapper` forwards policy and
    value model and one `accelerator.backward(loss)` trains both): the critic's activations are kept in the same
    backward as the policy's, and its gradients exist in the same step.
  - `critic_offload_outside_update=weights,optimizer` (verl critic.model.fsdp_config.param_offload /
    optimizer_offload: fsdp_workers.py CriticWorker `update_critic` loads them for the update and offloads them after;
    `compute_values` loads and offloads the weights): outside its update the critic holds none of them on the GPU.
- The reward model (`reward_model_path`): frozen, its config.json with the one-output head, in the run's 16-bit dtype,
  prepared as the reference copy is (states.frozen_copy): OpenRLHF `_ds_init_eval_model` with `get_ds_eval_config`
  (ZeRO-3 when the run is ZeRO-3, else stage 0: whole on every GPU); TRL PPOTrainer `prepare_deepspeed` (ZeRO-3
  shards it, other stages hold it whole). verl's reward model worker is forced to CPUOffload (fsdp_workers.py
  RewardModelWorker `_build_model`: `cpu_offload=CPUOffload(offload_params=True)`): the review does not give it.
- The reference model: the policy's frozen copy, as for DPO (`ref_model=copy`, states.reference_copy); none for a
  PEFT policy under TRL (the adapter disabled), a whole copy under OpenRLHF (its `initial_model` is a second Actor).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vramfit.planner.params import Arch, Counts

GIB = 2**30


@dataclass(frozen=True)
class Critic:
    setup: object  # the critic's Setup (its config, its one-output head, its batch and checkpointing)
    arch: Arch
    counts: Counts
    states: object  # states.States of the critic, sharded as the policy's

    def resident(self) -> float:
        """Bytes the critic holds outside its own update: its weights and optimizer states (its gradients too where they
        outlive the step: ZeRO-3's flat buffer), its ZeRO-3 persistent buffers; none of what verl offloads between updates."""
        st, away = self.states, self.setup.offload_outside_update
        held = 0.0 if "weights" in away else st.weights + (st.gradients if st.persistent_grads else 0.0)
        held += 0.0 if "optimizer" in away else st.optimizer
        return held + (st.buffers if st.buffers_in_step else 0.0)

    def in_update(self, gradients: float) -> float:
        """Bytes of the critic's states during its forward / backward (`gradients`: as states.gradients_in_forward says)."""
        st = self.states
        return st.weights + gradients + st.optimizer + st.buffers + st.gathered


def critic_setup(setup):
    """The critic's Setup: the policy's engine, sharding, precision, LoRA and quantization over the critic's config.json
    with a one-output head over every position (module docstring); its own micro-batch and checkpointing where given."""
    s = setup
    return s.replace(
        model_config=s.critic_config,
        method=s.method if s.method != "grpo" else ("lora" if s.lora else "full"),
        head="token_cls",
        num_labels=1,
        head_dropout=0.0,  # verl: critic_model_config.classifier_dropout = 0.0; OpenRLHF's value head has none
        trainer="sft",
        ref_model="none",
        fused_lm_head=False,
        grpo_whole_logits=False,
        sequences_per_sample=1,
        sequences_what="",
        use_vllm=False,
        eval_enabled=False,
        resident_frozen=0,
        teacher_config=None,
        critic_config=None,
        reward_config=None,
        micro_batch=s.critic_micro_batch or s.micro_batch,
        gradient_checkpointing=s.gradient_checkpointing if s.critic_gradient_checkpointing is None else s.critic_gradient_checkpointing,
        offload_outside_update=s.critic_offload_outside_update,
        train_projector=False,
        train_vision=False,
        images_per_sample=0,
    )


def critic(setup) -> Critic | None:
    if setup.critic_config is None:
        return None
    from vramfit.planner import params, states, training

    cs = critic_setup(setup)
    arch = training.with_head(params.summary(cs.model_config), cs)
    counts = params.count(arch, cs)
    return Critic(cs, arch, counts, states.gpu_states(cs, counts, arch))


def reward_arch(setup) -> Arch | None:
    if setup.reward_config is None:
        return None
    from vramfit.planner import params, training

    return training.with_head(params.summary(setup.reward_config), _reward_setup(setup))


def _reward_setup(setup):
    return setup.replace(model_config=setup.reward_config, head="token_cls", num_labels=1, lora_r=None, lora_targets=None, method="full")


def reward_weights(setup, rarch: Arch | None) -> float:
    """Bytes per GPU of the frozen reward model, prepared like the policy (states.frozen_copy)."""
    if rarch is None:
        return 0.0
    from vramfit.planner import params, states

    rs = _reward_setup(setup)
    return states.frozen_copy(rs, params.count(rarch, rs))


def reward_host(setup, rarch: Arch | None) -> float:
    if rarch is None:
        return 0.0
    from vramfit.planner import params, states

    rs = _reward_setup(setup)
    return states.frozen_copy_host(rs, params.count(rarch, rs))


def critic_host(c: Critic | None) -> float:
    """Bytes per node of the critic's states in host RAM (its offloaded optimizer, as host.host_ram plans the policy's)."""
    if c is None:
        return 0.0
    from vramfit.planner import host

    parts = host.host_ram(c.setup, c.counts, c.arch, 0.0)
    return parts.get("offloaded_states", 0.0) + parts.get("pinned_buffers", 0.0)


def rollout_phases(setup, arch: Arch, counts: Counts, st) -> dict[str, dict[str, float]]:
    """Transient terms of PPO's experience making at `rollout_micro_batch` sequences (OpenRLHF micro_rollout_batch_size),
    beside every model's resident states (plan.py adds them):

    - `generation` (no vLLM on these GPUs): the actor's transformers `generate` of `max_new_tokens` after a prompt of
      seq_len - max_new_tokens (OpenRLHF 3b116caf trainer/ppo_utils/experience_maker.py `make_experience`:
      `self.actor.generate(**inputs, **generate_kwargs)`; the models are in eval mode, so the KV cache is kept), planned
      as GRPO's generation terms (grpo.generation_peak); a ZeRO-3 actor is gathered a module at a time by its hooks, not
      whole.
    - `experience`: the no-grad forwards of the actor and the reference over the whole sequences
      (`self.actor(sequences, num_actions, attention_mask)`, `self.initial_model(...)`): each model's logits over every
      position in the 16-bit compute dtype and their log_softmax (models/utils.py `log_probs_from_logits`:
      `F.log_softmax(logits, dim=-1)` then `gather`), beside one layer's no-grad working set; the critic's and the reward
      model's forwards (one output per position) hold less."""
    from vramfit.planner import grpo
    from vramfit.planner.activations import nograd_layer_bytes
    from vramfit.planner.training import act_bytes

    s = setup
    n = s.rollout_micro_batch
    if not n or arch.analytic_gap:
        return {}
    a, seq = act_bytes(s), s.seq_len
    new = min(s.max_new_tokens, max(1, seq - 1))
    out = {}
    if not s.use_vllm:
        gs = s.replace(
            method="grpo",
            seq_len=seq - new,
            max_completion_length=new,
            micro_batch=n,
            steps_per_generation=1,
            gradient_accumulation_steps=1,
            ds3_gather_for_generation=False,
        )
        out["generation"] = grpo.generation_peak(gs, arch, counts, st)
    logits = 2 * n * seq * arch.vocab * a  # the logits and their log_softmax
    out["experience"] = {"activations": n * seq * nograd_layer_bytes(arch.text, a, s.attention, seq), "logits": float(logits)}
    return out


def note(setup, c: Critic | None, rarch: Arch | None, reward: float, reference: float) -> str:
    s = setup
    parts = []
    if c is not None:
        where = (
            f"its update a phase of its own (critic_update: its micro-batch {c.setup.micro_batch}, checkpointing "
            f"{'on' if c.setup.gradient_checkpointing else 'off'})"
            if s.critic_update == "separate"
            else "trained in the policy's backward (critic_update=joint: its activations beside the policy's)"
        )
        away = f"; its {' and '.join(s.critic_offload_outside_update)} in host RAM outside its update" if s.critic_offload_outside_update else ""
        parts.append(
            f"a critic ({Path(c.setup.model_config).name} with a one-output value head, {c.counts.total / 1e9:.2f} B parameters, "
            f"{c.counts.trainable / 1e9:.2f} B trained, sharded as the policy: {c.resident() / GIB:.2f} GiB per GPU held "
            f"outside its update){away}; {where}"
        )
    if s.critic_missing:
        parts.append(f"the critic's config was not found ({s.critic_missing})")
    if rarch is not None:
        parts.append(f"a frozen reward model ({Path(s.reward_config).name}, {rarch.total / 1e9:.2f} B parameters: {reward / GIB:.2f} GiB per GPU)")
    if s.reward_missing:
        parts.append(f"the reward model's config was not found ({s.reward_missing})")
    if s.ref_model == "copy":
        parts.append(f"a frozen reference copy of the policy ({reference / GIB:.2f} GiB per GPU)")
    if s.rollout_micro_batch:
        gen = "vLLM" if s.use_vllm else f"transformers generate of {min(s.max_new_tokens, s.seq_len - 1)} tokens (its KV cache)"
        parts.append(
            f"experience making at {s.rollout_micro_batch} sequences: {gen}, then the no-grad forwards with the whole logits and their log_softmax (experience)"
        )
    elif s.trainer == "ppo":
        parts.append("experience making (generation and the no-grad forwards) not planned apart: rollout_micro_batch not given")
    return "PPO: " + "; ".join(parts) if parts else ""
