"""The OpenMMLab catalog: blocked where mmcv/mmdet3d are absent; against the fixture packages
every group checks, applies, works and rolls back to the identical objects."""

import importlib
import sys

import pytest
from openmmlab_env import openmmlab_packages

import turbo_physai as tpa
from turbo_physai.catalogs import openmmlab

torch = pytest.importorskip("torch")

IDS = [g.id for g in openmmlab.GROUPS]
EAGER = {"backend": "eager"}
OPTIONS = {"bevformer.compile.encoder": EAGER, "bevfusion.gaussian": EAGER}
IMPORT_COMPAT = {"target.unresolved", "replacement.unresolved"}


def config(ids):
    return tpa.OptimizationConfig.for_groups(*ids, **{i: OPTIONS[i] for i in ids if i in OPTIONS})


def test_groups_are_the_seed_documents():
    assert IDS == [
        "mmcv.msda",
        "mmcv.mdc",
        "mmdet3d.gaussian",
        "mmdet3d.sparse_tensor",
        "bevformer.compile.encoder",
        "bevfusion.gaussian",
        "bevfusion.import_compatibility",
    ]
    assert openmmlab.BEVFUSION_GAUSSIAN.depends_on == ("mmdet3d.gaussian",)
    assert len(openmmlab.BEVFUSION_GAUSSIAN.declarations[0].aliases) == 3
    assert [d.kind for d in openmmlab.IMPORT_COMPATIBILITY.declarations] == [
        "import_alias",
        "replace_import",
        "optional_import",
        "registry_override",
    ]


def test_without_mmcv_and_mmdet3d_every_group_is_blocked():
    report = tpa.check(config(IDS), groups=list(openmmlab.GROUPS))
    reasons = {g.id: set(g.reasons) for g in report.groups}
    assert all(g.status == "blocked" for g in report.groups), str(report)
    for gid in IDS:
        if gid == "bevfusion.gaussian":  # its own targets and its blocked dependency
            assert reasons[gid] == {"dependency.blocked", "target.unresolved"}
        elif gid == "bevfusion.import_compatibility":  # the replace_import's module is missing
            assert reasons[gid] == IMPORT_COMPAT
        else:
            assert reasons[gid] == {"target.unresolved"}, (gid, reasons[gid])
    assert "mmcv" not in sys.modules and "mmdet3d" not in sys.modules


@pytest.fixture
def openmmlab_fixture():
    with openmmlab_packages():
        yield


