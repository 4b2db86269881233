"""The recipe format: a strict schema for `recipes/<name>/recipe.yaml` and `key=value` overrides.

The schema is structural only (pydantic, unknown keys rejected with a "did you mean"); the training
arguments are checked against the Hugging Face / TRL dataclasses themselves in `checks.training_args`,
and the cross-field rules (batch arithmetic, precision vs GPU, ...) live in `checks`.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vramfit.hardware import CATALOGUE
from vramfit.paths import repo_root
from vramfit.problems import ConfigError, Problems, did_you_mean

GPUName = Literal[tuple(CATALOGUE)]  # type: ignore[valid-type]
# <model>[-<method>]-[<count>x]<hardware>[-<variant>], hardware from the catalogue.
NAME_RE = re.compile(  # \A...\Z: "$" would also match before a trailing newline
    r"\A(?P<model>[a-z0-9][a-z0-9.]*(?:-[a-z0-9.]+)*?)-(?:(?P<count>\d+)x)?(?P<gpu>"
    + "|".join(re.escape(g) for g in sorted(CATALOGUE, key=len, reverse=True))
    + r")(?:-(?P<variant>[a-z0-9]+))?\Z"
)
ENV_KEY = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _booleans_are_not_numbers(cls, value: Any, info) -> Any:
        """pydantic's lax mode reads `gpus_per_node: true` as 1; a boolean where a number belongs is a mistake."""
        if isinstance(value, bool):
            annotation = cls.model_fields[info.field_name].annotation
            kinds = set(getattr(annotation, "__args__", ())) or {annotation}
            if bool not in kinds and kinds & {int, float}:
                raise ValueError(f"{value} is a boolean where a number belongs")
        return value


class LoRA(Strict):
    r: int = Field(gt=0)
    alpha: int = Field(gt=0)
    dropout: float = Field(default=0.05, ge=0, lt=1)
    # A list of module-name suffixes, "all-linear", or one PEFT regex over full module names.
    target_modules: Union[list[str], str]
    # PEFT LoraConfig.target_parameters: parameters (fused MoE experts' experts.gate_up_proj / experts.down_proj) adapted
    # through lora.ParamWrapper; PEFT matches a name when a parameter's full name equals it or ends in ".<name>"
    target_parameters: list[str] = []
    modules_to_save: list[str] = []


class Quantization(Strict):
    bits: Literal[4, 8] = 4
    quant_type: Literal["nf4", "fp4"] = "nf4"
    double_quant: bool = True
    compute_dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    # bitsandbytes packs 4-bit weights into this dtype; ZeRO-3 can only shard them when it is a
    # float type matching the compute dtype (uint8 storage keeps every rank holding full weights).
    quant_storage: Literal["uint8", "bfloat16", "float16", "float32"] = "uint8"
    # bitsandbytes (load_in_4bit / load_in_8bit), or a GPTQ / AWQ int4 checkpoint (group 128).
    method: Literal["bitsandbytes", "gptq", "awq"] = "bitsandbytes"


class Trainable(Strict):
    llm: bool = True
    projector: bool = True
    # false: frozen; true: all layers; an integer N: layers N.. trained, 0..N-1 frozen.
    vision_tower: Union[bool, int] = False


class Model(Strict):
    id: str = Field(min_length=1)
    architecture: str = Field(min_length=1)
    config: str = Field(min_length=1)
    trust_remote_code: bool = False
    stand_in: Union[str, None] = None
    attn_implementation: Literal["flash_attention_2", "sdpa", "eager"] = "sdpa"
    train: Trainable = Trainable()
    lora: Union[LoRA, None] = None
    quantization: Union[Quantization, None] = None


class Hardware(Strict):
    gpu: GPUName  # type: ignore[valid-type]
    gpus_per_node: int = Field(ge=1, le=16)
    nodes: int = Field(default=1, ge=1, le=1024)
    host_ram_gib: float = Field(gt=0, le=65536)


class Data(Strict):
    format: Literal["llava_json", "rec_jsonl", "chat_jsonl"]
    train_file: str = Field(min_length=1)
    eval_file: Union[str, None] = None
    image_folder: Union[str, None] = None
    # Tokens per sample after truncation, text and image tokens together (upstream model_max_length).
    max_length: int = Field(gt=0, le=1_048_576)
    images_per_sample: int = Field(default=1, ge=0, le=64)
    # Qwen2-VL family: pixels per image (one LLM token per 28x28 px). MiniCPM-V family: slices.
    max_pixels: Union[int, None] = Field(default=None, gt=0)
    max_slice_nums: Union[int, None] = Field(default=None, ge=1, le=64)


