"""The length-extrapolated trace (trace.py `_length_plan`) against a direct trace at the same length.

A text stack of Gated DeltaNet layers (Qwen3.5, Qwen3-Next) is traced at 128-512 tokens per sample and extrapolated in
length; this prints, per case, the extrapolated and the direct trace's allocated peak and train-phase transients (bytes),
their difference, and the CPU seconds of each (cold: a private, empty cache; the direct trace is never cached).

Usage:
    python benchmarks/trace_length.py                       # the default cases (minutes: the direct traces are slow)
    python benchmarks/trace_length.py --case model_configs/hub/qwen3.5-4b.json:2048:images_per_sample=0
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

CASES = (
    # config : tokens per sample : overrides (comma-separated)
    "model_configs/hub/qwen3.5-4b.json:2048:images_per_sample=0",
    "model_configs/hub/qwen3.5-4b.json:8192:",
    "model_configs/hub/qwen3-next-80b-a3b-instruct.json:4096:per_device_train_batch_size=2,attn_implementation=flash_attention_2",
)
BASE = ["method=lora", "bf16=true", "gradient_checkpointing=true", "per_device_train_batch_size=1", "mixer_kernels=torch"]  # the looping torch path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="config:tokens:overrides")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["VRAMFIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="vramfit-trace-length-")
    from vramfit.planner import Setup, params, trace

    print(f"{'case':<70} {'peak extrapolated':>18} {'peak direct':>16} {'diff':>8} {'s extrap':>9} {'s direct':>9}")
    for case in args.case or CASES:
        config, tokens, extra = case.split(":", 2)
        setup = Setup.from_args(config, "h100", 1, overrides=[*BASE, f"seq_len={tokens}", *filter(None, extra.split(","))])
        arch = params.summary(setup.model_config)
        started = time.process_time()
        extrapolated = trace.trace_step(setup, arch, cache=False)
        extrap_s = time.process_time() - started
        plan = trace._length_plan
        trace._length_plan = lambda setup, arch: None
        try:
            started = time.process_time()
            direct = trace.trace_step(setup, arch, cache=False)
            direct_s = time.process_time() - started
        finally:
            trace._length_plan = plan
        for field in ("peak_bytes", "train_transient"):
            got, want = getattr(extrapolated, field), getattr(direct, field)
            label = f"{config.rsplit('/', 1)[-1]} {tokens} {extra} {field}"
            print(f"{label:<70} {got:>18,} {want:>16,} {100 * (got - want) / want:>7.3f}% {extrap_s:>9.1f} {direct_s:>9.1f}")
        print(f"  lengths traced: {extrapolated.lengths}; linear: {extrapolated.linear}")


if __name__ == "__main__":
    main()
