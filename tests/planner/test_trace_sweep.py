"""benchmarks/trace_sweep.py's "misses, and why" section, on rows made here and on the committed rows."""

from __future__ import annotations

import importlib.util

import pytest

from planner_support import REPO


@pytest.fixture(scope="module")
def sweep():
    spec = importlib.util.spec_from_file_location("trace_sweep", REPO / "benchmarks" / "trace_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(arch, method, gc, length, mb, analytic, traced):
    gib = 2**30
    return {
        "arch": arch,
        "method": method,
        "gc": gc,
        "len": length,
        "req_len": length,
        "mb": mb,
        "analytic": {"act": 1.0 * gib, "alloc": analytic * gib, "peak": analytic * gib},
        "trace": {"act": 1.0 * gib, "alloc": traced * gib, "peak": traced * gib},
    }


def test_every_miss_is_explained_or_printed_as_not_explained(sweep, capsys, monkeypatch):
    monkeypatch.setitem(sweep.MISSES, ("arch-a", "qlora gc=on *x1"), "because of a named term")
    rows = [
        _row("arch-a", "full", True, 512, 1, 10.0, 10.2),  # -2%: within
        _row("arch-a", "qlora", True, 2048, 1, 9.0, 10.0),  # -10%: matches the pattern
        _row("arch-a", "qlora", True, 2048, 4, 9.0, 10.0),  # -10%: x4 is not matched
        _row("arch-b", "lora", False, 512, 1, 11.0, 10.0),  # +10%: no entry for arch-b
    ]
    sweep.summarise(rows, 0.0)
    out = capsys.readouterr().out
    section = out[out.index("misses, and why") :]
    assert "(3 outside 5%, 2 not explained)" in section
    assert "arch-a           qlora gc=on 2048x1" in section and "because of a named term" in section
    lines = [line for line in section.splitlines() if "NOT EXPLAINED" in line]
    assert [line.split()[:3] for line in lines] == [["arch-a", "qlora", "gc=on"], ["arch-b", "lora", "gc=off"]]
    assert "2048x4" in lines[0] and "+10.0%" in lines[1]
    assert sweep.label(rows[1]) == "qlora gc=on 2048x1" and sweep.explain(rows[2]) is None


def test_committed_rows_cover_the_grid_and_name_their_misses(sweep, capsys):
    """The committed sweep: >= 25 architectures with the whole grid (incl. 6 VLMs), and its printed
    misses are exactly the points outside 5%, each with its reason or NOT EXPLAINED."""
    rows = sweep.read_rows([REPO / "benchmarks" / "trace_sweep_rows.jsonl"])
    sweep.summarise(rows, 0.0)
    out = capsys.readouterr().out
    grid = {}
    for r in rows:
        if "alloc_pct" in r:
            grid.setdefault(r["arch"], set()).add(sweep.label(r))
    full = [a for a, points in grid.items() if len(points) >= sweep.GRID_POINTS]
    assert len(full) >= 25, sorted(grid)
    vlms = {name for name, _, kind in sweep.ARCHS if kind.startswith("VLM")}
    assert len(vlms & set(full)) >= 6
    found = sweep.misses(rows)
    assert all(abs(r["alloc_pct"]) > 5 for r, _ in found)
    assert sum(abs(r["alloc_pct"]) > 5 for r in rows if "alloc_pct" in r) == len(found)
    assert out.count("NOT EXPLAINED") == sum(why is None for _, why in found)
    assert f"architectures with the whole grid compared: {len(full)}" in out


def test_frozen_vision_tower_under_checkpointing_keeps_its_block_inputs(tmp_path):
    """transformers 5.23 `gradient_checkpointing_enable` -> `enable_input_require_grads` hooks every
    input embedding, the vision tower's patch embedding too: a frozen tower then runs under autograd
    and each checkpointed block keeps its input. Traced per vision layer against the analytic term."""
    import json

    from transformers import Qwen2_5_VLConfig

    from vramfit.planner import Setup, params, trace, training

    cfg = Qwen2_5_VLConfig(
        text_config=dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=1, num_key_value_heads=1, vocab_size=300),
        vision_config=dict(depth=4, hidden_size=96, intermediate_size=192, num_heads=4, out_hidden_size=128, fullatt_block_indexes=[3], window_size=112),
    )
    path = tmp_path / "qwen25vl.json"
    path.write_text(json.dumps(cfg.to_dict(), default=str))
    base = dict(label="t", source="t", model_config=path, gpu="a100-80g", gpus_per_node=1, engine="single", precision="bf16-true")
    s = Setup(**base, optimizer="adamw_torch", seq_len=128, micro_batch=1, images_per_sample=1, image_tokens=64, vision_patches=256)
    s = s.replace(gradient_checkpointing=True, train_vision=False)
    arch = params.summary(path)
    counts = params.count(arch, s)
    assert counts.vision_grad_layers == 0
    kept, _ = training.vision_training(s, arch, counts)
    per_layer = 2 * 96 * 256  # one bf16 block input of 256 patches
    assert kept == 4 * per_layer
    assert training.vision_training(s.replace(gradient_checkpointing=False), arch, counts)[0] == 0
    traced = trace.trace_step(s, cache=False, check_linear=False).per_layer["vision"]
    assert abs(traced - per_layer) <= 0.05 * per_layer, (traced, per_layer)
