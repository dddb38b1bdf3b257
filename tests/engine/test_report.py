"""The report: JSON, Markdown, readable str(), atomic files, summary counts."""

import json

from tpa_fixture_lib import shapes

import turbo_physai as tpa
from turbo_physai import group, replace

LIB, OPT = "tpa_fixture_lib", "tpa_fixture_opt"


def _report():
    good = group(
        "good",
        replace(
            f"{LIB}.shapes.gaussian_2d",
            f"{OPT}.gaussian_2d",
            runtime_condition=f"{OPT}.positive_fn",
        ),
    )
    bad = group("bad", replace(f"{LIB}.shapes.missing", f"{OPT}.forward"))
    off = group("off", replace(f"{LIB}.shapes.Base.forward", f"{OPT}.forward"))
    return tpa.apply(groups=[good, bad, off], disable_groups=["off"])


def test_summary_and_json(tmp_path):
    report = _report()
    shapes.gaussian_2d((1,), sigma=1)
    assert report.summary == {
        "groups": 3,
        "decisions": {"apply": 1, "skip": 1, "block": 1},
        "statuses": {"applied": 1, "blocked": 1, "skipped": 1},
    }
    assert not report.ok
    path = tmp_path / "out" / "report.json"
    report.to_json(path)
    data = json.loads(path.read_text())
    assert data["mode"] == "apply" and data["environment"]["python"]
    good = data["groups"][0]
    assert good["dispatchers"] == {f"{LIB}.shapes.gaussian_2d": {"replacement": 1, "original": 0}}
    assert good["timings_ms"]["prepare"] >= 0 and "install" in good["timings_ms"]
    bad = data["groups"][1]
    assert bad["reasons"] == ["target.unresolved"]
    check = next(c for c in bad["checks"] if c["code"] == "target.resolve")
    assert "missing" in check["message"] and check["overrideable"] is False
    assert not list(path.parent.glob(".*.tmp"))  # atomic write leaves no temporary behind


def test_markdown_and_str(tmp_path):
    report = _report()
    md = report.to_markdown(tmp_path / "r.md")
    assert "| `bad` | block | blocked | target.unresolved |" in md
    assert (tmp_path / "r.md").read_text() == md
    text = str(report)
    assert "good" in text and "target.unresolved" in text and "dispatcher" in text


def test_rollback_outcome_is_attached():
    report = _report()
    tpa.rollback()
    assert report.rollback["restored"] == [f"{LIB}.shapes.gaussian_2d"]
    assert report.to_dict()["rollback"]["failed"] == []
