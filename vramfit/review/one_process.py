"""A launch that starts one process: `python train.py ...` with no torchrun, deepspeed or accelerate launcher and no
Slurm tasks. What that one process does with the GPUs it sees, as the libraries' own code decides it:

- DeepSpeed: one rank on GPU 0. With no LOCAL_RANK in the environment accelerate's PartialState is not distributed
  (accelerate/state.py PartialState.__init__: the distributed branches need LOCAL_RANK != -1), so the Trainer's world
  is 1, and deepspeed.initialize's init_distributed finds a world of 1 through MPI discovery (deepspeed/comm/comm.py
  mpi_discovery: "Discovered MPI settings of world_rank=0, local_rank=0, world_size=1"; without mpi4py installed it stops
  there, at start, before any memory is used). ZeRO partitions over that one rank: every GPU but the first stays idle.
- FSDP given to the Trainer: refused at start, transformers Trainer.__init__: "Using fsdp only works in distributed
  training." (args.parallel_mode is not DISTRIBUTED without LOCAL_RANK).
- Neither, with several GPUs visible: TrainingArguments.n_gpu is every visible GPU (TrainingArguments._setup_devices,
  torch.cuda.device_count()) and Trainer._wrap_model wraps the model in torch.nn.DataParallel: the step's batch is
  per_device_train_batch_size x n_gpu, GPU 0 keeps the one copy of the gradients and optimizer states, and gathers every
  replica's outputs at the end of each forward (torch/nn/parallel/data_parallel.py DataParallel.forward: gather).

A program that starts processes of its own (Ray, torch.multiprocessing, Lightning, accelerate's notebook_launcher) is not
one process: left to what the files say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# a program whose code starts processes of its own (its source read where it lies beside the script)
SPAWNS = re.compile(
    r"\b(?:mp|multiprocessing|torch\.multiprocessing)\.(?:spawn|start_processes|Process)\b|\bnotebook_launcher\b|"
    r"^\s*(?:import ray\b|from ray\b)|\bray\.init\(|\bFabric\(|\bpytorch_lightning\b|^\s*(?:import|from) lightning\b|\belastic_launch\b",
    re.MULTILINE,
)
# modules that start their own workers when run with `python -m` (Ray launchers)
SELF_LAUNCHING = re.compile(r"(?:^|[./])(?:train_\w+_ray|main_ppo|main_generation)(?:\.py)?$")


@dataclass
class OneProcess:
    """`python PROGRAM` as the launch: where it is written."""

    program: str
    file: str
    line: int | None


def found(primary, program_text: str | None) -> OneProcess | None:
    """The launch, where it starts exactly one process (module docstring); None otherwise."""
    if primary.kind != "shell" or primary.launcher != "python" or primary.srun:
        return None  # another launcher, or srun starts the tasks (`srun --ntasks-per-node N python ...`: sources)
    name = primary.program.split(" ", 1)[-1]
    if SELF_LAUNCHING.search(name) or (program_text is not None and SPAWNS.search(program_text)):
        return None
    return OneProcess(primary.program, primary.label, primary.launch_line)


def apply(mapped, hw: dict, finding, origin) -> list:
    """What one process does with the GPUs (module docstring), before the hardware is taken from a recipe: DeepSpeed
    makes the run one rank (planned so), FSDP is the Trainer's refusal, and several GPUs with neither are DataParallel.
    `finding` builds a Finding, `origin` a mapping.Origin (where the hardware was read)."""
    launch: OneProcess | None = getattr(mapped, "one_process", None)
    if launch is None or mapped.python_device_map is not None or mapped.verl or mapped.litgpt or mapped.llmfoundry:
        return []  # a model spread with device_map is one process already (review/device_map.py); the others start their own
    t = mapped.recipe["training"]
    seen = mapped.primary.seen_gpus  # the GPUs the process sees, where CUDA_VISIBLE_DEVICES lists them
    if hw.get("gpus_per_node") is None and seen:
        hw["gpus_per_node"] = seen
        mapped.origins["hardware.gpus_per_node"] = origin(launch.file, "CUDA_VISIBLE_DEVICES", launch.line)
        mapped.stated["gpus_per_node"] = "CUDA_VISIBLE_DEVICES"
    gpus = hw.get("gpus_per_node")
    where = dict(file=launch.file, key="python", line=launch.line)
    command = f"python {launch.program}"
    fsdp = t.get("fsdp") and str(t["fsdp"]).strip().lower() not in ("", "false", "none")
    deepspeed = not str(mapped.recipe.get("deepspeed", "")).endswith("reviewed-none.json")  # mapping._deepspeed: none given
    o = mapped.origins.get("training.fsdp")
    if fsdp and not deepspeed and o is not None and o.key.lstrip("-") == "fsdp":  # the Trainer's own argument
        return [
            finding(
                "error",
                what=f"FSDP ({o.key} {t['fsdp']}) under one process ({command}, no launcher): the Trainer refuses it at "
                "start, 'Using fsdp only works in distributed training.' (transformers Trainer.__init__: without LOCAL_RANK the "
                "parallel mode is not distributed)",
                fix=f"launch it with `torchrun --nproc_per_node {gpus or 'N'} {launch.program} ...` (or `accelerate launch`).",
                **where,
            )
        ]
    if deepspeed:
        nodes = hw.get("nodes", 1)
        hw["gpus_per_node"], hw["nodes"] = 1, 1
        mapped.origins["hardware.gpus_per_node"] = mapped.origins["hardware.nodes"] = origin(launch.file, "python", launch.line)
        mapped.stated["gpus_per_node"] = mapped.stated["nodes"] = "python"
        mapped.script_ranks = 1
        why = (
            "DeepSpeed runs as 1 rank on GPU 0 (accelerate's PartialState sees no LOCAL_RANK; DeepSpeed's init_distributed finds "
            "a world of 1 through MPI discovery, and without mpi4py stops at start), so ZeRO partitions over 1 rank"
        )
        if (gpus or 1) * nodes > 1:
            return [
                finding(
                    "warning",
                    what=f"one process ({command}, no launcher) on {gpus * nodes} GPUs: {why} and the other {gpus * nodes - 1} GPUs stay "
                    "idle; planned as 1 rank on 1 GPU",
                    fix=f"launch it with `deepspeed --num_gpus {gpus} {launch.program} ...` (or `torchrun --nproc_per_node {gpus}`).",
                    **where,
                )
            ]
        return [
            finding(
                "info",
                what=f"one process ({command}, no launcher): {why}; planned as 1 rank on 1 GPU, whatever the node has",
                fix=f"on several GPUs, launch it with `deepspeed --num_gpus N {launch.program} ...`.",
                **where,
            )
        ]
    o = mapped.origins.get("training.per_device_train_batch_size")
    trainer = o is not None and o.key.lstrip("-") == "per_device_train_batch_size"  # the Trainer's own argument
    if gpus and gpus > 1 and trainer:
        return [
            finding(
                "info",
                what=f"one process ({command}, no launcher) sees {gpus} GPUs: the Trainer wraps the model in torch.nn.DataParallel "
                f"(TrainingArguments.n_gpu {gpus}), each step's batch split over them; GPU 0 keeps the gradients and optimizer "
                "states and gathers every replica's outputs (the logits included) at the end of each forward, which the plan (each "
                "GPU as a DDP rank) does not hold",
                fix=f"launch it with `torchrun --nproc_per_node {gpus} {launch.program} ...` for DistributedDataParallel.",
                **where,
            )
        ]
    return []
