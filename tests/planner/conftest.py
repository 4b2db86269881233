"""A private parameter-count cache for the planner tests (never the user's ~/.cache)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    previous = os.environ.get("VRAMFIT_CACHE_DIR")
    os.environ["VRAMFIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("vramfit-cache"))
    yield
    if previous is None:
        os.environ.pop("VRAMFIT_CACHE_DIR", None)
    else:
        os.environ["VRAMFIT_CACHE_DIR"] = previous
