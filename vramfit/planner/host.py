"""Host RAM per node: the part of a run that lives outside the GPUs.

- A base per rank process: 2.96 GB, the CPU RAM the peft README reports for a single-GPU training
  loop with nothing offloaded (T0_3B: "47.14GB GPU / 2.96 GB CPU"; mt0-xxl 3 GB, bloomz 3.8 GB).
- Checkpoint loading: every rank materialises the full checkpoint on CPU before the engine moves it
  to its GPU, unless the model is built under ZeRO-3 `deepspeed.zero.Init` (transformers
  modeling_utils: `needs_zero3_init`), which keeps only the rank's partition.
- Offloaded states (DeepSpeed ZeRO-Offload, deepspeed/runtime/zero/stage3.py, stage_1_and_2.py):
  fp32 master weights, Adam moments, the fp32 gradient partition (plus, in ZeRO-3, the 16-bit
  gradient partition) and, with `offload_param`, the 16-bit parameter partition; FSDP CPU offload
  keeps parameters, gradients and optimizer states on the host.
- Pinned (page-locked) buffers: PyTorch's caching host allocator rounds every pinned allocation up
  to the next power of two (ATen/core/CachingHostAllocator.h: "Round up the allocation to the
  nearest power of two"), and pinned pages cannot be swapped. DeepSpeed pins the fp32 partitions,
  gradient buffers and offloaded parameters when `pin_memory` is true, one buffer per sub-group.
- DataLoader workers are forked copies of the rank (Linux default start method): the rank's pages
  (interpreter, libraries, the model's host copies) are shared copy-on-write and counted once, in the
  rank's base. What a worker adds is what it writes: `prefetch_factor` x micro-batch samples of decoded
  inputs. (PyTorch docs, torch.utils.data "Multi-process data loading": reference counting copies the
  pages of Python objects a worker reads; the dataset's own objects are not modelled.) DocOwl#88's
  fix, 128 GB hosts for TinyChart with 4 workers per rank, is the check on this term.
- DeepSpeed `"sub_group_size": 0` (in axolotl's published ZeRO-3 JSONs) closes a sub-group at every
  parameter (stage3.py `_create_fp16_sub_groups`: `local_sub_group_size >= sub_group_size`), so pinned
  buffers are allocated per parameter: planned at the largest module's size.
- Evaluation logits moved to the host by `eval_accumulation_steps` are converted to fp32 numpy
  arrays (transformers trainer_pt_utils `nested_numpify`), all ranks' logits on every rank.
"""

from __future__ import annotations

from vramfit.planner.params import Arch, Counts
from vramfit.planner.states import optimizer_state_bytes, reference_copy_host, shardable_quant_bytes

PROCESS_BASE = 2.96e9  # bytes per rank process (peft README, see above)
PIXEL_BYTES = 4 * 3  # fp32 pixel values, 3 channels


def pinned(nbytes: float, elements: float, elem_bytes: int, sub_group: int) -> float:
    """Bytes a pinned buffer of `elements` really takes, allocated per sub-group."""
    if nbytes <= 0 or elements <= 0:
        return 0.0
    chunk = min(elements, sub_group) if sub_group > 0 else elements
    chunk = max(chunk, 1)
    full, rest = divmod(elements, chunk)
    rounded = lambda n: float(1 << max(0, int(n * elem_bytes - 1).bit_length()))  # noqa: E731
    return full * rounded(chunk) + (rounded(rest) if rest else 0.0)


def _per_parameter(arch: Arch) -> int:
    """The sub-group size when DeepSpeed's is 0: one parameter per group, planned at the largest module."""
    return max(1, int(arch.largest_module or 1))


