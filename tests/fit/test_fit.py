"""`vramfit fit`: the table and JSON keep the global batch and the pins, the winner fits with margin,
rejected families carry their reason, bad input exits 2, nothing fitting exits 1, --write validates."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit.cli import main

REPO = Path(__file__).resolve().parents[2]
LLAMA3B = str(REPO / "model_configs" / "llama-3.2-3b.json")


def fit_json(capsys, *argv) -> tuple[int, dict]:
    code = main(["fit", *argv, "--json", "--top", "200"])
    return code, json.loads(capsys.readouterr().out)


def test_recipe_fit_keeps_the_global_batch_and_the_winner_fits(capsys):
    code, data = fit_json(capsys, "axolotl-llama-3b-8xa100-80g")
    assert code == 0
    assert data["global_batch_size"] == 32 and data["ranked"]
    world = data["gpus_per_node"] * data["nodes"]
    for row in data["ranked"]:
        k = row["knobs"]
        assert k["per_device_train_batch_size"] * k["gradient_accumulation_steps"] * world == 32
        assert row["fits"] and row["peak_gib"] <= row["usable_gib"]
    win = data["winner"]
    assert win["writable"] and win["margin_gib"] > 0 and win["step_s"] > 0 and win["tokens_per_s"] > 0
    steps = [r["step_s"] for r in data["ranked"]]
    assert all(step <= min(steps[i:]) * 1.0101 for i, step in enumerate(steps))  # ranked by time, 1% ties


def test_pins_are_never_changed(capsys):
    code, data = fit_json(capsys, "axolotl-llama-3b-8xa100-80g", "gradient_checkpointing=true", "per_device_train_batch_size=2",
                          "deepspeed=zero2")
    assert code == 0
    assert data["pins"] == {"gradient_checkpointing": True, "per_device_train_batch_size": 2, "deepspeed": "zero2"}
    for row in data["ranked"]:
        assert row["knobs"]["gradient_checkpointing"] is True
        assert row["knobs"]["per_device_train_batch_size"] == 2 and row["knobs"]["gradient_accumulation_steps"] == 2
        assert row["knobs"]["deepspeed"] == "zero2"
    assert not any(r["knob"] in data["pins"] for r in data["rejected"])


def test_a_rejected_family_shows_its_reason(capsys):
    # Llama-3.2-3B full on one 24 GB card at 2k: plain Adam states (16 B x 3.2B) cannot fit; offload or 8-bit must.
    argv = ["--model-config", LLAMA3B, "--gpu", "rtx4090", "--gpus", "1", "--seq-len", "2048", "--global-batch-size", "8",
            "--host-ram-gib", "128", "optim=adamw_torch_fused"]
    code, data = fit_json(capsys, *argv)
    reasons = {(r["knob"], r["value"]): r["reason"] for r in data["rejected"]}
    none = reasons[("deepspeed", "none")]
    assert none.startswith("does not fit: lowest peak") and "GiB usable" in none
    assert code == 0 and data["winner"]["margin_gib"] > 0
    main(["fit", *argv])
    out = capsys.readouterr().out
    assert "rejected (each family value not chosen, and why):" in out
    assert "deepspeed=none: does not fit: lowest peak" in out
    assert "winner:" in out


def test_nothing_fits_exits_1_and_shows_the_closest(capsys):
    code, data = fit_json(capsys, "--model-config", str(REPO / "model_configs" / "llama-3.1-70b.json"), "--gpu", "t4", "--gpus", "1",
                          "--global-batch-size", "1", "--host-ram-gib", "64")
    assert code == 1 and data["winner"] is None and data["ranked"] == [] and data["closest"]


@pytest.mark.parametrize("argv, key", [
    (["axolotl-llama-3b-8xa100-80g", "--global-batch-size", "30"], "global_batch_size"),
    (["axolotl-llama-3b-8xa100-80g", "per_device_train_batch_size=3"], "per_device_train_batch_size"),
    (["axolotl-llama-3b-8xa100-80g", "--gpu", "a100"], "--gpu"),
    (["axolotl-llama-3b-8xa100-80g", "deepspeed=zero9"], "deepspeed"),
    (["axolotl-llama-3b-8xa100-80g", "gradient_checkpointing=maybe"], "gradient_checkpointing"),
    (["--model-config", LLAMA3B, "--gpus", "8"], "--gpu"),
    (["axolotl-llama-3b-8xa100-80g", "--write", "Not A Name"], "--write"),
])
def test_bad_input_exits_2_naming_the_key(capsys, argv, key):
    assert main(["fit", *argv]) == 2
    err = capsys.readouterr().err
    assert f": {key}: " in err and "Fix:" in err


def test_write_produces_a_recipe_that_validates_and_plans(tree, capsys):
    from vramfit.recipe import load
    from vramfit.validate import validate

    name = "llama-3.2-3b-full-2xa10"
    code = main(["fit", "--model-config", str(tree / "model_configs" / "llama-3.2-3b.json"), "--gpu", "a10", "--gpus", "2",
                 "--seq-len", "1024", "--global-batch-size", "16", "--host-ram-gib", "256", "--write", name])
    assert code == 0, capsys.readouterr()
    folder = tree / "recipes" / name
    recipe = load(folder / "recipe.yaml")
    result = validate(folder / "recipe.yaml", [], plan=True)
    assert result.plan.fits and recipe.global_batch_size == 16
    text = (folder / "recipe.yaml").read_text()
    header = text.split("\nname:")[0]
    for field in ("Hardware:", "Command:", "Expect:", f"make run RECIPE={name}"):
        assert field in header
    for knob in ("deepspeed:", "per_device_train_batch_size:", "gradient_checkpointing:", "use_liger_kernel:",
                 "attn_implementation:", "optim:"):
        line = next(line for line in text.splitlines() if line.strip().startswith(knob))
        assert "#" in line, f"no trade-off comment on {knob}"
    readme = (folder / "README.md").read_text()
    assert "## Why this configuration" in readme and "<!-- plan:start -->" in readme and "GiB per GPU" in readme
    assert (folder / "launch.sh").read_text() == (tree / "recipes" / "vlm-r1-h20" / "launch.sh").read_text()
    assert main(["fit", "--model-config", str(tree / "model_configs" / "llama-3.2-3b.json"), "--gpu", "a10", "--gpus", "2",
                 "--write", name]) == 2  # never overwrites


def test_the_catalogue_names_a_source_and_speeds_for_every_card():
    from vramfit.hardware import CATALOGUE
    from vramfit.recipe import NAME_RE

    for name in ("rtx3090", "rtxa6000", "l4", "a10", "v100-16g", "h800", "b200", "t4", "a100-80g", "h100", "h20"):
        g = CATALOGUE[name]
        assert g.peak_tflops > 0 and g.memory_gbs > 0 and g.link_gbs > 0 and g.pcie_gbs > 0 and g.network_gbs > 0
        assert len(g.source) > 40
        match = NAME_RE.match(f"llama-3b-8x{name}")
        assert match and match["gpu"] == name


def test_grpo_keeps_the_completion_batch_and_trl_s_generation_rule(capsys):
    code, data = fit_json(capsys, "vlm-r1-h20")
    assert code == 0 and data["ranked"]
    world = data["gpus_per_node"] * data["nodes"]
    for row in data["ranked"]:
        k = row["knobs"]
        assert k["per_device_train_batch_size"] * k["gradient_accumulation_steps"] * world == 96
        assert (k["per_device_train_batch_size"] * world * k["steps_per_generation"]) % 4 == 0  # num_generations 4
        assert row["step_parts_s"]["generation"] > 0


def test_the_winner_is_retimed_with_traced_flops_when_the_trace_exists(capsys, monkeypatch):
    """Issue 13's `vramfit.planner.trace.step_flops(setup)`; a stand-in module here, 20% above the analytic count."""
    import sys
    import types

    from vramfit.fit import steptime
    from vramfit.planner import params

    def step_flops(setup):
        arch = params.summary(setup.model_config)
        return int(1.2 * steptime.analytic_flops(setup, arch, params.count(arch, setup)).total)

    monkeypatch.setitem(sys.modules, "vramfit.planner.trace", types.SimpleNamespace(step_flops=step_flops))
    code, data = fit_json(capsys, "axolotl-llama-3b-8xa100-80g")
    assert code == 0
    assert data["flops_source"].startswith("trace") and data["winner"]["flops_source"] == "trace"
    assert any("traced" in n and "+20%" in n for n in data["notes"])
