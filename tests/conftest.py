"""Shared test setup: fixture packages on sys.path, and no apply() left active between tests."""

import os
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
# Importing ultralytics (its catalog's checks do) resolves two DNS names to decide whether it is
# online, unless this is set; the CLI tests' subprocesses inherit it.
os.environ.setdefault("YOLO_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _no_active_apply():
    import turbo_physai

    yield
    outcome = turbo_physai.rollback()
    assert not outcome["failed"], outcome
