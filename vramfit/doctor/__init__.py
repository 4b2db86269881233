"""`vramfit doctor`: read a crash log, say what ran out and where, and which settings fix it.

    from vramfit.doctor import diagnose, render
    print(render(diagnose("train.log")))

Standard library only, so `vramfit doctor` starts fast. The log is streamed: memory stays bounded
whatever its size.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Union

from vramfit.doctor.classify import classify
from vramfit.doctor.diagnosis import Diagnosis
from vramfit.doctor.fixes import fixes_for
from vramfit.doctor.lines import read_lines
from vramfit.doctor.render import render
from vramfit.doctor.scan import Scan

__all__ = ["Diagnosis", "diagnose", "render"]

# what `vramfit review` reads: a launch script, a notebook, a config
CONFIGS = (".sh", ".bash", ".slurm", ".sbatch", ".py", ".ipynb", ".yaml", ".yml", ".json")


def diagnose(path_or_stream: Union[str, os.PathLike, BinaryIO]) -> Diagnosis:
    """Diagnose a log given as a path or an open (binary or text) stream."""
    if isinstance(path_or_stream, (str, os.PathLike)):
        from vramfit.inputs import open_log  # a regular file only (a FIFO or /dev/zero would never end)

        with open_log(path_or_stream) as stream:
            diagnosis = _diagnose(stream, os.fspath(path_or_stream))
        if diagnosis.kind == "unknown" and os.fspath(path_or_stream).endswith(CONFIGS):  # a script given for a log
            diagnosis.notes.append(
                f"{os.fspath(path_or_stream)} looks like a launch script or config, not a log: `vramfit review {os.fspath(path_or_stream)}` reviews it."
            )
        return diagnosis
    return _diagnose(path_or_stream, str(getattr(path_or_stream, "name", "<stream>")))


def _diagnose(stream: BinaryIO, source: str) -> Diagnosis:
    scan = Scan()
    for lines, nul_bytes in read_lines(stream):
        scan.feed(lines)
        scan.nul_bytes += nul_bytes
    scan.finish()
    diagnosis, root = classify(scan, source)
    if root is not None:
        _micro_batch(scan, diagnosis, root)
        diagnosis.fixes = fixes_for(diagnosis, root, scan.settings.world_size(), scan.settings.per_node(), scan._hint_text)
    return diagnosis


def _micro_batch(scan: Scan, diagnosis: Diagnosis, root) -> None:
    """The micro-batch a CUDA OOM's tensors show (a logits shape, or a request sized exactly as one), kept as
    `micro_batch_from_shapes` with its evidence; the batch fixes start from it when no setting says the batch."""
    if diagnosis.kind != "cuda_oom":
        return
    halve = any(func == "concatenated_forward" for _, func in root.frames)
    shown = scan.settings.micro_batch(diagnosis.figures.get("requested_gib"), halve=halve)
    if shown is None:
        return
    count, evidence, how = shown
    diagnosis.settings["micro_batch_from_shapes"] = count
    diagnosis.settings["micro_batch_evidence"] = how
    diagnosis.notes.append(f"Micro-batch {count} read from {how}.")
    if evidence and all(e["line"] != evidence["line"] for e in diagnosis.evidence):
        diagnosis.evidence.append(evidence)
