"""Shared test setup: fixture packages on sys.path, and no apply() left active between tests."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
# Importing ultralytics (its catalog's checks do) resolves two DNS names to decide whether it is
# online, unless this is set; the CLI tests' subprocesses inherit it.
os.environ.setdefault("YOLO_OFFLINE", "1")


def pytest_configure(config):
    # The xdist controller imports a warning's module to rebuild it (rfdetr's config warning
    # pulls in torch). An import of torch first made there, inside that message handling,
    # failed half-way in CI ("partially initialized module 'torch'") and took every worker and
    # the run down; imported here, at start-up, it is complete before any warning arrives.
    if not hasattr(config, "workerinput") and importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401


@pytest.fixture(autouse=True)
def _no_active_apply():
    import turbo_physai

    yield
    outcome = turbo_physai.rollback()
    assert not outcome["failed"], outcome
