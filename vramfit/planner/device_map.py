"""One training process that spreads its model over several GPUs with device_map (naive layer-wise model parallelism).

`from_pretrained(device_map="auto" | "balanced")` in one process that sees N GPUs (ms-swift without NPROC_PER_NODE:
swift/utils/env.py `is_mp`; a plain script, LLaMA-Factory's single-process path) places whole modules on GPUs with
accelerate (transformers `_get_device_map`: accelerate.utils.modeling `get_balanced_memory` then
`infer_auto_device_map`, no_split_module_classes = the model's `_no_split_modules`, i.e. its decoder layer), and
`dispatch_model` moves the hidden states from GPU to GPU. What the split does, read from accelerate 1.x:
- `get_balanced_memory`: every GPU but the last is capped at `total / N + 1.25 * max(largest no-split block,
  mean leaf module)`; the last GPU keeps its whole memory ("the buffer is not enough" case);
- `infer_auto_device_map` walks the modules in their order (vision tower and projector, embeddings, decoder layers,
  final norm, lm_head), filling one GPU before the next; the first GPU is a "main device" and keeps room for the
  largest layer (`current_max_size - max_layer_size`), so it holds less; a tied lm_head is sized as a module of its
  own and goes last, as an untied one does (its weight stays with the embeddings; the logits are on the last GPU).
The step runs one micro-batch through the GPUs in turn (no pipelining): a GPU holds its own layers' weights, the
gradients and optimizer states of what trains there, the activations its own layers keep for backward, and, where the
lm_head is, the logits and the loss. The planner plans every GPU of the split and reports the busiest.

How it fills them follows the script: `device_map_policy` sequential (`device_map="sequential"`: GPU 0 filled to its
memory first, then the next) and `device_map_max_memory_gib` (from_pretrained's `max_memory`, each GPU's cap), both read
by the review from a Python file (vramfit/review/device_map.py).

Modelled, not read from the model: the vision tower is placed whole (accelerate may split it between its blocks), and
module sizes are in the load dtype (16-bit) with quantized linears at their bits.
"""

from __future__ import annotations

import dataclasses
import math

from vramfit.planner.params import Arch, Counts

BUFFER = 1.25  # accelerate get_balanced_memory: `buffer = int(1.25 * max(buffer, mean_leaves))`
LOAD_BYTES = 2  # module sizes in the 16-bit load dtype
GIB = 2**30
QUANT_BITS = {"int8": 8}  # the rest (nf4, fp4, gptq-int4, awq-int4): 4


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One GPU of a device_map split: what of the model it holds."""

    index: int
    gpus: int
    layers: int  # decoder layers of the text stack placed here
    total_layers: int
    embed: bool  # the embeddings (and a vision tower / projector): embeddings' and vision activations here
    head: bool  # the lm_head: the logits and loss computed here
    weight_share: float  # share of the model's weight bytes
    trainable_share: float  # share of the trained parameters (gradients, optimizer states)

    def layer_share(self, layers: int) -> int:
        """Of a stack of `layers`, those placed here (stacks other than the text one in proportion)."""
        if layers == self.total_layers:
            return self.layers
        return round(layers * self.layers / max(self.total_layers, 1))

    def describe(self) -> str:
        parts = [f"{self.layers} of {self.total_layers} layers"]
        if self.embed:
            parts.append("the embeddings")
        if self.head:
            parts.append("the lm_head, logits and loss")
        return f"GPU {self.index} of {self.gpus} ({', '.join(parts)})"


def split(setup, arch: Arch, counts: Counts) -> list[Gpu]:
    """accelerate's balanced split of the model over setup.device_map_gpus GPUs (module docstring)."""
    n = setup.device_map_gpus
    g = arch.groups
    layers = arch.text.layers
    bits = QUANT_BITS.get(setup.quantization or "", 4) if counts.quantized else 16
    llm_bytes = (g.get("llm", 0) - counts.quantized) * LOAD_BYTES + counts.quantized * bits / 8
    layer = llm_bytes / max(layers, 1)
    front = (g.get("vision", 0) + g.get("projector", 0)) * LOAD_BYTES
    embed = g.get("embed", 0) * LOAD_BYTES
    head = g.get("lm_head", 0) * LOAD_BYTES
    tied = arch.tied_embeddings
    if tied:
        head = embed  # accelerate sizes a tied lm_head as its own module (the tied weight counted twice): placed as untied
    modules: list[tuple[str, float]] = []
    if front:
        modules.append(("front", front))
    modules.append(("embed", embed))
    modules += [("layer", layer)] * layers
    modules.append(("head", head))
    total = sum(size for _, size in modules)
    largest = max(layer, embed, head)
    caps = [cap - (largest if i == 0 else 0) for i, cap in enumerate(_caps(setup, total, layer))] + [math.inf]
    placed: list[list[tuple[str, float]]] = [[] for _ in range(n)]
    device, used = 0, 0.0
    for name, size in modules:
        while used + size > caps[device] and device < n - 1:
            device, used = device + 1, 0.0
        placed[device].append((name, size))
        used += size
    full = counts.text_trainable or counts.trainable_base >= 0.5 * counts.total
    out = []
    for i, mods in enumerate(placed):
        here = sum(1 for name, _ in mods if name == "layer")
        names = {name for name, _ in mods}
        # a tied lm_head's weight is one tensor, kept with the embeddings (dispatch_model's hooks bring it to the
        # lm_head's GPU for its matmul)
        held = sum(0.0 if tied and name == "head" else size for name, size in mods)
        share = held / (total - (head if tied else 0.0)) if total else 1.0 / n
        out.append(
            Gpu(
                index=i,
                gpus=n,
                layers=here,
                total_layers=layers,
                embed="embed" in names,
                head="head" in names,
                weight_share=share,
                trainable_share=share if full else here / max(layers, 1),
            )
        )
    return out


