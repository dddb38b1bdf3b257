"""What a newcomer meets first: one line (exit 2) for every missing piece, shipped configs named
by ID, host libraries named by `list`, tables that keep IDs whole, a closed pipe."""

import json
import os
import subprocess
import sys

import pytest
import yaml

import turbo_physai as tpa
from turbo_physai.config import ConfigError, shipped_configs


def _blocked(tmp_path, cli, *modules):
    """PYTHONPATH on which importing each of ``modules`` fails as if it were not installed."""
    blocker = tmp_path / "blocked"
    blocker.mkdir(exist_ok=True)
    for name in modules:
        (blocker / f"{name}.py").write_text(
            f'raise ModuleNotFoundError("No module named {name!r}", name={name!r})\n')
    return {"PYTHONPATH": f"{blocker}:{cli.pythonpath}"}


def _one_clean_line(done):
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


@pytest.mark.parametrize("missing", [("torch",), ("transformers",), ("torch", "transformers")])
def test_demo_names_what_is_missing_and_the_pip_command(cli, tmp_path, missing):
    err = _one_clean_line(cli("demo", "--quick", env=_blocked(tmp_path, cli, *missing)))
    assert " and ".join(missing) in err and "pip install 'turbo_physai[demo]'" in err


def test_kernels_without_torch_is_one_line(cli, tmp_path):
    err = _one_clean_line(cli("kernels", env=_blocked(tmp_path, cli, "torch")))
    assert "torch is not installed" in err and "pip install" in err


def test_demo_on_a_device_that_is_not_here(cli):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    err = _one_clean_line(cli("demo", "--device", "cuda"))
    assert "no CUDA device is available here" in err
    assert "not a device" in _one_clean_line(cli("demo", "--device", "abacus"))


def test_shipped_config_ids_work_wherever_a_config_path_does(cli):
    shown = cli("show", "turbo_physai.deformable_detr.gpu_inference", "--json")
    assert shown.returncode == 0, shown.stderr
    sources = json.loads(shown.stdout)["sources"]
    assert [s.rsplit("/", 1)[1] for s in sources] == [
        "deformable_detr.yaml", "deformable_detr_gpu_inference.yaml"]
    checked = cli("check", "turbo_physai.deformable_detr", "--json")
    assert checked.returncode in (0, 1), checked.stderr  # 1 where transformers differs
    groups = [g["id"] for g in json.loads(checked.stdout)["groups"]]
    assert groups == ["transformers.msda.common", "transformers.deformable_detr.msda"]
    done = cli("diff", "turbo_physai.rt_detr.gpu_inference",
               "turbo_physai.rt_detr.gpu_inference_tf32")
    assert done.returncode == 1 and "matmul_precision: high" in done.stdout
    err = _one_clean_line(cli("check", "turbo_physai.no_such_config"))
    assert "neither a config file nor a config ID" in err and "turbo_physai.deformable_detr" in err


def test_config_ids_in_the_python_api_and_the_config_path(tmp_path, monkeypatch):
    config = tpa.load_config("turbo_physai.deformable_detr")
    assert config.path == str(shipped_configs()["turbo_physai.deformable_detr"])
    mine = tmp_path / "anything.yaml"
    mine.write_text("schema_version: turbophysai/optimization-config/v1\n"
                    "kind: OptimizationConfig\nmetadata: {id: team.fixture, version: '1'}\n"
                    "optimization_groups:\n- id: fixture.sparse\n")
    monkeypatch.setenv("TURBO_PHYSAI_CONFIG_PATH", str(tmp_path))
    with tpa.applied("team.fixture") as report:
        assert report.group("fixture.sparse").status == "applied"
    assert tpa.check("team.fixture").ok
    with pytest.raises(ConfigError, match="'team.nothing' is neither a config file"):
        tpa.check("team.nothing")
    with pytest.raises(ConfigError, match="cannot read"):
        tpa.load_config(tmp_path / "not_there.yaml")  # a path stays a path


