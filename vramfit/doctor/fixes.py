"""Concrete fixes for a diagnosis, cheapest first, each with a one-line why that quotes the log.

A fix is {"overrides": {...}} (TrainingArguments / GRPOConfig names, or `deepspeed=<shared JSON>`),
{"env": {...}}, or {"deepspeed": {...}} (a dotted edit inside the run's DeepSpeed JSON). Batch changes
keep the global batch: per-device batch down, gradient accumulation up by the same factor.
"""

from __future__ import annotations

import re
from math import gcd

from vramfit.divisors import divisors
from vramfit.doctor import patterns as P
from vramfit.doctor.classify import oom_numbers
from vramfit.doctor.diagnosis import Diagnosis
from vramfit.doctor.scan import Event
from vramfit.doctor.units import gib
from vramfit.libraries import grpo_generation_batch

# The repo's shared DeepSpeed JSONs, named for what they do.
ZERO3 = "deepspeed_configs/zero3.json"
ZERO3_OFFLOAD_OPTIMIZER = "deepspeed_configs/zero3_offload_optimizer.json"
ZERO3_OFFLOAD_ALL = "deepspeed_configs/zero3_offload_optimizer_params.json"
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
PLAIN_PIXELS = 1003520  # 1,280 image tokens for Qwen2.5-VL: the common setting


def _fix(form: str, values: dict, why: str) -> dict:
    return {form: values, "why": why}


