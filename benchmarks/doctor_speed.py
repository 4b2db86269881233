"""How fast `vramfit doctor` reads a large log, and how much memory it holds doing it.

    python benchmarks/doctor_speed.py [--mb 100]

Writes a realistic log into a temporary directory: 8 ranks' worth of rank-prefixed progress bars with
carriage returns, loss lines, colour-coded warnings, then a CUDA OOM traceback and torchrun's
ChildFailedError block near the end. Prints the wall time of `diagnose` on it and its peak Python memory
(tracemalloc, a second run). Target: under 5 s for 100 MB on a 2-core machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from vramfit.doctor import diagnose

TOTAL_STEPS = 400000
STEP = (
    "\r{pct:3d}%|{bar}| {n}/{total} [{el}<{rem}, 12.34s/it]\r{pct:3d}%|{bar}| {n}/{total} [{el}<{rem}, 12.33s/it]\n"
    "[rank0]: {{'loss': {loss:.4f}, 'grad_norm': {gn:.3f}, 'learning_rate': 1.9e-05, 'epoch': {ep:.3f}}}\n"
)
WARNING = (
    "[rank{r}]: \x1b[33m[2024-11-05 03:14:{s:02d},{ms:03d}] [WARNING] [stage3.py:2114:step] 1 pytorch allocator "
    "cache flushes since last step. this happens when there is high memory pressure\x1b[0m\n"
)
TAIL = """[rank3]: Traceback (most recent call last):
[rank3]:   File "train.py", line 188, in train
[rank3]:     trainer.train()
[rank3]:   File "/usr/lib/python3.10/site-packages/transformers/trainer.py", line 2548, in _inner_training_loop
[rank3]:     tr_loss_step = self.training_step(model, inputs, num_items_in_batch)
[rank3]:   File "/usr/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 2020, in backward
[rank3]:     self.optimizer.backward(loss, retain_graph=retain_graph)
[rank3]:   File "/usr/lib/python3.10/site-packages/torch/_tensor.py", line 581, in backward
[rank3]:     torch.autograd.backward(
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of \
79.25 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.22 GiB memory in use. Of the \
allocated memory 75.11 GiB is allocated by PyTorch, and 1.55 GiB is reserved by PyTorch but unallocated.
E1105 03:14:21.662000 1400 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 3 \
(pid: 1423) of binary: /usr/bin/python3
"""


def write_log(path: Path, megabytes: float) -> None:
    """A log of about `megabytes` MB, mostly progress and loss lines, with an OOM at the end."""
    target = int(megabytes * 1e6)
    written, n = 0, 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            block = []
            for _ in range(2000):
                n = n % TOTAL_STEPS + 1
                frac = n / TOTAL_STEPS
                filled = int(10 * frac)
                block.append(
                    STEP.format(
                        pct=int(100 * frac),
                        bar="\u2588" * filled + " " * (10 - filled),
                        n=n,
                        total=TOTAL_STEPS,
                        el=f"{n // 290}:{n % 60:02d}:{n % 47:02d}",
                        rem=f"{(TOTAL_STEPS - n) // 290}:{n % 37:02d}:{n % 53:02d}",
                        loss=1.0 / (1 + n % 97),
                        gn=(n % 31) / 7,
                        ep=frac,
                    )
                )
                if n % 50 == 0:
                    block.append(WARNING.format(r=n % 8, s=n % 60, ms=n % 1000))
            text = "".join(block)
            out.write(text)
            written += len(text.encode())
        out.write(TAIL)


def measure(path: Path) -> tuple[float, float, object]:
    """(seconds, peak MiB, diagnosis): time from a plain run, peak memory from a traced one."""
    start = time.perf_counter()
    diagnosis = diagnose(path)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    diagnose(path)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak, diagnosis


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100, help="log size in MB (default 100)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.log"
        write_log(path, args.mb)
        size = path.stat().st_size / 1e6
        seconds, peak, diagnosis = measure(path)
    print(
        f"doctor: {size:.0f} MB log, {diagnosis.lines_read} lines: {seconds:.2f} s "
        f"({size / seconds:.0f} MB/s), peak Python memory {peak:.1f} MiB; "
        f"found {diagnosis.kind} in {diagnosis.phase} ({diagnosis.cause})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
