"""The OpenMMLab catalogs at TurboPhysAI's module paths: its group IDs, blocked where mmcv and
mmdet3d are absent (and, for groups we cannot offer, always, with the reason); against the
fixture packages every group of ours checks, applies, works and rolls back to the identical
objects."""

import importlib
import sys

import pytest
from openmmlab_env import openmmlab_packages

import turbo_physai as tpa
from turbo_physai.catalogs import BUILTIN, OPENMMLAB, openmmlab
from turbo_physai.catalogs.discovery import named
from turbo_physai.optimizations.unsupported import PLATFORM, REASONS, UNAVAILABLE

torch = pytest.importorskip("torch")

EAGER = {"backend": "eager"}
#: Ours in the OpenMMLab catalogs (all others are blocked whatever is installed).
OURS = ["mmcv.msda", "mmcv.mdc", "mmdet3d.gaussian", "mmdet3d.sparse_tensor", "bevformer.msda",
        "bevformer.compile.encoder", "bevformer.compile.decoder", "bevfusion.import_compatibility",
        "bevfusion.gaussian", "bevfusion.compile.sparse_encoder", "bevfusion.compile.fuser",
        "bevfusion.compile.camera", "bevfusion.compile.transfusion",
        "bevfusion.compile.depth_transform"]
#: Ours too, but they write targets of groups above (their own round).
OVERLAPPING = ["bevformer.mdc", "bevformer.compile", "bevfusion.compile"]


def config(ids):
    compile_ = {i: EAGER for i in ids if "compile" in i or i in ("bevfusion.gaussian",
                                                                "bevformer.mdc")}
    return tpa.OptimizationConfig.for_groups(*ids, **compile_)


def test_the_catalog_modules_declare_turbophysais_ids():
    from turbo_physai.optimizations.common.mmcv import catalog as mmcv
    from turbo_physai.optimizations.common.mmdet3d import catalog as mmdet3d
    from turbo_physai.optimizations.models.bevformer import catalog as bevformer
    from turbo_physai.optimizations.models.bevfusion import catalog as bevfusion

    assert [g.id for g in mmcv.GROUPS] == ["mmcv.msda", "mmcv.mdc"]
    assert [g.id for g in mmdet3d.GROUPS] == [
        "mmdet3d.gaussian", "mmdet3d.bev_pool", "mmdet3d.quick_cumsum", "mmdet3d.voxelization",
        "mmdet3d.canonical_indice_pairs", "mmdet3d.sparse_tensor"]
    assert [g.id for g in bevformer.GROUPS] == [
        "bevformer.mdc", "bevformer.msda", "bevformer.geometry_sca", "bevformer.tsa",
        "bevformer.grid_mask", "bevformer.compile.encoder", "bevformer.compile.decoder",
        "bevformer.compile", "bevformer.training"]
    assert {g.id for g in bevfusion.GROUPS} == {
        "bevfusion.import_compatibility", "bevfusion.backbone", "bevfusion.loss_reduction",
        "bevfusion.training", "bevfusion.gaussian", "bevfusion.depth_factorization",
        "bevfusion.bev_geometry", "bevfusion.hungarian_transfer", "bevfusion.compile",
        "bevfusion.compile.sparse_encoder", "bevfusion.compile.fuser",
        "bevfusion.compile.camera", "bevfusion.compile.transfusion",
        "bevfusion.compile.depth_transform", "bevfusion.transfusion_bbox_coder"}
    assert bevfusion.GAUSSIAN.depends_on == ("mmdet3d.gaussian",)
    assert len(bevfusion.IMPORT_COMPATIBILITY.declarations[3].names) == 10
    # One copy: the old module re-exports the new ones, and only those are registered.
    assert openmmlab.GROUPS == mmcv.GROUPS + mmdet3d.GROUPS + bevformer.GROUPS + bevfusion.GROUPS
    assert "turbo_physai.catalogs.openmmlab" not in BUILTIN and set(OPENMMLAB) <= set(BUILTIN)
    assert named(["turbo_physai.catalogs.openmmlab"], []) == set(OPENMMLAB)
    assert {g.source for g in tpa.registry.groups() if g.id in ids_of(openmmlab.GROUPS)} <= set(
        OPENMMLAB) or not tpa.registry.groups()


