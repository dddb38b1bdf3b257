"""Fault injection: a failing step blocks or rolls back its group, the report says why, and
nothing else is disturbed."""

import sys

import pytest
import tpa_fixture_opt as opt
from tpa_fixture_lib import shapes
from tpa_state import assert_identical, capture

import turbo_physai as tpa
from turbo_physai import group, replace, replace_import, wrap

LIB, OPT = "tpa_fixture_lib", "tpa_fixture_opt"
GOOD = group("good", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"))


def apply_with_good(bad):
    before = capture()
    report = tpa.apply(groups=[bad, GOOD])
    assert report.group("good").status == "applied"
    assert shapes.gaussian_2d is opt.gaussian_2d
    return before, report


def reasons_after(bad, expected):
    before, report = apply_with_good(bad)
    gr = report.group(bad.id)
    assert (gr.decision, gr.status) == ("block", "blocked")
    assert gr.reasons == expected
    assert gr.targets == []
    tpa.rollback()
    assert_identical(before, capture())
    return gr


def test_factory_raises():
    gr = reasons_after(
        group("bad", wrap(f"{LIB}.shapes.Base.forward", f"{OPT}.failing_factory")),
        ["factory.error"],
    )
    assert "factory exploded" in next(c.message for c in gr.checks if c.code == "wrap.factory")


def test_compatibility_check_incompatible_is_not_forceable():
    bad = group(
        "bad",
        replace(f"{LIB}.shapes.Base.forward", f"{OPT}.forward"),
        compatibility_check=f"{OPT}.incompatible",
    )
    before = capture()
    report = tpa.apply(groups=[bad, GOOD], force_groups=["bad"])
    gr = report.group("bad")
    assert gr.reasons == ["compatibility.incompatible"]
    check = next(c for c in gr.checks if c.code == "compatibility_check")
    assert (check.expected, check.actual, check.message) == (
        {"fixture": "9.9"},
        {"fixture": "1.0"},
        "validated on 9.9",
    )
    tpa.rollback()
    assert_identical(before, capture())


@pytest.mark.parametrize("check_path", ["raising_check", "wrong_result", "does_not_exist"])
def test_compatibility_check_errors(check_path):
    bad = group(
        "bad",
        replace(f"{LIB}.shapes.Base.forward", f"{OPT}.forward"),
        compatibility_check=f"{OPT}.{check_path}",
    )
    reasons_after(bad, ["compatibility.error"])


def test_compatibility_context_sees_options_read_only():
    g = group(
        "ok",
        replace(f"{LIB}.shapes.Base.forward", f"{OPT}.forward"),
        compatibility_check=f"{OPT}.compatible",
    )
    cfg = tpa.OptimizationConfig((tpa.GroupSelection("ok", options={"tag": 1}),))
    report = tpa.check(cfg, groups=[g])
    check = next(c for c in report.group("ok").checks if c.code == "compatibility_check")
    assert check.status == "pass" and dict(check.actual) == {"tag": 1}


def test_install_fails_half_way_through_a_group():
    # int's attributes cannot be set: the second install raises after the first succeeded.
    bad = group(
        "bad",
        replace(f"{LIB}.shapes.Base.forward", f"{OPT}.forward"),
        replace("builtins.int.bit_length", f"{OPT}.bit_length"),
    )
    before = capture()
    report = tpa.apply(groups=[bad, GOOD])
    gr = report.group("bad")
    assert gr.decision == "apply" and gr.status == "rolled_back"
    assert "int" in gr.error and gr.restore["restored"] == [f"{LIB}.shapes.Base.forward"]
    assert shapes.Base().forward(1) == ("stock", 1)
    assert report.group("good").status == "applied"
    tpa.rollback()
    assert_identical(before, capture())


def test_dependents_of_a_rolled_back_group_are_not_started():
    bad = group("bad", replace("builtins.int.bit_length", f"{OPT}.bit_length"))
    dependent = group(
        "dep", replace(f"{LIB}.shapes.Base.forward", f"{OPT}.forward"), depends_on="bad"
    )
    report = tpa.apply(groups=[bad, dependent, GOOD])
    assert report.group("dep").status == "not_started"
    assert report.group("dep").reasons == ["dependency.failed"]
    assert shapes.Base().forward(1) == ("stock", 1)


def test_dependents_of_a_blocked_group_are_blocked():
    bad = group("bad", replace(f"{LIB}.nothing_here", f"{OPT}.forward"))
    dependent = group(
        "dep", replace(f"{LIB}.shapes.Base.forward", f"{OPT}.forward"), depends_on="bad"
    )
    report = tpa.check(groups=[bad, dependent])
    assert report.group("bad").reasons == ["target.unresolved"]
    dep = report.group("dep")
    assert dep.reasons == ["dependency.blocked"]
    # Still prepared: its own targets were checked and would apply on their own.
    assert [c.status for c in dep.checks if c.code == "target.resolve"] == ["pass"]


def test_alias_identity_mismatch():
    bad = group(
        "bad",
        replace(
            f"{LIB}.shapes.gaussian_2d",
            f"{OPT}.gaussian_2d",
            aliases=(f"{LIB}.shapes.Base.forward",),
        ),
    )
    before = capture()
    report = tpa.apply(groups=[bad])
    assert report.group("bad").reasons == ["alias.identity_mismatch"]
    tpa.rollback()
    assert_identical(before, capture())


def test_replace_import_of_already_imported_module():
    bad = group("bad", replace_import(f"{LIB}.shapes", f"{LIB}.mha"))
    before = capture()
    report = tpa.apply(groups=[bad])
    assert report.group("bad").reasons == ["replace_import.already_imported"]
    assert sys.modules[f"{LIB}.shapes"] is shapes
    tpa.rollback()
    assert_identical(before, capture())


@pytest.mark.parametrize(
    "target,replacement,reason",
    [
        (f"{LIB}.shapes.missing", f"{OPT}.forward", "target.unresolved"),
        ("tpa_no_such_package.f", f"{OPT}.forward", "target.unresolved"),
        (f"{LIB}.shapes.Base.forward", f"{OPT}.missing", "replacement.unresolved"),
        (f"{LIB}.shapes.Layer", f"{OPT}.forward", "kind.mismatch"),
        (f"{LIB}.shapes.SparseTensor.sparity", f"{OPT}.forward", "kind.mismatch"),
        (f"{LIB}.shapes.Base.forward", f"{OPT}.bad_signature", "signature.mismatch"),
    ],
)
def test_structural_blocks(target, replacement, reason):
    reasons_after(group("bad", replace(target, replacement)), [reason])


def test_force_does_not_override_structural_checks():
    bad = group("bad", replace(f"{LIB}.shapes.missing", f"{OPT}.forward"))
    report = tpa.check(groups=[bad], force_groups=["bad"])
    assert report.group("bad").reasons == ["target.unresolved"]


def test_evidence_mismatch_blocks_and_force_overrides():
    g = group("ev", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"))
    target = f"{LIB}.shapes.gaussian_2d"
    stale = tpa.Trust({target: ("source-v1:" + "0" * 64,)}, {target: ("ast-v1:" + "0" * 64,)})
    cfg = tpa.OptimizationConfig((tpa.GroupSelection("ev", trust=stale),))
    report = tpa.check(cfg, groups=[g])
    assert report.group("ev").reasons == ["source.identity"]
    forced = tpa.check(cfg, groups=[g], force_groups=["ev"])
    assert forced.group("ev").decision == "apply"
    assert any(c.forced for c in forced.group("ev").checks)


def test_evidence_match_passes():
    from turbo_physai.engine.evidence import identity

    tree = identity(shapes.gaussian_2d)["ast-v1"]
    g = group("ev", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"))
    cfg = tpa.OptimizationConfig(
        (tpa.GroupSelection("ev", trust=tpa.Trust({}, {f"{LIB}.shapes.gaussian_2d": (tree,)})),)
    )
    report = tpa.check(cfg, groups=[g])
    assert report.group("ev").decision == "apply"


def test_conflicting_groups_are_both_blocked():
    a = group("a", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"))
    b = group("b", wrap(f"{LIB}.shapes.gaussian_2d", f"{OPT}.counting_wrapper"))
    report = tpa.check(groups=[a, b])
    for gid, other in (("a", "b"), ("b", "a")):
        gr = report.group(gid)
        assert gr.reasons == ["conflict.target"]
        assert other in next(c.message for c in gr.checks if c.code == "conflict.target")


def test_disabled_group_is_skipped_and_dependents_blocked():
    dep = group("dep", replace(f"{LIB}.shapes.Base.forward", f"{OPT}.forward"), depends_on="good")
    report = tpa.check(groups=[GOOD, dep], disable_groups=["good"])
    assert (report.group("good").decision, report.group("good").status) == ("skip", "skipped")
    assert report.group("dep").reasons == ["dependency.blocked"]


def test_config_enabled_false_skips():
    cfg = tpa.OptimizationConfig((tpa.GroupSelection("good", enabled=False),))
    report = tpa.check(cfg, groups=[GOOD])
    assert report.group("good").decision == "skip"


def test_unknown_force_or_disable_ids_are_errors():
    with pytest.raises(
        ValueError, match=r"force_groups names groups that are not selected: \['x'\]"
    ):
        tpa.check(groups=[GOOD], force_groups=["x"])
    with pytest.raises(ValueError, match="disable_groups"):
        tpa.check(groups=[GOOD], disable_groups=["x"])


def test_unknown_group_id_is_blocked_and_the_others_go_on():
    for run in (tpa.check, tpa.apply):
        report = run(groups=["nope", GOOD])
        assert report.group("nope").reasons == ["group.unknown"]
        assert report.group("good").decision == "apply"
        tpa.rollback()


def test_strict_keeps_the_unknown_group_error_unless_it_is_disabled():
    before = capture()
    for run in (tpa.check, tpa.apply):
        with pytest.raises(ValueError, match="unknown group 'nope'"):
            run(groups=[GOOD, "nope"], strict=True)
        assert_identical(before, capture())
    report = tpa.apply(groups=[GOOD, "nope"], strict=True, disable_groups=["nope"])
    assert (report.group("nope").decision, report.group("nope").status) == ("skip", "skipped")


def test_forced_and_disabled_is_an_error():
    with pytest.raises(ValueError, match=r"both forced and disabled: \['good'\]"):
        tpa.check(groups=[GOOD], force_groups=["good"], disable_groups=["good"])
    cfg = tpa.OptimizationConfig((tpa.GroupSelection("good", enabled=False),))
    with pytest.raises(ValueError, match="both forced and disabled"):
        tpa.apply(cfg, groups=[GOOD], force_groups=["good"])
    assert tpa.active_report() is None


def test_cycles_raise():
    a = group("a", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"), depends_on="b")
    b = group("b", replace(f"{LIB}.shapes.Base.forward", f"{OPT}.forward"), depends_on="a")
    with pytest.raises(ValueError, match="dependency cycle: a -> b -> a"):
        tpa.check(groups=[a, b])


def test_nothing_selected_is_an_error():
    with pytest.raises(ValueError, match="nothing selected"):
        tpa.apply()


def test_strict_rolls_back_everything_and_raises():
    bad = group("bad", replace(f"{LIB}.shapes.missing", f"{OPT}.forward"))
    before = capture()
    with pytest.raises(tpa.ApplyError, match=r"bad \(blocked: target.unresolved\)") as err:
        tpa.apply(groups=[GOOD, bad], strict=True)
    assert err.value.report.group("good").status == "applied"
    assert tpa.active_report() is None
    assert_identical(before, capture())


def test_third_party_patch_on_top_is_reported_not_clobbered():
    before = capture()
    tpa.apply(groups=[GOOD])

    def theirs(*args, **kwargs):
        return "theirs"

    shapes.gaussian_2d = theirs
    with pytest.warns(RuntimeWarning, match="not exact"):
        outcome = tpa.rollback()
    assert outcome["drifted"] == [f"{LIB}.shapes.gaussian_2d"]
    assert shapes.gaussian_2d is theirs
    shapes.gaussian_2d = before["tpa_fixture_lib.shapes"]["gaussian_2d"]
    assert_identical(before, capture())
