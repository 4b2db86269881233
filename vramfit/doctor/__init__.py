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


def diagnose(path_or_stream: Union[str, os.PathLike, BinaryIO]) -> Diagnosis:
    """Diagnose a log given as a path or an open (binary or text) stream."""
    if isinstance(path_or_stream, (str, os.PathLike)):
        from vramfit.inputs import open_log  # a regular file only (a FIFO or /dev/zero would never end)

        with open_log(path_or_stream) as stream:
            return _diagnose(stream, os.fspath(path_or_stream))
    return _diagnose(path_or_stream, str(getattr(path_or_stream, "name", "<stream>")))


def _diagnose(stream: BinaryIO, source: str) -> Diagnosis:
    scan = Scan()
    for lines, nul_bytes in read_lines(stream):
        scan.feed(lines)
        scan.nul_bytes += nul_bytes
    scan.finish()
    diagnosis, root = classify(scan, source)
    if root is not None:
        diagnosis.fixes = fixes_for(diagnosis, root, scan.settings.world_size(), scan.settings.per_node(),
                                    scan._hint_text)
    return diagnosis
