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
    code, data = fit_json(capsys, "axolotl-llama-3b-8xa100-80g", "gradient_checkpointing=true", "per_device_train_batch_size=2", "deepspeed=zero2")
    assert code == 0
    assert data["pins"] == {"gradient_checkpointing": True, "per_device_train_batch_size": 2, "deepspeed": "zero2"}
    for row in data["ranked"]:
        assert row["knobs"]["gradient_checkpointing"] is True
        assert row["knobs"]["per_device_train_batch_size"] == 2 and row["knobs"]["gradient_accumulation_steps"] == 2
        assert row["knobs"]["deepspeed"] == "zero2"
    assert not any(r["knob"] in data["pins"] for r in data["rejected"])


def test_a_rejected_family_shows_its_reason(capsys):
    # Llama-3.2-3B full on one 24 GB card at 2k: plain Adam states (16 B x 3.2B) cannot fit; offload or 8-bit must.
    argv = [
        "--model-config",
        LLAMA3B,
        "--gpu",
        "rtx4090",
        "--gpus",
        "1",
        "--seq-len",
        "2048",
        "--global-batch-size",
        "8",
        "--host-ram-gib",
        "128",
        "optim=adamw_torch_fused",
    ]
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
    code, data = fit_json(
        capsys,
        "--model-config",
        str(REPO / "model_configs" / "llama-3.1-70b.json"),
        "--gpu",
        "t4",
        "--gpus",
        "1",
        "--global-batch-size",
        "1",
        "--host-ram-gib",
        "64",
    )
    assert code == 1 and data["winner"] is None and data["ranked"] == [] and data["closest"]


@pytest.mark.parametrize(
    "argv, key",
    [
        (["axolotl-llama-3b-8xa100-80g", "--global-batch-size", "30"], "global_batch_size"),
        (["axolotl-llama-3b-8xa100-80g", "per_device_train_batch_size=3"], "per_device_train_batch_size"),
        (["axolotl-llama-3b-8xa100-80g", "--gpu", "a100"], "--gpu"),
        (["axolotl-llama-3b-8xa100-80g", "deepspeed=zero9"], "deepspeed"),
        (["axolotl-llama-3b-8xa100-80g", "gradient_checkpointing=maybe"], "gradient_checkpointing"),
        (["--model-config", LLAMA3B, "--gpus", "8"], "--gpu"),
        (["axolotl-llama-3b-8xa100-80g", "--write", "Not A Name"], "--write"),
    ],
)
def test_bad_input_exits_2_naming_the_key(capsys, argv, key):
    assert main(["fit", *argv]) == 2
    err = capsys.readouterr().err
    assert f": {key}: " in err and "Fix:" in err


def test_write_produces_a_recipe_that_validates_and_plans(tree, capsys):
    from vramfit.recipe import load
    from vramfit.validate import validate

    name = "llama-3.2-3b-full-2xa10"
    code = main(
        [
            "fit",
            "--model-config",
            str(tree / "model_configs" / "llama-3.2-3b.json"),
            "--gpu",
            "a10",
            "--gpus",
            "2",
            "--seq-len",
            "1024",
            "--global-batch-size",
            "16",
            "--host-ram-gib",
            "256",
            "--write",
            name,
        ]
    )
    assert code == 0, capsys.readouterr()
    folder = tree / "recipes" / name
    recipe = load(folder / "recipe.yaml")
    result = validate(folder / "recipe.yaml", [], plan=True)
    assert result.plan.fits and recipe.global_batch_size == 16
    text = (folder / "recipe.yaml").read_text()
    header = text.split("\nname:")[0]
    for field in ("Hardware:", "Command:", "Expect:", f"make run RECIPE={name}"):
        assert field in header
    for knob in ("deepspeed:", "per_device_train_batch_size:", "gradient_checkpointing:", "use_liger_kernel:", "attn_implementation:", "optim:"):
        line = next(line for line in text.splitlines() if line.strip().startswith(knob))
        assert "#" in line, f"no trade-off comment on {knob}"
    readme = (folder / "README.md").read_text()
    assert "## Why this configuration" in readme and "<!-- plan:start -->" in readme and "GiB per GPU" in readme
    assert (folder / "launch.sh").read_text() == (tree / "recipes" / "vlm-r1-h20" / "launch.sh").read_text()
    assert (
        main(["fit", "--model-config", str(tree / "model_configs" / "llama-3.2-3b.json"), "--gpu", "a10", "--gpus", "2", "--write", name]) == 2
    )  # never overwrites