def host_ram(setup, counts: Counts, arch: Arch, eval_logits_per_rank: float, offloaded_activations_per_rank: float = 0.0) -> dict[str, float]:
    """Host RAM per node (bytes), by component, at the larger of loading and training.
    `offloaded_activations_per_rank`: activations TRL's OffloadActivations keeps in pinned host memory."""
    s, c = setup, counts
    ranks = s.gpus_per_node
    dp = s.world
    z = s.zero
    load_b = 4 if (s.precision == "fp32" or s.frozen_fp32) else 2
    zero3_init = s.engine == "deepspeed" and z.stage == 3  # transformers builds it under zero.Init
    load = c.total * load_b / (dp if zero3_init else 1)
    parts: dict[str, float] = {"processes": ranks * PROCESS_BASE}
    if offloaded_activations_per_rank:
        parts["offloaded_activations"] = ranks * offloaded_activations_per_rank

    T = c.trainable
    moments = optimizer_state_bytes(s.optimizer)
    offloaded = 0.0
    pinned_bytes = 0.0
    if s.engine == "deepspeed" and z.offload_optimizer:
        part = T / dp
        sub = z.sub_group_size if z.sub_group_size and z.sub_group_size > 0 else _per_parameter(arch)
        fp32 = [part, part]  # master weights, fp32 gradient partition
        half = [part] if z.stage == 3 else []  # 16-bit gradient partition
        if z.pin_memory:
            pinned_bytes += ranks * sum(pinned(p * 4, p, 4, sub) for p in fp32)
            pinned_bytes += ranks * sum(pinned(p * 2, p, 2, sub) for p in half)
        else:
            offloaded += ranks * (sum(fp32) * 4 + sum(half) * 2)
        offloaded += ranks * part * moments  # exp_avg, exp_avg_sq: not pinned (zeros_like)
    if s.engine == "deepspeed" and z.offload_params:
        dense = (c.total - c.quantized + c.adapters) / dp
        nbytes = dense * (2 if s.sixteen_bit else 4) + c.quantized * shardable_quant_bytes(s) / dp
        if z.pin_memory:
            sub = z.sub_group_size if z.sub_group_size and z.sub_group_size > 0 else _per_parameter(arch)
            pinned_bytes += ranks * pinned(nbytes, dense, 2 if s.sixteen_bit else 4, sub)
        else:
            offloaded += ranks * nbytes
    if s.engine == "fsdp" and (z.offload_params or z.offload_optimizer):
        train_b = 2 if s.precision == "bf16-true" else 4
        offloaded += ranks * (T * (2 * train_b + moments) + (c.total - c.trainable_base - c.quantized) * load_b + c.quantized * shardable_quant_bytes(s)) / dp
    if offloaded:
        parts["offloaded_states"] = offloaded
    reference = reference_copy_host(s, c)  # TRL's DPO / KTO reference copy, offloaded like the policy
    if reference:
        parts["reference_model"] = ranks * reference
    from vramfit.planner import gkd

    teacher = gkd.teacher_host(s, gkd.teacher_arch(s))  # GKD's teacher shards offloaded (ZeRO-3 offload_param, ...)
    if teacher:
        parts["teacher_model"] = ranks * teacher
    if pinned_bytes:
        parts["pinned_buffers"] = pinned_bytes
    if s.dataloader_workers:
        patch = arch.image.get("patch_size") or 14
        # decoded pixel values (fp32, 3 channels) for every encoder patch, and int64 ids, labels, mask
        sample = s.images_per_sample * s.vision_patches * patch * patch * PIXEL_BYTES + s.seq_len * 8 * 3
        per_worker = s.prefetch_factor * s.micro_batch * sample  # the rank's pages are shared copy-on-write
        parts["dataloader_workers"] = ranks * s.dataloader_workers * per_worker
    if eval_logits_per_rank:
        parts["eval_logits"] = ranks * eval_logits_per_rank
    training = sum(parts.values())
    loading = ranks * (PROCESS_BASE + load)
    if loading > training:
        return {"processes": ranks * PROCESS_BASE, "checkpoint_loading": ranks * load}
    return parts
