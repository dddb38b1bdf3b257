"""Regression tests of issue 24 (engine items) and issue 26 (engine semantics): whatever
fails, nothing stays installed and the report or the exception says which group and why."""

import inspect
import sys
import types
import warnings

import pytest
import tpa_fixture_lib as lib
from tpa_fixture_lib import registry, shapes
from tpa_state import assert_identical, capture

import turbo_physai as tpa
from turbo_physai import group, replace, wrap
from turbo_physai.compatibility import import_alias, optional_import, registry_override
from turbo_physai.engine.evidence import record

LIB, OPT = "tpa_fixture_lib", "tpa_fixture_opt"
GOOD = group("good", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"))
COMPAT = group(
    "compat",
    import_alias(f"{LIB}.mha", "MHA", "FlashMHA"),
    optional_import(f"{LIB}.never_there"),
)


@pytest.fixture
def scratch(monkeypatch):
    """A module of test-made objects, importable as ``tpa_rel_scratch``."""
    module = types.ModuleType("tpa_rel_scratch")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


class _RaisingSignature:
    def __init__(self, exc):
        self.exc = exc

    @property
    def __signature__(self):
        raise self.exc

    def __call__(self, *args, **kwargs):
        return "new"


def test_a_replacement_whose_signature_raises_blocks_its_group_only(scratch):
    scratch.bad = _RaisingSignature(RuntimeError("signature exploded"))
    bad = group("bad", replace(f"{LIB}.shapes.Base.forward", "tpa_rel_scratch.bad"))
    before = capture()
    report = tpa.apply(groups=[GOOD, bad])
    gr = report.group("bad")
    assert gr.reasons == ["prepare.error"] and gr.targets == []
    message = next(c.message for c in gr.checks if c.code == "prepare")
    assert "replace('tpa_fixture_lib.shapes.Base.forward')" in message
    assert "RuntimeError: signature exploded" in message
    assert report.group("good").status == "applied"
    tpa.rollback()
    assert_identical(before, capture())


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_after_installed_groups_restores_them_and_names_the_group(scratch, exc):
    scratch.bad = _RaisingSignature(exc("stop"))
    bad = group("bad", replace(f"{LIB}.shapes.Base.forward", "tpa_rel_scratch.bad"))
    modules = (f"{LIB}.never_there",)
    before = capture(modules)
    with pytest.raises(exc) as caught:
        tpa.apply(groups=[COMPAT, GOOD, bad])  # compat and good are installed by then
    assert tpa.active_report() is None
    assert_identical(before, capture(modules))
    [note] = caught.value.__notes__
    assert "apply() was interrupted while preparing group 'bad'" in note
    assert "tpa_fixture_lib.shapes.gaussian_2d" in note  # what was restored


def test_evidence_of_a_lambda_target_is_hashed_without_error(scratch):
    scratch.f = lambda x: x  # inspect.getsource gives the whole line: not parseable alone
    scratch.g = lambda x: ("new", x)
    hashes, _ = record(scratch.f)
    cfg = tpa.OptimizationConfig(
        (tpa.GroupSelection("lam", trust=tpa.Trust({"tpa_rel_scratch.f": tuple(hashes)})),)
    )
    report = tpa.check(
        cfg, groups=[group("lam", replace("tpa_rel_scratch.f", "tpa_rel_scratch.g"))]
    )
    assert report.group("lam").decision == "apply", report


def test_check_leaves_nothing_when_a_later_group_is_interrupted():
    failing = group("bad", wrap(f"{LIB}.shapes.Base.forward", "tpa_rel_interrupt.factory"))
    interrupting = types.ModuleType("tpa_rel_interrupt")

    def factory(original, options):
        raise KeyboardInterrupt

    interrupting.factory = factory
    sys.modules[interrupting.__name__] = interrupting
    modules = (f"{LIB}.never_there",)
    try:
        import tpa_fixture_lib.mha as mha

        before = capture(modules)
        with pytest.raises(KeyboardInterrupt):
            tpa.check(groups=[COMPAT, failing])
        assert not hasattr(mha, "FlashMHA")
        assert f"{LIB}.never_there" not in sys.modules
        assert_identical(before, capture(modules))
    finally:
        del sys.modules[interrupting.__name__]


def _fresh(module):
    sys.modules.pop(module, None)
    vars(lib).pop(module.rpartition(".")[2], None)


def test_a_plugin_that_registers_then_raises_leaves_no_entry():
    module = f"{LIB}.plugin_raising"
    _fresh(module)
    g = group("reg", registry_override(module, f"{LIB}.registry.CONV_LAYERS", ("SparseConv3d",)))
    before = capture()
    report = tpa.apply(groups=[g])
    gr = report.group("reg")
    assert gr.status == "rolled_back" and "failed after registering" in gr.error
    assert gr.restore["restored"] == [f"{LIB}.registry.CONV_LAYERS[SparseConv3d]"]
    assert registry.CONV_LAYERS.module_dict["SparseConv3d"].origin == "stock"
    assert tpa.rollback() == {"restored": [], "drifted": [], "failed": []}
    assert_identical(before, capture())


def test_registry_override_reapplies_after_rollback_and_after_check():
    module = f"{LIB}.plugin_renamed"
    _fresh(module)
    g = group("reg", registry_override(module, f"{LIB}.registry.CONV_LAYERS", ("SparseConv3d",)))
    table = registry.CONV_LAYERS.module_dict
    before = capture()
    assert tpa.check(groups=[g]).group("reg").decision == "apply"
    assert table["SparseConv3d"].origin == "stock"  # check() imported it, then restored
    for _ in range(2):  # after check(), then after rollback()
        report = tpa.apply(groups=[g])
        assert report.group("reg").status == "applied"
        assert table["SparseConv3d"] is sys.modules[module].FastSparseConv
        assert tpa.rollback()["restored"] == [f"{LIB}.registry.CONV_LAYERS[SparseConv3d]"]
        assert table["SparseConv3d"].origin == "stock"
    assert_identical(before, capture(), imported=("plugin_renamed",))


def test_registry_override_of_a_module_imported_elsewhere_without_that_name_blocks():
    module = f"{LIB}.plugin_renamed"
    _fresh(module)
    table = registry.CONV_LAYERS.module_dict
    stock = table.pop("SparseConv3d")  # so that the plain import below may register it
    import tpa_fixture_lib.plugin_renamed  # noqa: F401  (not through turbo_physai)

    table["SparseConv3d"] = stock
    g = group("reg", registry_override(module, f"{LIB}.registry.CONV_LAYERS", ("SparseConv3d",)))
    report = tpa.check(groups=[g])
    assert report.group("reg").reasons == ["registry.unknown_registration"]


class _Thing:
    __slots__ = ("slot", "__dict__")

    def __init__(self):
        self._level = 1

    @property
    def level(self):
        return self._level

    @level.setter
    def level(self, value):
        self._level = value


@pytest.mark.parametrize("name", ["level", "slot"])
def test_record_write_refuses_a_data_descriptor_and_writes_nothing(name):
    thing = _Thing()
    state = dict(vars(thing))
    with tpa.applied(groups=[GOOD], strict=True):
        with pytest.raises(TypeError, match=f"cannot write _Thing.{name}: it is a"):
            tpa.record_write("good", thing, name, 5)
        assert tpa.record_write("good", thing, "_level", 7) and thing.level == 7
    assert vars(thing) == state and thing.level == 1


def test_a_failed_import_compat_group_stops_the_plan_before_the_model_imports():
    compat = group("compat", import_alias(f"{LIB}.mha", "Missing", "Alias"))
    model = group("model", replace(f"{LIB}.model_must_not_import.f", f"{OPT}.forward"))
    for run in (tpa.check, tpa.apply):
        report = run(groups=[compat, model, GOOD])
        assert report.group("compat").reasons == ["target.unresolved"]
        for gid in ("model", "good"):
            gr = report.group(gid)
            assert gr.reasons == ["import_compat.blocked"] and "'compat'" in gr.checks[-1].message
        assert f"{LIB}.model_must_not_import" not in sys.modules
        tpa.rollback()


def test_an_import_compat_group_its_check_declines_holds_only_its_dependents():
    compat = group(
        "compat",
        import_alias(f"{LIB}.mha", "MHA", "FlashMHA"),
        compatibility_check=f"{OPT}.incompatible",
    )
    model = group(
        "model", replace(f"{LIB}.model_must_not_import.f", f"{OPT}.forward"), depends_on="compat"
    )
    report = tpa.check(groups=[compat, model, GOOD])
    assert report.group("compat").reasons == ["compatibility.incompatible"]
    assert report.group("model").reasons == ["dependency.blocked"]
    assert report.group("good").decision == "apply"
    assert f"{LIB}.model_must_not_import" not in sys.modules


def test_an_alias_that_is_the_target_by_another_path_rolls_back_exactly(monkeypatch):
    monkeypatch.setattr(lib, "shapes_again", shapes, raising=False)
    g = group(
        "gauss",
        replace(
            f"{LIB}.shapes.gaussian_2d",
            f"{OPT}.gaussian_2d",
            aliases=(f"{LIB}.shapes_again.gaussian_2d",),
        ),
    )
    before = capture()
    report = tpa.apply(groups=[g])
    assert report.group("gauss").targets == [f"{LIB}.shapes.gaussian_2d"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outcome = tpa.rollback()
    assert outcome == {"restored": [f"{LIB}.shapes.gaussian_2d"], "drifted": [], "failed": []}
    assert_identical(before, capture())


def test_a_path_resolves_through_the_longest_importable_module_first(scratch):
    import tpa_shadow_pkg

    def fast(feats, coords):
        return ("fast", feats, coords)

    scratch.fast = fast
    stock = tpa_shadow_pkg.bev_pool  # the re-exported function, shadowing the submodule
    g = group("pool", replace("tpa_shadow_pkg.bev_pool.bev_pool", "tpa_rel_scratch.fast"))
    with tpa.applied(groups=[g], strict=True):
        assert sys.modules["tpa_shadow_pkg.bev_pool"].bev_pool is fast
        assert tpa_shadow_pkg.bev_pool is stock  # an alias the group did not declare
    assert sys.modules["tpa_shadow_pkg.bev_pool"].bev_pool is stock


@pytest.mark.parametrize("accessor", ["fset", "fdel"])
def test_a_property_replacement_must_keep_the_setter_and_deleter_shape(scratch, accessor):
    def getter(self):
        return "new"

    scratch.prop = property(getter, **{accessor: lambda self, *value: None})
    g = group("prop", replace(f"{LIB}.shapes.SparseTensor.sparity", "tpa_rel_scratch.prop"))
    gr = tpa.check(groups=[g]).group("prop")
    assert gr.reasons == ["signature.mismatch"]
    check = next(c for c in gr.checks if c.code == "target.signature")
    assert f"adds an {accessor}" in check.message and check.actual == ["fget", accessor]


def test_a_property_replacement_with_the_same_shape_applies(scratch):
    scratch.prop = property(lambda self: "new")
    g = group("prop", replace(f"{LIB}.shapes.SparseTensor.sparity", "tpa_rel_scratch.prop"))
    with tpa.applied(groups=[g], strict=True):
        assert shapes.SparseTensor(1, 2).sparity == "new"
    assert inspect.getattr_static(shapes.SparseTensor, "sparity").fset is None
