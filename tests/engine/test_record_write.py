"""record_write: writes an applied group makes at run time are journaled with its targets."""

import warnings

import turbo_physai as tpa
from turbo_physai import group, replace

GROUP = group(
    "record.host",
    replace("tpa_fixture_lib.shapes.gaussian_2d", "tpa_fixture_opt.gaussian_2d",
            aliases=("tpa_fixture_lib.utils.gaussian_2d",)),
)


class Thing:
    def __init__(self):
        self.flag = True


def test_rollback_restores_the_old_value_and_deletes_what_did_not_exist():
    thing, flag = Thing(), object()
    tpa.apply(groups=[GROUP], strict=True)
    assert tpa.record_write("record.host", thing, "flag", flag)
    assert tpa.record_write("record.host", thing, "extra", 1)
    assert thing.flag is flag and thing.extra == 1
    outcome = tpa.rollback()
    assert thing.flag is True and not hasattr(thing, "extra")
    assert len(outcome["restored"]) == 4 and not outcome["drifted"]


def test_nothing_is_written_without_that_group_applied():
    thing = Thing()
    assert not tpa.record_write("record.host", thing, "flag", False)  # no apply active
    with tpa.applied(groups=[GROUP], strict=True):
        assert not tpa.record_write("other.group", thing, "flag", False)
    with tpa.applied(groups=[GROUP], disable_groups=["record.host"]):
        assert not tpa.record_write("record.host", thing, "flag", False)  # skipped
    assert thing.flag is True


def test_a_value_changed_on_top_of_ours_is_left_and_reported():
    thing = Thing()
    tpa.apply(groups=[GROUP], strict=True)
    tpa.record_write("record.host", thing, "flag", "ours")
    thing.flag = "theirs"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = tpa.rollback()
    assert thing.flag == "theirs" and len(outcome["drifted"]) == 1
    assert "not exact" in str(caught[0].message)
