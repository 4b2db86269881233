"""What the doctor looks for in a log, as compiled regexes.

Every line is first tested against ANCHOR (bytes, cheap); only lines that match are decoded and run
through the patterns below, which is what keeps a 100 MB log fast.
"""

from __future__ import annotations

import re

from vramfit.doctor.units import SIZE

# One literal per thing worth a closer look. Literals without digits: lines that differ only in their
# numbers (loss logs, timestamps) match alike, which lets the scanner remember the quiet ones.
ANCHOR = re.compile(
    rb"out of memory|OutOfMemory|Out of memory|Out Of Memory|CUBLAS_STATUS_ALLOC_FAILED|oom|OOM|Killed|SIGKILL"
    rb"|exitcode|return code|got signal|killed by signal|local_rank|Root Cause"
    rb"|Traceback|File \"|\.py:|Error|error|Watchdog|watchdog|NCCL|Timeout|TCPStore"
    rb"|- ds |NOT_AVAILABLE|require grad|size of tensor|use_reentrant|num_generations"
    rb"|\*\*\*\*\* Running|Saving|Loading|Total optimization|Instantaneous batch|ccumulation|Num processes"
    rb"|global_step|batch_size|_steps|_strategy|max_completion|gradient_checkpointing|liger|offload"
    rb"|pin_memory|\"device\"|\"stage\"|zero_stage|world_size|nproc|NPROC|num_gpus|num_processes|nnodes"
    rb"|max_pixels|num_workers|ddp_timeout|PYTORCH_CUDA_ALLOC_CONF|ZeRO|DeepSpeed|deepspeed"
    rb"|collective mismatch|doesn't match expected size|mismatch between collectives"
    rb"|Tried to allocate|exp_avg|log_softmax|cross_entropy|shared memory|/dev/shm|No available memory|KV cache"
    rb"|Killing subprocess|closing signal|Cell In\[|line \d+, in |\.py\(\d+\): |initializing optimizer states"
    rb"|fp16 partitions|cpu_adam|CPUAdam|posix_fallocate|partition count|SIGBUS"
    rb"|torch\.Size\(\[|shape ?[=:]? ?'?[\[(]|vocab_size|max_seq_len|cutoff_len|seq_length"
    rb"|Assertion `|fsdp|FSDP|\.py in |\.py\]\(|nested_concat|Initiali|memory pressure|memory usage threshold|generate_sequences|from_pretrained|device memory|NPU out"
)

ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

# Prefixes launchers put before each line: pdsh/DeepSpeed multi-node "10.0.0.5: " or "node01: ",
# torchrun "[rank3]:" / "[default3]:", srun --label "3: ".
HOST_PREFIX = re.compile(r"^(\d{1,3}(?:\.\d{1,3}){3}|[a-z][a-z0-9-]*\d[a-z0-9-]*(?:\.[a-z0-9-]+)*): ")
RANK_PREFIX = re.compile(r"^\[([A-Za-z_]+?)(\d+)\]:\s?")
LABEL_PREFIX = re.compile(r"^(\d{1,5}): ")

# What launchers, loggers and log viewers put before a message, none of it naming a stream: a viewer's line
# number "[80746] ", docker compose "vllm-1  | ", ray "(pid=12) ", glog "E0629 00:06:24.298000 1402 api.py:826] ",
# python logging "[2023-04-07 13:08:55,468] [INFO] [launch.py:318:sigkill_handler] ", vLLM "ERROR 11-18 18:07:28
# engine.py:366] ".
NOISE_PREFIX = re.compile(
    r"^(?:\[\d+\]\s+|[\w.-]+-\d+\s+\|\s+|\([\w.-]+ pid=\d+\)\s+"
    r"|\[?[EWIFD]\d{4} \d\d:\d\d:\d\d\.\d+ [^\]]{0,200}\]\s?"
    r"|\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d[,.\d]*\]?\s+(?:\[?[A-Z]+\]?\s+)?(?:\[[\w.:<>-]+\]\s+)?"
    r"|(?:ERROR|INFO|WARNING|DEBUG)\s+\d\d-\d\d \d\d:\d\d:\d\d [\w.]+:\d+\]\s+)"
)