def ids_of(groups):
    return [g.id for g in groups]


@pytest.mark.parametrize("overlapping", [False, True])
def test_without_mmcv_and_mmdet3d_every_group_is_blocked_with_its_reason(overlapping):
    ids = [i for i in ids_of(openmmlab.GROUPS) if (i in OVERLAPPING) == overlapping]
    report = tpa.check(config(ids))
    assert all(g.status == "blocked" for g in report.groups), str(report)
    # A failed import-compatibility group (bevfusion's: no flash_attn here) holds back every
    # later group unprepared, so that no model module imports without it (reliability.md).
    compat = [g for g in report.groups if tpa.registry.get(g.id).import_compat]
    stoppers = [g.id for g in compat if "target.unresolved" in g.reasons]
    for g in report.groups:
        if stoppers and g not in compat:
            held = next(c for c in g.checks if c.reason == "import_compat.blocked")
            assert held.actual == stoppers, g.id
        elif g.id in REASONS:  # never offered: the reason, never an unresolved target
            assert REASONS[g.id][0] in g.reasons and "target.unresolved" not in g.reasons, g.id
            assert set(g.reasons) <= {PLATFORM, UNAVAILABLE, "dependency.blocked"}, g.id
            check = next(c for c in g.checks if c.code == "compatibility_check")
            assert check.message == REASONS[g.id][1] and not check.overrideable
        else:
            assert "target.unresolved" in g.reasons, (g.id, g.reasons)
    assert "mmcv" not in sys.modules and "mmdet3d" not in sys.modules


def test_force_does_not_unblock_a_group_we_cannot_offer():
    report = tpa.check(config(["mmdet3d.bev_pool"]), force_groups=["mmdet3d.bev_pool"])
    assert report.group("mmdet3d.bev_pool").reasons == [PLATFORM]


@pytest.fixture
def openmmlab_fixture():
    with openmmlab_packages():
        yield