class Knobs(Strict):
    """What the run does that the Hugging Face / TRL argument classes of `training:` cannot say
    (TRL SFTConfig, torchtune, axolotl names; vramfit/planner/knobs.py models each). `training:`
    keeps TrainingArguments / GRPOConfig keys: fsdp, fsdp_config, optim, use_vllm, vllm_mode, ..."""

    packing: bool = False  # TRL SFTConfig.packing (BFD: padding-free sequences filled to data.max_length)
    padding_free: bool = False  # TRL SFTConfig.padding_free
    typical_length: Union[int, None] = Field(default=None, gt=0, le=1_048_576)  # a typical sample's tokens
    activation_offloading: bool = False  # TRL SFTConfig.activation_offloading / axolotl
    loss_kernel: Literal["torch", "liger", "cce", "chunked"] = "torch"  # liger also via training.use_liger_kernel
    # loss_kernel chunked: its chunks (torchtune / axolotl num_output_chunks, default 8), and whether the per-chunk
    # cross-entropy runs under torch.compile (axolotl's chunked_cross_entropy always compiles it)
    loss_chunks: int = Field(default=8, ge=1, le=1024)
    compile_loss: bool = False
    # Mamba / gated-delta-rule / short-convolution layers: the kernels of mamba-ssm, causal-conv1d and
    # flash-linear-attention (fused), or transformers' torch fallback (torch); planner/mixer_kernels.py
    mixer_kernels: Literal["fused", "torch"] = "fused"
    # the output layer: the causal LM's lm_head, or the `score` head of AutoModelForSequenceClassification (reward
    # models) / AutoModelForTokenClassification (process reward models), with num_labels outputs; embedding (the
    # last token's hidden state, no output layer) or generative_reranker (lm_head's yes / no rows only): ms-swift's
    # task types (vramfit/planner/heads.py)
    head: Literal["lm", "seq_cls", "token_cls", "embedding", "generative_reranker"] = "lm"
    # PEFT's (SEQ_CLS, TOKEN_CLS) or ms-swift's (embedding, reranker, generative_reranker, seq_cls) task type naming the head
    task_type: Union[str, None] = None
    num_labels: Union[int, None] = Field(default=None, ge=1, le=1_000_000)  # None: the config's, else transformers' 2
    # sequences of one embedding / reranker sample in the forward: its hard negatives (embedding default 0; reranker 7,
    # ms-swift MAX_NEGATIVE_SAMPLES) and positives (reranker: MAX_POSITIVE_SAMPLES, default 1)
    negatives: Union[int, None] = Field(default=None, ge=0, le=100_000)
    positives: Union[int, None] = Field(default=None, ge=1, le=100_000)
    optimizer_in_bwd: bool = False  # torchtune
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"  # from_pretrained dtype
    lora_vision_tower: bool = True  # PEFT all-linear includes the vision tower; false: the LLM only
    # max_length cuts a sample before its image placeholders become the images' tokens (ms-swift 2.x, Qwen2-VL)
    images_past_max_length: bool = False
    # InternVL: tiles per image at most, a thumbnail beside them (VLM-R1's --max_anyres_num: its InternVL module's
    # dynamic_preprocess(max_num=..., use_thumbnail=True)); None: one tile
    max_tiles: Union[int, None] = Field(default=None, ge=1, le=64)
    # an Omni checkpoint's speech output (Qwen2.5-Omni's Talker and vocoder) loaded beside the model, frozen, unused
    audio_output: bool = False
    bitsandbytes_version: Union[str, None] = None  # the run's bitsandbytes (< 0.43.2 keeps 4-bit linears' inputs)
    accelerate_version: Union[str, None] = None  # the run's accelerate (< 1.11.0: FSDP2 reduce-scatters every micro-batch)
    torch_version: Union[str, None] = None  # the run's torch (< 2.0: zero_grad keeps the gradients allocated)
    # FSDP1 (use_orig_params) with LoRA inside its layer's unit, as Lightning Fabric wraps litgpt's blocks: the
    # frozen weights get gradients; "separate": PEFT's own wrap policy (transformers' Trainer) or FSDP2
    fsdp_lora_units: Literal["separate", "layer"] = "separate"
    # the training loop holds the last step's output into the next forward (LitGPT's fit: `logits = model(...)`)
    keeps_previous_output: bool = False
    # the quantized base's lm_head quantized too (Lightning's BitsandbytesPrecision, LitGPT)
    quantize_lm_head: bool = False
    # the fused 3-D MoE expert tensors quantized with the base (axolotl quantize_moe_experts)
    quantize_moe_experts: bool = False
    # GRPO's log-probs from the whole logits (verl), not TRL's fused head
    grpo_whole_logits: bool = False
    # model states moved to host RAM outside the update (verl param_offload / optimizer_offload): "weights,optimizer"
    offload_outside_update: Union[str, None] = None
    # sequence parallelism (ms-swift --sequence_parallel_size: Ulysses / ring attention): each GPU holds
    # max_length / N tokens of every sample of its micro-batch; planner/knobs.py sequence_parallel_fields
    sequence_parallel: int = Field(default=1, ge=1, le=1024)
    # ms-swift CELOSS_PARALLEL_SIZE (with sequence parallelism): its ChunkedCrossEntropyLoss over chunks of N tokens
    celoss_parallel_size: int = Field(default=0, ge=0, le=1_048_576)
    # GPUs one training process spreads its model over with device_map="auto" / "balanced" (naive layer-wise model
    # parallelism: ms-swift without NPROC_PER_NODE, a plain script's from_pretrained(device_map="auto")): device_map.py
    device_map_gpus: int = Field(default=1, ge=1, le=64)
    # how accelerate fills those GPUs: "balanced" (device_map "auto" / "balanced") or "sequential" (GPU 0 first), and the
    # max_memory cap from_pretrained gives each GPU (GiB), where the script passes one: device_map.py
    device_map_policy: Literal["balanced", "sequential"] = "balanced"
    device_map_max_memory_gib: Union[float, None] = Field(default=None, gt=0, le=4096)
    # full fine-tuning of only the weights these regexes name (re.match over named_parameters; axolotl
    # unfrozen_parameters, a Spectrum YAML), the rest frozen
    unfrozen_parameters: Union[list[str], None] = None
    # the TRL trainer the run uses (knobs.trainer_fields): DPO / ORPO / CPO / reward collate chosen + rejected (2 x the
    # micro-batch in one forward); DPO / KTO keep a frozen reference model ("copy") unless the policy is a PEFT model or
    # the reference log-probs are precomputed (None: as TRL decides); DPO's fused LM head (None: on for trainer=dpo)
    trainer: Literal["sft", "dpo", "orpo", "cpo", "reward", "kto", "gkd", "ppo"] = "sft"
    ref_model: Union[Literal["copy", "none", "precomputed"], None] = None
    fused_lm_head: Union[bool, None] = None
    # GKD (trainer: gkd; vramfit/planner/gkd.py): the frozen teacher (a config.json beside the recipe or a model id;
    # None: TRL's teacher is the policy's model again, ms-swift distils from the policy), or a teacher served elsewhere;
    # TRL GKDConfig's lmbda / beta / max_new_tokens / seq_kd (None: GKDConfig's defaults); whose loss runs
    teacher_model: Union[str, None] = None
    teacher_model_server: Union[str, None] = None
    lmbda: Union[float, None] = Field(default=None, ge=0, le=1)
    gkd_beta: Union[float, None] = Field(default=None, ge=0, le=1)
    max_new_tokens: Union[int, None] = Field(default=None, ge=1)
    seq_kd: bool = False
    gkd_loss: Literal["trl", "swift"] = "trl"
    teacher_deepspeed: Union[str, None] = None  # ms-swift --teacher_deepspeed preset (zero3, zero3_offload, ...)
    offload_teacher_model: bool = False  # ms-swift --offload_teacher_model
    # ms-swift GKD's rollout engine (--use_vllm with --vllm_mode, --vllm_gpu_memory_utilization, --sleep_level > 0)
    gkd_vllm: Union[Literal["colocate", "server"], None] = None
    gkd_vllm_gpu_memory_utilization: Union[float, None] = Field(default=None, gt=0, le=1)
    gkd_vllm_sleep: bool = False
    # PPO (trainer: ppo, or method grpo with a critic: verl's gae; vramfit/planner/ppo.py): the critic, a value model
    # trained beside the policy (a config.json or a model id; None: the reward model's, else the policy's, for trainer ppo;
    # "none": no critic), the frozen reward model (None: rewards from a function or a server), whether the critic trains
    # apart (OpenRLHF, verl) or in the policy's backward (TRL's PPOTrainer), its micro-batch and checkpointing (None: the
    # policy's), and what verl keeps in host RAM outside its update (critic param_offload / optimizer_offload)
    critic_model: Union[str, None] = None
    reward_model_path: Union[str, None] = None
    critic_update: Union[Literal["separate", "joint"], None] = None
    critic_micro_batch: Union[int, None] = Field(default=None, ge=1)
    critic_gradient_checkpointing: Union[bool, None] = None
    critic_offload_outside_update: Union[str, None] = None
    # PPO's rollout engine on these GPUs (OpenRLHF --colocate_all_models: its vLLM engines at vllm_gpu_memory_utilization,
    # asleep outside generation with --vllm_enable_sleep)
    rollout_vllm: Union[Literal["colocate", "server"], None] = None
    rollout_vllm_gpu_memory_utilization: Union[float, None] = Field(default=None, gt=0, le=1)
    rollout_vllm_sleep: bool = False
    # PPO's experience making: sequences per generate / no-grad forward (OpenRLHF micro_rollout_batch_size); the tokens it
    # generates are max_new_tokens of data.max_length
    rollout_micro_batch: Union[int, None] = Field(default=None, ge=1)