# Python, IPython / Jupyter, rich and TorchScript ("At:") tracebacks.
TRACEBACK = "Traceback (most recent call last)"
FRAMES = (
    re.compile(r'File "([^"]+)", line \d+, in (\S+)'),  # python
    re.compile(r"([^\s│|]+\.py):\d+ in (\w+)"),  # rich
    re.compile(r"^\s*File (\S+?\.py):\d+,? in (?:[\w.<>]+\.)?(\w+)\("),  # IPython: File path:12, in Class.func(
    re.compile(r"^\s*(\S+\.py)\(\d+\): (\w+)"),  # TorchScript "At:" blocks
    re.compile(r"^\s*()line \d+, in (\w+)\s*$"),  # a frame cut at the start of a paste
    # IPython < 8 / Colab: "/path/trainer.py in evaluation_loop(self, ...)", Colab's "[/path/x.py](https://localhost:8080/#) in f(t)"
    re.compile(r"^\s*\[?([^\s\[\]]+\.py)(?:\]\([^)\s]*\))? in (\w+)\("),
)
PARTIAL_FRAME = re.compile(r'File "[^"]*$|File "[^"]+",?\s*$')  # a frame wrapped onto the next line
IPYTHON_HEADER = re.compile(r"^\s*((?:[\w.]+\.)?\w*(?:Error|Exception))\s+Traceback \(most recent call last\)")
EXCEPTION_LINE = re.compile(r"^\s*(?:\*\*\* )?(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b")
RAISED_INLINE = re.compile(r"(?<![\w.])(?:[\w.]+\.)?\w*(?:Error|Exception): ")  # what a one-line traceback raised
EXCEPTION = re.compile(r"^\s*(?:\*\*\* )?((?:[\w.]+\.)?(\w*(?:Error|Exception)))\b:?\s*(.*)")
# Exceptions that only report another process's failure; the failure itself is elsewhere in the log.
WRAPPERS = {"ChildFailedError", "CalledProcessError", "ProcessExitedException", "ProcessRaisedException", "SystemExit", "DistBackendError", "RendezvousError"}
# Source lines under a frame that say what the frame computed when the frame itself is missing.
# nested_concat: the Trainer concatenating every eval batch's predictions on the GPU (IPython prints the line).
SOURCE_HINT = re.compile(r"\b(log_softmax|cross_entropy|exp_avg(?:_sq)?|nested_concat)\b")

# tqdm: "desc:  12%|███▏      | 50/400 [10:23<1:12:00, 12.34s/it]"
BAR = re.compile(r"(?P<desc>[^|\r]{0,200}?)\s*\d{1,3}%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[[^\]]*\]?")

