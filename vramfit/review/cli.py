"""`vramfit review PATH... [--gpu NAME --gpus N --nodes N --host-ram-gib N] [--against RECIPE] [--json]`.

Exit codes: 0 nothing found blocks the run, 1 a finding would fail or OOM it, 2 the input cannot be read,
3 incomplete (no config for the model, or a term of the memory plan not computed: said in the findings; everything else checked).
Heavy libraries load inside `run`, so `vramfit --help` stays fast.
"""

from __future__ import annotations

import argparse
import json

from vramfit.hardware import CATALOGUE

EPILOG = """\
examples:
  vramfit review run_grpo_rec.sh --gpu h20 --gpus 6
  vramfit review scripts/sharegpt4v/slurm_finetune_7b.sh scripts/zero3.json --gpu a100-40g --gpus 8 --nodes 1
  vramfit review train.sh --gpu a100-80g --host-ram-gib 64 --json
  vramfit review axolotl.yaml --gpu a100-80g --gpus 8 --against axolotl-llama-3b-8xa100-80g
  vramfit review config_hub/finetune/llama-2-7b/full.yaml --gpu a10g

PATH: a shell launch script (torchrun / deepspeed [--hostfile] / accelerate launch / trl sft|dpo|grpo|... /
python (one process) / mpirun / axolotl train / swift sft|rlhf / llamafactory-cli train, Slurm wrappers, a
wrapper that runs another script), a Python training script (its docstring's
launch commands or its TrainingArguments(...) / SFTConfig(...) call, read with ast, never run), a
DeepSpeed JSON, an accelerate config, an axolotl YAML, a LitGPT fine-tuning config (`litgpt
finetune_full|finetune_lora --config`, planned as LitGPT runs it), an llm-foundry (Composer) training YAML
(`composer scripts/train/train.py YAML`: an inline MPT or hf_causal_lm, fsdp_config, the global batch over the
GPUs), a verl launch (`python3 -m verl.trainer.main_ppo key=value ...`: Hydra overrides over verl's ppo_trainer.yaml,
the FSDP actor with its vLLM / SGLang rollout colocated; Megatron not planned) or a TrainingArguments / TRL /
LLaMA-Factory JSON or YAML. Files the script names (--deepspeed x.json, --config_file) are read too, next to the
script or in the folders above it, unless a PATH with the same file name is given; an absolute path from
another machine's checkout (/kaggle/working/LLaMA-Factory/examples/...) is read from the same place here, and
the review says so.

The model's config.json comes from vramfit's table (model_configs/), a local folder, the Hugging Face
cache or the Hub (config.json only). Without one the review still checks everything else and exits 3.
A local path this machine does not have is planned as the one table model its folder's name names
(case, '-', '_', '.', a trailing -hf and the model's organisation in front aside: /data/qwen2___5-7b-instruct
is Qwen/Qwen2.5-7B-Instruct), said in an info finding and on the verdict line; an ambiguous name is not.
A known key written without its space (`model_name_or_path:x` in a YAML) is an error on its line (the
file does not load), and the rest is reviewed as meant.
"""


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("paths", nargs="+", metavar="PATH", help="launch script and config files to review")
    parser.add_argument("--gpu", choices=list(CATALOGUE), help="GPU type (default: the closest recipe's, said so)")
    parser.add_argument("--gpus", type=_positive(int), help="GPUs per node (default: what the script says)")
    parser.add_argument("--nodes", type=_positive(int), help="nodes (default: what the script says, else 1)")
    parser.add_argument("--host-ram-gib", type=_positive(float), help="host RAM per node, to check it (default: not checked)")
    parser.add_argument("--against", metavar="RECIPE", help="compare with this recipe (default: the closest one)")
    parser.add_argument(
        "--model-config", metavar="FILE", help="the model's config.json when it is not found (vramfit's table, a local folder, the Hugging Face cache, the Hub)"
    )
    parser.add_argument(
        "--transformers-version",
        metavar="X.Y.Z",
        help="judge flags, and the model's default attention (eager before its SDPA release), under this transformers version "
        "(default: the version a requirements file / setup.py / pyproject.toml beside the script pins)",
    )
    parser.add_argument(
        "--trl-version",
        metavar="X.Y.Z",
        help="the TRL the run uses (default: the version pinned beside the script, else the installed one): before 0.22 its "
        "configs keep gradient checkpointing off by default, before 0.19 bf16 off; both are planned",
    )
    parser.add_argument(
        "--accelerate-version",
        metavar="X.Y.Z",
        help="the accelerate the run uses (default: an accelerate==X pin beside the script, else the installed one): before "
        "1.11.0 FSDP2 reduce-scatters every gradient accumulation micro-batch (no no_sync), which is planned",
    )
    parser.add_argument(
        "--mixer-kernels",
        choices=("fused", "torch"),
        help="Mamba / gated-delta-rule layers: planned with the kernels of mamba-ssm, causal-conv1d and flash-linear-attention "
        "(fused, the default: transformers calls them when they are installed) or on transformers' torch fallback (torch: "
        "the run without them, which keeps more)",
    )
    parser.add_argument(
        "--torch-version",
        metavar="X.Y.Z",
        help="the torch the run uses (default: the installed one): before 2.8 the Trainer's default optimizer is the "
        "multi-tensor adamw_torch, before 2.0 zero_grad keeps the gradients; both are planned",
    )
    parser.add_argument(
        "--image-tokens",
        type=_positive(int),
        metavar="N",
        help="your data's typical image tokens per image (Qwen2-VL style models: pixels / 784); default: the maximum the files allow, said so",
    )
    parser.add_argument(
        "--sample-length",
        type=_positive(int),
        metavar="N",
        help="your data's longest sample in tokens, images included: planned at it where the trainer pads each batch to its "
        "longest sample, the cap beside it; default: a sample of the training file where it lies here, else the cap, said so",
    )
    parser.add_argument("--json", action="store_true", help="print the review as JSON")


def run(args: argparse.Namespace) -> int:
    from transformers.utils import logging as transformers_logging

    from vramfit.review.report import render
    from vramfit.review.reviewer import review

    # the libraries' own notes about the arguments they are handed (transformers: "Passing `fsdp` as a string is
    # deprecated ...") are findings already where they matter, in the review's voice; not a second, unsorted copy
    transformers_logging.set_verbosity_error()
    result = review(
        args.paths,
        gpu=args.gpu,
        gpus=args.gpus,
        nodes=args.nodes,
        host_ram_gib=args.host_ram_gib,
        against=args.against,
        model_config=args.model_config,
        transformers_version=getattr(args, "transformers_version", None),
        image_tokens=getattr(args, "image_tokens", None),
        sample_length=getattr(args, "sample_length", None),
        torch_version=getattr(args, "torch_version", None),
        trl_version=getattr(args, "trl_version", None),
        accelerate_version=getattr(args, "accelerate_version", None),
        mixer_kernels=getattr(args, "mixer_kernels", None),
    )
    if result.exit_code == 2 and result.plan is None:  # bad input: the one problem format of every command
        from vramfit.problems import Problem, as_dicts, report

        problems = [Problem(f.file, f.key, f.what, f.fix) for f in result.findings if f.severity == "error"]
        if not args.json:
            return report(problems)
        # --json: the shared {"exit_code", "problems"} object, with the review's own keys beside it
        print(json.dumps({**result.to_json(), "problems": as_dicts(problems)}, indent=2))
        return result.exit_code
    print(json.dumps(result.to_json(), indent=2) if args.json else render(result, args.paths))
    return result.exit_code
