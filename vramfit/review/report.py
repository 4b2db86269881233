"""The review as text: how the files were read, the findings by severity, the memory table, the verdict."""

from __future__ import annotations

from vramfit.review.findings import SEVERITIES
from vramfit.review.reviewer import Review

HEADINGS = {"error": "errors: would fail or OOM the run", "warning": "warnings", "info": "info"}
VERDICT = {
    0: "exit 0: nothing found would fail or OOM the run.",
    1: "exit 1: an error above would fail or OOM the run.",
    2: "exit 2: the input could not be read or reviewed.",
    3: "exit 3: incomplete: nothing found would fail the run, but the memory could not be planned in full (see info).",
}


def render(result: Review, paths: list[str]) -> str:
    lines = [f"vramfit review: {' '.join(paths)}"]
    lines += [f"  {line}" for line in result.summary]
    number = 0
    for severity in SEVERITIES:
        group = [f for f in result.findings if f.severity == severity]
        if not group:
            continue
        lines += ["", f"{HEADINGS[severity]} ({len(group)})"]
        for finding in group:
            number += 1
            lines.append(f"  {number}. {finding}" + (f"  [{finding.source}]" if finding.source != "validation" else ""))
    if result.plan is not None:
        lines += ["", "memory plan (vramfit plan):"]
        lines += [f"  {line}" if line else "" for line in result.plan.render().splitlines()]
    verdict = VERDICT[result.exit_code]
    if result.model_assumed is not None and result.exit_code in (0, 1):  # the memory verdict rests on a folder's name
        path, planned = result.model_assumed
        verdict = verdict[:-1] + f", if {path} holds the model its name names: planned by the folder's name with the config of {planned} (see info)."
    lines += ["", verdict]
    return "\n".join(lines)
