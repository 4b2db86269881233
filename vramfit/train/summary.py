"""The few lines every run ends with: what happened, where the checkpoint is, what to run next.

Rank 0 writes summary.json into the output directory when training ends (callbacks.RunSummary);
the runner reads it after the launchers exit, with metrics.jsonl for a run that stopped early, and
prints `render(...)`. Light on purpose (no torch): the runner imports it.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

SUMMARY = "summary.json"


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    except OSError:
        pass
    return rows


def from_metrics(rows: list[dict], method: str) -> dict:
    """steps, the first and last loss (and reward for GRPO), tokens and training time, from logged dicts."""
    steps = [r for r in rows if "loss" in r or "reward" in r]
    end = next((r for r in reversed(rows) if "train_runtime" in r), {})
    out: dict = {"steps": max((r.get("step", 0) for r in rows), default=0)}
    for key in ("loss", "reward") if method == "grpo" else ("loss",):
        values = [r[key] for r in steps if isinstance(r.get(key), (int, float))]
        if values:
            out[key] = [values[0], values[-1]]
    tokens = [r[k] for r in rows for k in ("num_tokens", "num_input_tokens_seen") if isinstance(r.get(k), (int, float))]
    if tokens:
        out["tokens"] = tokens[-1]
    if "train_runtime" in end:
        out["train_runtime_s"] = end["train_runtime"]
    return out


def _here(path: Path) -> str:
    """A path as the user would type it: relative to the current folder when under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f}"


def _command(argv: list[str], add: str, drop: tuple[str, ...]) -> str:
    words = [w for w in argv if w not in drop]
    return shlex.join(["vramfit", *words, *([add] if add not in words else [])])


def render(
    output_dir: Path, log: Path, recipe_name: str, method: str, code: int, wall_s: float, max_steps: int | None = None, argv: list[str] | None = None
) -> str:
    """The end-of-run summary: steps, loss (reward), tokens/s, wall time, peak memory per GPU, checkpoint, next command."""
    from vramfit import outputs

    argv = list(sys.argv[1:] if argv is None else argv)
    written = {}
    try:  # only a finished run's: an earlier run's file may be there after a failed resume
        written = json.loads((output_dir / SUMMARY).read_text()) if code == 0 else {}
    except (OSError, json.JSONDecodeError):
        pass
    facts = {**from_metrics(_read_jsonl(output_dir / "metrics.jsonl"), method), **written}
    ok = code == 0
    head = "finished" if ok else (f"stopped by signal {code - 128}" if code >= 128 else f"failed (launcher exit code {code})")
    lines = [f"vramfit: run {head}: {recipe_name}"]

    def row(label: str, value: str) -> None:
        lines.append(f"  {label:<13}{value}")

    total = facts.get("max_steps") or max_steps
    row("steps", f"{facts.get('steps', 0)}" + (f" of {total}" if total else ""))
    for key in ("reward", "loss") if method == "grpo" else ("loss",):
        if key in facts:
            first, last = facts[key]
            row(key, f"{first:.4g} -> {last:.4g}")
    runtime = facts.get("train_runtime_s")
    if facts.get("tokens") and runtime:
        row("tokens/s", f"{facts['tokens'] / runtime:,.0f} ({facts['tokens']:,.0f} tokens in {runtime:.1f} s of training)")
    elif runtime:
        row("tokens/s", f"n/a (no token count logged; {runtime:.1f} s of training)")
    row("wall time", f"{wall_s:.0f} s")
    peaks = facts.get("peak_memory_bytes")
    if peaks and any(p is not None for p in peaks):
        row("peak memory", ", ".join(f"GPU{i} {_gib(p)} GiB" if p is not None else f"GPU{i} n/a" for i, p in enumerate(peaks)) + " (torch max reserved)")
    else:
        row("peak memory", "n/a on CPU" if peaks is not None or ok else "n/a (the run did not reach its end)")
    last = outputs.last_complete(output_dir)
    row("checkpoint", _here(last) if last else "none complete yet")
    if ok:
        row("weights", _here(output_dir))
    row("log", _here(log))
    nexts = []
    if not ok:
        nexts.append(shlex.join(["vramfit", "doctor", _here(log), "--recipe", recipe_name]) + "   # what went wrong, and the fix")
    if last:
        resume = _command(argv, "--resume", ("--overwrite",)) if argv[:1] == ["run"] else f"vramfit run {recipe_name} --resume"
        nexts.append(resume + ("   # continue from " + last.name if ok else "   # resume from " + last.name))
    for i, n in enumerate(nexts):
        row("next" if i == 0 else "", n)
    return "\n".join(lines)


def report(run_dir: Path, log: Path, code: int, wall_s: float) -> None:
    """The runner's hook: print the summary of the run whose launch files are in run_dir (never raises)."""
    try:
        from vramfit import outputs
        from vramfit.recipe import Recipe

        recipe = Recipe.model_validate(json.loads((run_dir / "recipe.json").read_text()))
        out = outputs.output_dir(recipe, run_dir)
        max_steps = recipe.training.get("max_steps")
        text = render(out, log, recipe.name, recipe.method, code, wall_s, max_steps if isinstance(max_steps, int) and max_steps > 0 else None)
    except Exception as exc:  # a summary must never turn a finished run into a traceback
        text = f"vramfit: no run summary ({type(exc).__name__}: {exc}); the log is {log}"
    print("\n" + text, file=sys.stdout if code == 0 else sys.stderr, flush=True)
