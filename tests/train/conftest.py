"""Fixtures for the training tests, and each recipe's smoke wall time at the end of the session."""

from __future__ import annotations

import pytest

from train_support import REPO, WALL_TIMES


def pytest_terminal_summary(terminalreporter):
    if WALL_TIMES:
        terminalreporter.write_sep("-", "smoke wall time per recipe (vramfit run --smoke, 2 ranks)")
        for name, seconds in sorted(WALL_TIMES.items()):
            terminalreporter.write_line(f"{name:40s} {seconds:6.1f} s")


@pytest.fixture(scope="session")
def smoke_recipe(tmp_path_factory):
    """smoke_recipe(name, *overrides) -> the recipe with its smoke overrides applied (model, tokenizer and
    data built once per recipe and session, on CPU)."""
    from vramfit.recipe import load
    from vramfit.train import smoke

    built: dict[str, list[str]] = {}

    def get(name: str, *extra: str):
        source = REPO / "recipes" / name / "recipe.yaml"
        if name not in built:
            built[name] = smoke.prepare(load(source), tmp_path_factory.mktemp(name), cpu=True)
        return load(source, [*built[name], *extra])

    return get