# --- GPU memory ---
OOM = re.compile(
    r"CUDA out of memory|(?i:cuda error: out of memory)|HIP out of memory|(?<!ray\.exceptions\.)OutOfMemoryError(?!: Task was killed)"
    r"|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure '?\d*'? ?'?out of memory|cudaErrorMemoryAllocation"
    r"|CUDA_ERROR_OUT_OF_MEMORY|^Tried to allocate \d|No available memory for the cache blocks"
    r"|cuda runtime error \(2\) : out of memory|CUDA driver error: out of memory|MPS backend out of memory"
    r"|XPU out of memory|NPU out of memory"
    # Intel's SYCL / Level Zero runtime (ipex, torch XPU): its own words for the device being full
    r"|Allocation is out of device memory on current platform|UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"
    r"|larger than the available KV cache memory"
)
VLLM_KV = re.compile(r"No available memory for the cache blocks|available KV cache memory")
# vLLM's sleep-mode allocator (csrc/cumem_allocator.cpp): the rollout engine's own memory pool
VLLM_ALLOCATOR = re.compile(r"cumem_allocator")
OOM_FIGURES = {
    "requested": [re.compile(r"Tried to allocate " + SIZE)],
    "gpu": [re.compile(r"\bGPU (\d+)")],
    "total": [re.compile(SIZE + r" total capacity"), re.compile(r"total capac\w* of " + SIZE)],
    "free": [re.compile(r"of which " + SIZE + r" is free"), re.compile(SIZE + r" free")],
    "allocated": [re.compile(SIZE + r" already allocated"), re.compile(SIZE + r" is allocated by PyTorch")],
    # torch 1.4-2.0: reserved in total, allocated included
    "reserved_total": [re.compile(SIZE + r" reserved in total by PyTorch")],
    # torch 1.0-1.3 "cached" is the cache minus what is allocated (amount_cached - amount_allocated), and
    # torch 2.1+ says so in words: both are reserved-but-unallocated already
    "reserved_unallocated": [re.compile(SIZE + r" is reserved by PyTorch but unallocated"), re.compile(SIZE + r" cached\)")],
    "in_use": [re.compile(r"this process has " + SIZE + r" memory in use"), re.compile(r"Process \d+ has " + SIZE + r" memory in use")],
}
# torch 2.1+ lists every process on the GPU: "Process 43872 has 4.97 GiB memory in use." and, when it can tell
# which one it is, "Including non-PyTorch memory, this process has 17.05 GiB memory in use."
PROCESS_IN_USE = re.compile(r"Process (\d+) has " + SIZE + r" memory in use")
SELF_IN_USE = re.compile(r"this process has " + SIZE + r" memory in use")
PINNED = re.compile(r"pin_memory|pinned|cudaHostAlloc|CachingHostAllocator", re.IGNORECASE)

# --- host RAM: a rank killed by SIGKILL, or the kernel / Slurm OOM killer ---
HOST_KILL = re.compile(
    r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b|failed \(exitcode: -9\)|exits with return code = -9"
    r"|Signals\.SIGKILL|got signal: 9\b|Killed process \d+|oom-kill:|oom_reaper|invoked oom-killer"
    r"|oom[_-]kill event|OOM[ -]?Killed|OOMKilled|killed by signal: Killed|^Killed\s*$|\b\d+ Killed\s"
    r"|task \d+: Out Of Memory"
    # Ray's memory monitor (verl, OpenRLHF): it kills a worker when the node's host RAM passes its threshold
    r"|Task was killed due to the node running low on memory|killed due to memory pressure \(OOM\)"
    r"|which exceeds the memory usage threshold of [\d.]+\. Ray killed this worker"  # the report without its headline
)
DATALOADER_KILL = re.compile(r"DataLoader worker \(pid[^)]*\) is killed by signal: (?!Bus error)")
# /dev/shm too small: DataLoader workers pass batches through it, NCCL its intra-node buffers.
SHM = re.compile(
    r"is killed by signal: Bus error|insufficient shared memory|out of shared memory|failed to extend /dev/shm"
    r"|/dev/shm\S* \(?No space left on device|No space left on device.{0,80}/dev/shm"
    r"|Error while creating shared memory segment|unable to (?:write to|open) (?:file|shared memory)\s*<?/?torch_"
    r"|posix_fallocate failed\W+No space left on device"  # NCCL < 2.12's include/shm.h
    # a rank dead of SIGBUS (7): a shared-memory page that could not be backed
    r"|exitcode\s*:\s*-7\b|failed \(exitcode: -7\)|Signal 7 \(SIGBUS\)|return code = -7\b|Signals\.SIGBUS"
)
# A launcher tearing ranks down after one exited; with no Python error anywhere, that rank was killed.
SILENT_KILL = re.compile(r"Killing subprocess (\d+)|Sending process (\d+) closing signal SIGTERM")
# Who reported the kill, in the words of the report.
KILL_SOURCES = [
    (re.compile(r"exits with return code = -9"), "DeepSpeed's launcher reports a rank exited with return code -9"),
    (re.compile(r"exitcode\s*:\s*-9|Signal 9 \(SIGKILL\)"), "torchrun reports a rank exited with -9 (SIGKILL)"),
    (re.compile(r"Killed process|oom-kill|oom_reaper|oom-killer"), "the kernel's OOM killer killed the process"),
    (re.compile(r"oom[_-]kill event|OOM[ -]?Killed|OOMKilled|Out Of Memory"), "the scheduler reports an OOM kill"),
    (re.compile(r"Signals\.SIGKILL|got signal: 9"), "the launcher reports the process died with SIGKILL"),
    (re.compile(r"DataLoader worker"), "a DataLoader worker was killed by SIGKILL"),
    (
        re.compile(r"running low on memory|memory pressure|memory usage threshold"),
        "Ray's memory monitor killed a worker: the node's host RAM passed its threshold",
    ),
    (re.compile(r"Killed"), "the shell reports the process Killed (SIGKILL)"),
]
KILLED_RANK = re.compile(r"local_rank[=:]\s*(\d+)|task (\d+): Out Of Memory")
KILLED_RSS = re.compile(r"anon-rss:(\d+)kB")