@pytest.mark.usefixtures("openmmlab_fixture")
def test_msda_through_mmcv_function_matches_the_pytorch_reference():
    from mmcv.ops import MultiScaleDeformableAttnFunction as Msda
    from mmcv.ops import multi_scale_deformable_attn_pytorch as reference

    gen = torch.Generator().manual_seed(0)
    shapes = torch.tensor([[6, 5], [3, 4]])
    start = torch.tensor([0, 30])
    value = torch.randn(2, 42, 2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    loc = torch.rand(2, 7, 2, 2, 3, 2, generator=gen, dtype=torch.float64) * 1.2 - 0.1
    weights = torch.rand(2, 7, 2, 2, 3, generator=gen, dtype=torch.float64)
    loc.requires_grad_(), weights.requires_grad_()
    expected = reference(value, shapes, loc, weights)
    with tpa.applied(groups=[openmmlab.MSDA]) as report:
        assert report.group("mmcv.msda").status == "applied", str(report)
        got = Msda.apply(value, shapes, start, loc, weights, 64)
        grad = torch.randn(got.shape, generator=gen, dtype=torch.float64)
        ours = torch.autograd.grad(got, (value, loc, weights), grad)
    theirs = torch.autograd.grad(expected, (value, loc, weights), grad)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def owners():
    """Every namespace the catalog writes into, by a readable name (imported ones only)."""
    found = {}
    for name in (
        "mmcv._ext",
        "mmcv.ops.modulated_deform_conv",
        "mmdet3d.core",
        "mmdet3d.core.utils",
        "mmdet3d.core.utils.gaussian",
        "mmdet3d.models.heads.bbox.transfusion",
        "mmdet3d.ops.feature_decorator",
        "flash_attn",
        "flash_attn.modules.mha",
    ):
        if name in sys.modules:
            found[name] = sys.modules[name]
    spconv = sys.modules.get("mmdet3d.ops.spconv.structure")
    if spconv is not None:
        found["SparseConvTensor"] = spconv.SparseConvTensor
    encoder = sys.modules["projects.mmdet3d_plugin.bevformer.modules.encoder"]
    found["BEVFormerLayer"] = encoder.BEVFormerLayer
    return found


def capture():
    from mmcv.cnn import CONV_LAYERS

    state = {name: dict(vars(owner)) for name, owner in owners().items()}
    state["CONV_LAYERS"] = dict(CONV_LAYERS.module_dict)
    state["CONV_LAYERS.instance"] = dict(vars(CONV_LAYERS))
    placeholder = "mmdet3d.ops.feature_decorator.feature_decorator_ext"
    installed = ("flash_attn.flash_attention", placeholder)
    state["sys.modules"] = {m: sys.modules.get(m) for m in installed}
    return state


def assert_identical(before, after):
    for owner, names in before.items():
        assert names.keys() == after[owner].keys(), (owner, set(names) ^ set(after[owner]))
        for key, value in names.items():
            assert after[owner][key] is value, f"{owner}.{key} is not the original object"


def import_stock_modules():
    """What a BEVFusion/BEVFormer process has imported before apply(); the spconv and
    feature_decorator packages cannot be imported yet (that is what the compat group fixes)."""
    for name in (
        "mmcv.ops",
        "mmcv.cnn",
        "mmdet3d.core",
        "mmdet3d.models.heads.bbox.transfusion",
        "flash_attn.modules.mha",
        "projects.mmdet3d_plugin.bevformer.modules.encoder",
    ):
        importlib.import_module(name)
    for broken in ("mmdet3d.ops.spconv", "mmdet3d.ops.feature_decorator"):
        with pytest.raises((ImportError, KeyError)):
            importlib.import_module(broken)


def run_models():
    """Outputs of every replaced object, computed through the targets' own paths."""
    from mmcv.ops import ModulatedDeformConv2d
    from mmdet3d.models.heads.bbox.transfusion import heatmap_targets
    from projects.mmdet3d_plugin.bevformer.modules.encoder import BEVFormerLayer

    gen = torch.Generator().manual_seed(3)
    boxes = torch.rand(6, 5, generator=gen) * torch.tensor([100.0, 100.0, 1.0, 4.0, 9.0])
    heatmap = heatmap_targets(boxes, torch.tensor([0, 1, 2, 0, 1, 2]), 3, (32, 32),
                              (0.4, 0.4), (0.0, 0.0), out_size_factor=8)
    torch.manual_seed(3)
    layer = BEVFormerLayer().eval()
    with torch.no_grad():
        bev = layer(torch.randn(1, 8, 32, generator=gen))
    torch.manual_seed(4)
    dcn = ModulatedDeformConv2d(4, 6, 3, padding=1, groups=2, deform_groups=2)
    x = torch.randn(1, 4, 6, 6, generator=gen)
    offset = torch.randn(1, 36, 6, 6, generator=gen)
    mask = torch.rand(1, 18, 6, 6, generator=gen)
    with torch.no_grad():
        conv = dcn(x, offset, mask)  # NCHW: mmcv's path
        cl = [t.contiguous(memory_format=torch.channels_last) for t in (x, offset, mask)]
        dcn.weight.data = dcn.weight.data.contiguous(memory_format=torch.channels_last)
        conv_cl = dcn(*cl)  # all four channels_last: the replacement
    return {"heatmap": heatmap, "bev": bev, "conv_cl": conv_cl, "conv": conv}


@pytest.mark.usefixtures("openmmlab_fixture")
def test_every_group_applies_works_and_rolls_back_exactly():
    ids, groups = IDS, list(openmmlab.GROUPS)
    import_stock_modules()
    stock = run_models()
    before = capture()

    checked = tpa.check(config(ids), groups=groups)
    assert all(g.status == "checked" for g in checked.groups), str(checked)
    assert_identical(before, capture())  # check() installed nothing

    report = tpa.apply(config(ids), groups=groups)
    assert all(g.status == "applied" for g in report.groups), str(report)
    assert_import_compatibility_installed()
    from mmdet3d.core.utils import gaussian
    from mmdet3d.ops.spconv.structure import SparseConvTensor

    assert gaussian.gaussian_2d.__module__.startswith("turbo_physai.optimizations")
    assert vars(SparseConvTensor)["sparity"] is openmmlab_sparity()
    optimized = run_models()
    counts = report.group("mmcv.mdc").to_dict()["dispatchers"]
    assert counts == {
        "mmcv.ops.modulated_deform_conv.modulated_deform_conv2d": {"replacement": 1, "original": 1}
    }
    for key in stock:
        # heatmaps: one float32 ulp (numpy vs torch exp); MDC: float32 sums in another order.
        tol = {"heatmap": (1.2e-7, 0), "bev": (0, 0)}.get(key, (1e-5, 1e-5))
        torch.testing.assert_close(optimized[key], stock[key], rtol=tol[0], atol=tol[1], msg=key)

    outcome = tpa.rollback()
    assert not outcome["drifted"] and not outcome["failed"], outcome
    assert_identical(before, capture())
    assert "flash_attn.flash_attention" not in sys.modules

    # Second round with everything imported (spconv, feature_decorator): exact again.
    again = capture()
    assert tpa.apply(config(ids), groups=groups).ok
    tpa.rollback()
    assert_identical(again, capture())


def openmmlab_sparity():
    from turbo_physai.optimizations.common.mmdet3d.sparse_tensor import sparity

    return sparity


def assert_import_compatibility_installed():
    import mmdet3d.ops.feature_decorator  # noqa: F401  (imports with the placeholder ext)
    import mmdet3d.ops.spconv.conv as conv
    from flash_attn.flash_attention import FlashMHA
    from flash_attn.modules.mha import MHA
    from mmcv.cnn import CONV_LAYERS

    assert FlashMHA is MHA
    assert CONV_LAYERS.module_dict["SparseConv3d"] is conv.SparseConv3d
    assert CONV_LAYERS.module_dict["SubMConv3d"].origin == "mmdet3d"
