"""Every command the README and the recipe headers show is exercised here.

`make` lines are expanded with `make -n` (so the Makefile mapping is checked) and the vramfit
command they expand to is run in-process. Smoke runs (`SMOKE=1`) are run by tests/train, which
parametrises over the same recipes; `make test` is what CI runs.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from vramfit.cli import main

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.parent.name for p in (REPO / "recipes").glob("*/recipe.yaml"))


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    lines = [l.split("  #")[0].strip() for b in blocks for l in b.splitlines()]
    inline = re.findall(r"`((?:make|vramfit) [^`]+)`", text)
    return sorted({l for l in [*lines, *inline] if l.startswith(("make ", "vramfit ")) and "..." not in l})


def header_commands() -> list[str]:
    found = []
    for name in RECIPES:
        header = (REPO / "recipes" / name / "recipe.yaml").read_text().split("\nname:")[0]
        found += re.findall(r"(?<![\w-])((?:make|vramfit|axolotl train) [^()\n]+?)(?=\s{2,}|\s*[()]|$)", header, re.M)
    return sorted({c.strip() for c in found if "..." not in c})


def expand(command: str) -> list[str]:
    """The vramfit argv a documented command runs."""
    if command.startswith("vramfit "):
        return shlex.split(command)[1:]
    out = subprocess.run(["make", "-n", *shlex.split(command)[1:]], cwd=REPO, capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if "/vramfit " in l or l.startswith("vramfit "))
    return shlex.split(line.split("vramfit", 1)[1])


def exercise(command: str, capsys) -> None:
    if command in ("make test", "make test-gpu", "make test-fast", "make lint"):  # the suite itself: what each target runs
        out = subprocess.run(["make", "-n", command.split()[1]], cwd=REPO, capture_output=True, text=True, check=True).stdout
        assert ("ruff check" in out and "ruff format --check" in out) if command == "make lint" else "pytest" in out
        assert "make test" in (REPO / ".ci" / "run").read_text()
        return
    # Placeholders in prose commands: a real recipe and a real log.
    log = str(REPO / "tests" / "doctor" / "logs" / "vlmr1_grpo_6xh20_generation.log")
    hostfile = REPO / "tests" / "runner" / "hostfile.example"
    names = {"RECIPE": "vlm-r1-h20", "LOG": log, "R": "0", "HOST": "127.0.0.1", "FILE": str(hostfile)}
    command = " ".join(names.get(w, w) for w in command.split())
    if command.startswith("axolotl train "):
        config = yaml.safe_load((REPO / command.split()[-1]).read_text())  # axolotl itself is not a dependency
        assert config["sequence_len"] == 4096 and config["gradient_checkpointing"] is True
        return
    argv = [a for a in expand(command) if a != ">"]
    if "job.sbatch" in argv:
        argv = argv[: argv.index("job.sbatch")]
    if argv[0] == "run" and "--smoke" in argv:
        assert argv[1] in RECIPES  # tests/train/test_smoke.py runs `vramfit run <recipe> --smoke` for every recipe
        return
    if argv[0] == "run" and "--dry-run" not in argv:
        import torch

        if torch.cuda.device_count() == 0:  # a real run here must refuse and point at the alternatives
            code = main(argv)
            assert code == 2 and "--dry-run" in capsys.readouterr().err
            return
        argv.append("--dry-run")
    if argv[0] == "cp":
        pytest.skip("covered by test_tree.py::test_cp_copies_and_renames in a private tree")
    if argv[0] == "review":
        pytest.skip("covered by tests/review with the seed scripts")
    code = main(argv)
    assert code == 0, capsys.readouterr().err  # every documented command on a shipped recipe succeeds (each recipe fits)


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    exercise(command, capsys)


@pytest.mark.parametrize("command", header_commands())
def test_recipe_header_command(command, capsys):
    exercise(command, capsys)


def test_the_two_commands_are_shown():
    commands = readme_commands()
    assert "make run RECIPE=vlm-r1-h20 SMOKE=1" in commands and "make test" in commands
