"""Fixtures shared by every test folder: no network, and where the repository is."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Nothing may be downloaded: set before any test (and every subprocess it starts) imports the hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# hypothesis writes nothing into the repository: no example database, its storage in the temp folder.
try:
    from hypothesis import settings
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "vramfit-hypothesis")
    settings.register_profile("vramfit", database=None)
    settings.load_profile("vramfit")
except ImportError:  # hypothesis is a test extra; the fuzz tests import it themselves
    pass


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
