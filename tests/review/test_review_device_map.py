"""A Python training file's `from_pretrained(device_map=...)` (review/device_map.py): read with ast, then combined with the
launch that runs it - one process over the GPUs it sees is planned as accelerate's split (planner `device_map_gpus`),
a distributed launcher is accelerate's refusal, a per-process map is one GPU per process."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from vramfit.review import device_map, mapping
from vramfit.review.sources import read_all

LOAD = 'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf", {kwargs})\n'


def _read(code: str):
    code = textwrap.dedent(code)
    return device_map.read(ast.parse(code), code)


@pytest.mark.parametrize(
    "code, kind, policy, per_process",
    [
        (LOAD.format(kwargs='device_map="auto"'), "spread", "auto", False),
        (LOAD.format(kwargs='device_map="sequential"'), "spread", "sequential", False),
        ('DEVICE_MAP = "balanced"\n' + LOAD.format(kwargs="device_map=DEVICE_MAP"), "spread", "balanced", False),
        # alpaca-lora / artidoro/qlora: "auto" in one process, {"": local_rank} when WORLD_SIZE / LOCAL_RANK says distributed
        (
            'device_map = "auto"\nif ddp:\n    device_map = {"": int(os.environ.get("LOCAL_RANK") or 0)}\n' + LOAD.format(kwargs="device_map=device_map"),
            "spread",
            "auto",
            True,
        ),
        (LOAD.format(kwargs='device_map={"": Accelerator().process_index}'), "one", "", False),
        (LOAD.format(kwargs="device_map=get_kbit_device_map() if quantization_config is not None else None"), "one", "", False),
        (LOAD.format(kwargs="device_map=get_kbit_device_map()"), "one", "", False),
        (LOAD.format(kwargs='device_map="cuda:0"'), "one", "", False),
        (LOAD.format(kwargs="device_map=args.device_map"), "unknown", "", False),
        (LOAD.format(kwargs='device_map={"model.embed_tokens": 0, "model.layers": 1, "lm_head": 1}'), "hand", "", False),
        ('kw = dict(torch_dtype=torch.bfloat16, device_map="auto")\n' + LOAD.format(kwargs="**kw"), "spread", "auto", False),
    ],
)
def test_the_device_map_of_the_model_load_is_read_as_written(code, kind, policy, per_process):
    dm = _read(code)
    assert (dm.kind, dm.policy, dm.per_process_when_distributed) == (kind, policy, per_process)


def test_no_device_map_and_a_tokenizer_load_are_not_a_device_map():
    assert _read('tok = AutoTokenizer.from_pretrained("x", device_map="auto")\n' + LOAD.format(kwargs="torch_dtype=torch.bfloat16")) is None
    assert _read(LOAD.format(kwargs="device_map=None")) is None
    # MiniCPM-o's finetune.py: None, or {"": LOCAL_RANK} under DDP: never spread
    assert _read('device_map = None\nif q:\n    device_map = {"": local_rank} if ddp else None\n' + LOAD.format(kwargs="device_map=device_map")).kind == "one"
    # Qwen's finetune.py: None unless q_lora, then "auto" or per process: the arguments decide
    assert (
        _read('device_map = None\nif q:\n    device_map = {"": local_rank} if ddp else "auto"\n' + LOAD.format(kwargs="device_map=device_map")).kind
        == "unknown"
    )


def test_the_first_model_load_decides_not_a_later_one_for_inference():
    code = LOAD.format(kwargs='device_map={"": 0}') + "trainer.train()\n" + LOAD.format(kwargs='device_map="auto"')
    assert _read(code).kind == "one"


@pytest.mark.parametrize(
    "memory, gib, gpus, read",
    [
        ('{0: "20GiB", 1: "24GiB"}', 20.0, 2, True),
        ('{i: "40GiB" for i in range(torch.cuda.device_count())}', 40.0, None, True),
        ('{0: "11776MB", 1: "11776MB", 2: "11776MB"}', 11776e6 / 2**30, 3, True),
        ("{i: f'{args.max_memory_MB}MB' for i in range(n_gpus)}", None, None, False),
    ],
)
def test_max_memory_is_read_where_literal(memory, gib, gpus, read):
    dm = _read(LOAD.format(kwargs=f'device_map="auto", max_memory={memory}'))
    assert (dm.max_memory_gpus, dm.max_memory_read) == (gpus, read)
    assert dm.max_memory_gib == (pytest.approx(gib) if gib is not None else None)


SCRIPT = """\
import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments

bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
{before}model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf", quantization_config=bnb, {kwargs})
args = TrainingArguments(output_dir="out", per_device_train_batch_size=1, gradient_accumulation_steps=8, bf16=True{extra})
Trainer(model=model, args=args).train()
"""


def _mapped(tmp_path: Path, kwargs: str, launch: str | None = None, gpus: int = 4, before: str = "", extra: str = "", pin: str = ""):
    (tmp_path / "train.py").write_text(SCRIPT.format(kwargs=kwargs, before=before, extra=extra))
    if pin:
        (tmp_path / "requirements.txt").write_text(pin + "\n")
    paths = [str(tmp_path / "train.py")]
    if launch is not None:
        (tmp_path / "run.sh").write_text(launch + "\n")
        paths = [str(tmp_path / "run.sh")]
    work = tmp_path / "work"
    work.mkdir()
    mapped = mapping.build(read_all(paths, known=mapping.known_key), work)
    findings = mapping.fill_hardware(mapped, "a100-40g", gpus, None, None, None)
    return mapped, findings


def _about_device_map(findings) -> list:
    return [f for f in findings if f.key == "device_map"]


def test_a_python_file_alone_with_device_map_auto_is_one_process_over_the_nodes_gpus(tmp_path):
    mapped, findings = _mapped(tmp_path, 'device_map="auto"')
    assert mapped.recipe["planner"]["device_map_gpus"] == 4
    assert mapped.recipe["hardware"]["gpus_per_node"] == 1  # one rank
    (said,) = _about_device_map(findings)
    assert said.severity == "info" and "one process" in said.what and "4 GPUs" in said.what


def test_a_plain_python_launch_spreads_over_the_gpus_its_cuda_visible_devices_lists(tmp_path):
    mapped, findings = _mapped(tmp_path, 'device_map="auto"', "CUDA_VISIBLE_DEVICES=0,1 python train.py")
    assert mapped.recipe["planner"]["device_map_gpus"] == 2
    # a program without an argument parser: its own code gives the model and the Trainer's arguments
    assert mapped.recipe["model"]["id"] == "meta-llama/Llama-2-13b-hf"
    assert mapped.recipe["training"]["gradient_accumulation_steps"] == 8
    assert "CUDA_VISIBLE_DEVICES" in _about_device_map(findings)[0].what


def test_sequential_and_a_literal_max_memory_reach_the_planner(tmp_path):
    mapped, _ = _mapped(tmp_path, 'device_map="sequential", max_memory={0: "20GiB", 1: "20GiB", 2: "20GiB"}')
    assert mapped.recipe["planner"] == {**mapped.recipe["planner"], "device_map_gpus": 3, "device_map_policy": "sequential", "device_map_max_memory_gib": 20.0}


def test_a_max_memory_computed_when_the_script_runs_is_said_not_read(tmp_path):
    _, findings = _mapped(tmp_path, "device_map=\"auto\", max_memory={i: f'{mb}MB' for i in range(n)}")
    assert any("not read" in f.what and "max_memory" in f.what for f in _about_device_map(findings))


def test_device_map_auto_under_a_distributed_launcher_is_accelerates_refusal(tmp_path):
    mapped, findings = _mapped(tmp_path, 'device_map="auto"', "torchrun --nproc_per_node 4 train.py")
    (error,) = [f for f in _about_device_map(findings) if f.severity == "error"]
    assert "in any distributed mode" in error.what and "accelerate#1810" in error.what
    assert "PartialState().process_index" in error.fix
    assert "device_map_gpus" not in mapped.recipe.get("planner", {})


def test_an_accelerate_pinned_before_the_refusal_is_a_warning(tmp_path):
    _, findings = _mapped(tmp_path, 'device_map="auto"', "torchrun --nproc_per_node 4 train.py", pin="accelerate==0.19.0")
    assert [f.severity for f in _about_device_map(findings)] == ["warning"]


def test_a_file_that_switches_to_one_gpu_per_process_when_distributed_is_read_so(tmp_path):
    before = 'device_map = "auto"\nif int(os.environ.get("WORLD_SIZE", 1)) != 1:\n    device_map = {"": int(os.environ.get("LOCAL_RANK") or 0)}\n'
    mapped, findings = _mapped(tmp_path, "device_map=device_map", "torchrun --nproc_per_node 4 train.py", before=before)
    assert [f.severity for f in _about_device_map(findings)] == ["info"]
    assert "device_map_gpus" not in mapped.recipe.get("planner", {}) and mapped.recipe["hardware"]["gpus_per_node"] == 4


def test_device_map_auto_beside_deepspeed_in_one_process_is_refused(tmp_path):
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}')
    mapped, findings = _mapped(tmp_path, 'device_map="auto"', extra=', deepspeed="ds.json"')
    assert [f.severity for f in _about_device_map(findings)] == ["error"]
    assert "device_map_gpus" not in mapped.recipe.get("planner", {})


def test_a_programs_own_optim_default_is_the_runs(tmp_path):
    # artidoro/qlora's qlora.py: its TrainingArguments subclass defaults optim to paged_adamw_32bit, which the script keeps
    (tmp_path / "qlora.py").write_text(
        textwrap.dedent(
            """\
            from dataclasses import dataclass, field
            import transformers

            @dataclass
            class TrainingArguments(transformers.Seq2SeqTrainingArguments):
                optim: str = field(default="paged_adamw_32bit")

            parser = transformers.HfArgumentParser((TrainingArguments,))
            """
        )
    )
    (tmp_path / "run.sh").write_text("python qlora.py --model_name_or_path meta-llama/Llama-2-13b-hf --output_dir out\n")
    work = tmp_path / "work"
    work.mkdir()
    mapped = mapping.build(read_all([str(tmp_path / "run.sh")], known=mapping.known_key), work)
    assert mapped.recipe["training"]["optim"] == "paged_adamw_32bit"


def test_a_notebooks_python_cells_give_its_length_and_its_trainer_no_eval_logits(tmp_path):
    # brevdev/notebooks mixtral-finetune.ipynb: tokenizer(..., truncation=True, max_length=max_length) pads and cuts every
    # sample to 340 tokens, and its Trainer gets no compute_metrics (Trainer.evaluate keeps no logits)
    import json

    cells = [
        "import transformers\nfrom transformers import AutoModelForCausalLM\nmax_length = 340\n",
        'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf", device_map="auto")\n',
        'def tokenize(prompt):\n    return tokenizer(prompt, truncation=True, max_length=max_length, padding="max_length")\n',
        "trainer = transformers.Trainer(model=model, args=transformers.TrainingArguments(output_dir='o', "
        "per_device_train_batch_size=1, eval_strategy='steps', eval_steps=50))\n",
    ]
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": c.splitlines(keepends=True)} for c in cells], "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "ft.ipynb").write_text(json.dumps(notebook, indent=1))
    work = tmp_path / "work"
    work.mkdir()
    mapped = mapping.build(read_all([str(tmp_path / "ft.ipynb")], known=mapping.known_key), work)
    assert mapped.recipe["data"]["max_length"] == 340
    assert mapped.recipe["training"]["prediction_loss_only"] is True


def test_gpus_given_for_an_ms_swift_device_map_launch_count_gpus_not_processes(tmp_path):
    # CUDA_VISIBLE_DEVICES=0,1,2,3 swift sft (no NPROC_PER_NODE): one process over the 4 GPUs; --gpus 4 is those GPUs
    (tmp_path / "run.sh").write_text(
        "CUDA_VISIBLE_DEVICES=0,1,2,3 swift sft --model Qwen/Qwen2.5-7B-Instruct --train_type lora --max_length 1024 "
        "--per_device_train_batch_size 1 --gradient_accumulation_steps 16\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    mapped = mapping.build(read_all([str(tmp_path / "run.sh")], known=mapping.known_key), work)
    findings = mapping.fill_hardware(mapped, "rtx4090", 4, None, None, None)
    assert mapped.recipe["planner"]["device_map_gpus"] == 4 and mapped.recipe["hardware"]["gpus_per_node"] == 1
    assert not [f for f in findings if "reviewed with --gpus" in f.what]


def test_model_loads_under_branches_the_arguments_decide_leave_the_device_map_to_the_run(tmp_path):
    """s1's train/sft.py: device_map="auto" only under `if "70B" in config.model_name:`, no map in its `else:`. Neither
    branch is fixed by the file, so the first load is not the run's: said, not an error under torchrun."""
    code = textwrap.dedent(
        """\
        kwargs = {}
        if "70B" in config.model_name:
            kwargs = {"device_map": "auto", "torch_dtype": "auto"}
            model = AutoModelForCausalLM.from_pretrained(config.model_name, **kwargs)
        else:
            model = AutoModelForCausalLM.from_pretrained(config.model_name)
        """
    )
    dm = device_map.read(ast.parse(code), code)
    assert dm.kind == "unknown" and "branches the arguments decide" in dm.written
    # one load under a branch, and the same map in both branches, read as before
    assert _read("if big:\n    " + LOAD.format(kwargs='device_map="auto"')).kind == "spread"
    both = "if big:\n    " + LOAD.format(kwargs='device_map="auto"') + "else:\n    " + LOAD.format(kwargs='device_map="auto"')
    assert _read(both).kind == "spread"
    before = 'if "70B" in name:\n    model = AutoModelForCausalLM.from_pretrained(name, device_map="auto")\nelse:\n    '
    mapped, findings = _mapped(tmp_path, "torch_dtype=torch.bfloat16", "torchrun --nproc_per_node 4 train.py", before=before)
    (said,) = _about_device_map([*mapped.findings, *findings])
    assert said.severity == "info" and "chosen when the script runs" in said.what