class Recipe(Strict):
    name: str
    summary: str = Field(min_length=1)
    method: Literal["full", "lora", "qlora", "grpo"]
    model: Model
    hardware: Hardware
    launcher: Literal["torchrun", "deepspeed", "accelerate"]
    deepspeed: str = Field(min_length=1)
    global_batch_size: int = Field(gt=0)
    training: dict[str, Any]
    data: Data
    env: dict[str, str] = {}
    planner: Knobs = Knobs()

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_are_text(cls, value: Any) -> Any:
        """`env.NCCL_DEBUG=1` reads as the number 1; environment values are text."""
        if isinstance(value, dict):
            return {k: (str(v).lower() if isinstance(v, bool) else str(v)) if isinstance(v, (int, float, bool)) else v for k, v in value.items()}
        return value

    @field_validator("env")
    @classmethod
    def _env_keys_are_names(cls, value: dict[str, str]) -> dict[str, str]:
        """A key a shell could not export (`A;rm -rf ~`) would run as code in a pasted `export` line."""
        bad = [k for k in value if not ENV_KEY.match(k)]
        if bad:
            raise ValueError(f"environment variable names must match [A-Za-z_][A-Za-z0-9_]*, got {', '.join(repr(k) for k in bad[:3])}")
        return value

    # Filled by `load`, not part of the file.
    source: Path = Field(default=Path("."), exclude=True)

    @property
    def folder(self) -> Path:
        return self.source.parent

    @property
    def world_size(self) -> int:
        return self.hardware.gpus_per_node * self.hardware.nodes

    def path(self, relative: str) -> Path:
        """A path named in the recipe, resolved against the repository root (a symlink loop or an
        over-long path is left unresolved: the input layer names it when the file is read)."""
        joined = repo_root(self.folder) / relative
        try:
            return joined.resolve()
        except (OSError, RuntimeError):
            return joined

    def resolved_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