# torchrun's ChildFailedError block: "rank      : 5 (local_rank: 5)" then "exitcode  : -9 (pid: 12350)"
FAILURE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
FAILURE_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
ROOT_CAUSE = "Root Cause (first observed failure)"
# The first rank to exit, as the launchers report it: torchrun "failed (exitcode: 1) local_rank: 3 (pid: ...)",
# DeepSpeed "[..., '--local_rank=3', ...] exits with return code = 1".
LAUNCHER_EXIT = re.compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)"
    r"|local_rank=(?P<ds_rank>\d+).*exits with return code = (?P<ds_code>-?\d+)"
)

# --- communication ---
NCCL_TIMEOUT = re.compile(
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)[^)]*?Timeout\(ms\)=(?P<timeout>\d+)\)"
    r"(?: ran for (?P<ran>\d+) milliseconds)?"
)
NCCL_ERROR = re.compile(
    r"Watchdog caught collective operation timeout|NCCL communicator was aborted|watchdog got stuck"
    r"|Some NCCL operations have failed or timed out|DistStoreError|RendezvousTimeoutError"
    r"|NCCL error|ncclSystemError|ncclInternalError|ncclRemoteError"
    # gloo (CPU collectives), one timeout worded two ways: gloo/transport/tcp/pair.cc "Timed out waiting
    # Nms for send|recv operation to complete" and "Application timeout caused pair closure"
    r"|Timed out waiting \d+ms for (?:send|recv) operation|Application timeout caused pair closure"
)
# NCCL failures that are no collective waiting on a rank: a system call (socket, bind, malloc), NCCL's own
# invariants or a wrong call. Not memory and not a timeout; "unhandled cuda error" stays with the timeouts,
# since the CUDA failure under it (often an OOM) follows on the next lines.
NCCL_SETUP = re.compile(
    r"unhandled system error|ncclSystemError|internal error - please report|ncclInternalError|invalid usage|ncclInvalidUsage"
    r"|invalid argument|ncclInvalidArgument"
    # a rank that cannot set its own sockets up (a port taken, no usable interface); unlike "Connection
    # refused / closed by remote peer", never the echo of another rank dying
    r"|NCCL WARN (?:Call to (?:bind|listen) failed|Bootstrap : no socket interface found|NET/Socket : no usable interface)"
)
GLOO_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?:send|recv) operation|Application timeout caused pair closure")
RANK_IN_TEXT = re.compile(r"\[Rank (\d+)\]")
# Ranks that called different collectives: gloo's size check, torch's TORCH_DISTRIBUTED_DEBUG=DETAIL check.
COLLECTIVE_MISMATCH = re.compile(
    r"Is there a distributed collective mismatch|Received data size doesn't match expected size"
    r"|Detected mismatch between collectives"
)

