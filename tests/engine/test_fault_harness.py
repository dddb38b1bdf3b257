"""Fault injection at every point where the engine calls user code, with every kind of
exception: afterwards the state is identical (tests/fixtures/tpa_fault_lib.py)."""

import pytest
import tpa_fault_lib as F
from hypothesis import HealthCheck, given, settings
from tpa_state import differences

import turbo_physai as tpa

IDS = [g.id for g in F.GROUPS]


@pytest.fixture(autouse=True)
def _fresh():
    F.reset()
    yield
    F.arm(None)
    F.reset()


def test_unarmed_every_group_applies_and_rolls_back():
    before = F.state()
    report = tpa.apply(**F.selected(IDS), strict=True)
    assert [g.status for g in report.groups] == ["applied"] * len(IDS)
    assert differences(before, F.state())  # it did change something
    tpa.rollback()
    assert differences(before, F.state()) == []


@pytest.mark.parametrize("mode", ["check", "apply"])
@pytest.mark.parametrize("kind", F.KINDS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("point", sorted(F.POINTS))
def test_a_fault_leaves_the_state_identical(point, kind, mode):
    owner = F.POINTS[point]
    before = F.state()
    F.arm(point, kind)
    try:
        if issubclass(kind, Exception):  # user code's error: that group, not the call
            report = getattr(tpa, mode)(**F.selected(IDS))
            assert f"injected at {point}" in str(report.group(owner).to_dict())
            for g in report.groups:  # the others go on unless an import-compat group failed
                assert (
                    g.decision == "apply" or g.id == owner or g.reasons == ["import_compat.blocked"]
                ), (g.id, g.reasons)
        else:  # KeyboardInterrupt, SystemExit: the call stops, with nothing left installed
            with pytest.raises(kind) as caught:
                getattr(tpa, mode)(**F.selected(IDS))
            notes = " ".join(getattr(caught.value, "__notes__", ()))
            assert f"group {owner!r}" in notes and "restored" in notes, notes
            assert tpa.active_report() is None
    finally:
        F.arm(None)
    tpa.rollback()
    assert differences(before, F.state()) == []


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ops=F.sequences())
def test_sequences_of_apply_check_rollback_with_faults(ops):
    assert F.run_sequence(ops) == []
