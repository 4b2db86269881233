"""When gradients exist in a single-GPU step, measured on a GPU, against the planner.

The planner's train phase holds no gradients during the forward pass of a single-GPU loop that
steps every micro-batch (vramfit/planner/states.py `gradients_in_forward`: zero_grad(set_to_none=True)
frees them), and its optimizer-step phase adds one state-sized intermediate for torch AdamW's foreach
path and none for the fused one (`foreach_intermediate`). This script checks both on a GPU.

- On a machine with CUDA (`--measure`): builds a Llama of 1.24 B parameters from
  benchmarks/measured/llama-1.2b-gradient-lifetime.config.json (random weights, bf16, SDPA, batch 2 x 2048
  tokens, no checkpointing), runs three steps with torch.optim.AdamW foreach and fused, and writes
  torch.cuda.max_memory_allocated per part of each step to the JSON given.
- Anywhere: prints the planner's allocated peaks (`vramfit plan --model-config` with the same inputs)
  beside the stored measurement, benchmarks/measured/gradient_lifetime.h100.json (one H100, torch 2.11,
  transformers 5.17, measured 2026-11-24 for issue #13), with the planner as it was before
  `gradients_in_forward` (gradients held through the forward) for comparison.

Usage: python benchmarks/gradient_lifetime.py            (compare)
       python3 benchmarks/gradient_lifetime.py --measure OUT.json   (on a GPU)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "measured" / "llama-1.2b-gradient-lifetime.config.json"
MEASURED = HERE / "measured" / "gradient_lifetime.h100.json"
OPTIMIZERS = {"adamw_torch": {"foreach": True}, "adamw_torch_fused": {"fused": True}}
G = 2**30


def measure(path: str) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**{k: v for k, v in json.loads(CONFIG.read_text()).items() if k not in ("architectures", "model_type", "torch_dtype")})
    cfg._attn_implementation = "sdpa"
    res = {"torch": torch.__version__}
    for name, kw in OPTIMIZERS.items():
        torch.manual_seed(0)
        m = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-5, **kw)
        ids = torch.randint(0, cfg.vocab_size, (2, 2048), device="cuda")
        out = {}
        for step in range(3):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
            loss = m(input_ids=ids, labels=ids).loss
            torch.cuda.synchronize()
            fwd = torch.cuda.max_memory_allocated()
            loss.backward()
            torch.cuda.synchronize()
            bwd = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            pre = torch.cuda.memory_allocated()
            opt.step()
            torch.cuda.synchronize()
            out[step] = dict(start=start / G, fwd_peak=fwd / G, fwd_bwd_peak=bwd / G, before_step=pre / G, step_peak=torch.cuda.max_memory_allocated() / G)
            opt.zero_grad(set_to_none=True)
        res[name] = out
        del m, opt, loss
        torch.cuda.empty_cache()
    res["params"] = sum(p.numel() for p in LlamaForCausalLM(cfg).parameters())
    Path(path).write_text(json.dumps(res, indent=1))


def compare() -> int:
    sys.path.insert(0, str(HERE.parent))
    from vramfit.planner import Setup, plan, states

    measured = json.loads(MEASURED.read_text())
    print(f"measured on one H100 (torch {measured['torch']}), step 3 of 3; planner allocated peaks (GiB):")
    print(f"{'optimizer':<18} {'phase':<15} {'measured':>8} {'planner':>8} {'err':>7} {'before':>8} {'err':>7}")
    keep = states.gradients_in_forward
    for optim in OPTIMIZERS:
        setup = Setup.from_args(CONFIG, "h100", 1, 1, None, ["dtype=bfloat16", "per_device_train_batch_size=2", "seq_len=2048", f"optim={optim}"])
        now = plan(setup).measures
        states.gradients_in_forward = lambda s, st: st.gradients  # gradients held through the forward
        try:
            before = plan(setup).measures
        finally:
            states.gradients_in_forward = keep
        m = measured[optim]["2"]
        for phase, key in (("train", "fwd_bwd_peak"), ("optimizer_step", "step_peak")):
            a, b, x = now[phase]["allocated"], before[phase]["allocated"], m[key]
            print(f"{optim:<18} {phase:<15} {x:>8.2f} {a:>8.2f} {(a - x) / x:>+7.1%} {b:>8.2f} {(b - x) / x:>+7.1%}")
        print(f"{'':<18} at the start of a forward: {m['start']:.2f} GiB measured = weights + moments, no gradients")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--measure":
        measure(sys.argv[2])
        sys.exit(0)
    sys.exit(compare())
