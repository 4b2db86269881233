"""`vramfit review` on the published corpus (tests/review/corpus): how many reviews finish, how many
documented problems it names, and how many errors and warnings it raises that no expert named.

Each case is a sidecar under tests/review/corpus/cases/ naming the published files (kept byte for byte
under tests/review/corpus/files/<owner>+<repo>/), their repository and commit, the hardware they were
run on and what an expert or the issue thread says: `sound`, or the problems, each with the finding
that names it (severity, key, a phrase). A finding that matches no named problem is a false positive.

    .venv/bin/python benchmarks/review_corpus.py            # the four figures
    .venv/bin/python benchmarks/review_corpus.py -v         # and every case's errors and warnings
    .venv/bin/python benchmarks/review_corpus.py -k llava   # only cases whose name contains 'llava'
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the corpus is reviewed as on a machine without the Hub: reproducible
CORPUS = Path(__file__).resolve().parent.parent / "tests" / "review" / "corpus"
RANK = {"error": 0, "warning": 1, "info": 2}


def cases(pattern: str = "") -> list[tuple[str, dict]]:
    out = []
    for path in sorted((CORPUS / "cases").glob("*.yaml")):
        if pattern in path.stem:
            out.append((path.stem, yaml.safe_load(path.read_text())))
    return out


def matches(finding, problem: dict) -> bool:
    """A finding names the problem: at least its severity, its key (when given), its phrase."""
    if RANK[finding.severity] > RANK[problem.get("severity", "warning")]:
        return False
    if problem.get("key") and finding.key != problem["key"]:
        return False
    return problem.get("text", "").lower() in str(finding).lower()


def programs() -> list[dict]:
    """tests/review/corpus/programs.yaml: the argument defaults of the upstream training programs some scripts
    run, as facts (the programs are upstream code, not kept in this repository)."""
    return yaml.safe_load((CORPUS / "programs.yaml").read_text()) or []


def stand_in(program: dict) -> str:
    """A program that declares the recorded arguments with their recorded defaults, and nothing else."""
    lines = [
        "# Stand-in written by benchmarks/review_corpus.py from tests/review/corpus/programs.yaml: the argument",
        f"# defaults of {program['source']}. Not the upstream program.",
        "import argparse",
        "",
        "parser = argparse.ArgumentParser()",
    ]
    switches = set(program.get("switches") or [])
    for name, fact in program["defaults"].items():
        flag = "--" + name
        if flag in switches:
            action = "store_false" if fact["value"] else "store_true"
            lines.append(f"parser.add_argument({flag!r}, action={action!r})  # upstream line {fact['line']}")
        else:
            lines.append(f"parser.add_argument({flag!r}, default={fact['value']!r})  # upstream line {fact['line']}")
    for name in program.get("declared") or []:  # declared upstream without a default vramfit reads
        if name not in program["defaults"]:
            lines.append(f"parser.add_argument({'--' + name!r})  # declared upstream")
    for fact in program.get("lines") or []:  # upstream lines kept verbatim (the argument classes the program parses into)
        lines.append(f"{fact['text']}  # upstream line {fact['line']}")
    if program.get("keeps_eval_logits"):
        lines.append("compute_metrics = None  # the upstream program passes a compute_metrics to its Trainer")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def materialized(case: dict):
    """The case's files root: the corpus itself, or, where the case runs a program recorded in programs.yaml,
    a temporary copy of its repository folder with the program's stand-in written at the program's path."""
    used = [p for p in programs() if any(r.startswith(f"files/{p['folder']}/") for r in case["review"]) and p["path"] in _listed(case)]
    if not used:
        yield CORPUS
        return
    with tempfile.TemporaryDirectory(prefix="review-corpus-") as tmp:
        root = Path(tmp)
        (root / "cases").symlink_to(CORPUS / "cases")
        for folder in {p["folder"] for p in used}:
            shutil.copytree(CORPUS / "files" / folder, root / "files" / folder)
        for p in used:
            target = root / "files" / p["folder"] / p["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(stand_in(p))
        yield root


def _listed(case: dict) -> list[str]:
    return [str(p).split("#")[0].strip() for p in (case.get("source") or {}).get("paths", [])]


def run_case(name: str, case: dict):
    """(review or None, traceback text, seconds)."""
    with materialized(case) as root:
        return _run_case(root, case)


def _run_case(root: Path, case: dict):
    from vramfit.review.reviewer import review

    hw = case.get("hardware") or {}
    paths = [str((root / "cases" / p).resolve()) if p.startswith("..") else str(root / p) for p in case["review"]]
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            result = review(
                paths, gpu=hw.get("gpu"), gpus=hw.get("gpus"), nodes=hw.get("nodes"), host_ram_gib=hw.get("host_ram_gib"), **(case.get("flags") or {})
            )
        return result, "", time.perf_counter() - start
    except Exception:  # a traceback a user would see: counted, never hidden
        return None, traceback.format_exc(), time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("-v", action="store_true", help="print every case's errors and warnings")
    args = parser.parse_args(argv)
    os.chdir(CORPUS)  # findings name files relative to here
    totals = dict(cases=0, finished=0, incomplete=0, stopped=0, tracebacks=0, problems=0, caught=0, fp_errors=0, fp_warnings=0, by_name=0)
    for name, case in cases(args.k):
        totals["cases"] += 1
        problems = case.get("problems") or []
        totals["problems"] += len(problems)
        result, tb, seconds = run_case(name, case)
        if result is None:
            totals["tracebacks"] += 1
            print(f"{name}: TRACEBACK ({seconds:.1f} s)\n{tb}" if args.v else f"{name}: TRACEBACK {tb.strip().splitlines()[-1]}")
            continue
        key = {0: "finished", 1: "finished", 3: "incomplete"}.get(result.exit_code, "stopped")
        totals[key] += 1
        caught = [p for p in problems if any(matches(f, p) for f in result.findings)]
        totals["caught"] += len(caught)
        false = [f for f in result.findings if f.severity in ("error", "warning") and not any(matches(f, p) for p in problems)]
        fe = [f for f in false if f.severity == "error"]
        fw = [f for f in false if f.severity == "warning"]
        totals["fp_errors"] += len(fe)
        totals["fp_warnings"] += len(fw)
        totals["by_name"] += result.model_assumed is not None
        if args.v:
            print(f"{name}: exit {result.exit_code}, {len(caught)}/{len(problems)} caught, {len(fe)} false errors, {len(fw)} false warnings ({seconds:.1f} s)")
            for p in problems:
                if p not in caught:
                    print(f"    MISSED: {p['what']}")
            for f in fe + fw:
                print(f"    {f.severity.upper()}: {str(f)[:400]}")
            if result.model_assumed is not None:
                print(f"    PLANNED BY THE FOLDER'S NAME: {result.model_assumed[0]} as {result.model_assumed[1]}")
    t = totals
    print(f"cases: {t['cases']}")
    print(
        f"reviews finished: {t['finished']} (exit 0/1); incomplete (exit 3): {t['incomplete']}; stopped (exit 2): {t['stopped']}; tracebacks: {t['tracebacks']}"
    )
    print(f"documented problems caught: {t['caught']} of {t['problems']}")
    print(f"false-positive errors: {t['fp_errors']}")
    print(f"false-positive warnings: {t['fp_warnings']} ({t['fp_warnings'] / max(t['cases'], 1):.2f} per case)")
    print(f"models planned by a local folder's name (vramfit.models.folder_entry; said in each review): {t['by_name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
