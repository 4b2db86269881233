"""Each seed setup is reviewed once per session: a review imports transformers / TRL and runs the
planner, a few seconds each."""

from __future__ import annotations

import pytest

from vramfit.review.reviewer import Review, review

from review_support import SEED_RUNS


@pytest.fixture(scope="session")
def seed_review():
    cache: dict[str, Review] = {}

    def get(name: str) -> Review:
        if name not in cache:
            paths, hardware = SEED_RUNS[name]
            cache[name] = review([str(p) for p in paths], **hardware)
        return cache[name]

    return get
