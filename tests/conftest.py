"""Shared test setup: fixture packages on sys.path, and no apply() left active between tests."""

import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))


@pytest.fixture(autouse=True)
def _no_active_apply():
    import turbo_physai

    yield
    outcome = turbo_physai.rollback()
    assert not outcome["failed"], outcome
