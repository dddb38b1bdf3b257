"""Every mechanism applies, reports, and rolls back to an identical state."""

import inspect
import sys

import pytest
import tpa_fixture_lib as lib
import tpa_fixture_opt as opt
from tpa_fixture_lib import _ext, registry, shapes, utils
from tpa_state import assert_identical, capture

import turbo_physai as tpa
from turbo_physai import group, replace, replace_import, wrap
from turbo_physai.compatibility import import_alias, optional_import, registry_override

LIB = "tpa_fixture_lib"
OPT = "tpa_fixture_opt"


def roundtrip(*groups, modules=(), **kwargs):
    before = capture(modules)
    report = tpa.apply(groups=list(groups), **kwargs)
    return before, report


def finish(before, modules=(), imported=()):
    outcome = tpa.rollback()
    assert not outcome["drifted"] and not outcome["failed"]
    assert_identical(before, capture(modules), imported)
    return outcome


def test_function_with_aliases():
    g = group(
        "gauss",
        replace(
            f"{LIB}.shapes.gaussian_2d",
            f"{OPT}.gaussian_2d",
            aliases=(f"{LIB}.utils.gaussian_2d", f"{LIB}.gaussian_2d"),
        ),
    )
    before, report = roundtrip(g)
    assert report.group("gauss").status == "applied"
    assert shapes.gaussian_2d is opt.gaussian_2d
    assert utils.gaussian_2d is opt.gaussian_2d and lib.gaussian_2d is opt.gaussian_2d
    assert sorted(report.group("gauss").targets) == sorted(
        [f"{LIB}.shapes.gaussian_2d", f"{LIB}.utils.gaussian_2d", f"{LIB}.gaussian_2d"]
    )
    finish(before)
    assert shapes.gaussian_2d((2, 2))[0] == "stock"


