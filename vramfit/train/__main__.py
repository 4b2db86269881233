"""`python -m vramfit.train --run-dir RUN_DIR`, once per rank.

Exit codes: 0 trained and saved; 2 bad input found before training (a malformed data record, a
checkpoint the recipe's class cannot load); anything else raised is a failed run (1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from vramfit.problems import EXIT_BAD_INPUT, EXIT_OK


def training_arguments(recipe, run_dir: Path, output_dir: Path):
    """TrainingArguments / GRPOConfig from recipe.training, pointed at the run's DeepSpeed JSON."""
    from vramfit.checks.training_args import config_class
    from vramfit.libraries import verbose

    quiet = {} if verbose() else {"disable_tqdm": True}  # callbacks.ProgressLine prints one line a step instead
    counted = {} if recipe.method == "grpo" else {"include_num_input_tokens_seen": "non_padding"}  # tokens/s in the summary (TRL logs num_tokens)
    values = {**quiet, **counted, **recipe.training, "output_dir": str(output_dir), "deepspeed": str(run_dir / "deepspeed.json")}
    return config_class(recipe.method)(**values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vramfit.train", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True, help="folder holding recipe.json and deepspeed.json")
    # The DeepSpeed launcher appends --local_rank=N (the rank is read from LOCAL_RANK instead).
    options, _ = parser.parse_known_args(argv)
    run_dir = options.run_dir.resolve()

    from vramfit import libraries

    libraries.quiet_rank()  # before the libraries are imported: their notices are filtered where they arise
    from vramfit.train import cpu_shims

    cpu_shims.install()
    from vramfit import multinode, outputs
    from vramfit.recipe import Recipe
    from vramfit.train import callbacks
    from vramfit.train.data import DataError
    from vramfit.train.model import ModelError, check_checkpoint

    recipe = Recipe.model_validate(json.loads((run_dir / "recipe.json").read_text()))
    output_dir = outputs.output_dir(recipe, run_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        check_checkpoint(recipe)
        with libraries.drop_stdout_lines(r"DeepSpeed \S+ built successfully"):  # its CPU shm op, every rank
            args = training_arguments(recipe, run_dir, output_dir)  # starts the process group
        multinode.assert_same_everywhere(run_dir)  # every rank runs the same code and resolved config
        hooks = [
            callbacks.MetricsLog(output_dir / "metrics.jsonl"),
            callbacks.ParamCheck(output_dir / "param_check.json"),
            callbacks.MarkComplete(),
            callbacks.ProgressLine(),
            callbacks.RunSummary(output_dir / "summary.json", recipe.method),
        ]
        if recipe.method == "grpo":
            from vramfit.train import grpo as method
        else:
            from vramfit.train import sft as method
        method.train(recipe, args, output_dir, hooks)
        code = EXIT_OK
    except (DataError, ModelError) as exc:  # found alike by every rank, before training
        print(f"vramfit: {exc}", file=sys.stderr, flush=True)
        code = EXIT_BAD_INPUT
    except BaseException:
        shutdown(wait=False)  # peers blocked in a collective fail at once instead of at the timeout
        raise
    shutdown(wait=True)
    return code


def shutdown(wait: bool) -> None:
    """Destroy the process groups (DeepSpeed's references to them included) before interpreter exit,
    where ranks otherwise abort ("terminate called without an active exception", exit -6). With
    wait, every rank first waits until all have finished (rank 0 may still be writing files)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    import deepspeed.comm

    if wait:
        dist.barrier()
    if deepspeed.comm.is_initialized():
        deepspeed.comm.destroy_process_group()
    else:
        dist.destroy_process_group()


def exit_now(code: int) -> None:
    """Leave without interpreter teardown once everything is saved and the groups are destroyed.

    Even after destroy_process_group, a communication thread (gloo, DeepSpeed's shm op) is now
    and then still attached when Python tears down, and the rank aborts with "terminate called
    without an active exception" (exit -6) after a complete run: seen 1 run in ~30 here.
    """
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run() -> None:
    """main(), then out without interpreter teardown, on failure too: a rank whose collective failed
    (a peer died or hung, the ddp_timeout expired) still has gloo/NCCL work queued on communication
    threads, and the interpreter's exit waited on them for good (seen: the traceback printed, the
    rank alive 400 s later), so the launcher never learnt the run had failed."""
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    exit_now(code)


if __name__ == "__main__":
    run()
