"""Compatibility by evidence (optimizations/common/host_code.py), on the fixture library: code
with a validated fingerprint passes whatever the release, other code and missing code are
blocked naming the release and the path, an absent distribution defers to target resolution."""

from turbo_physai.engine.context import CompatibilityContext
from turbo_physai.optimizations.common import host_code

PATH = "tpa_fixture_lib.shapes.gaussian_2d"
HOW = "run the fixture tests"


def _check(fingerprints, package="tpa-fixture-lib"):
    validated = host_code.Validated(package, fingerprints, HOW)
    return host_code.check(CompatibilityContext("g", {}, ()), validated)


def test_validated_code_passes_and_names_the_releases_it_was_validated_on():
    result = _check({PATH: {host_code.fingerprint(PATH): ("0.9", "0.8")}})
    assert result.compatible
    assert result.actual == "1.0.0"
    assert result.reason == "tpa-fixture-lib 1.0.0: the code validated on 0.8, 0.9"


def test_other_code_is_blocked_naming_the_release_the_path_and_how_to_validate():
    result = _check({PATH: {"ast-v1:" + "0" * 64: ("1.0.0",)}})
    assert not result.compatible
    assert result.code == "compatibility.incompatible"
    current = host_code.fingerprint(PATH)
    assert result.reason == (
        f"tpa-fixture-lib 1.0.0: the code of {PATH} is not a validated "
        f"version (fingerprint {current}); {HOW}"
    )


def test_missing_code_is_blocked():
    result = _check({"tpa_fixture_lib.shapes.no_such_function": {"ast-v1:x": ("1.0.0",)}})
    assert not result.compatible
    assert "tpa_fixture_lib.shapes.no_such_function is missing" in result.reason


def test_an_absent_distribution_defers_to_target_resolution():
    result = _check({PATH: {}}, package="no-such-distribution")
    assert result.compatible and result.actual is None
    assert result.reason == "no-such-distribution is not installed"


def test_the_fingerprint_ignores_formatting_and_comments(tmp_path, monkeypatch):
    source = "def f(x):\n    return x + 1\n"
    reformatted = "def f( x ):  # a comment\n\n    return (x + 1)\n"
    for name, text in (("a_mod", source), ("b_mod", reformatted)):
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert host_code.fingerprint("a_mod.f") == host_code.fingerprint("b_mod.f")
    assert host_code.fingerprint("a_mod.f") != host_code.fingerprint(PATH)