def test_undeclared_alias_is_left_alone():
    g = group("gauss", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"))
    before, _ = roundtrip(g)
    assert shapes.gaussian_2d is opt.gaussian_2d
    assert utils.gaussian_2d((1,))[0] == "stock"
    finish(before)


def test_builtin_extension_functions():
    g = group(
        "msda",
        replace(f"{LIB}._ext.ms_deform_attn_forward", f"{OPT}.ms_deform_attn_forward"),
        replace(f"{LIB}._ext.ms_deform_attn_backward", f"{OPT}.ms_deform_attn_backward"),
    )
    before, report = roundtrip(g)
    assert _ext.ms_deform_attn_forward(1, 2) == ("fast", 1, 2)
    statuses = {
        c.code: c.status for c in report.group("msda").checks if c.code.startswith("target.sig")
    }
    assert statuses  # signature checked (builtin hypot has none: unknown, not a block)
    finish(before)
    assert _ext.ms_deform_attn_forward(1, 2) == 3


def test_property_keeps_kind_and_restores():
    g = group("sparse", replace(f"{LIB}.shapes.SparseTensor.sparity", f"{OPT}.sparity"))
    before, _ = roundtrip(g)
    assert isinstance(vars(shapes.SparseTensor)["sparity"], property)
    assert shapes.SparseTensor(1, 4).sparity == ("fast", 0.25)
    finish(before)
    assert shapes.SparseTensor(1, 4).sparity == ("stock", 0.25)


def test_staticmethod_and_classmethod_stay_descriptors():
    g = group(
        "desc",
        replace(f"{LIB}.shapes.SparseTensor.make", f"{OPT}.make"),
        replace(f"{LIB}.shapes.SparseTensor.build", f"{OPT}.build"),
    )
    before, _ = roundtrip(g)
    raw = vars(shapes.SparseTensor)
    assert isinstance(raw["make"], staticmethod) and isinstance(raw["build"], classmethod)
    t = shapes.SparseTensor(1, 2)
    assert shapes.SparseTensor.make(1, 2) == t.make(1, 2) == ("fast-make", 1, 2)
    assert shapes.SparseTensor.build(3) == ("fast-build", shapes.SparseTensor, 3)
    finish(before)
    assert isinstance(vars(shapes.SparseTensor)["make"], staticmethod)


def test_inherited_method_is_deleted_on_rollback():
    g = group("child", replace(f"{LIB}.shapes.Child.forward", f"{OPT}.forward"))
    before, _ = roundtrip(g)
    assert "forward" in vars(shapes.Child)
    assert shapes.Child().forward(2) == ("fast", 2) and shapes.Base().forward(2) == ("stock", 2)
    finish(before)
    assert "forward" not in vars(shapes.Child)


def test_class_replacement():
    g = group("layer", replace(f"{LIB}.shapes.Layer", f"{OPT}.Layer"))
    before, _ = roundtrip(g)
    assert shapes.Layer(3).channels == 6
    finish(before)
    assert shapes.Layer(3).channels == 3


def test_wrap_receives_original_and_options():
    g = group("w", wrap(f"{LIB}.shapes.Base.forward", f"{OPT}.counting_wrapper"))
    cfg = tpa.OptimizationConfig((tpa.GroupSelection("w", options={"tag": "t1"}),))
    before = capture()
    report = tpa.apply(cfg, groups=[g])
    assert shapes.Base().forward(2) == ("wrapped", "t1", ("stock", 2))
    assert report.group("w").status == "applied"
    finish(before)


def test_replace_import_registers_module_and_parent_attribute():
    target = f"{LIB}.flash_attention"
    g = group("ri", replace_import(target, f"{LIB}.mha"))
    modules = (target,)
    before, _ = roundtrip(g, modules=modules)
    import tpa_fixture_lib.flash_attention as fa  # resolved through sys.modules

    assert fa is sys.modules[f"{LIB}.mha"] and lib.flash_attention is fa
    finish(before, modules)
    assert target not in sys.modules and "flash_attention" not in vars(lib)


def test_optional_import_placeholder_only_when_missing():
    missing = f"{LIB}.feature_decorator_ext"
    g = group("opt", optional_import(missing), optional_import(f"{LIB}.mha"))
    before, report = roundtrip(g, modules=(missing, f"{LIB}.mha"))
    placeholder = sys.modules[missing]
    assert placeholder.__turbo_physai_placeholder__ is True
    assert not getattr(sys.modules[f"{LIB}.mha"], "__turbo_physai_placeholder__", False)
    codes = [(c.code, c.status) for c in report.group("opt").checks]
    assert ("optional_import.module", "not_applicable") in codes
    finish(before, (missing, f"{LIB}.mha"))
    assert missing not in sys.modules


def test_import_alias_adds_and_removes_name():
    g = group("alias", import_alias(f"{LIB}.mha", "MHA", "FlashMHA"))
    import tpa_fixture_lib.mha as mha

    before = capture()
    tpa.apply(groups=[g])
    assert mha.FlashMHA is mha.MHA
    finish(before)
    assert not hasattr(mha, "FlashMHA")


def test_registry_override_forces_declared_names_only():
    module = f"{LIB}.plugin_conv"
    sys.modules.pop(module, None)
    g = group(
        "reg",
        registry_override(module, f"{LIB}.registry.CONV_LAYERS", ("SparseConv3d", "SubMConv3d")),
    )
    before, report = roundtrip(g, modules=())
    table = registry.CONV_LAYERS.module_dict
    assert table["SparseConv3d"].origin == "plugin" and table["SubMConv3d"].origin == "plugin"
    assert table["Conv2d"].origin == "stock"
    assert "_register_module" not in vars(registry.CONV_LAYERS)  # the hook is gone after import
    finish(before, imported=("plugin_conv",))
    assert table["SparseConv3d"].origin == "stock"
    # Apply again after rollback: the module is imported now; its own classes are reinstated.
    again = tpa.apply(groups=[g])
    assert again.group("reg").status == "applied"
    assert table["SparseConv3d"].origin == "plugin"
    finish(before, imported=("plugin_conv",))


def test_registry_override_keeps_duplicate_rule_for_other_names():
    module = f"{LIB}.plugin_clash"
    sys.modules.pop(module, None)
    g = group("clash", registry_override(module, f"{LIB}.registry.CONV_LAYERS", ("SparseConv3d",)))
    before = capture()
    report = tpa.apply(groups=[g])
    gr = report.group("clash")
    assert gr.status == "rolled_back" and "already registered" in gr.error
    assert_identical(before, capture())  # the failed import left no module behind


def test_real_mmengine_registry():
    mmengine = pytest.importorskip("mmengine.registry")
    import types

    reg = mmengine.Registry("fixture_models")

    class Old:
        pass

    reg.register_module(name="Net", module=Old)
    holder = types.ModuleType("tpa_mmengine_holder")
    holder.REG = reg
    sys.modules["tpa_mmengine_holder"] = holder
    plugin = types.ModuleType("tpa_mmengine_plugin")
    plugin.__spec__ = None
    source = "from tpa_mmengine_holder import REG\n@REG.register_module()\nclass Net:\n    pass\n"

    class Loader:
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            exec(source, vars(module))

    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "tpa_mmengine_plugin":
                return importlib.util.spec_from_loader(name, Loader())
            return None

    finder = Finder()
    sys.meta_path.insert(0, finder)
    try:
        g = group("mme", registry_override("tpa_mmengine_plugin", "tpa_mmengine_holder.REG", "Net"))
        report = tpa.apply(groups=[g])
        assert report.group("mme").status == "applied", report
        assert reg.get("Net") is sys.modules["tpa_mmengine_plugin"].Net
        tpa.rollback()
        assert reg.module_dict["Net"] is Old
    finally:
        sys.meta_path.remove(finder)
        for name in ("tpa_mmengine_plugin", "tpa_mmengine_holder"):
            sys.modules.pop(name, None)


def test_apply_twice_is_an_error_and_apply_after_rollback_works():
    g = group("gauss", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"))
    before = capture()
    tpa.apply(groups=[g])
    with pytest.raises(tpa.ApplyError, match="already active"):
        tpa.apply(groups=[g])
    finish(before)
    tpa.apply(groups=[g])
    assert shapes.gaussian_2d is opt.gaussian_2d
    finish(before)


def test_check_installs_nothing_and_removes_placeholders():
    missing = f"{LIB}.never_there"
    g1 = group("compat", optional_import(missing), replace_import(f"{LIB}.old_mha", f"{LIB}.mha"))
    g2 = group(
        "gauss", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"), depends_on="compat"
    )
    modules = (missing, f"{LIB}.old_mha")
    before = capture(modules)
    report = tpa.check(groups=[g1, g2])
    assert [g.decision for g in report.groups] == ["apply", "apply"]
    assert [g.status for g in report.groups] == ["checked", "checked"]
    assert_identical(before, capture(modules))
    assert tpa.active_report() is None


def test_signature_is_the_originals_through_the_engine():
    g = group(
        "gauss",
        replace(
            f"{LIB}.shapes.gaussian_2d",
            f"{OPT}.gaussian_2d",
            runtime_condition=f"{OPT}.positive_fn",
        ),
    )
    before = capture()
    tpa.apply(groups=[g])
    assert str(inspect.signature(shapes.gaussian_2d)) == "(shape, sigma=1, device=None, dtype=None)"
    finish(before)


def test_applied_context_manager_rolls_back_on_error():
    g = group("gauss", replace(f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d"))
    before = capture()
    with pytest.raises(RuntimeError, match="inside"):
        with tpa.applied(groups=[g]) as report:
            assert report.group("gauss").status == "applied"
            assert shapes.gaussian_2d is opt.gaussian_2d
            raise RuntimeError("inside")
    assert tpa.active_report() is None
    assert_identical(before, capture())
