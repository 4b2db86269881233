"""`vramfit doctor` on logs as people paste them: the world corpus (tests/doctor/world, each log kept as
published with a sidecar naming its issue thread and what it concluded), and each format and frame family
one by one, built here from the libraries' real messages and function names.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vramfit.doctor import diagnose, render
from vramfit.doctor.diagnosis import CAUSES, KINDS, PHASES
from vramfit.doctor.fixes import ZERO3

HERE = Path(__file__).parent
WORLD = HERE / "world"
REPO = HERE.parents[1]
spec = importlib.util.spec_from_file_location("doctor_corpus", REPO / "benchmarks" / "doctor_corpus.py")
corpus = importlib.util.module_from_spec(spec)
spec.loader.exec_module(corpus)


def keys(d) -> list[set[str]]:
    return [{k for form in corpus.FORMS for k in fix.get(form, {})} for fix in d.fixes]


def log(tmp_path: Path, text: str, name: str = "train.log") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


# --- the world corpus ---


def test_world_corpus_is_public_and_sourced():
    logs = sorted(WORLD.glob("*.log"))
    assert len(logs) >= 50
    repos = set()
    for path in logs:
        side = json.loads(path.with_name(path.stem + ".source.json").read_text())
        assert side["source"]["url"].startswith("https://github.com/"), path
        assert side["expected"]["kind"] in (*KINDS, "other_error") and side["expected"]["phase"] in PHASES
        assert side["concluded"]
        repos.add(side["source"]["repository"])
    assert len(repos) >= 30  # not one project's logs


@pytest.mark.parametrize("path", sorted(WORLD.glob("*.log")), ids=lambda p: p.stem)
def test_world_log_diagnoses_without_a_traceback(path):
    d = diagnose(path)
    assert d.kind in KINDS and d.phase in PHASES and d.cause in CAUSES
    text = render(d)
    assert "-0." not in text and " -1" not in text.split("Evidence:")[0]  # no negative figure is ever shown
    for fix in d.fixes:
        assert fix["why"]


def test_world_accuracy_at_least_90_percent():
    """The measure of the doctor: kind, phase and first fix all right on at least 90% of the world logs."""
    rows = sorted(WORLD.glob("*.log"))
    right = 0
    for path in rows:
        want = json.loads(path.with_name(path.stem + ".source.json").read_text())["expected"]
        d = diagnose(path)
        right += d.kind == want["kind"] and d.phase == want["phase"] and corpus.fix_right(want["first_fix"], corpus.first_fix_keys(d))
    assert right / len(rows) >= 0.9, f"{right}/{len(rows)}"


# --- PyTorch OOM formats, version by version ---


def test_torch_1_0_cached_is_not_subtracted_again(tmp_path):
    # 1.0-1.3: "cached" = amount_cached - amount_allocated, already net of what is allocated
    d = diagnose(
        log(
            tmp_path,
            "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total "
            "capacity; 8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)\n",
        )
    )
    assert d.figures["reserved_unallocated_gib"] == pytest.approx(4.68 / 1024, abs=1e-6)
    assert "-" not in render(d).splitlines()[0].split("(", 1)[1]


def test_torch_1_4_reserved_in_total_is_net_of_allocated_and_never_negative(tmp_path):
    d = diagnose(
        log(
            tmp_path,
            "RuntimeError: CUDA out of memory. Tried to allocate 284.00 MiB (GPU 0; 31.75 GiB total "
            "capacity; 27.12 GiB already allocated; 99.50 MiB free; 30.44 GiB reserved in total by "
            "PyTorch)\n",
        )
    )
    assert d.figures["reserved_unallocated_gib"] == pytest.approx(3.32, abs=1e-6)
    assert d.cause == "fragmentation"
    # before 2.1 there are no expandable segments: the knob of that version
    assert d.fixes[0] == {"env": {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}, "why": d.fixes[0]["why"]}
    odd = diagnose(
        log(
            tmp_path,
            "CUDA out of memory. Tried to allocate 2 MiB (GPU 0; 8 GiB total capacity; 3.00 GiB "
            "already allocated; 1 MiB free; 2.00 GiB reserved in total by PyTorch)\n",
            "b.log",
        )
    )
    assert "reserved_unallocated_gib" not in odd.figures  # a torn paste never becomes a negative reserve


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: cuda runtime error (2) : out of memory at /opt/conda/conda-bld/pytorch_1524590031827/work/aten/src/"
        "THC/generic/THCStorage.cu:58",  # torch 0.4
        "RuntimeError: CUDA driver error: out of memory",
        "torch.AcceleratorError: CUDA error: out of memory",  # torch 2.8+
        "RuntimeError: MPS backend out of memory (MPS allocated: 17.80 GB, other allocations: 210.42 MB, max allowed: "
        "18.13 GB). Tried to allocate 256.00 MB on private pool.",
    ],
)
def test_older_and_other_backend_wordings_are_gpu_oom(tmp_path, line):
    assert diagnose(log(tmp_path, line + "\n")).kind == "cuda_oom"


def test_hip_out_of_memory_gets_the_hip_allocator_variable(tmp_path):
    d = diagnose(
        log(
            tmp_path,
            "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.70 GiB. GPU 0 has a "
            "total capacity of 63.98 GiB of which 0 bytes is free. Of the allocated memory 50.93 GiB "
            "is allocated by PyTorch, and 9.30 GiB is reserved by PyTorch but unallocated.\n",
        )
    )
    assert d.kind == "cuda_oom" and d.cause == "fragmentation"
    assert d.fixes[0]["env"] == {"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"}


MESSAGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
    "79.25 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.22 GiB memory in "
    "use. Of the allocated memory 75.11 GiB is allocated by PyTorch, and 1.55 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)


@pytest.mark.parametrize("width", [80, 100])
def test_message_hard_wrapped_at_a_terminal_width_keeps_its_figures(tmp_path, width):
    whole = diagnose(log(tmp_path, "[rank3]: " + MESSAGE + "\n", "whole.log"))
    text = "[rank3]: " + MESSAGE
    wrapped = "\n".join(text[i : i + width] for i in range(0, len(text), width))  # mid-word, mid-number
    d = diagnose(log(tmp_path, wrapped + "\n"))
    assert d.figures == whole.figures and d.ranks == [3]


def test_windows_line_ends_ansi_colour_and_logger_prefixes(tmp_path):
    plain = diagnose(log(tmp_path, MESSAGE + "\n", "plain.log"))
    noisy = "[80746] [rank3]:[E321 02:07:08.408271257 trainer.py:607] \x1b[31m" + MESSAGE + "\x1b[0m\r\nvllm-1  | INFO 11-18 18:07:28 engine.py:366] done\r\n"
    d = diagnose(log(tmp_path, noisy))
    assert (d.kind, d.figures, d.ranks) == ("cuda_oom", plain.figures, [3])


def test_jupyter_traceback_names_the_exception_before_the_frames(tmp_path):
    cell = textwrap.dedent("""\
        ---------------------------------------------------------------------------
        OutOfMemoryError                          Traceback (most recent call last)
        Cell In[9], line 22
        ---> 22 trainer.train()

        File ~/envs/lib/python3.10/site-packages/transformers/trainer.py:1979, in Trainer._inner_training_loop(self, batch_size)
        -> 1979 tr_loss_step = self.training_step(model, inputs)

        File ~/envs/lib/python3.10/site-packages/torch/_tensor.py:487, in Tensor.backward(self, gradient)
        -> 487 torch.autograd.backward(
        """)
    d = diagnose(log(tmp_path, cell))  # the paste stops before the message: the header still says what it was
    assert (d.kind, d.phase) == ("cuda_oom", "backward")
    d = diagnose(
        log(
            tmp_path,
            cell + "\nOutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; "
            "14.75 GiB total capacity; 13.9 GiB already allocated; 1.06 MiB free; 14.1 GiB "
            "reserved in total by PyTorch)\n",
            "b.log",
        )
    )
    assert (d.kind, d.phase, d.figures["requested_gib"]) == ("cuda_oom", "backward", pytest.approx(20 / 1024, abs=1e-5))


# --- the phase from the libraries' own frames ---


def traceback(*frames: tuple[str, str], error: str = MESSAGE, prefix: str = "[rank0]: ") -> str:
    lines = [prefix + "Traceback (most recent call last):"]
    for path, func in frames:
        lines.append(f'{prefix}  File "/usr/lib/python3.10/site-packages/{path}", line 1, in {func}')
    return "\n".join([*lines, prefix + error]) + "\n"


TRAIN = ("transformers/trainer.py", "train"), ("transformers/trainer.py", "_inner_training_loop")
DDP_WRAP = (
    *TRAIN,
    ("accelerate/accelerator.py", "prepare"),
    ("accelerate/accelerator.py", "_prepare_one"),
    ("accelerate/accelerator.py", "prepare_model"),
    ("torch/nn/parallel/distributed.py", "__init__"),
    ("torch/nn/parallel/distributed.py", "_ddp_init_helper"),
)


@pytest.mark.parametrize(
    "frames, phase",
    [
        (DDP_WRAP, "model_load"),
        ((*TRAIN, ("accelerate/accelerator.py", "prepare_model"), ("torch/distributed/fsdp/_wrap_utils.py", "_auto_wrap")), "model_load"),
        (
            (("peft/peft_model.py", "from_pretrained"), ("peft/peft_model.py", "load_adapter"), ("peft/utils/save_and_load.py", "load_peft_weights")),
            "model_load",
        ),
        ((*TRAIN, ("transformers/trainer.py", "_load_best_model"), ("peft/peft_model.py", "load_adapter")), "model_load"),
        ((*TRAIN, ("torch/optim/optimizer.py", "wrapper"), ("torch/optim/adamw.py", "step"), ("torch/optim/adamw.py", "_init_group")), "optimizer_step"),
        (
            (
                *TRAIN,
                ("transformers/trainer.py", "evaluate"),
                ("transformers/trainer.py", "evaluation_loop"),
                ("transformers/trainer_pt_utils.py", "nested_concat"),
            ),
            "evaluation",
        ),
        ((("vllm/entrypoints/llm.py", "__init__"), ("vllm/worker/worker.py", "determine_num_available_blocks")), "generation"),
        ((*TRAIN, ("transformers/trainer.py", "_save_checkpoint"), ("transformers/trainer.py", "save_model")), "checkpoint_save"),
        ((*TRAIN, ("deepspeed/runtime/engine.py", "backward"), ("deepspeed/runtime/zero/stage3.py", "backward")), "backward"),
    ],
)
def test_phase_from_frames(tmp_path, frames, phase):
    assert diagnose(log(tmp_path, traceback(*frames))).phase == phase


def test_ddp_wrap_of_25_gib_gets_sharding_first_not_activation_knobs(tmp_path):
    error = MESSAGE.replace("Tried to allocate 2.00 GiB", "Tried to allocate 25.10 GiB")
    d = diagnose(log(tmp_path, traceback(*DDP_WRAP, error=error)))
    assert d.phase == "model_load" and d.fixes[0]["overrides"] == {"deepspeed": ZERO3}
    assert not any("use_liger_kernel" in k or "per_device_train_batch_size" in k for k in keys(d))


def test_a_small_allocation_while_saving_gets_a_saving_fix_first(tmp_path):
    error = MESSAGE.replace("Tried to allocate 2.00 GiB", "Tried to allocate 16.00 MiB")
    d = diagnose(log(tmp_path, traceback(*TRAIN, ("transformers/trainer.py", "_save_checkpoint"), error=error)))
    assert d.phase == "checkpoint_save" and keys(d)[0] == {"save_only_model"}
    stage3 = traceback(
        *TRAIN, ("transformers/trainer.py", "save_model"), ("deepspeed/runtime/zero/stage3.py", "_zero3_consolidated_16bit_state_dict"), error=error
    )
    assert keys(diagnose(log(tmp_path, stage3, "z3.log")))[0] == {"zero_optimization.stage3_gather_16bit_weights_on_model_save"}


def test_oom_reported_under_an_nccl_error_keeps_the_frames_phase(tmp_path):
    text = traceback(
        *TRAIN,
        ("torch/_tensor.py", "backward"),
        ("torch/distributed/distributed_c10d.py", "all_reduce"),
        error="torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    )
    text += "[rank0]: ncclUnhandledCudaError: Call to CUDA function failed.\n[rank0]: Last error:\n[rank0]: Cuda failure 'out of memory'\n"
    d = diagnose(log(tmp_path, text))
    assert (d.kind, d.phase) == ("cuda_oom", "backward")


def test_adapter_reload_after_training_is_not_an_activation_problem(tmp_path):
    error = MESSAGE.replace("Tried to allocate 2.00 GiB", "Tried to allocate 64.00 MiB")
    d = diagnose(log(tmp_path, traceback(*TRAIN, ("transformers/trainer.py", "_load_best_model"), ("peft/peft_model.py", "load_adapter"), error=error)))
    assert d.phase == "model_load" and keys(d)[0] == {"load_best_model_at_end"}
    assert not any("use_liger_kernel" in k for k in keys(d))


def test_inside_stage3_never_suggests_zero3_and_checkpointing_frames_mean_it_is_on(tmp_path):
    frames = (*TRAIN, ("deepspeed/runtime/zero/stage3.py", "_optimizer_step"))
    text = '{"zero_optimization": {"stage": 2}}\n' + traceback(*frames)  # the frames outrank an earlier line
    d = diagnose(log(tmp_path, text))
    assert d.settings["zero_stage"] == 3 and d.phase == "optimizer_step"
    assert all(fix.get("overrides", {}).get("deepspeed") != ZERO3 for fix in d.fixes)
    checkpointed = traceback(
        *TRAIN, ("torch/_tensor.py", "backward"), ("torch/utils/checkpoint.py", "recompute_fn"), ("transformers/models/llama/modeling_llama.py", "forward")
    )
    d = diagnose(log(tmp_path, checkpointed, "ckpt.log"))
    assert d.phase == "backward" and not any("gradient_checkpointing" in k for k in keys(d))


def test_logits_in_the_frames_put_liger_first_vision_frames_put_max_pixels_first(tmp_path):
    logits = traceback(*TRAIN, ("transformers/loss/loss_utils.py", "ForCausalLMLoss"), ("torch/nn/functional.py", "cross_entropy"))
    assert keys(diagnose(log(tmp_path, logits)))[0] == {"use_liger_kernel"}
    vision = traceback(
        *TRAIN, ("transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py", "forward"), ("transformers/models/siglip/modeling_siglip.py", "forward")
    )
    assert keys(diagnose(log(tmp_path, vision, "v.log")))[0] == {"data.max_pixels"}
    plain = traceback(*TRAIN, ("transformers/models/llama/modeling_llama.py", "forward"))
    assert keys(diagnose(log(tmp_path, plain, "p.log")))[0] == {"per_device_train_batch_size"}


# --- host RAM, /dev/shm, NCCL, and crashes that are not about memory ---


def test_shm_bus_error_is_shared_memory_not_host_ram(tmp_path):
    d = diagnose(
        log(
            tmp_path,
            "ERROR: Unexpected bus error encountered in worker. This might be caused by "
            "insufficient shared memory (shm).\nRuntimeError: DataLoader worker (pid 325) is killed "
            "by signal: Bus error.\n",
        )
    )
    assert (d.kind, d.cause) == ("shm_exhausted", "shared_memory")
    assert d.fixes[0] == {"launch": {"--shm-size": "16g"}, "why": d.fixes[0]["why"]}
    killed = diagnose(log(tmp_path, "RuntimeError: DataLoader worker (pid 11) is killed by signal: Killed.\n", "k.log"))
    assert killed.kind == "host_oom" and keys(killed)[0] == {"dataloader_num_workers"}


def test_host_kill_while_loading_gets_loading_knobs(tmp_path):
    text = (
        "torchrun --nproc_per_node 8 train.py\nLoading checkpoint shards:  57%|#####  | 4/7 [00:37<00:28]\n"
        "E0629 00:06:24.298000 1402 torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: -9) "
        "local_rank: 2 (pid: 29736) of binary: /opt/conda/bin/python3.10\n"
    )
    d = diagnose(log(tmp_path, text))
    assert (d.kind, d.phase) == ("host_oom", "model_load")
    assert keys(d)[0] == {"low_cpu_mem_usage"} and {"--nproc_per_node"} in keys(d)


def test_a_launcher_teardown_with_no_python_error_is_a_kill(tmp_path):
    text = (
        "[2023-04-07 13:08:55,468] [INFO] [utils.py:829:see_memory_usage] Before initializing optimizer states\n"
        "[2023-04-07 13:09:33,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80\n"
    )
    d = diagnose(log(tmp_path, text))
    assert (d.kind, d.phase) == ("host_oom", "model_load") and "offload" in " ".join(map(str, keys(d)[:2]))
    crashed = text + "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nKeyError: 'labels'\n"
    assert diagnose(log(tmp_path, crashed, "c.log")).kind == "other_error"


def test_nccl_timeout_names_the_rank_that_fell_behind(tmp_path):
    line = (
        "[E ProcessGroupNCCL.cpp:458] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={s}, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out.\n"
    )
    d = diagnose(log(tmp_path, line.format(r=0, s=96120) + line.format(r=7, s=64088) + line.format(r=3, s=96120)))
    assert d.kind == "nccl_timeout" and d.figures["stalled_rank"] == 7 and "rank 7" in d.why


@pytest.mark.parametrize(
    "error, timeout",
    [
        ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting 45000ms for recv operation to complete", 45),
        ("RuntimeError: Application timeout caused pair closure", None),
    ],
)
def test_a_gloo_timeout_is_a_collective_timeout_without_nccl_settings(tmp_path, error, timeout):
    """A peer that stopped on a CPU (gloo) run: gloo words the same timeout two ways (both seen in this
    repository's two-node test logs); NCCL's settings do nothing for it."""
    d = diagnose(log(tmp_path, traceback(*TRAIN, ("torch/distributed/distributed_c10d.py", "all_gather"), error=error)))
    assert (d.kind, d.cause) == ("nccl_timeout", "communication")
    assert not any(k.startswith("NCCL") or k.startswith("TORCH_NCCL") for fix in keys(d) for k in fix)
    assert keys(d)[0] == {"ddp_timeout"}
    assert (f"{timeout} s timeout" in render(d)) == (timeout is not None)


def test_a_crash_that_is_not_about_memory_is_not_called_oom(tmp_path):
    text = traceback(
        *TRAIN,
        ("accelerate/accelerator.py", "clip_grad_norm_"),
        ("torch/amp/grad_scaler.py", "unscale_"),
        error="ValueError: Attempting to unscale FP16 gradients.",
        prefix="",
    )
    d = diagnose(log(tmp_path, text))
    assert (d.kind, d.cause, d.phase, d.fixes) == ("other_error", "not_memory", "optimizer_step", [])
    assert "not for memory" in render(d).splitlines()[0]


def test_host_kill_with_a_recipe_prices_host_ram(tmp_path, capsys):
    """Through the CLI's own entry, as a user runs it: stdout is the JSON alone, whatever the libraries it
    imports cold (DeepSpeed's lazy accelerator warning) would print."""
    from vramfit.cli import main

    path = log(tmp_path, "Loading checkpoint shards: 14%\nfailed (exitcode: -9) local_rank: 2 (pid: 1) of binary: x\n")
    assert main(["doctor", str(path), "--recipe", "tinychart-3b-8xa100-80g-offload", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["figures"]["planned_host_ram_gib"] > 0
    assert any("GiB of host RAM per node against the node's" in note for note in out["notes"])


def test_closed_stdout_is_no_traceback(tmp_path):
    path = log(tmp_path, MESSAGE + "\n")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from vramfit.cli import main; sys.exit(main())", "doctor", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        timeout=60,
        input=None,
        start_new_session=True,
    )
    assert done.returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from vramfit.cli import main; sys.exit(main())", "doctor", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    proc.stdout.close()  # the reader went away before the first line (| head -0)
    assert proc.wait(timeout=60) == 0
    assert b"Traceback" not in proc.stderr.read()


# --- round 3 (issue threads the corpus lacked): each rule below, one by one ---

SHARED = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 238.00 MiB. GPU 0 has a total capacity of 22.05 GiB "
    "of which 10.81 MiB is free. {others}Including non-PyTorch memory, this process has {own} memory in use. Of the "
    "allocated memory 15.43 GiB is allocated by PyTorch, and 1.07 GiB is reserved by PyTorch but unallocated.\n"
)


@pytest.mark.parametrize(
    "others, own, first",
    [
        ("Process 43872 has 4.97 GiB memory in use. ", "17.05 GiB", {"CUDA_VISIBLE_DEVICES"}),  # another workload
        # four sibling ranks' bare CUDA contexts on this GPU: no workload to move away
        ("Process 1 has 398.00 MiB memory in use. " * 4, "17.05 GiB", {"PYTORCH_CUDA_ALLOC_CONF"}),
        # a container hides which PID is this one: the listed process whose total covers PyTorch's is this one
        ("Process 26469 has 16.60 GiB memory in use. ", "0 bytes", {"PYTORCH_CUDA_ALLOC_CONF"}),
    ],
)
def test_memory_other_processes_hold_on_the_gpu_is_freed_first(tmp_path, others, own, first):
    d = diagnose(log(tmp_path, SHARED.format(others=others, own=own)))
    assert keys(d)[0] == first


FSDP_RUN = 'torchrun --nproc_per_node=5 train.py --per_device_train_batch_size 1 --fsdp "full_shard auto_wrap{}" \\\n'


@pytest.mark.parametrize("offload", ["", " offload"])
def test_an_fsdp_run_gets_fsdp_offload_never_zero3(tmp_path, offload):
    step = traceback(*TRAIN, ("torch/optim/optimizer.py", "wrapper"), ("torch/optim/adamw.py", "_multi_tensor_adamw"))
    d = diagnose(log(tmp_path, FSDP_RUN.format(offload) + step))
    assert d.settings["fsdp"] is True and d.phase == "optimizer_step"
    assert all(fix.get("overrides", {}).get("deepspeed") is None for fix in d.fixes)
    assert [fix["overrides"] for fix in d.fixes if "fsdp" in fix.get("overrides", {})] == ([] if offload else [{"fsdp": "full_shard auto_wrap offload"}])


@pytest.mark.parametrize(
    "text",
    [
        traceback(
            ("torch/nn/parallel/distributed.py", "__init__"),
            error="RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:911, unhandled system error, NCCL version 2.7.8",
        )
        + "ncclSystemError: System call (socket, malloc, munmap, etc) failed.\n",
        "host:140:140 [0] include/socket.h:333 NCCL WARN Call to bind failed : Address already in use\n"
        + traceback(("torch/distributed/distributed_c10d.py", "all_reduce"), error="")[:-1],
        "../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [640,0,0], thread: [127,0,0] "
        "Assertion `srcIndex < srcSelectDimSize` failed.\n" * 3 + traceback(*TRAIN, error="")[:-1],
    ],
    ids=["nccl-system-error", "nccl-bind", "device-side-assert"],
)
def test_nccl_setup_failures_and_device_asserts_are_not_memory_nor_timeouts(tmp_path, text):
    d = diagnose(log(tmp_path, text))
    assert (d.kind, d.cause, d.fixes) == ("other_error", "not_memory", [])


def test_a_paste_whose_line_breaks_were_lost_still_shows_the_kill(tmp_path):
    # inline code in an issue joins the launcher's lines: teardown, the -9 exit and its traceback on one line
    line = (
        "Loading checkpoint shards:   0%|          | 0/2 [00:00<?, ?it/s]WARNING:torch.distributed.elastic.multiprocessing"
        ".api:Sending process 899505 closing signal SIGTERM    ERROR:torch.distributed.elastic.multiprocessing.api:failed "
        '(exitcode: -9) local_rank: 4 (pid: 899509) of binary: /bin/python    Traceback (most recent call last):    File "/bin/torchrun"\n'
    )
    d = diagnose(log(tmp_path, line))
    assert (d.kind, d.phase, d.ranks) == ("host_oom", "model_load", [4])


def test_colab_frames_and_the_source_line_put_prediction_accumulation_first(tmp_path):
    cell = textwrap.dedent("""\
        OutOfMemoryError                          Traceback (most recent call last)
        <ipython-input-13-941869335d74> in <cell line: 1>()
        ----> 1 predictions = trainer.predict(test_dataset)

        /usr/local/lib/python3.10/dist-packages/transformers/trainer.py in evaluation_loop(self, dataloader, description)
        -> 3140                 preds_host = logits if preds_host is None else nested_concat(preds_host, logits, padding_index=-100)
        """)
    d = diagnose(log(tmp_path, cell))
    assert (d.kind, d.phase) == ("cuda_oom", "evaluation") and keys(d)[0] == {"eval_accumulation_steps"}


def test_a_traceback_that_ends_in_training_step_says_no_phase(tmp_path):
    d = diagnose(log(tmp_path, traceback(*TRAIN, ("transformers/trainer.py", "training_step"))))
    assert d.phase == "unknown"


# --- round 4 ---

RAY_KILL = (
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 10.0.0.1, ID: ab) where the task (actor ID: cd, name=WorkerDict.__init__, pid=41, memory "
    "used=56.57GB) was running was 246.41GB / 251.54GB (0.979583), which exceeds the memory usage threshold of 0.95.\n"
    "PID     MEM(GB) COMMAND\n41 56.57   ray::WorkerDict.actor_rollout_generate_sequences\n"
)


def test_ray_memory_monitor_kills_are_host_ram_not_gpu(tmp_path):
    d = diagnose(log(tmp_path, RAY_KILL))
    assert (d.kind, d.phase) == ("host_oom", "generation")  # its process table says what the node was running
    raylet = "(raylet) node_manager.cc:3099: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed\n"
    assert diagnose(log(tmp_path, raylet, "raylet.log")).kind == "host_oom"


def test_colab_linked_frames_and_loading_banners_give_the_phase(tmp_path):
    cell = (
        "OutOfMemoryError                          Traceback (most recent call last)\n"
        "[/usr/local/lib/python3.10/dist-packages/accelerate/utils/operations.py](https://localhost:8080/#) in _convert_to_fp32(tensor)\n"
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 9.47 GiB. GPU 0 has a total capacity of 14.75 GiB of which 3.78 GiB is free.\n"
    )
    assert diagnose(log(tmp_path, cell)).phase == "forward"
    banner = "Initializing language decoder from ../ckpt/vicuna_ckpt/7b_v0/ ...\n[INFO] [launch.py:314:sigkill_handler] Killing subprocess 9439\n"
    assert (lambda d: (d.kind, d.phase))(diagnose(log(tmp_path, banner, "b.log"))) == ("host_oom", "model_load")


def test_an_exception_named_before_its_original_traceback_takes_the_frames_phase(tmp_path):
    text = (
        "RuntimeError: Caught RuntimeError in replica 1 on device 1.\n"
        + traceback(("torch/nn/parallel/parallel_apply.py", "_worker"), ("transformers/models/qwen2/modeling_qwen2.py", "forward"), error="").replace(
            "Traceback", "Original Traceback"
        )[:-1]
    )
    d = diagnose(log(tmp_path, text))
    assert (d.kind, d.phase) == ("other_error", "forward")


def test_impossible_nvml_figures_name_no_other_process(tmp_path):
    d = diagnose(log(tmp_path, SHARED.format(others="Process 7 has 17179869184.00 GiB memory in use. ", own="17179869184.00 GiB")))
    assert "other_processes_gib" not in d.figures and keys(d)[0] != {"CUDA_VISIBLE_DEVICES"}


# --- round 5 ---


def test_ray_kill_report_without_its_headline_and_model_actor_init(tmp_path):
    report = (
        "Memory on the node ( ID: 37f3) where the task (actor ID: 658f, name=RewardModelRayActor.__init__, pid=5315, memory "
        "used=1.67GB) was running was 445.48GB / 468.75GB (0.950365), which exceeds the memory usage threshold of 0.95. "
        "Ray killed this worker (ID: 3842) because it was the most recently scheduled task\n"
        "PID\tMEM(GB)\tCOMMAND\n5313\t202.20\tray::CriticModelRayActor.init_model_from_pretrained\n"
    )
    d = diagnose(log(tmp_path, report))
    assert (d.kind, d.phase) == ("host_oom", "model_load")


@pytest.mark.parametrize(
    "line, variable",
    [
        ("RuntimeError: Allocation is out of device memory on current platform.", None),  # Intel XPU (ipex)
        (
            "RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB (NPU 0; 60.97 GiB total capacity; 49.92 GiB already "
            "allocated; 49.92 GiB current active; 1.66 GiB free; 58.95 GiB reserved in total by PyTorch)",
            "PYTORCH_NPU_ALLOC_CONF",
        ),
    ],
)
def test_intel_and_ascend_wordings_are_device_oom_with_their_own_allocator(tmp_path, line, variable):
    d = diagnose(log(tmp_path, line + "\n"))
    assert d.kind == "cuda_oom"
    envs = {k for fix in d.fixes for k in fix.get("env", {})}
    assert "PYTORCH_CUDA_ALLOC_CONF" not in envs and (variable is None or variable in envs)


# --- round 6 ---


def test_vllm_sleep_mode_allocator_oom_is_a_rollout_oom_in_any_case(tmp_path):
    d = diagnose(log(tmp_path, "Runtime Error: Cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp: 62\n"))
    assert (d.kind, d.phase) == ("cuda_oom", "generation")
    # an allocation inside vLLM failed with the GPU full: vLLM must ask for less (the KV-budget error asks for more)
    assert d.fixes[0]["overrides"]["vllm_gpu_memory_utilization"] < 0.9
    budget = diagnose(log(tmp_path, "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`\n", "kv.log"))
    assert budget.fixes[0]["overrides"]["vllm_gpu_memory_utilization"] > 0.7


def test_a_traceback_on_one_line_keeps_its_frames_and_its_exception(tmp_path):
    line = (
        'Traceback (most recent call last): File "/x/train.py", line 728, in train_batch loss.backward() '
        'File "/usr/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward torch.autograd.backward( '
        'File "/usr/lib/python3.11/site-packages/torch/autograd/graph.py", line 823, in _engine_run_backward return 1 '
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    d = diagnose(log(tmp_path, line))
    assert (d.kind, d.phase) == ("other_error", "backward")
    oom = line.replace("RuntimeError: CUDA error: an illegal memory access was encountered", MESSAGE)
    assert (lambda d: (d.kind, d.phase))(diagnose(log(tmp_path, oom, "oom.log"))) == ("cuda_oom", "backward")


def test_a_vision_function_in_a_compiled_copy_puts_max_pixels_first(tmp_path):
    frames = (*TRAIN, ("unsloth_compiled_cache/unsloth_compiled_module_qwen2_vl.py", "VisionSdpaAttention_forward"))
    assert keys(diagnose(log(tmp_path, traceback(*frames))))[0] == {"data.max_pixels"}
