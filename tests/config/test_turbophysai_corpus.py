"""TurboPhysAI's configs (tests/fixtures/turbophysai, see its README) load with their meaning
and ``turbo-physai check`` reports on each: exit 0/1, never a config error."""

import contextlib
import hashlib
import inspect
import io
import textwrap
from pathlib import Path

import pytest
from openmmlab_env import openmmlab_packages
from turbophysai_env import CORPUS, corpus_targets

import turbo_physai as tpa
from turbo_physai.cli.main import main
from turbo_physai.config import load_config
from turbo_physai.config.runtime import is_runtime_config, load_runtime_config
from turbo_physai.engine.evidence import identity

LAYOUT = CORPUS / "turbo_physai" / "optimizations"
FILES = sorted(p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*.yaml"))

MMDET3D = ["mmdet3d.gaussian", "mmdet3d.bev_pool", "mmdet3d.quick_cumsum",
           "mmdet3d.voxelization", "mmdet3d.canonical_indice_pairs", "mmdet3d.sparse_tensor"]


def test_the_corpus_has_turbophysais_sixteen_files_and_ours():
    assert len([f for f in FILES if f.startswith("turbo_physai/")]) == 17  # + mmcv's generated
    assert {Path(f).name for f in FILES} >= {"optimization.yaml", "recipe.yaml", "runtime.yaml"}


@pytest.mark.parametrize("name", FILES)
def test_every_file_loads(name):
    path = CORPUS / name
    if is_runtime_config(path):
        load_runtime_config(path)
    else:
        config = load_config(path)
        assert config.groups or name.endswith("common/configs/recipe.yaml")


def groups(relative):
    return [g.id for g in load_config(LAYOUT / relative).groups]


def test_extends_by_id_follows_turbophysais_layout():
    # common.hcu.base lives beside a recipe with the same ID: only optimization.yaml counts,
    # and its parents are found in sibling trees (common/mmcv, common/mmdet3d).
    assert groups("common/configs/optimization.yaml") == ["mmcv.msda", *MMDET3D]
    assert groups("common/configs/recipe.yaml") == ["mmcv.msda", *MMDET3D]
    bevfusion = load_config(LAYOUT / "models/bevfusion/configs/recipe.yaml")
    assert [g.id for g in bevfusion.groups][:7] == ["mmcv.msda", *MMDET3D]
    assert bevfusion.catalogs == (
        "turbo_physai.optimizations.common.mmcv.catalog",
        "turbo_physai.optimizations.common.mmdet3d.catalog",
        "turbo_physai.optimizations.models.bevfusion.catalog",
    )
    assert bevfusion.group("bevfusion.training").options["compile_target"] == "camera"
    assert bevfusion.metadata["id"] == "model.bevfusion.base.hcu"
    assert groups("models/bevformer/configs/recipe.yaml")[0] == "mmcv.msda"
    openvla = load_config(LAYOUT / "models/openvla/configs/recipe.yaml")
    assert not openvla.group("openvla.reproducibility.data_order").enabled


def test_evidence_loads_as_written():
    config = load_config(LAYOUT / "models/bevformer/configs/optimization.yaml")
    msda = config.group("mmcv.msda").trust
    assert msda.source_hashes["mmcv._ext.ms_deform_attn_forward"][0].startswith("artifact-v1:")
    cosmos = load_config(LAYOUT / "models/cosmos3/configs/optimization.yaml")
    assert len(cosmos.group("cosmos3.compile_options").trust.source_hashes[
        "cosmos_framework.utils.misc.set_torch_compile_options"]) == 2


def check(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["check", *map(str, args)])
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", FILES)
def test_check_reports_on_every_file(name):
    status, out, err = check(CORPUS / name, "--json")
    assert status in (0, 1) and not err, err
    assert "Traceback" not in out


def test_without_the_packages_groups_are_blocked_with_their_reasons():
    status, out, _ = check(LAYOUT / "models/bevformer/configs/optimization.yaml", "--json")
    reasons = {g["id"]: g["reasons"] for g in __import__("json").loads(out)["groups"]}
    assert status == 1
    assert reasons["bevformer.tsa"] == ["replacement.unavailable"]
    assert reasons["bevformer.msda"] == ["target.unresolved"]
    older = tpa.check(LAYOUT.parent.parent / "older" / "bevformer-ed79ebc6.yaml")
    assert older.group("bevformer.compile").reasons == ["target.unresolved"]


@pytest.fixture
def targets():
    with openmmlab_packages(), corpus_targets():
        yield


@pytest.mark.usefixtures("targets")
def test_against_stand_ins_recorded_evidence_is_a_mismatch_and_force_overrides_it():
    path = LAYOUT / "models/bevformer/configs/optimization.yaml"
    report = tpa.check(path)
    reasons = {g.id: g.reasons for g in report.groups}
    # TurboPhysAI's hashes are of upstream code, not of the stand-ins: mismatches.
    assert reasons["mmcv.msda"] == ["source.identity"]  # artifact-v1 vs a builtin here
    assert reasons["bevformer.msda"] == ["source.identity"]
    assert reasons["bevformer.compile.encoder"] == ["source.identity"]
    assert reasons["bevformer.grid_mask"] == ["replacement.unavailable"]
    forced = tpa.check(path, force_groups=["bevformer.msda", "bevformer.compile.encoder"])
    assert forced.group("bevformer.msda").decision == "apply"
    assert forced.group("bevformer.compile.encoder").decision == "apply"


def test_turbophysais_hash_definitions():
    """source-v1 hashes inspect.getsource as is (no dedent); ast-v1 the canonical dump."""
    from tpa_fixture_lib.shapes import Base, SparseTensor

    method = Base.forward
    assert identity(method)["source-v1"] == "source-v1:" + hashlib.sha256(
        inspect.getsource(method).encode()).hexdigest()
    accessor = vars(SparseTensor)["sparity"]
    joined = ("__turbo_physai_property_accessor__ = 'fget'\n"
              + textwrap.dedent(inspect.getsource(accessor.fget)))
    assert identity(accessor)["source-v1"] == "source-v1:" + hashlib.sha256(
        joined.encode()).hexdigest()
    namespace = {}
    exec(compile("def f(x):\n    return x + 1\n", "<corpus>", "exec"), namespace)
    canonical = ("Module(body=[FunctionDef(name='f',args=arguments(args=[arg(arg='x')]),"
                 "body=[Return(value=BinOp(left=Name(id='x',ctx=Load()),op=Add(),"
                 "right=Constant(value=1)))])])")
    from turbo_physai.engine import evidence

    assert evidence._canonical_tree("def f(x):\n    return x + 1\n") == canonical


def write_config(tmp_path, body):
    path = tmp_path / "c.yaml"
    path.write_text("schema_version: turbophysai/optimization-config/v1\n"
                    "kind: OptimizationConfig\nmetadata: {id: c, version: '1'}\n"
                    + textwrap.dedent(body))
    return path


@pytest.mark.parametrize("recorded, status, reason", [
    ("source-v1:stale", "fail", "source.identity"),  # a placeholder: a mismatch, not a crash
    ("TODO", "unknown", None),
    ("xyz-v9:0123abcd", "unknown", None),
])
def test_placeholder_and_unverifiable_hashes(tmp_path, recorded, status, reason):
    path = write_config(tmp_path, f"""\
        optimization_groups:
        - id: fixture.gaussian
          trust:
            source_hashes: {{tpa_fixture_lib.shapes.gaussian_2d: ['{recorded}']}}
        """)
    report = tpa.check(path)
    [identity_check] = [c for c in report.group("fixture.gaussian").checks
                        if c.code == "source.identity"]
    assert identity_check.status == status and identity_check.reason == reason
    if status == "unknown":
        assert "cannot be verified here" in identity_check.message
        assert report.group("fixture.gaussian").decision == "apply"


@pytest.mark.usefixtures("targets")
def test_a_user_catalog_that_redeclares_a_builtin_id_wins_when_named(tmp_path):
    path = write_config(tmp_path, """\
        optimization_modules: [tpa_corpus_catalog]
        optimization_groups: [{id: mmdet3d.gaussian}]
        """)
    status, _, err = check(path)
    assert status == 2 and "not an installed catalog" in err  # a config is data
    report = tpa.check(path, trust=True)
    group = report.group("mmdet3d.gaussian")
    [choice] = [c for c in group.checks if c.code == "catalog.choice"]
    assert choice.status == "warning" and choice.actual == "tpa_corpus_catalog"
    assert "turbo_physai.optimizations.common.mmdet3d.catalog" in choice.message
    assert group.decision == "apply", str(report)
    # A config that does not name it gets the built-in group: a trusted catalog takes part
    # only while a config names it (two installed catalogs: test_discovery.py).
    plain = tpa.check(tpa.OptimizationConfig.for_groups("mmdet3d.gaussian")).group(
        "mmdet3d.gaussian")
    assert not [c for c in plain.checks if c.code.startswith("catalog.")], plain.checks
    assert tpa.registry.get("mmdet3d.gaussian").source.endswith("mmdet3d.catalog")


@pytest.mark.skipif("strict" not in inspect.signature(tpa.check).parameters,
                    reason="needs the planner's group.unknown (engine change, issue 26)")
def test_an_unknown_group_is_reported_blocked_and_the_others_go_on(tmp_path):
    path = write_config(tmp_path, "optimization_groups: [{id: no.such.group}, "
                              "{id: fixture.gaussian}]\n")
    status, out, err = check(path)
    assert status == 1 and "group.unknown" in out, out + err
    report = tpa.check(path)
    assert report.group("no.such.group").reasons == ["group.unknown"]
    assert report.group("fixture.gaussian").decision == "apply"


@pytest.mark.parametrize("name, trust, status", [
    ("bevformer", False, 0), ("bevfusion", False, 1), ("bevfusion", True, 0),
    ("cosmos3", False, 0), ("openvla", False, 0)])
def test_runtime_configs(name, trust, status):
    path = LAYOUT / f"models/{name}/configs/runtime.yaml"
    got, out, _ = check(path, *(["--trust-config"] if trust else []))
    assert got == status, out
    if name == "bevfusion" and not trust:
        assert "TORCHINDUCTOR_CACHE_DIR: loads code" in out
    runtime = load_runtime_config(path)
    assert runtime.numa is (name != "bevfusion")  # cosmos3 has no process: TurboPhysAI's default