def _caps(setup, total: float, layer: float) -> list[float]:
    """What accelerate lets each GPU but the last hold (bytes), before the first GPU's room for the largest layer:
    - balanced (transformers `_get_device_map` for "auto" / "balanced": `get_balanced_memory`): the model's share
      `total / N` plus the buffer, or the max_memory cap where it is lower (`min(per_gpu, max_memory[i])`);
    - sequential (`get_max_memory`): the max_memory cap, else the card's memory: GPU 0 is filled first.
    The last GPU keeps its whole memory (or its cap) in both: the planner places what is left there."""
    n = setup.device_map_gpus
    cap = setup.device_map_max_memory_gib * GIB if setup.device_map_max_memory_gib else math.inf
    if setup.device_map_policy == "sequential":
        if not setup.device_map_max_memory_gib:
            from vramfit.hardware import CATALOGUE

            gpu = CATALOGUE.get(setup.gpu)
            cap = gpu.memory_gib * GIB if gpu is not None else math.inf
        return [cap] * (n - 1)
    return [min(total / n + BUFFER * layer, cap)] * (n - 1)


# resident terms and the share of the GPU that scales each
# (PPO's critic and reward model, each loaded with the same device_map, taken as split like the policy's weights)
WEIGHT_TERMS = ("weights", "reference_model", "reward_model", "teacher_model", "critic")
TRAINABLE_TERMS = ("gradients", "optimizer_states", "paged_optimizer_states", "optimizer_step")


def scale(parts: dict[str, float], gpu: Gpu) -> dict[str, float]:
    """A phase's resident terms (whole model) scaled to what this GPU of the split holds."""
    out = dict(parts)
    for key in WEIGHT_TERMS:
        if key in out:
            out[key] = out[key] * gpu.weight_share
    for key in TRAINABLE_TERMS:
        if key in out:
            out[key] = out[key] * gpu.trainable_share
    return out


def note(gpu: Gpu, others: list[tuple[Gpu, float]], setup=None) -> str:
    """The plan's word on the split: which GPU is the peak, and the others' figures."""
    rest = ", ".join(f"GPU {g.index} {gib:.1f} GiB" for g, gib in others if g.index != gpu.index)
    how = "sequential" if setup is not None and setup.device_map_policy == "sequential" else "balanced"
    if setup is not None and setup.device_map_max_memory_gib:
        how += f" map, max_memory {setup.device_map_max_memory_gib:g} GiB per GPU"
    else:
        how += " map"
    return (
        f"device_map over {gpu.gpus} GPUs (one process, layers split by accelerate's {how}, one micro-batch "
        f"through the GPUs in turn): planned is the busiest, {gpu.describe()}; {rest}"
    )
