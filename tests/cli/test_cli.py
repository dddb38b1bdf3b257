"""The CLI end to end, in subprocesses: list, generate, check, show, diff, report, kernels."""

import importlib.util
import json

import yaml

GROUPS = ["fixture.forward", "fixture.sparse", "fixture.msda", "fixture.wrap"]


def generate(cli, tmp_path, *groups, name="opt.yaml"):
    out = tmp_path / name
    done = cli("generate", *(groups or GROUPS), "-o", out, "--id", "demo", "--json")
    assert done.returncode == 0, done.stderr
    return out, json.loads(done.stdout)


def test_help_and_usage_errors(cli):
    done = cli("--help")
    assert done.returncode == 0 and "generate" in done.stdout and "86" in done.stdout
    assert cli("frobnicate").returncode == 2
    assert cli("check").returncode == 2  # missing argument


def test_list_shows_catalog_groups_and_verdicts(cli):
    done = cli("list", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["id"]: r for r in json.loads(done.stdout)}
    assert rows["fixture.forward"]["depends_on"] == ["fixture.gaussian"]
    assert rows["fixture.forward"]["catalog"] == "tpa_fixture_catalog"
    assert rows["fixture.sparse"]["would_apply"] is True
    assert rows["fixture.incompatible"]["would_apply"] is False
    assert rows["fixture.incompatible"]["reasons"] == ["compatibility.incompatible"]
    assert "fixture.incompatible" in cli("list").stdout


def test_generate_closure_evidence_versions_and_no_overwrite(cli, tmp_path):
    out, summary = generate(cli, tmp_path)
    assert summary["added_by_dependency"] == ["fixture.gaussian"]
    doc = yaml.safe_load(out.read_text())
    assert [g["id"] for g in doc["optimization_groups"]] == ["fixture.gaussian", *GROUPS]
    assert doc["compatibility"]["dependencies"] == {"tpa-fixture-lib": ["1.0.0"]}
    assert doc["optimization_modules"] == ["tpa_fixture_catalog"]
    trust = {g["id"]: g["trust"] for g in doc["optimization_groups"]}
    prop = "tpa_fixture_lib.shapes.SparseTensor.sparity"
    assert trust["fixture.sparse"]["source_hashes"][prop][0].startswith("source-v1:")
    native = trust["fixture.msda"]["source_hashes"]["tpa_fixture_lib._ext.ms_deform_attn_forward"]
    assert native[0].startswith("native-v1:")
    before = out.read_text()
    again = cli("generate", "fixture.sparse", "-o", out, "--id", "demo")
    assert again.returncode == 2 and "--force" in again.stderr
    assert out.read_text() == before
    assert cli("generate", "fixture.sparse", "-o", out, "--id", "x", "--force").returncode == 0
    assert "fixture.gaussian" not in out.read_text()


def test_generate_errors(cli, tmp_path):
    done = cli("generate", "no.such.group", "-o", tmp_path / "x.yaml", "--id", "x")
    assert done.returncode == 2 and "no.such.group" in done.stderr
    assert not (tmp_path / "x.yaml").exists()
    assert cli("generate", "-o", tmp_path / "x.yaml").returncode == 2  # nothing to generate


def test_generate_id_defaults_to_the_output_name(cli, tmp_path):
    assert cli("generate", "fixture.sparse", "-o", tmp_path / "my-opt.yaml").returncode == 0
    assert yaml.safe_load((tmp_path / "my-opt.yaml").read_text())["metadata"]["id"] == "my-opt"