# A CUDA kernel's device-side assertion (an index out of range, a label outside the classes): the crash is
# the data or the code, never memory. ATen prints one line per failing thread before the RuntimeError.
DEVICE_ASSERT = re.compile(r"(?:\.cu|\.cuh):\d+: .*Assertion `[^`]+` failed")

# --- configuration errors ---
DS_BATCH = re.compile(
    r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size"
    r"\s*(\d+)\s*!=\s*(\d+)\s*\*\s*(\d+)\s*\*\s*(\d+)"
)
HF_MISMATCH = "DeepSpeed config values that mismatch TrainingArguments values"
HF_MISMATCH_ITEM = re.compile(r"- ds ([\w.]+)=(\S+) vs hf ([\w.]+)=(\S+)")
GRPO_GLOBAL_OLD = re.compile(
    r"global (train|eval) batch size \((\d+) x (\d+)\) must be evenly divisible by the number of"
    r" generations per prompt \((\d+)\)"
)
GRPO_VALID = re.compile(r"valid values for the number of generations are: \[([\d,\s]*)\]")
GRPO_EVAL_NEW = re.compile(
    r"global eval batch size \((\d+) \* (\d+)\) must be divisible by the number of generations"
    r" used for evaluation \((\d+)\)"
)
GRPO_GEN_BATCH = re.compile(r"generation_batch_size \((\d+)\) must be divisible by num_generations \((\d+)\)")
GRPO_GEN_GLOBAL = re.compile(r"generation_batch_size \((\d+)\) must be divisible by the global batch size \((\d+)\)")
GRPO_MIN = re.compile(r"GRPO requires at least 2 generations per prompt(?:.*?You provided (\d+))?")
CHECKPOINTING = re.compile(
    r"The size of tensor a \(0\) must match the size of tensor b"
    r"|(?:ds_status|'status')\W+(?:ZeroParamStatus\.)?NOT_AVAILABLE"
    r"|element 0 of tensors does not require grad and does not have a grad_fn"
)

# --- where in the run we are, from lines other than tracebacks ---
HINTS = [
    (re.compile(r"\*\*\*\*\* Running (?:Evaluation|Prediction) \*\*\*\*\*"), "evaluation"),
    (re.compile(r"\*\*\*\*\* Running training \*\*\*\*\*"), "training"),
    (re.compile(r"Saving (?:the )?model|Saving checkpoint|save_checkpoint"), "checkpoint_save"),
    (
        re.compile(
            r"Loading checkpoint shards|Loading model|DeepSpeedZeroOptimizer|Creating ZeRO|ZeRO Offload"
            r"|cpu_adam|partition_parameters\.py|initialize_optimizer_states|DeepSpeed info:"
            r"|[Ii]nitializing optimizer states|fp16 partitions|DeepSpeedZeRoOffload initialize"
            r"|partition count \[\d+\] and sizes"
            # "Initializing language decoder from ../vicuna/7b ...", "Loading base model from /models/..."
            r"|init_model_from_pretrained"  # OpenRLHF's Ray model actors building their models
            r"|\b(?:Loading|Initiali[sz]ing|Instantiating)\b[\w ,-]{0,40}\b(?:model|decoder|encoder|backbone|LLM|weights|checkpoint)s?\b[^.]{0,20}\bfrom\b"
        ),
        "model_load",
    ),
    # verl / OpenRLHF rollout workers (ray::WorkerDict.actor_rollout_generate_sequences)
    (re.compile(r"generate_sequences\b"), "generation"),
]
# Within model loading: building optimizer states (host RAM for offloaded states) rather than reading weights.
OPTIMIZER_INIT = re.compile(
    r"optimizer states|fp16 partitions|DeepSpeedZeroOptimizer|Creating ZeRO|cpu_adam|CPUAdam"
    r"|partition count"
)
STEP = re.compile(r"global_step/max_steps'?:\s*'?(\d+)/(\d+)")
