"""Checks that come from the config: dependency pins per package, model repository state."""

import subprocess

import pytest

import turbo_physai as tpa
from turbo_physai import group, replace
from turbo_physai.config import GroupSelection, OptimizationConfig

LIB = group("pin.lib", replace("tpa_fixture_lib.shapes.gaussian_2d",
                               "tpa_fixture_opt.gaussian_2d"))
OTHER = group("pin.other", replace("tpa_fixture_lib.shapes.Layer", "tpa_fixture_opt.Layer"))
# tpa_fixture_opt is no installed distribution: no pin can apply to this group.
NOWHERE = group("pin.nowhere", replace("tpa_fixture_opt.positive_fn",
                                       "tpa_fixture_opt.gaussian_2d"))


def config(compat, *ids):
    return OptimizationConfig(tuple(GroupSelection(i) for i in ids), compatibility=compat)


def checks(report, gid, code):
    return [c for c in report.group(gid).checks if c.code == code]


@pytest.mark.parametrize("spec, ok", [("1.0.0", True), (">=1,<2", True), ("~=1.0", True),
                                      (">=2", False), ("0.9", False), ("!=1.0.0", False)])
def test_dependency_pin_blocks_only_groups_in_that_package(spec, ok):
    cfg = config({"dependencies": {"TPA_Fixture.Lib": [spec]}}, "pin.lib", "pin.nowhere")
    report = tpa.check(cfg, groups=[LIB, NOWHERE])
    [pin] = checks(report, "pin.lib", "dependency.version")
    assert pin.status == ("pass" if ok else "fail") and pin.actual == "1.0.0"
    assert report.group("pin.lib").decision == ("apply" if ok else "block")
    assert checks(report, "pin.nowhere", "dependency.version") == []
    assert report.group("pin.nowhere").decision == "apply"


def test_any_of_several_versions_and_force():
    cfg = config({"dependencies": {"tpa-fixture-lib": ["0.9", "1.0.0"]}}, "pin.lib")
    assert tpa.check(cfg, groups=[LIB]).group("pin.lib").decision == "apply"
    cfg = config({"dependencies": {"tpa-fixture-lib": ">=3"}}, "pin.lib")
    report = tpa.check(cfg, groups=[LIB], force_groups=["pin.lib"])
    assert report.group("pin.lib").decision == "apply"
    assert checks(report, "pin.lib", "dependency.version")[0].forced


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    (tmp_path / "model.py").write_text("x = 1\n")
    _git(tmp_path, "add", "model.py")
    _git(tmp_path, "commit", "-qm", "init")
    monkeypatch.chdir(tmp_path)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=tmp_path).stdout.strip()
    return tmp_path, head


def test_commit_mismatch_is_a_warning(repo):
    _, head = repo
    report = tpa.check(config({"commits": ["0" * 40]}, "pin.other"), groups=[OTHER])
    [commit] = checks(report, "pin.other", "project.commit")
    assert commit.status == "warning" and commit.actual == head
    assert report.group("pin.other").decision == "apply"
    report = tpa.check(config({"commits": [head]}, "pin.other"), groups=[OTHER])
    assert checks(report, "pin.other", "project.commit")[0].status == "pass"


def test_dirty_tree_blocks_when_disallowed_unless_forced(repo):
    path, head = repo
    (path / "model.py").write_text("x = 2\n")
    unstated = tpa.check(config({"commits": [head]}, "pin.other"), groups=[OTHER])
    assert not checks(unstated, "pin.other", "project.dirty")  # TurboPhysAI: not judged
    assert unstated.group("pin.other").decision == "apply"
    strict = config({"commits": [head], "allow_dirty": False}, "pin.other")
    report = tpa.check(strict, groups=[OTHER])
    assert report.group("pin.other").reasons == ["project.dirty"]
    report = tpa.check(strict, groups=[OTHER], force_groups=["pin.other"])
    assert report.group("pin.other").decision == "apply"
    allowed = config({"commits": [head], "allow_dirty": True}, "pin.other")
    report = tpa.check(allowed, groups=[OTHER])
    assert checks(report, "pin.other", "project.dirty")[0].status == "warning"
    assert report.group("pin.other").decision == "apply"


def test_not_a_repository_is_unknown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    report = tpa.check(config({"commits": ["abc"]}, "pin.other"), groups=[OTHER])
    assert checks(report, "pin.other", "project.commit")[0].status == "unknown"