def test_check_passes_then_detects_an_edited_target_and_force_overrides(cli, tmp_path,
                                                                         fixtures):
    out, _ = generate(cli, tmp_path)
    done = cli("check", out, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {g["decision"] for g in json.loads(done.stdout)["groups"]} == {"apply"}

    shapes = fixtures / "tpa_fixture_lib" / "shapes.py"
    shapes.write_text(shapes.read_text().replace('return ("stock", x * scale)',
                                                 'return ("edited", x * scale)'))
    done = cli("check", out, "--json")
    assert done.returncode == 1
    report = {g["id"]: g for g in json.loads(done.stdout)["groups"]}
    forward = report["fixture.forward"]
    assert forward["decision"] == "block" and forward["reasons"] == ["source.identity"]
    failed = [c for c in forward["checks"] if c["status"] == "fail"]
    assert failed[0]["message"].startswith("tpa_fixture_lib.shapes.Base.forward changed")
    assert report["fixture.sparse"]["decision"] == "apply"  # other groups are unaffected

    human = cli("check", out)
    assert human.returncode == 1 and "source.identity" in human.stdout

    forced = cli("check", out, "--force-group", "fixture.forward", "--json")
    assert forced.returncode == 0, forced.stdout
    checks = {c["code"]: c for g in json.loads(forced.stdout)["groups"]
              if g["id"] == "fixture.forward" for c in g["checks"]}
    assert checks["source.identity"]["forced"] is True


def test_failing_compatibility_check_cannot_be_forced(cli, tmp_path):
    out, _ = generate(cli, tmp_path, "fixture.incompatible")
    done = cli("check", out, "--force-group", "fixture.incompatible", "--json")
    assert done.returncode == 1
    group = json.loads(done.stdout)["groups"][0]
    assert group["decision"] == "block" and group["reasons"] == ["compatibility.incompatible"]


def test_dependency_pin_blocks_only_groups_in_that_package(cli, tmp_path):
    out, _ = generate(cli, tmp_path, "fixture.sparse")
    doc = yaml.safe_load(out.read_text())
    doc["compatibility"]["dependencies"] = {"tpa-fixture-lib": [">=2"], "tpa-fixture-catalog":
                                            ["0.1.0"]}
    out.write_text(yaml.safe_dump(doc))
    done = cli("check", out, "--json")
    group = json.loads(done.stdout)["groups"][0]
    assert done.returncode == 1 and group["reasons"] == ["dependency.version"]
    check = next(c for c in group["checks"] if c["code"] == "dependency.version")
    assert check["expected"] == [">=2"] and check["actual"] == "1.0.0"
    assert cli("check", out, "--force-group", "fixture.sparse").returncode == 0


def test_config_errors_exit_2_with_file_and_line(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: turbophysai/optimization-config/v1\n"
                   "kind: OptimizationConfig\nmetadata: {id: b, version: '1'}\n"
                   "optimization_groups:\n- id: a\n  enabeld: true\n")
    done = cli("check", bad)
    assert done.returncode == 2
    assert f"{bad}:6: optimization_groups[0].enabeld: unknown key" in done.stderr
    assert cli("show", bad).returncode == 2


def test_untrusted_catalog_is_refused_unless_trusted(cli, tmp_path):
    out, _ = generate(cli, tmp_path, "fixture.sparse")
    doc = yaml.safe_load(out.read_text())
    doc["optimization_modules"].append("tpa_fixture_opt")  # importable, but no catalog
    out.write_text(yaml.safe_dump(doc))
    done = cli("check", out)
    assert done.returncode == 2 and "'tpa_fixture_opt'" in done.stderr
    assert "--trust-config" in done.stderr
    assert cli("check", out, "--trust-config").returncode == 0


def test_show_diff_report_kernels(cli, tmp_path):
    a, _ = generate(cli, tmp_path, "fixture.sparse", name="a.yaml")
    b, _ = generate(cli, tmp_path, "fixture.sparse", "fixture.msda", name="b.yaml")
    shown = cli("show", a, "--json")
    assert json.loads(shown.stdout)["optimization_groups"][0]["id"] == "fixture.sparse"
    assert "fixture.sparse" in cli("show", a).stdout
    assert cli("diff", a, a).returncode == 0
    done = cli("diff", a, b, "--json")
    assert done.returncode == 1
    paths = [c["path"] for c in json.loads(done.stdout)]
    assert "optimization_groups.fixture.msda" in paths

    saved = tmp_path / "r.json"
    assert cli("check", a, "--report", saved).returncode == 0
    rendered = cli("report", saved)
    assert rendered.returncode == 0 and "fixture.sparse" in rendered.stdout
    garbage = tmp_path / "g.json"
    garbage.write_text("[1]")
    assert cli("report", garbage).returncode == 2

    if importlib.util.find_spec("torch") is not None:
        kernels = cli("kernels")
        assert kernels.returncode == 0 and "slot" in kernels.stdout


def test_diff_shows_key_paths_and_values(cli, tmp_path):
    a, _ = generate(cli, tmp_path, "fixture.sparse", name="a.yaml")
    b, _ = generate(cli, tmp_path, "fixture.sparse", "fixture.msda", name="b.yaml")
    doc = yaml.safe_load(b.read_text())
    doc["metadata"]["version"] = "0.2.0"
    b.write_text(yaml.safe_dump(doc))
    lines = cli("diff", a, b).stdout.splitlines()
    assert "~ metadata.version: 0.1.0 -> 0.2.0" in lines
    native = "tpa_fixture_lib._ext.ms_deform_attn_forward"
    added = [x for x in lines if x.startswith(f"+ optimization_groups[fixture.msda].trust"
                                               f".source_hashes[{native}]: native-v1:")]
    assert len(added) == 1, lines
    assert "+ optimization_groups[fixture.msda].enabled: true" in lines
    assert not any('{"' in x for x in lines)  # no JSON blobs