def test_list_configs_shows_ids_and_descriptions(cli, tmp_path):
    done = cli("list", "--configs", "--json")
    rows = {r["id"]: r for r in json.loads(done.stdout)}
    assert set(shipped_configs()) <= set(rows)
    row = rows["turbo_physai.deformable_detr"]
    assert row["shipped"] and "Deformable DETR" in row["description"]
    assert row["groups"] == ["transformers.msda.common", "transformers.deformable_detr.msda"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({
        "schema_version": "turbophysai/optimization-config/v1", "kind": "OptimizationConfig",
        "metadata": {"id": "team.c", "version": "1", "description": "ours"},
        "optimization_groups": [{"id": "fixture.sparse"}]}))
    human = cli("list", "--configs", env={"TURBO_PHYSAI_CONFIG_PATH": str(tmp_path),
                                           "COLUMNS": "80"}).stdout
    assert "turbo_physai.rt_detr.gpu_inference_tf32" in human and "team.c" in human
    assert "ours (1 groups;" in human


def test_list_names_host_libraries_and_their_releases(cli, tmp_path):
    env = _blocked(tmp_path, cli)  # nothing blocked: the fixture catalog and the built-ins
    rows = json.loads(cli("list", "--json", env=env).stdout)
    hosts = {r["catalog"]: r["host_packages"] for r in rows}
    mmcv = "turbo_physai.optimizations.common.mmcv.catalog"
    assert hosts[mmcv] == {"mmcv-full": None, "mmcv": None}
    assert hosts["turbo_physai.optimizations.models.bevfusion.catalog"] == {
        "mmdet3d": None, "flash-attn": None}
    assert hosts["turbo_physai.optimizations.models.cosmos3.catalog"] == {}  # a source tree
    assert hosts["tpa_fixture_catalog"] is None  # declares no HOST_PACKAGES
    transformers = hosts["turbo_physai.catalogs.transformers"]["transformers"]
    try:
        import transformers as lib
    except ImportError:
        assert transformers is None
    else:
        assert transformers == lib.__version__
    human = cli("list", env={"COLUMNS": "250"}).stdout
    assert "mmcv-full not installed" in human and "pip install NAME" in human
    assert "target.unresolved (host library not installed)" in human


def test_tables_keep_ids_whole_at_80_columns(cli):
    out = cli("list", env={"COLUMNS": "80"}).stdout
    cells = [c.strip() for line in out.splitlines() for c in line.split("│")]
    for group_id in ("fixture.incompatible", "fixture.gaussian"):
        assert group_id in cells
    assert "target.unresolved" in out or "compatibility.incompatible" in out


def test_a_closed_pipe_is_not_a_traceback(cli):
    # The reader closes before the command writes its first line (`list --json | head -0`).
    script = ("import subprocess, sys\n"
              "p = subprocess.Popen([sys.executable, '-m', 'turbo_physai.cli', 'list', '--json'],"
              " stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
              "p.stdout.close()\n"
              "err = p.stderr.read().decode(); print(p.wait()); print(err)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": cli.pythonpath}, timeout=120)
    status, _, err = done.stdout.partition("\n")
    assert status == "141" and not err.strip(), done.stdout + done.stderr


def test_plan_error_is_public():
    assert tpa.PlanError.__module__ == "turbo_physai" and issubclass(tpa.PlanError, ValueError)
    with pytest.raises(tpa.PlanError, match="unknown group 'no.such.group'"):
        tpa.check(groups=["no.such.group"], strict=True)


def test_print_report_starts_with_a_summary():
    report = tpa.check(groups=[tpa.group("x.broken", tpa.replace("json.not_there", "json.dumps"))])
    first, *rest = str(report).splitlines()
    assert first == "turbo_physai check: 1 group: 0 apply, 0 skip, 1 block (not ok)"
    assert any(line.startswith("  x.broken: target.unresolved: ") for line in rest)
