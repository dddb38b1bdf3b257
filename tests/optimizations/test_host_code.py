"""Compatibility by evidence (optimizations/common/host_code.py), on the fixture library: code
with a validated fingerprint passes whatever the release, other code and missing code it relies
on are blocked naming the release, the path and how to validate it, the math markers are named,
the release being validated lets its new code through, and record writes what check accepts."""

import json

import pytest

from turbo_physai.engine.context import CompatibilityContext, TargetInfo
from turbo_physai.engine.paths import resolve
from turbo_physai.optimizations.common import host_code

PATH = "tpa_fixture_lib.shapes.gaussian_2d"
HOW = "run the fixture tests on {release}"
ENV = "TPA_VALIDATE_TPA_FIXTURE_LIB"


def _evidence(tmp_path, fingerprints, package="tpa-fixture-lib", **kwargs):
    file = tmp_path / "validated.json"
    file.write_text(json.dumps({"format": host_code.FORMAT, "fingerprints": fingerprints}))
    return host_code.Evidence(package, file, HOW, **kwargs)


def _check(evidence, targets=(PATH,)):
    infos = tuple(TargetInfo(p, "replace") for p in targets)
    return host_code.check(CompatibilityContext("g", {}, infos), evidence)


def _current():
    return host_code.fingerprint(resolve(PATH).found)


@pytest.fixture(autouse=True)
def _not_validating(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def test_validated_code_passes_and_names_the_releases_it_was_validated_on(tmp_path):
    evidence = _evidence(tmp_path, {_current(): {"code": "g", "releases": ["0.8", "0.10"]}})
    result = _check(evidence)
    assert result.compatible
    assert result.actual == "1.0.0"
    assert result.reason == "tpa-fixture-lib 1.0.0: the code validated on 0.8, 0.10"


def test_other_code_is_blocked_naming_the_release_the_path_and_how_to_validate(tmp_path):
    evidence = _evidence(tmp_path, {"msda-ast-v1:" + "0" * 64: {"code": "g", "releases": ["1"]}})
    result = _check(evidence)
    assert not result.compatible
    assert result.code == "compatibility.incompatible"
    assert result.reason == (
        f"tpa-fixture-lib 1.0.0: the code of {PATH} is not a validated version "
        f"(fingerprint {_current()}); validate it: run the fixture tests on 1.0.0"
    )


def test_the_math_markers_are_named_and_the_release_being_validated_passes(tmp_path, monkeypatch):
    problems = []
    evidence = _evidence(tmp_path, {}, math=lambda obj: problems)
    assert "its math markers are there, but no test ran" in _check(evidence).reason
    monkeypatch.setenv(ENV, "1.0.0")
    assert _check(evidence).compatible
    problems.append("grid_sample align_corners=False")
    reason = _check(evidence).reason  # validating does not let other math through
    assert "no longer does what our op computes: grid_sample align_corners=False" in reason
    monkeypatch.setenv(ENV, "1.0.1")
    assert not _check(_evidence(tmp_path, {})).compatible  # another release's validation


def test_missing_code_it_relies_on_is_blocked_a_missing_target_is_left_to_preparation(tmp_path):
    missing = "tpa_fixture_lib.shapes.no_such_function"
    table = {_current(): {"code": "g", "releases": ["1"]}}
    assert _check(_evidence(tmp_path, table), targets=(PATH, missing)).compatible
    relying = _evidence(tmp_path, table, relies_on=(missing,))
    result = _check(relying)
    assert not result.compatible
    assert f"{missing} is missing" in result.reason


def test_an_absent_distribution_defers_to_target_resolution(tmp_path):
    result = _check(_evidence(tmp_path, {}, package="no-such-distribution"))
    assert result.compatible and result.actual is None
    assert result.reason == "no-such-distribution is not installed"


def test_record_writes_what_check_then_accepts(tmp_path):
    evidence = _evidence(tmp_path, {"msda-ast-v1:old": {"code": "f", "releases": ["0.1"]}})
    assert not _check(evidence).compatible
    host_code.record(evidence, [PATH, "tpa_fixture_lib.shapes.no_such_function"])
    table = json.loads(evidence.file.read_text())
    assert table["format"] == host_code.FORMAT
    assert table["fingerprints"][_current()] == {"code": "gaussian_2d", "releases": ["1.0.0"]}
    assert "msda-ast-v1:old" in table["fingerprints"]  # earlier records are kept
    assert _check(evidence).compatible


def test_a_table_of_another_format_is_refused(tmp_path):
    evidence = _evidence(tmp_path, {})
    evidence.file.write_text(json.dumps({"format": "ast-v1", "fingerprints": {}}))
    with pytest.raises(ValueError, match="format 'ast-v1', expected 'msda-ast-v1'"):
        host_code.validated(evidence)


def test_the_fingerprint_ignores_formatting_and_comments(tmp_path, monkeypatch):
    source = "def f(x):\n    return x + 1\n"
    reformatted = "def f( x ):  # a comment\n\n    return (x + 1)\n"
    for name, text in (("a_mod", source), ("b_mod", reformatted)):
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    a, b = (host_code.fingerprint(resolve(f"{m}.f").found) for m in ("a_mod", "b_mod"))
    assert a == b != _current()


def test_our_own_replacement_is_not_judged_while_applied(tmp_path, monkeypatch):
    import tpa_fixture_lib.shapes

    evidence = _evidence(tmp_path, {})
    assert not _check(evidence).compatible
    monkeypatch.setattr(tpa_fixture_lib.shapes, "gaussian_2d", host_code.fingerprint)
    assert _check(evidence).compatible  # the code it replaced was judged when it was applied