def test_the_catalogue_names_a_source_and_speeds_for_every_card():
    from vramfit.hardware import CATALOGUE
    from vramfit.recipe import NAME_RE

    for name in ("rtx3090", "rtxa6000", "l4", "l20", "l40s", "a800", "a10", "v100-16g", "h800", "b200", "t4", "a100-80g", "h100", "h20"):
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
    assert data["flops_source"].startswith("vramfit.planner.trace.step_flops") and data["winner"]["flops_source"] == "trace"
    assert any("step_flops" in n and "+20%" in n for n in data["notes"])
    # every fitting candidate is re-timed with the same ratio, so the table compares like with like
    assert all(r["flops_source"] in ("trace", "analytic x trace ratio") for r in data["ranked"])
    steps = [r["step_s"] for r in data["ranked"]]
    assert all(step <= min(steps[i:]) * 1.0101 for i, step in enumerate(steps))


def test_the_output_names_the_flop_source_of_the_real_trace(capsys):
    code, data = fit_json(capsys, "llama-3.1-8b-full-8xh100")
    assert code == 0 and data["winner"]["flops_source"] == "trace"
    assert "step_flops" in data["flops_source"]


def test_fsdp_is_a_family_beside_zero_and_wins_or_loses_with_a_reason(capsys):
    code, data = fit_json(capsys, "llama-3.1-8b-full-8xh100")
    assert code == 0
    fsdp_rows = [r for r in data["ranked"] if r["knobs"]["deepspeed"].startswith("fsdp")]
    assert fsdp_rows, "no FSDP candidate fits Llama-3.1-8B full on 8 x H100"
    row = fsdp_rows[0]
    assert row["comm_gb_per_step"] > 0 and row["step_parts_s"]["compute"] > 0
    if not data["winner"]["knobs"]["deepspeed"].startswith("fsdp"):
        reasons = {r["value"]: r["reason"] for r in data["rejected"] if r["knob"] == "deepspeed"}
        assert "fsdp2" in reasons and reasons["fsdp2"].startswith("fits (")
        off = reasons["fsdp2_offload"]
        assert off.startswith("fits (") and ("slower" in off or "validator rejects `deepspeed: none`" in off)
        assert float(off.split("), ")[1].split(" s/step")[0].split(": ")[-1]) > row["step_s"]  # PCIe + host step
    assert not any("FSDP" in n and "not model" in n for n in data["notes"])


def test_fsdp_and_vllm_pins_are_kept(capsys):
    code, data = fit_json(capsys, "llama-3.1-8b-full-8xh100", "fsdp=full_shard auto_wrap", "fsdp_config.version=2")
    assert code in (0, 1)
    assert data["pins"]["fsdp"] == "full_shard auto_wrap"
    rows = data["ranked"] or data["closest"]
    assert rows and all(r["knobs"]["deepspeed"] == "fsdp2" for r in rows)
    assert not any(r["knob"] == "deepspeed" for r in data["rejected"])
    code, data = fit_json(capsys, "qwen3-8b-grpo-8xh100", "vllm_gpu_memory_utilization=0.5", "vllm_enable_sleep_mode=true", "deepspeed=fsdp2")
    assert code in (0, 1)
    rows = data["ranked"] or data["closest"]
    for r in rows:
        k = r["knobs"]
        assert k["use_vllm"] is True and k["vllm_gpu_memory_utilization"] == 0.5 and k["vllm_enable_sleep_mode"] is True
        assert k["deepspeed"] == "fsdp2" and r["step_parts_s"]["generation"] > 0
    assert not any(r["knob"] in ("vllm_gpu_memory_utilization", "vllm_enable_sleep_mode", "use_vllm", "deepspeed") for r in data["rejected"])


def test_grpo_searches_the_vllm_share_and_sleep_mode(capsys):
    import argparse

    from vramfit.fit.cli import build
    from vramfit.fit.search import search

    args = argparse.Namespace(
        items=["qwen3-8b-grpo-8xh100"],
        model_config=None,
        gpu=None,
        gpus=None,
        nodes=None,
        method=None,
        seq_len=None,
        global_batch_size=None,
        host_ram_gib=None,
        write=None,
        data_format=None,
    )
    request = build(args)
    result = search(request.base, request.global_batch, request.pins, request.base_knobs, request.label, trace=False)
    seen = {(c.knobs["use_vllm"], c.knobs.get("vllm_gpu_memory_utilization"), c.knobs.get("vllm_enable_sleep_mode")) for c in result.candidates}
    assert {(False, None, None), (True, 0.3, False), (True, 0.5, True), (True, 0.7, False)} <= seen
    vllm = [c for c in result.candidates if c.knobs["use_vllm"] and c.fits]
    assert vllm and all(c.time.parts["generation"] > 0 for c in vllm)

    # the share is planned: a larger share is a higher peak, sleep mode lowers the training phase's
    def peak(share, sleep):
        return min(
            c.plan.per_gpu_peak_gib
            for c in result.candidates
            if c.knobs.get("vllm_gpu_memory_utilization") == share and c.knobs.get("vllm_enable_sleep_mode") == sleep
        )

    assert peak(0.7, False) > peak(0.3, False)
    families = {r["knob"] for r in result.rejected}
    assert "use_vllm" in families or result.winner.knobs["use_vllm"]