class Context:
    """What the fixes are built from: the diagnosis, its root event and the run's settings."""

    def __init__(self, diagnosis: Diagnosis, root: Event, world_size: int | None, per_node: int | None, hint_text: str = ""):
        self.d, self.root, self.s = diagnosis, root, diagnosis.settings
        self.hint_text = hint_text
        self.world, self.per_node = world_size, per_node
        f = diagnosis.figures
        if "requested_gib" in f and "free_gib" in f:  # the short form, for the why of each fix
            self.numbers = f"{gib(f['requested_gib'])} requested, {gib(f['free_gib'])} free"
        elif "requested_gib" in f:
            self.numbers = oom_numbers(root)
        else:
            self.numbers = f"'{root.text[:70]}'"

    def off(self, key: str) -> bool:
        return self.s.get(key) is not True

    def batch_splits(self, reason: str) -> list[dict]:
        """Lower per-device batch, raise accumulation to keep the global batch."""
        per_device = self.s.get("per_device_train_batch_size")
        accumulation = self.s.get("gradient_accumulation_steps", 1)
        shown = "per-device batch"
        if per_device is None and self.training_shapes():
            per_device = self.s["micro_batch_from_shapes"]
            shown = f"micro-batch (from {self.s['micro_batch_evidence']})"
            if "gradient_accumulation_steps" not in self.s:
                shown += ", accumulation not in the log (1 assumed):"
        if per_device == 1:
            return []
        if per_device is None:
            return [
                _fix(
                    "overrides",
                    {"per_device_train_batch_size": 1},
                    f"{reason}; the log does not show the per-device batch: raise gradient_accumulation_steps by the same factor to keep the global batch",
                )
            ]
        smaller = [per_device // 2] if per_device >= 4 and per_device % 2 == 0 else []
        smaller += [1] if per_device > 1 else []
        fixes = []
        for new in smaller:
            new_accumulation = accumulation * per_device // new
            fixes.append(
                _fix(
                    "overrides",
                    {"per_device_train_batch_size": new, "gradient_accumulation_steps": new_accumulation},
                    f"{reason}; {shown} {per_device} x accumulation {accumulation} becomes "
                    f"{new} x {new_accumulation}: same {per_device * accumulation} samples per rank per "
                    f"step, about {per_device // new}x less activation memory",
                )
            )
        return fixes

    def training_shapes(self) -> bool:
        """Whether the micro-batch read from the log's shapes is the training batch: not in evaluation (the
        eval batch) or generation (the sequences in flight)."""
        return "micro_batch_from_shapes" in self.s and self.d.phase not in ("evaluation", "generation") and not self.s.get("num_generations")

    def activations(self) -> list[dict]:
        fixes = []
        if self.off("use_liger_kernel"):
            fixes.append(
                _fix(
                    "overrides",
                    {"use_liger_kernel": True},
                    f"{self.numbers}: Liger's fused linear cross-entropy never materialises the "
                    "logits (sequence x vocabulary), the largest activation of a big-vocabulary LLM",
                )
            )
        if self.off("gradient_checkpointing"):
            fixes.append(
                _fix(
                    "overrides",
                    {"gradient_checkpointing": True},
                    f"{self.numbers}: keeps one activation per layer and recomputes the rest in backward (~30% slower)",
                )
            )
        return fixes

    def zero(self) -> list[dict]:
        """One step up the ZeRO ladder from what the log shows; for an FSDP run (already sharded like ZeRO-3),
        FSDP's own CPU offload."""
        stage, optimizer, params = (self.s.get("zero_stage"), self.s.get("offload_optimizer"), self.s.get("offload_param"))
        if self.s.get("fsdp") and stage is None:
            if self.s.get("fsdp_offload"):
                return []
            return [
                _fix(
                    "overrides",
                    {"fsdp": "full_shard auto_wrap offload"},
                    f"{self.numbers}; the run already shards with FSDP (what ZeRO-3 would do): FSDP's CPU offload "
                    "keeps parameters, gradients and optimizer states in host RAM between uses (accelerate: "
                    "fsdp_offload_params: true); slower, and mind the host RAM it needs",
                )
            ]
        offloaded = ("cpu", "nvme")
        if stage is None or stage < 3:
            shown = f"ZeRO-{stage}" if stage is not None else "without ZeRO-3 (none shown in the log)"
            return [
                _fix(
                    "overrides",
                    {"deepspeed": ZERO3},
                    f"{self.numbers}; {shown} every GPU holds full weights (or full optimizer states): "
                    "ZeRO-3 shards weights, gradients and optimizer states across ranks",
                )
            ]
        if optimizer not in offloaded:
            return [
                _fix(
                    "overrides",
                    {"deepspeed": ZERO3_OFFLOAD_OPTIMIZER},
                    f"{self.numbers}: offloading the optimizer moves fp32 master weights and Adam moments "
                    "(12 of the 16 bytes per parameter) to host RAM; mind the host RAM it needs",
                )
            ]
        if params not in offloaded:
            return [
                _fix(
                    "overrides",
                    {"deepspeed": ZERO3_OFFLOAD_ALL},
                    f"{self.numbers}: with the optimizer already offloaded, offloading parameters too "
                    "leaves only the live layer's weights on the GPU; slow, and host RAM heavy",
                )
            ]
        return []

    def expandable(self, reason: str) -> list[dict]:
        """The allocator setting that lets cached blocks serve the request, in the version the message is from:
        expandable segments from torch 2.1; max_split_size_mb before (1.10-2.0); nothing in 1.0-1.3."""
        raw = self.root.raw
        platform = self.root.extra.get("platform")
        if platform == "xpu":
            return []  # no allocator setting for Intel GPUs in the torch versions these messages come from
        variable = {"rocm": "PYTORCH_HIP_ALLOC_CONF", "npu": "PYTORCH_NPU_ALLOC_CONF"}.get(platform, "PYTORCH_CUDA_ALLOC_CONF")
        if "expandable_segments:true" in str(self.s.get("PYTORCH_CUDA_ALLOC_CONF", "")).lower():
            return []
        if "max_split_size_mb" in str(self.s.get("PYTORCH_CUDA_ALLOC_CONF", "")) and "reserved_total" in raw:
            return []  # already set, and this version has nothing better
        if "reserved_total" in raw:  # torch 1.4-2.0 wording: expandable segments did not exist yet
            return [
                _fix(
                    "env",
                    {variable: "max_split_size_mb:128"},
                    reason + "; this PyTorch (1.x/2.0 message) predates expandable segments: blocks above "
                    "128 MiB are then never split, which keeps large free blocks whole",
                )
            ]
        if "reserved_unallocated" in raw and "cached" in self.root.text:  # torch 1.0-1.3: no allocator settings
            return []
        return [_fix("env", {variable: "expandable_segments:True"}, reason)]


ADAPTER_LOAD = ("load_adapter", "load_peft_weights", "_load_best_model")
ACCUMULATED = ("nested_concat", "_nested_gather", "torch_pad_and_concatenate", "nested_numpify")
LOGITS = (
    "cross_entropy",
    "log_softmax",
    "logsumexp",
    "_get_batch_logps",
    "get_batch_logps",
    "concatenated_forward",
    "selective_log_softmax",
    "loss_function",
    "ForCausalLMLoss",
    "fixed_cross_entropy",
    "lm_head",
)
VISION = ("vision", "visual", "siglip", "clip", "vit", "image_encoder", "patch_embed")
VISION_FUNC = re.compile(r"(?i)(?:^|_)vision|^Vision|visual(?!iz)")


def _evidence(c: Context) -> set[str]:
    """What the frames say the failing allocation was: 'logits' (the loss over sequence x vocabulary),
    'vision' (the image encoder's patches)."""
    found = set()
    for path, func in c.root.frames:
        if func in LOGITS:
            found.add("logits")
        if VISION_FUNC.search(func):  # VisionSdpaAttention_forward, vision_model, visual_forward (compiled copies too)
            found.add("vision")
        low = path.lower()
        model_file = "/models/" in low or "modeling_" in low or "transformers_modules/" in low
        if model_file and any(word in low.rsplit("/", 2)[-1] or word in low.rsplit("/", 2)[-2:][0] for word in VISION):
            found.add("vision")
        elif func == "_prepare_attention_mask" and "_vl" in low:
            found.add("vision")
    return found


def _save(c: Context) -> list[dict]:
    fixes = []
    if c.s.get("zero_stage") == 3:
        fixes.append(
            _fix(
                "deepspeed",
                {"zero_optimization.stage3_gather_16bit_weights_on_model_save": False},
                f"{c.numbers} while saving under ZeRO-3: gathering full 16-bit weights for the save is the "
                "spike; save the ZeRO shards and consolidate offline with zero_to_fp32.py",
            )
        )
    fixes.append(_fix("overrides", {"save_only_model": True}, f"{c.numbers} while saving: skips gathering and writing optimizer state at each save"))
    fixes.append(_fix("overrides", {"save_strategy": "epoch"}, f"{c.numbers} while saving: fewer saves, each still needs the same room"))
    return fixes


def _true_capacity(c: Context) -> list[dict]:
    phase, fixes = c.d.phase, []
    if c.root.extra.get("vllm"):
        return _vllm(c)
    if phase == "checkpoint_save":
        fixes += _save(c)
    elif phase == "model_load" and any(func in ADAPTER_LOAD for _, func in c.root.frames):
        if any(func == "_load_best_model" for _, func in c.root.frames):
            fixes.append(
                _fix(
                    "overrides",
                    {"load_best_model_at_end": False},
                    f"{c.numbers} reloading the best adapter after training: PEFT's load_adapter "
                    "materialises a second copy of the adapter weights on the GPU; load the best "
                    "checkpoint afterwards instead",
                )
            )
        fixes += c.zero()
    elif phase in ("model_load", "optimizer_step"):  # weights and optimizer states, not activations
        fixes += c.zero()
    else:
        seen = _evidence(c)
        where = "inside the vision encoder" if "vision" in seen else ""
        shown = c.s.get("micro_batch_from_shapes", 1) if c.training_shapes() else 1
        if c.s.get("max_pixels") and c.s.get("per_device_train_batch_size", shown) <= 1:
            seen.add("vision")  # a VLM run at one sample per GPU: image tokens are what is left to cut
            where = where or f"in a VLM run at one sample per GPU with max_pixels={c.s['max_pixels']}"
        if "vision" in seen:
            pixels = min(c.s.get("max_pixels") or PLAIN_PIXELS * 2, PLAIN_PIXELS * 2) // 2
            fixes.append(
                _fix(
                    "overrides",
                    {"data.max_pixels": pixels},
                    f"{c.numbers} {where}: the vision encoder's activations (and an eager attention "
                    f"mask) grow with the patches per image, quadratically for attention; "
                    f"max_pixels={pixels} caps an image at {pixels // 784} tokens",
                )
            )
        if "logits" in seen:
            fixes += c.activations()[:1] if c.off("use_liger_kernel") else []
        fixes += c.batch_splits(c.numbers)
        fixes += [fix for fix in c.activations() if fix not in fixes and "gradient_checkpointing" in fix["overrides"]]
        if c.s.get("num_generations") and c.s.get("max_completion_length"):
            fixes.append(_completion(c))
        fixes += [fix for fix in c.activations() if fix not in fixes]
        fixes += c.zero()
    spare = c.d.figures.get("reserved_unallocated_gib", 0)
    if spare >= 0.25:
        fixes += c.expandable(f"{gib(spare)} reserved but unallocated could serve part of the request if segments could grow (no speed cost)")
    return fixes


def _fragmentation(c: Context) -> list[dict]:
    f = c.d.figures
    fixes = c.expandable(
        f"{gib(f['reserved_unallocated_gib'])} reserved but unallocated vs a "
        f"{gib(f.get('requested_gib', 0))} request: expandable segments let the allocator grow "
        "a segment instead of needing one free block (no speed cost)"
    )
    return fixes + c.batch_splits(c.numbers) + c.activations()


def _evaluation_spike(c: Context) -> list[dict]:
    s, step = c.s, c.d.figures.get("step")
    at = f"OOM at step {step}" if step else "OOM"
    accumulated = any(func in ACCUMULATED for _, func in c.root.frames)
    # the allocation that failed is the concatenation of every eval batch's predictions so far: the eval batch does not
    # change that total, moving it off the GPU does - then this fix comes first, else after the eval-batch fixes
    offload = _fix(
        "overrides",
        {"eval_accumulation_steps": 1},
        f"{at} in evaluation, concatenating the predictions gathered so far ({c.numbers}): they are kept on the GPU "
        "for the whole evaluation unless eval_accumulation_steps moves them to the CPU"
        if accumulated
        else f"{at} in evaluation: moves gathered predictions to the CPU after every eval step instead of holding all of them on the GPU",
    )
    fixes = [offload] if accumulated else []
    eval_batch = s.get("per_device_eval_batch_size")
    if eval_batch is None and c.d.phase == "evaluation":
        eval_batch = s.get("micro_batch_from_shapes")
    if (eval_batch or 2) > 1:
        fixes.append(
            _fix(
                "overrides",
                {"per_device_eval_batch_size": 1},
                f"{at} in evaluation ({c.numbers}): eval batch "
                f"{eval_batch or 'unknown'} -> 1" + ("" if "per_device_eval_batch_size" in s or eval_batch is None else f" (from {s['micro_batch_evidence']})"),
            )
        )
    fixes.append(
        _fix(
            "overrides",
            {"prediction_loss_only": True},
            f"{at} in evaluation ({c.numbers}): without it the Trainer keeps every eval batch's logits (sequence x vocabulary) on the GPU",
        )
    )
    if not accumulated:
        fixes.append(offload)
    fixes.append(_fix("overrides", {"eval_strategy": "no"}, f"{at} in evaluation: evaluate after training instead (the ms-swift#1286 workaround)"))
    every = s.get("eval_steps")
    if every:
        fixes.append(
            _fix(
                "overrides",
                {"eval_steps": max(1000, every * 10)},
                f"eval_steps={every} puts an evaluation spike every {every} steps; fewer evaluations fail less often but still fail",
            )
        )
    spare, requested = c.d.figures.get("reserved_unallocated_gib", 0), c.d.figures.get("requested_gib")
    if requested and spare >= requested:
        fixes += c.expandable(f"{gib(spare)} reserved but unallocated exceeds the {gib(requested)} request: expandable segments can reuse it (no speed cost)")
    return fixes


def _completion(c: Context) -> dict:
    length = c.s["max_completion_length"]
    return _fix(
        "overrides",
        {"max_completion_length": max(64, length // 2)},
        f"max_completion_length={length}: the generation KV cache and the loss activations grow with it",
    )


def _generation_rollout(c: Context) -> list[dict]:
    if c.root.extra.get("vllm"):
        return _vllm(c)
    s = c.s
    generations = s.get("num_generations")
    per_device, accumulation = s.get("per_device_train_batch_size"), s.get("gradient_accumulation_steps", 1)
    rollout = f"{c.numbers}; per-device batch {per_device or 'unknown'}, num_generations={generations or 'unknown'}"
    fixes = c.batch_splits(f"generation OOM ({rollout}): fewer sequences in flight per GPU, and the generation batch stays divisible by num_generations")
    if c.off("gradient_checkpointing"):
        fixes.append(
            _fix("overrides", {"gradient_checkpointing": True}, f"{c.numbers}: the policy's activations for all generated sequences are kept otherwise")
        )
    if s.get("max_pixels", 0) > PLAIN_PIXELS:
        fixes.append(
            _fix(
                "overrides",
                {"data.max_pixels": PLAIN_PIXELS},
                f"max_pixels={s['max_pixels']} allows up to {s['max_pixels'] // 784} image tokens per image; {PLAIN_PIXELS} caps it at {PLAIN_PIXELS // 784}",
            )
        )
    if s.get("max_completion_length"):
        fixes.append(_completion(c))
    if generations:
        batch = (per_device or 1) * (c.world or 1) * accumulation
        if c.world:
            smaller = max((g for g in divisors(batch, up_to=generations - 1) if g >= 2), default=None)
        else:
            smaller = generations // 2
        if smaller and smaller >= 2:
            fixes.append(
                _fix(
                    "overrides",
                    {"num_generations": smaller},
                    f"num_generations={generations} completions per prompt; {smaller} keeps the "
                    f"generation batch ({batch}) divisible, changes the GRPO group size",
                )
            )
    return fixes


def _host_ram(c: Context) -> list[dict]:
    """Host-RAM knobs in the order the log points at: what was running when the kill came first."""
    s, fixes, phase = c.s, [], c.d.phase
    ranks = f"{c.per_node} ranks per node" if c.per_node and c.per_node > 1 else "every rank"
    optimizer_init = phase == "model_load" and bool(P.OPTIMIZER_INIT.search(c.hint_text))
    if phase == "checkpoint_save":
        fixes.append(
            _fix(
                "overrides",
                {"save_only_model": True},
                "killed while saving: gathering optimizer state (12 bytes per parameter) into host RAM for the checkpoint is the spike; save the model only",
            )
        )
    elif phase == "model_load" and not optimizer_init:
        fixes.append(
            _fix(
                "overrides",
                {"low_cpu_mem_usage": True},
                f"killed while loading the checkpoint: with {ranks} each materialising the whole model in "
                "host RAM, load shard by shard onto the meta device (from_pretrained(low_cpu_mem_usage=True))",
            )
        )
        if s.get("zero_stage") != 3:
            fixes.append(
                _fix(
                    "overrides",
                    {"deepspeed": ZERO3},
                    "ZeRO-3's zero.Init (the DeepSpeed config given to TrainingArguments before "
                    "from_pretrained) has each rank materialise only its 1/N shard of the weights",
                )
            )
    workers = s.get("dataloader_num_workers")
    if workers != 0 and (c.root.extra.get("dataloader") or (workers or 0) > 0 or (phase == "unknown" and not s.get("uses_deepspeed"))):
        new = 0 if c.root.extra.get("dataloader") or not workers else max(0, workers // 2)
        fixes.append(
            _fix(
                "overrides",
                {"dataloader_num_workers": new},
                f"dataloader_num_workers={workers if workers is not None else 'unknown'}: each worker is "
                "a forked copy of the rank's Python heap (its dataset included), per rank",
            )
        )
    if phase in ("unknown", "forward", "backward", "evaluation") and s.get("dataloader_pin_memory") is not False:
        fixes.append(
            _fix(
                "overrides",
                {"dataloader_pin_memory": False},
                f"'{c.root.text[:60]}': pinned batches are page-locked host RAM the kernel cannot reclaim, one set per worker and rank",
            )
        )
    offload = [w for w in ("param", "optimizer") if s.get(f"offload_{w}") in ("cpu", "nvme")]
    known = "offload_param" in s or "offload_optimizer" in s
    if s.get("uses_deepspeed") or known:
        pinned = [w for w in (offload if known else ["param", "optimizer"]) if s.get(f"offload_{w}_pin_memory", True)]
        shown = "" if known else " (the log does not show the DeepSpeed config; if it offloads)"
        if pinned:
            fixes.append(
                _fix(
                    "deepspeed",
                    {f"zero_optimization.offload_{w}.pin_memory": False for w in pinned},
                    f"rank killed for host RAM{shown}: pinned {' and '.join(pinned)} offload buffers on "
                    f"{ranks} cannot be paged out; unpinned, copies are slower but the kernel can page them",
                )
            )
        if offload or not known:
            which = offload or ["optimizer"]
            fixes.append(
                _fix(
                    "deepspeed",
                    {f"zero_optimization.offload_{w}.device": "nvme" for w in which},
                    f"offloaded {' and '.join(which)} states live in host RAM on {ranks} (the fp32 "
                    "optimizer states alone are 12 bytes per parameter); NVMe offload moves them to "
                    "disk (set nvme_path)",
                )
            )
        if "param" in offload:
            fixes.append(
                _fix(
                    "overrides",
                    {"deepspeed": ZERO3_OFFLOAD_OPTIMIZER},
                    f"parameter offload keeps weights in host RAM for {ranks}; keep parameters on the GPU and offload only the optimizer",
                )
            )
    if c.per_node and c.per_node > 1:
        fixes.append(
            _fix(
                "launch",
                {"--nproc_per_node": c.per_node // 2},
                f"{ranks} share one host's RAM: half as many ranks per node (more nodes) halves what loading and offload hold there",
            )
        )
    if c.root.extra.get("slurm") or "slurmstepd" in c.root.text:
        fixes.insert(
            0,
            _fix(
                "launch",
                {"--mem": "0"},
                "Slurm's oom-kill: the job's cgroup limit killed it, not the node's RAM; ask Slurm for "
                "the node's whole memory (sbatch --mem=0) or what the run needs",
            ),
        )
    if phase == "model_load" and optimizer_init and not fixes:
        fixes.append(_fix("overrides", {"deepspeed": ZERO3}, "killed while building optimizer states: sharding them over more ranks lowers each share"))
    if not fixes:
        fixes.append(_fix("overrides", {"dataloader_num_workers": 0}, "killed for host RAM: DataLoader workers are the usual extra copies of a rank's heap"))
    said = f"'{c.root.text[:70]}'"
    for fix in fixes:  # every why quotes what it read
        if not any(ch.isdigit() for ch in fix["why"]) and "'" not in fix["why"]:
            fix["why"] = f"{said}: {fix['why']}"
    return fixes


def _shared_memory(c: Context) -> list[dict]:
    workers = c.s.get("dataloader_num_workers")
    fewer = (
        []
        if workers == 0
        else [
            _fix(
                "overrides",
                {"dataloader_num_workers": max(0, (workers or 2) // 2)},
                f"dataloader_num_workers={workers if workers is not None else 'unknown'}: fewer workers hold fewer "
                "batches in shared memory at once (0 uses none, slower input)",
            )
        ]
    )
    return [
        _fix(
            "launch",
            {"--shm-size": "16g"},
            f"'{c.root.text[:70]}': /dev/shm (docker's default is 64 MB) is too small for the batches DataLoader "
            "workers pass to the rank; give the container more (docker run --shm-size=16g, or --ipc=host; "
            "Kubernetes: an emptyDir with medium: Memory at /dev/shm)",
        ),
        *fewer,
        _fix(
            "env",
            {"NCCL_SHM_DISABLE": "1"},
            f"'{c.root.text[:60]}': when it is NCCL's segment that fails, NCCL can use P2P/sockets instead of /dev/shm (slower between GPUs without NVLink)",
        ),
    ]


def _vllm(c: Context) -> list[dict]:
    current = c.s.get("vllm_gpu_memory_utilization")
    if not P.VLLM_KV.search(c.root.text):
        # an allocation inside vLLM failed (its pool, its weights, its CUDA graphs): the GPU was full, most often
        # because the trainer shares it; vLLM asking for less is the fix (TRL's default went from 0.9 to 0.3)
        target = round(max(0.3, (current or 0.9) - 0.2), 2)
        return [
            _fix(
                "overrides",
                {"vllm_gpu_memory_utilization": target},
                f"'{c.root.text[:70]}': an allocation inside vLLM failed with the GPU full; vLLM reserves "
                f"gpu_memory_utilization x GPU up front, so {target} leaves room for what shares the GPU with it",
            ),
            _fix("overrides", {"vllm_max_model_len": 4096}, "a shorter max_model_len needs fewer KV blocks to serve one sequence"),
        ]
    target = round(min(0.95, (current or 0.7) + 0.2), 2)
    return [
        _fix(
            "overrides",
            {"vllm_gpu_memory_utilization": target},
            f"'{c.root.text[:70]}': vLLM keeps gpu_memory_utilization x GPU for weights + KV cache; after the "
            f"weights nothing was left. {target} gives the cache room (when training shares the GPU, the trainer "
            "gets less)",
        ),
        _fix("overrides", {"vllm_max_model_len": 4096}, "a shorter max_model_len needs fewer KV blocks to serve one sequence"),
    ]


def _not_memory(c: Context) -> list[dict]:
    return []


def _collective_mismatch(c: Context) -> list[dict]:
    what = f"'{c.root.text[:70]}'"
    return [
        _fix(
            "env",
            {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
            f"{what}: torch then checks every collective's op and tensor shapes across ranks and names the "
            "first one that differs (slower; for the diagnosis run only)",
        ),
        _fix("env", {"NCCL_DEBUG": "INFO"}, f"{what}: logs which collective each rank was in when it failed"),
    ]


def _communication(c: Context) -> list[dict]:
    f, s = c.d.figures, c.s
    timeout_s = f["timeout_ms"] // 1000 if "timeout_ms" in f else s.get("ddp_timeout", 1800)
    during = f" during {c.d.phase.replace('_', ' ')}" if c.d.phase != "unknown" else ""
    if "timeout_ms" in f:
        what = f"{c.root.extra['op']} (SeqNum={c.root.extra['seq']})" + (f" ran {f['ran_for_ms']} ms" if "ran_for_ms" in f else " timed out")
    else:
        what = f"'{c.root.text[:70]}'"
    longer = _fix(
        "overrides",
        {"ddp_timeout": max(3600, 2 * timeout_s)},
        f"{what} against a {timeout_s} s timeout{during}: a rank that is slow (saving, evaluating, loading) rather than dead gets room",
    )
    debug = [
        _fix("env", {"NCCL_DEBUG": "INFO"}, f"{what}: logs which rank and peer the stalled collective waits on"),
        _fix(
            "env",
            {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
            f"{what}: tears every rank down as soon as one collective fails instead of hanging until the timeout",
        ),
    ]
    if c.root.extra.get("backend") == "gloo":
        # gloo's timeout is the process group's (ddp_timeout); NCCL's settings do nothing for it. The
        # rank that stopped is the one whose own log does not show this error.
        if "gloo_timeout_ms" in f:
            timeout_s = f["gloo_timeout_ms"] // 1000
            after = f"the process group's {timeout_s} s timeout"
        elif "ddp_timeout" in s:
            after = f"the process group's {timeout_s} s timeout (ddp_timeout)"
        else:
            after = "the process group's timeout (ddp_timeout; 1800 s unless set)"
        longer = _fix(
            "overrides",
            {"ddp_timeout": max(3600, 2 * timeout_s)},
            f"{what}: gloo gave up waiting for a peer after {after}{during}; "
            "if that peer was only slow (saving, evaluating, loading) it gets room - if it hung, its own log "
            "(the rank without this error) says where",
        )
        return [longer]
    return [longer, *debug] if "timeout_ms" in f else [*debug, longer]


def _batch_mismatch(c: Context) -> list[dict]:
    f = c.d.figures
    total, micro, accumulation, world = (f["train_batch_size"], f["micro_batch_per_gpu"], f["gradient_accumulation_steps"], f["world_size"])
    equation = f"train_batch_size {total} != {micro} x {accumulation} x {world} = {micro * accumulation * world}"
    fixes = [
        _fix(
            "deepspeed",
            {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"},
            f"{equation}: 'auto' lets the Hugging Face integration fill them from TrainingArguments",
        )
    ]
    if total % (micro * world) == 0:
        accumulation_needed = total // (micro * world)
        fixes.append(
            _fix(
                "overrides",
                {"gradient_accumulation_steps": accumulation_needed},
                f"{equation}: {micro} x {accumulation_needed} x {world} = {total} keeps the global batch",
            )
        )
    else:
        fixes.append(
            _fix(
                "deepspeed",
                {"train_batch_size": micro * accumulation * world},
                f"{equation}: {total} is not a multiple of micro batch x world size ({micro} x {world}); use the batch the ranks actually run",
            )
        )
    return fixes


def _value(text: str):
    return int(text) if text.isdigit() else text


def _config_mismatch(c: Context) -> list[dict]:
    items = c.root.extra.get("items", [])
    if not items:
        return []
    listed = "; ".join(f"ds {k}={v} vs hf {hk}={hv}" for k, v, hk, hv in items)
    return [
        _fix("deepspeed", {k: "auto" for k, _, _, _ in items}, f"{listed}: 'auto' takes the TrainingArguments values (transformers' own advice)"),
        _fix("overrides", {hk: _value(v) for _, v, hk, _ in items}, f"{listed}: or make TrainingArguments match the JSON"),
    ]


def _grpo(c: Context) -> list[dict]:
    f, s = c.d.figures, c.s
    generations = f.get("num_generations", s.get("num_generations"))
    if generations is None or generations < 2:
        return [_fix("overrides", {"num_generations": 2}, "GRPO needs at least 2 completions per prompt")]
    if "generation_batch_size" in f and "global_batch_size" in f:
        batch, global_batch = f["generation_batch_size"], f["global_batch_size"]
        fixed = -(-batch // global_batch) * global_batch
        return [_fix("overrides", {"generation_batch_size": fixed}, f"generation_batch_size {batch} is not a multiple of the global batch {global_batch}")]
    if "generation_batch_size" in f:
        batch = f["generation_batch_size"]
        fixes = []
        accumulation = s.get("gradient_accumulation_steps")
        if accumulation and s.get("generation_batch_size") is None and batch % accumulation == 0:
            factor = generations // gcd(batch, generations)
            per_step = batch // accumulation  # per-device x processes
            fixes.append(
                _fix(
                    "overrides",
                    {"gradient_accumulation_steps": accumulation * factor},
                    f"generation_batch_size {batch} (per-device x processes x accumulation) is not "
                    f"divisible by num_generations={generations}; accumulation {accumulation} -> "
                    f"{accumulation * factor} makes it "
                    f"{grpo_generation_batch(per_step, 1, accumulation * factor)}",
                )
            )
        lcm = batch * generations // gcd(batch, generations)
        fixes.append(
            _fix(
                "overrides",
                {"generation_batch_size": lcm},
                f"generation_batch_size {batch} is not divisible by num_generations={generations}; "
                f"{lcm} is the smallest that is, and stays a multiple of the global batch",
            )
        )
        fixes += _fewer_generations(batch, generations)
        return fixes
    processes, per_device, split = f["num_processes"], f["per_device_batch_size"], c.root.extra["split"]
    batch = processes * per_device
    key = f"per_device_{split}_batch_size"
    new_per_device = next(p for p in range(per_device + 1, per_device + generations + 1) if processes * p % generations == 0)
    fixes = _fewer_generations(batch, generations, c.root.extra.get("valid"), c.root.extra.get("generations_key", "num_generations"))
    fixes.append(
        _fix(
            "overrides",
            {key: new_per_device},
            f"global {split} batch {processes} x {per_device} = {batch} is not divisible by "
            f"num_generations={generations}; {processes} x {new_per_device} = "
            f"{processes * new_per_device} is",
        )
    )
    return fixes


def _fewer_generations(batch: int, generations: int, valid: list[int] | None = None, key: str = "num_generations") -> list[dict]:
    valid = valid or [g for g in divisors(batch) if g >= 2]
    smaller = max((g for g in valid if g < generations), default=None)
    if not smaller:
        return []
    return [_fix("overrides", {key: smaller}, f"a batch of {batch} completions divides into groups of {valid}; {smaller} is the largest below {generations}")]


def _checkpointing(c: Context) -> list[dict]:
    return [
        _fix(
            "overrides",
            {"gradient_checkpointing_kwargs": {"use_reentrant": False}},
            f"'{c.root.text[:90]}' is what reentrant checkpointing gives with ZeRO-3 partitioned weights or "
            "frozen inputs; the non-reentrant implementation tracks them",
        ),
        _fix(
            "overrides", {"gradient_checkpointing": False}, f"'{c.root.text[:60]}': or turn checkpointing off, at the cost of keeping every layer's activations"
        ),
    ]


BY_CAUSE = {
    "true_capacity": _true_capacity,
    "fragmentation": _fragmentation,
    "evaluation_spike": _evaluation_spike,
    "generation_rollout": _generation_rollout,
    "host_ram": _host_ram,
    "communication": _communication,
    "shared_memory": _shared_memory,
    "not_memory": _not_memory,
}
BY_KIND = {
    "batch_mismatch": _batch_mismatch,
    "config_mismatch": _config_mismatch,
    "grpo_divisibility": _grpo,
    "checkpointing_error": _checkpointing,
    "collective_mismatch": _collective_mismatch,
}


CUDA_CONTEXT_GIB = 1.0  # a process holding no more than this holds a bare CUDA context (0.3-0.8 GiB): another
# rank of the same job that touched this GPU, not a workload to move away


def _shared_gpu(c: Context) -> list[dict]:
    """Other processes hold a real share of the GPU, more than the failed request: free it first."""
    f = c.d.figures
    working = [(pid, size) for pid, size in c.root.extra.get("other_processes", ()) if size > CUDA_CONTEXT_GIB]
    others, total = sum(size for _, size in working), f.get("total_gib")
    if c.d.kind != "cuda_oom" or not total or others < max(f.get("requested_gib", 0), 0.05 * total):
        return []
    listed = ", ".join(f"process {pid} {gib(size)}" for pid, size in working)
    gpu = f" on GPU {f['gpu']}" if "gpu" in f else ""
    return [
        _fix(
            "env",
            {"CUDA_VISIBLE_DEVICES": "<GPUs no other process uses>"},
            f"other processes hold {gib(others)} of the {gib(total)}{gpu} ({listed}), more than the "
            f"{gib(f.get('requested_gib', 0))} request: stop them (nvidia-smi lists them) or run on GPUs they do not use",
        )
    ]


def fixes_for(diagnosis: Diagnosis, root: Event, world_size: int | None, per_node: int | None, hint_text: str = "") -> list[dict]:
    context = Context(diagnosis, root, world_size, per_node, hint_text)
    build = BY_KIND.get(diagnosis.kind) or BY_CAUSE[diagnosis.cause]
    return _shared_gpu(context) + build(context)