def msda_inputs(dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    shapes = torch.tensor([[6, 5], [3, 4]])
    start = torch.tensor([0, 30])
    value = torch.randn(2, 42, 2, 4, generator=gen, dtype=dtype, requires_grad=True)
    loc = torch.rand(2, 7, 2, 2, 3, 2, generator=gen, dtype=dtype) * 1.2 - 0.1
    weights = torch.rand(2, 7, 2, 2, 3, generator=gen, dtype=dtype)
    loc.requires_grad_(), weights.requires_grad_()
    return value, shapes, start, loc, weights


@pytest.mark.usefixtures("openmmlab_fixture")
def test_msda_through_mmcv_function_matches_the_pytorch_reference():
    from mmcv.ops import MultiScaleDeformableAttnFunction as Msda
    from mmcv.ops import multi_scale_deformable_attn_pytorch as reference

    value, shapes, start, loc, weights = msda_inputs()
    gen = torch.Generator().manual_seed(1)
    expected = reference(value, shapes, loc, weights)
    with tpa.applied(config(["mmcv.msda"])) as report:
        assert report.group("mmcv.msda").status == "applied", str(report)
        got = Msda.apply(value, shapes, start, loc, weights, 64)
        grad = torch.randn(got.shape, generator=gen, dtype=torch.float64)
        ours = torch.autograd.grad(got, (value, loc, weights), grad)
    theirs = torch.autograd.grad(expected, (value, loc, weights), grad)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.usefixtures("openmmlab_fixture")
def test_bevformer_msda_reaches_every_alias_and_matches_stock():
    from projects.mmdet3d_plugin.bevformer.modules import (
        decoder,
        spatial_cross_attention,
        temporal_self_attention,
    )

    args = msda_inputs()
    stock = spatial_cross_attention.sample(*args)
    grad = torch.randn(stock.shape, generator=torch.Generator().manual_seed(2),
                       dtype=torch.float64)
    stock_grads = torch.autograd.grad(stock, (args[0], args[3], args[4]), grad)
    with tpa.applied(config(["bevformer.msda"])) as report:
        assert report.group("bevformer.msda").status == "applied", str(report)
        ours = type(decoder.MultiScaleDeformableAttnFunction_fp32)
        assert decoder.MultiScaleDeformableAttnFunction_fp32.__module__.startswith(
            "turbo_physai"), ours
        for sample in (spatial_cross_attention.sample, temporal_self_attention.sample):
            got = sample(*args)
            torch.testing.assert_close(got, stock, rtol=1e-10, atol=1e-10)
            grads = torch.autograd.grad(got, (args[0], args[3], args[4]), grad)
            for a, b in zip(grads, stock_grads, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
        with pytest.raises(ValueError, match="im2col_step must be a positive integer"):
            decoder.MultiScaleDeformableAttnFunction_fp16.apply(*args, 0)
        with pytest.raises(TypeError, match="used through .apply"):
            decoder.MultiScaleDeformableAttnFunction_fp16()
    assert decoder.MultiScaleDeformableAttnFunction_fp32.__module__.startswith("projects")


@pytest.mark.usefixtures("openmmlab_fixture")
def test_bevformer_mdc_and_the_older_compile_id():
    from mmcv.ops import modulated_deform_conv
    from projects.mmdet3d_plugin.bevformer.detectors.bevformer import BEVFormer

    img = torch.randn(1, 2, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(5)
    model = BEVFormer().eval()
    with torch.no_grad():
        stock = model.extract_img_feat(img)
    function = modulated_deform_conv.modulated_deform_conv2d
    with tpa.applied(config(["bevformer.mdc", "bevformer.compile"])) as report:
        assert report.ok, str(report)
        import mmcv.ops

        assert mmcv.ops.modulated_deform_conv2d is modulated_deform_conv.modulated_deform_conv2d
        assert modulated_deform_conv.modulated_deform_conv2d is not function
        with torch.no_grad():
            compiled = model.extract_img_feat(img)
    torch.testing.assert_close(compiled[0], stock[0], rtol=0, atol=0)
    assert modulated_deform_conv.modulated_deform_conv2d is function
    both = tpa.check(config(["bevformer.compile", "bevformer.compile.encoder"]))
    assert all(g.reasons == ["conflict.target"] for g in both.groups), str(both)


@pytest.mark.usefixtures("openmmlab_fixture")
def test_bevfusion_compile_groups_compile_classes_and_keep_outputs():
    from mmdet3d.models.backbones import sparse_encoder
    from mmdet3d.models.fusers import conv
    from mmdet3d.models.heads.bbox import transfusion
    from mmdet3d.models.necks import generalized_lss
    from mmdet3d.models.vtransforms import depth_lss

    gen = torch.Generator().manual_seed(6)
    inputs = {
        sparse_encoder.SparseEncoder: (torch.randn(1, 4, 3, 6, 6, generator=gen),),
        conv.ConvFuser: ([torch.randn(1, 8, 6, 6, generator=gen) for _ in range(2)],),
        generalized_lss.GeneralizedLSSFPN: ([torch.randn(1, 8, 8, 8, generator=gen),
                                             torch.randn(1, 8, 4, 4, generator=gen)],),
        depth_lss.DepthLSSTransform: (torch.randn(1, 8, 4, 4, generator=gen),),
    }
    originals = [sparse_encoder.SparseEncoder, conv.ConvFuser,
                 generalized_lss.GeneralizedLSSFPN, depth_lss.DepthLSSTransform]

    def outputs():
        out = []
        for cls in (sparse_encoder.SparseEncoder, conv.ConvFuser,
                    generalized_lss.GeneralizedLSSFPN, depth_lss.DepthLSSTransform):
            torch.manual_seed(7)
            model = cls().eval()
            with torch.no_grad():
                out.append(model(*inputs[originals[len(out)]]))
        torch.manual_seed(7)
        head = transfusion.TransFusionHead().eval()
        with torch.no_grad():
            out.append(head.forward_single((torch.randn(1, 8, 5, generator=gen.manual_seed(8)),
                                            torch.rand(1, 5, 2, generator=gen))))
        return out

    stock = outputs()
    ids = [g for g in OURS if g.startswith("bevfusion.compile")]
    with tpa.applied(config(ids)) as report:
        assert report.ok, str(report)
        assert conv.ConvFuser is not originals[1] and issubclass(conv.ConvFuser, originals[1])
        assert (conv.ConvFuser.__name__, conv.ConvFuser.__module__) == (
            "ConvFuser", "mmdet3d.models.fusers.conv")
        compiled = outputs()
    for a, b in zip(compiled, stock, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert conv.ConvFuser is originals[1]
    assert tpa.check(config(["bevfusion.compile"])).ok


def test_unknown_compile_option_blocks_the_group_at_check():
    with openmmlab_packages():
        cfg = tpa.OptimizationConfig.for_groups(
            "bevfusion.compile.transfusion", **{"bevfusion.compile.transfusion": {"mode2": 1}})
        report = tpa.check(cfg)
    [group] = report.groups
    assert group.status == "blocked" and "mode2" in str(group.to_dict()), str(report)


def owners():
    """Every namespace the catalogs write into, by a readable name (imported ones only)."""
    found = {}
    for name in (
        "mmcv._ext",
        "mmcv.ops",
        "mmcv.ops.modulated_deform_conv",
        "mmdet3d.core",
        "mmdet3d.core.utils",
        "mmdet3d.core.utils.gaussian",
        "mmdet3d.models.heads.bbox.transfusion",
        "mmdet3d.ops.feature_decorator",
        "flash_attn",
        "flash_attn.modules.mha",
        "projects.mmdet3d_plugin.bevformer.modules.multi_scale_deformable_attn_function",
        "projects.mmdet3d_plugin.bevformer.modules.spatial_cross_attention",
        "projects.mmdet3d_plugin.bevformer.modules.temporal_self_attention",
        "projects.mmdet3d_plugin.bevformer.modules.decoder",
        "mmdet3d.models.backbones.sparse_encoder",
        "mmdet3d.models.fusers.conv",
        "mmdet3d.models.necks.generalized_lss",
        "mmdet3d.models.vtransforms.depth_lss",
    ):
        if name in sys.modules:
            found[name] = sys.modules[name]
    spconv = sys.modules.get("mmdet3d.ops.spconv.structure")
    if spconv is not None:
        found["SparseConvTensor"] = spconv.SparseConvTensor
    encoder = sys.modules["projects.mmdet3d_plugin.bevformer.modules.encoder"]
    found["BEVFormerLayer"] = encoder.BEVFormerLayer
    found["DetectionTransformerDecoder"] = sys.modules[
        "projects.mmdet3d_plugin.bevformer.modules.decoder"].DetectionTransformerDecoder
    transformer = sys.modules["mmdet3d.models.utils.transformer"]
    found["PositionEmbeddingLearned"] = transformer.PositionEmbeddingLearned
    found["FFN"] = transformer.FFN
    found["TransFusionHead"] = sys.modules[
        "mmdet3d.models.heads.bbox.transfusion"].TransFusionHead
    return found


#: torch.compile (dynamo) stores its generated names in the compiled function's module globals.
DYNAMO = ("__compiled_fn_", "__import_", "__builtins_dict__", "__resume_at_")


def capture():
    from mmcv.cnn import CONV_LAYERS

    state = {name: {k: v for k, v in vars(owner).items() if not k.startswith(DYNAMO)}
             for name, owner in owners().items()}
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
        "mmdet3d.models.utils.transformer",
        "mmdet3d.models.backbones.sparse_encoder",
        "mmdet3d.models.fusers.conv",
        "mmdet3d.models.necks.generalized_lss",
        "mmdet3d.models.vtransforms.depth_lss",
        "flash_attn.modules.mha",
        "projects.mmdet3d_plugin.bevformer.modules.encoder",
        "projects.mmdet3d_plugin.bevformer.modules.decoder",
        "projects.mmdet3d_plugin.bevformer.modules.spatial_cross_attention",
        "projects.mmdet3d_plugin.bevformer.modules.temporal_self_attention",
    ):
        importlib.import_module(name)
    for broken in ("mmdet3d.ops.spconv", "mmdet3d.ops.feature_decorator"):
        with pytest.raises((ImportError, KeyError)):
            importlib.import_module(broken)


def run_models():
    """Outputs of every replaced object, computed through the targets' own paths."""
    from mmcv.ops import ModulatedDeformConv2d
    from mmdet3d.models.heads.bbox.transfusion import heatmap_targets
    from projects.mmdet3d_plugin.bevformer.modules.decoder import DetectionTransformerDecoder
    from projects.mmdet3d_plugin.bevformer.modules.encoder import BEVFormerLayer

    gen = torch.Generator().manual_seed(3)
    boxes = torch.rand(6, 5, generator=gen) * torch.tensor([100.0, 100.0, 1.0, 4.0, 9.0])
    heatmap = heatmap_targets(boxes, torch.tensor([0, 1, 2, 0, 1, 2]), 3, (32, 32),
                              (0.4, 0.4), (0.0, 0.0), out_size_factor=8)
    torch.manual_seed(3)
    layer = BEVFormerLayer().eval()
    decoder = DetectionTransformerDecoder().eval()
    query = torch.randn(1, 8, 32, generator=gen)
    with torch.no_grad():
        bev = layer(query)
        decoded = decoder(query)[0][-1]
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
    return {"heatmap": heatmap, "bev": bev, "decoded": decoded, "conv_cl": conv_cl, "conv": conv}


@pytest.mark.usefixtures("openmmlab_fixture")
def test_every_group_of_ours_applies_works_and_rolls_back_exactly():
    import_stock_modules()
    stock = run_models()
    before = capture()

    checked = tpa.check(config(OURS))
    assert all(g.status == "checked" for g in checked.groups), str(checked)
    assert_identical(before, capture())  # check() installed nothing

    report = tpa.apply(config(OURS))
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
        tol = {"heatmap": (1.2e-7, 0), "bev": (0, 0), "decoded": (0, 0)}.get(key, (1e-5, 1e-5))
        torch.testing.assert_close(optimized[key], stock[key], rtol=tol[0], atol=tol[1], msg=key)

    outcome = tpa.rollback()
    assert not outcome["drifted"] and not outcome["failed"], outcome
    assert_identical(before, capture())
    assert "flash_attn.flash_attention" not in sys.modules

    # Second round with everything imported (spconv, feature_decorator): exact again.
    again = capture()
    assert tpa.apply(config(OURS)).ok
    tpa.rollback()
    assert_identical(again, capture())
    for ids in (["bevformer.mdc"], ["bevformer.compile"], ["bevfusion.compile"]):
        assert tpa.apply(config(ids)).ok, ids
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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.usefixtures("openmmlab_fixture")
@pytest.mark.parametrize("fp16", [False, True])
def test_bevformer_msda_on_cuda_under_autocast_casts_like_custom_fwd(fp16):
    from projects.mmdet3d_plugin.bevformer.modules import spatial_cross_attention

    value, shapes, start, loc, weights = (t.detach().cuda() for t in msda_inputs(torch.float32))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        stock = spatial_cross_attention.sample(value, shapes, start, loc, weights, fp16=fp16)
        with tpa.applied(config(["bevformer.msda"])):
            ours = spatial_cross_attention.sample(value, shapes, start, loc, weights, fp16=fp16)
    assert ours.dtype == stock.dtype == (torch.float16 if fp16 else torch.float32)
    tol = 2e-3 if fp16 else 1e-5
    torch.testing.assert_close(ours, stock, rtol=tol, atol=tol)