TOP_LEVEL = [name for name in Recipe.model_fields if name != "source"]


def _describe_error(err: dict[str, Any], file: str, raw: Any) -> tuple[str, str, str]:
    loc = [str(x) for x in err["loc"]]
    key = ".".join(loc)
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        parent = _submodel(loc[:-1])
        fields = [f for f in parent.model_fields if f != "source"] if parent else []
        return key, f"unknown key '{loc[-1]}'.{did_you_mean(loc[-1], fields)}", (f"remove it or use one of: {', '.join(fields)}.")
    if kind == "missing":
        return key, "required key is missing", f"add '{loc[-1]}:' to the file."
    if kind == "literal_error":
        return key, f"{value!r} is not allowed ({err['msg']})", "use one of the listed values."
    if kind in ("int_parsing", "float_parsing", "int_type", "float_type", "bool_parsing", "bool_type", "int_from_float"):
        return key, f"{value!r} is not a {kind.split('_')[0]} ({err['msg']})", (f"write a plain {kind.split('_')[0]} without quotes.")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return key, f"{value!r} is out of range ({err['msg']})", "use a value in range."
    return key, f"{err['msg']} (got {value!r})"[:300], "correct the value."


def _submodel(loc: list[str]):
    model: Any = Recipe
    for part in loc:
        ann = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if ann is None:
            return None
        candidates = [ann.annotation, *getattr(ann.annotation, "__args__", ())]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return None
    return model


