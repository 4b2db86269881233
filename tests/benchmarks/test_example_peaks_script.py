"""benchmarks/example_peaks.py: published configs reviewed against the peaks their projects publish beside them.

The corpus is data kept as published: every sidecar names its source and the README line that states the figure,
and the figure it records is the one in that line. The script reviews a case in-process and says per case whether it
was planned, left incomplete (and why) or stopped, without a traceback; the totals are printed. Behaviour, not figures.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "example_peaks.py"
AXOLOTL = REPO / "benchmarks" / "example_peaks" / "axolotl-ai-cloud+axolotl"


def _script():
    spec = importlib.util.spec_from_file_location("example_peaks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("example_peaks", module)
    spec.loader.exec_module(module)
    return module


def test_every_axolotl_sidecar_names_its_source_and_the_line_it_quotes():
    sides = sorted(AXOLOTL.glob("**/*.peak.json"))
    assert len(sides) >= 60
    for side in sides:
        meta = json.loads(side.read_text())
        assert meta["repo"] == "axolotl-ai-cloud/axolotl" and len(meta["commit"]) == 40, side
        assert (side.parent / meta["file"]).is_file() and meta["path"].endswith(meta["file"]), side
        assert f"{meta['figure']:g}" in meta["readme_line"].replace(",", ""), side  # the figure is the quoted line's
        factor = 1e9 / 2**30 if meta["unit"] == "GB" else 1.0
        assert abs(meta["gib_per_gpu"] - meta["figure"] * factor) < 0.01, side
        assert meta["metric"] in ("unstated", "allocated", "reserved", "nvidia-smi") and meta["gpus"] >= 1, side


def test_cases_are_reviewed_without_a_traceback_and_each_gets_a_status():
    module = _script()
    chosen = {case[0]: case for case in module.cases() if case[0].endswith(("llama-2/qlora.yml", "hunyuan-v1-dense-qlora.yaml", "qwen3.5/27b-fft.yaml"))}
    assert len(chosen) == 3
    rows = {name: module.score(*case) for name, case in chosen.items()}
    planned, incomplete, stopped = (next(r for n, r in rows.items() if n.endswith(end)) for end in ("qlora.yml", "qlora.yaml", "27b-fft.yaml"))
    assert planned["status"] == "planned" and planned["card"] == "rtx4090" and planned["planned"] > 0 and planned["fits"]
    assert incomplete["status"] == "incomplete" and incomplete["missing_model"] == "tencent/Hunyuan-0.5B-Instruct"
    assert stopped["status"] == "stopped" and "unfrozen_parameters" in stopped["why"]


def test_the_script_prints_the_totals():
    module = _script()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert module.main(["-k", "llama-2/lora.yml"]) == 0
    text = out.getvalue()
    assert "cases: 1; planned: 1" in text and "false errors" in text and "median |error|" in text
