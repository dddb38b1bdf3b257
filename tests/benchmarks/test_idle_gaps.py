"""benchmarks/gpu_profile.py's idle_gaps: where the GPU idles inside a profiled step,
from its device activity (the figures BENCHMARKS.md quotes for issue 29)."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from gpu_profile import idle_gaps  # noqa: E402


def test_gaps_split_into_kernel_to_kernel_and_waits_for_the_host():
    activity = [(0, 10, "a"), (12, 30, "b"), (100, 110, "c"), (111, 120, "d"), (170, 171, "e")]
    found = idle_gaps(activity, host_us=20.0)
    assert found["span_ms"] == pytest.approx(0.171)
    assert found["idle_short_ms"] == pytest.approx(0.003)  # 2 + 1 us
    assert found["idle_long_ms"] == pytest.approx(0.120)  # 70 + 50 us
    assert found["long_gaps"] == 2
    assert found["largest"] == [(0.07, "b", "c"), (0.05, "d", "e")]  # ms, before, after


def test_overlapping_activity_is_not_idle_and_order_does_not_matter():
    # a kernel on another stream inside a long one: the later end is what the next gap follows
    activity = [(40, 60, "late"), (0, 40, "long"), (5, 10, "inside")]
    found = idle_gaps(activity)
    assert found["idle_short_ms"] == 0 and found["long_gaps"] == 0
    assert found["largest"] == []
    assert idle_gaps([(0, 40, "long"), (5, 10, "inside"), (70, 80, "x")])["largest"] == [
        (0.03, "long", "x")]


def test_no_activity_gives_none():
    assert idle_gaps([]) is None