def parse_value(text: str) -> Any:
    """A command-line value read as YAML (2 -> int, true -> bool, [a,b] -> list), else kept as text."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) or (value is None and text.strip() not in ("null", "~", "")):
        return text  # a string stays exactly as typed (YAML would fold newlines and strip quotes)
    return value


def apply_overrides(data: dict[str, Any], overrides: list[str], training_fields, file: str) -> Problems:
    """Apply `key=value` overrides in place. Bare names resolve to `training.<name>`."""
    problems = Problems()
    for item in overrides:
        if "=" not in item:
            problems.add(file, item, "an override must be key=value", f"write e.g. per_device_train_batch_size=2, not '{item}'.")
            continue
        key, text = item.split("=", 1)
        key = key.strip()
        if len(key) > 200:  # no recipe key is this long; the message shows its start only
            problems.add(file, key[:40] + "...", f"override key of {len(key):,} characters is not a recipe key", "use names like training.learning_rate=1e-5.")
            continue
        if not key or not all(part.isidentifier() for part in key.split(".")):
            problems.add(file, key or "<empty>", f"override key {key!r} is not a dotted name", "use names like training.learning_rate=1e-5.")
            continue
        parts = key.split(".")
        if parts[0] not in TOP_LEVEL:
            if len(parts) == 1 and parts[0] in training_fields:
                parts = ["training", parts[0]]
            else:
                hint = did_you_mean(parts[0], [*TOP_LEVEL, *training_fields])
                problems.add(
                    file,
                    key,
                    f"unknown override key '{key}'.{hint}",
                    "use a dotted path into the recipe (hardware.gpus_per_node=4) or a Hugging Face argument name (per_device_train_batch_size=2).",
                )
                continue
        node = data
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {} if node.get(part) is None else node[part]
            if not isinstance(node[part], dict):
                problems.add(file, key, f"'{part}' is not a section", "override a leaf key.")
                break
            node = node[part]
        else:
            node[parts[-1]] = parse_value(text)
    return problems


def _nul_strings(node: Any, prefix: str = ""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _nul_strings(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _nul_strings(v, f"{prefix}[{i}]")
    elif isinstance(node, str) and "\x00" in node:
        yield prefix, node


def read_yaml(path: Path) -> tuple[Any, Problems]:
    """The recipe file through the one input layer (vramfit.inputs): a bounded, strict, duplicate-free read."""
    from vramfit import inputs

    problems = Problems()
    try:
        data = inputs.load_yaml(path, "recipe")
    except ConfigError as error:
        problems.extend(error.problems)
        return None, problems
    if not isinstance(data, dict):
        problems.add(str(path), "", f"must be a mapping of keys, got {type(data).__name__}", "start from recipes/<name>/recipe.yaml of an existing recipe.")
        return None, problems
    return data, problems


def load(path: Path, overrides: list[str] = (), training_fields=None) -> Recipe:
    """Read, override and schema-validate a recipe; raise ConfigError with every problem found."""
    path = Path(path)
    try:
        if path.is_dir():
            path = path / "recipe.yaml"
    except OSError:
        pass  # a path too long or a symlink loop: read_yaml names it
    data, problems = read_yaml(path)
    if data is None:
        raise ConfigError(problems)
    data = copy.deepcopy(data)
    if overrides:
        overrides = list(overrides)
        for item in [o for o in overrides if "\x00" in o]:
            problems.add(str(path), item.split("=", 1)[0].replace("\x00", "\\x00"), "contains a NUL byte", "remove it.")
            overrides.remove(item)
        if training_fields is None:
            from vramfit.libraries import argument_names  # cached per library versions; no checks import (no cycle)

            training_fields = argument_names(data.get("method"))
        problems.extend(apply_overrides(data, list(overrides), training_fields, str(path)))
    for key, _value in _nul_strings(data):
        problems.add(str(path), key, "contains a NUL byte, which no path or argument can carry", "remove it.")
    if problems:
        raise ConfigError(problems)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            key, what, fix = _describe_error(err, str(path), data)
            problems.add(str(path), key, what, fix)
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    recipe.source = path.resolve()
    return recipe