def test_a_vllm_share_too_small_for_its_weights_is_rejected_with_that_reason():
    from vramfit.fit import steptime
    from vramfit.planner.setup import Setup

    s = Setup.from_args(
        REPO / "model_configs" / "qwen3-8b.json", "rtx4090", 2, overrides=["method=grpo", "bf16=true", "use_vllm=true", "vllm_gpu_memory_utilization=0.3"]
    )
    arch = params_summary(s)
    from vramfit.planner import params

    veto = steptime.vllm_veto(s, arch, params.count(arch, s))
    assert veto.startswith("vLLM cannot start") and "16-bit weights take" in veto
    assert steptime.vllm_veto(s.replace(use_vllm=False), arch, params.count(arch, s)) == ""


def params_summary(setup):
    from vramfit.planner import params

    return params.summary(setup.model_config)


def test_a_written_fsdp_recipe_plans_as_fsdp(tree, monkeypatch, capsys):
    """The writer's FSDP spelling (`deepspeed: none`, training.fsdp / fsdp_config) is what the planner reads as
    FSDP2 full shard + offload; `vramfit validate` is asked too when this tree's validator accepts `deepspeed: none`."""
    import argparse

    import yaml

    from vramfit.fit import search as search_mod, write as write_mod
    from vramfit.fit.cli import build
    from vramfit.planner.setup import Setup
    from vramfit.recipe import load

    monkeypatch.setattr(search_mod, "_FSDP_WRITABLE", [True])
    name = "llama-3.2-3b-full-2xa10-fsdp"
    args = argparse.Namespace(
        items=["deepspeed=fsdp2_offload"],
        model_config=str(tree / "model_configs" / "llama-3.2-3b.json"),
        gpu="a10",
        gpus=2,
        nodes=None,
        method=None,
        seq_len=1024,
        global_batch_size=16,
        host_ram_gib=256,
        write=name,
        data_format=None,
    )
    request = build(args)
    result = search_mod.search(request.base, request.global_batch, request.pins, request.base_knobs, request.label, trace=False)
    assert result.winner.knobs["deepspeed"] == "fsdp2_offload"
    data = write_mod._recipe_data(result, request, args, name)
    assert data["deepspeed"] == "none"
    assert data["training"]["fsdp"] == "full_shard auto_wrap offload" and data["training"]["fsdp_config"] == {"version": 2}
    text = write_mod.render_yaml(data, result, "# header")
    fsdp_line = next(line for line in text.splitlines() if line.strip().startswith("fsdp:"))
    assert "# FSDP2 full shard + CPU offload" in fsdp_line
    folder = tree / "recipes" / name
    folder.mkdir()
    (folder / "recipe.yaml").write_text(text)
    setup = Setup.from_recipe(load(folder / "recipe.yaml"))
    assert setup.engine == "fsdp" and setup.fsdp_version == 2 and setup.fsdp_offload and setup.fsdp_sharding == "full_shard"
    from vramfit.planner.plan import plan

    assert plan(setup).fits
    monkeypatch.setattr(search_mod, "_FSDP_WRITABLE", [])
    if search_mod.FSDP_WRITABLE():  # the validator accepts `deepspeed: none`: the whole --write path must validate
        from vramfit.validate import validate

        assert validate(folder / "recipe.yaml", [], plan=True).plan.fits
    else:
        assert result.winner is None and not result.ranked[0].writable and yaml.safe_load(text)["deepspeed"] == "none"


def test_a_written_grpo_recipe_keeps_the_pinned_vllm_share_and_validates(tree, capsys):
    from vramfit.recipe import load
    from vramfit.validate import validate

    name = "qwen3-8b-grpo-8xh100-vllm"
    code = main(["fit", str(tree / "recipes" / "qwen3-8b-grpo-8xh100" / "recipe.yaml"), "vllm_gpu_memory_utilization=0.5", "--write", name])
    assert code == 0, capsys.readouterr()
    folder = tree / "recipes" / name
    training = load(folder / "recipe.yaml").training
    assert training["use_vllm"] is True and training["vllm_gpu_memory_utilization"] == 0.5
    assert "vllm_enable_sleep_mode" in training
    assert validate(folder / "recipe.yaml", [], plan=True).plan.fits
    line = next(x for x in (folder / "recipe.yaml").read_text().splitlines() if x.strip().startswith("vllm_gpu_memory_utilization:"))
    assert "pinned by the user" in line
