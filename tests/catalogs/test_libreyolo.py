"""The libreyolo catalog on LibreYOLO 1.6's own code: our implementations in its kernel slots
(bit-exact quant slots, MSDA with gradients), the families' MSDA call sites on our op (float64
outputs and gradients against LibreYOLO's grid_sample ports, also under torch.compile), exact
rollback of LibreYOLO's registry, and every failure mode blocked with its reason.
End-to-end model runs are in test_libreyolo_models.py."""

import importlib

import pytest
from tpa_state import assert_identical

import turbo_physai as tpa
from turbo_physai.catalogs import libreyolo as catalog

torch = pytest.importorskip("torch")
pytest.importorskip("libreyolo")

from libreyolo import kernels as registry  # noqa: E402
from libreyolo.kernels.attention import ms_deform_attn as slot_module  # noqa: E402
from libreyolo.quant import fake_quant  # noqa: E402

from turbo_physai import _core  # noqa: E402
from turbo_physai.ops import frontends  # noqa: E402
from turbo_physai.ops import quant as our_quant  # noqa: E402
from turbo_physai.optimizations.common.libreyolo import slots  # noqa: E402

RTOL, ATOL = 1e-9, 1e-11  # float64: the op and grid_sample differ in summation order only
FAMILY_IDS = [g.id for g in catalog.FAMILY_GROUPS]
#: (family, call site): a family's MSDA cores, one per module (EC has two)
SITES = [(f, i) for f, sites in catalog.FAMILIES.items() for i in range(len(sites))]


def _module(family, site=0):
    return importlib.import_module(f"libreyolo.models.{catalog.FAMILIES[family][site][0]}")


def _registry_state():
    """LibreYOLO's registry, slot modules and family modules, by identity (tpa_state's format).
    The lazy in-tree providers are loaded first: that happens once per process, with or
    without us (the group's factory triggers it where LibreYOLO's first resolve would)."""
    registry.active()
    owners = {
        "libreyolo.kernels": registry,
        "ms_deform_attn": slot_module,
        **{f"{f}[{i}]": _module(f, i) for f, i in SITES},
    }
    state = {name: dict(vars(owner)) for name, owner in owners.items()}
    state["_REGISTRY"] = dict(registry._REGISTRY)
    state["entries"] = {
        f"{slot}[{i}]": entry
        for slot, entries in registry._REGISTRY.items()
        for i, entry in enumerate(entries)
    }
    return state


# --- libreyolo.kernels ---------------------------------------------------------------------


def test_every_slot_resolves_to_ours_and_rolls_back_exactly():
    before = _registry_state()
    stock = registry.active()  # also caches resolutions before apply
    # LibreYOLO's reference on the CPU; its Triton kernel where CUDA and triton are present
    stock_fp8 = registry.resolve("fake_quant_fp8")
    with tpa.applied(groups=["libreyolo.kernels"], strict=True):
        assert registry.active() == {**stock, **dict.fromkeys(slots.SLOTS, "turbo_physai")}
        assert registry.resolve("fake_quant_fp8") is our_quant.fake_quant_fp8
        assert registry.resolve("ms_deform_attn") is frontends.libreyolo_ms_deform_attn
    assert registry._RESOLVED is before["libreyolo.kernels"]["_RESOLVED"]
    assert not registry._RESOLVED  # LibreYOLO's cache, emptied: nothing of ours stays in it
    assert_identical(before, _registry_state())
    assert registry.resolve("fake_quant_fp8") is stock_fp8


def test_quant_slots_through_libreyolos_proxies_give_the_references_bits():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 33, generator=gen) * 1e3
    x[0, :4] = torch.tensor([float("nan"), float("inf"), -0.0, 1e-42])
    scale = torch.rand(8, 1, generator=gen) + 0.5  # broadcast scale, as LibreYOLO passes it
    calls = {
        "fake_quant_fp8": (x, scale),
        "fake_quant_int8_per_channel": (x,),
        "fake_quant_int8_affine": (x, torch.tensor(-3.0), torch.tensor(5.0)),
        "fake_quant_int_grouped": (x, 4, 16),
        "fake_quant_nvfp4_dynamic": (x[:, :32].contiguous(),),
        "fake_quant_mxfp4_dynamic": (x[:, :32].contiguous(),),
    }
    stock = {op: getattr(registry, op)(*args) for op, args in calls.items()}
    with tpa.applied(groups=["libreyolo.kernels"], strict=True):
        for op, args in calls.items():
            assert registry.resolve(op) is getattr(our_quant, op)
            got = getattr(registry, op)(*args)
            assert got.dtype == stock[op].dtype
            assert torch.equal(got.nan_to_num(7.0), stock[op].nan_to_num(7.0)), op
            assert torch.equal(got.isnan(), stock[op].isnan()), op


def _slot_inputs(dtype=torch.float64, n=2, lq=5, m=2, d=4, levels=((6, 5), (3, 2)), p=3):
    gen = torch.Generator().manual_seed(0)
    s = sum(h * w for h, w in levels)
    value = torch.randn(n, s, m, d, generator=gen, dtype=dtype)
    # Spill past [0, 1] so zero padding at the borders is exercised too.
    loc = torch.rand(n, lq, m, len(levels), p, 2, generator=gen, dtype=dtype) * 1.2 - 0.1
    weights = torch.rand(n, lq, m, len(levels), p, generator=gen, dtype=dtype)
    return value, [tuple(hw) for hw in levels], loc, weights


def _grads(fn, *leaves):
    leaves = [t.clone().requires_grad_() for t in leaves]
    out = fn(*leaves)
    return [out.detach(), *torch.autograd.grad((out * out).sum(), leaves)]


def _close(got, want, rtol=RTOL, atol=ATOL):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def test_msda_slot_trains_on_the_cpu_where_libreyolos_providers_do_not_run(op_calls):
    """LibreYOLO's Hub and Triton providers are CUDA only (Triton declines gradients): stock,
    the slot resolves to nothing here and RT-DETR's core runs grid_sample; with the group, the
    same core reaches our op, with gradients equal to grid_sample's."""
    core = _module("rtdetr").deformable_attention_core_func
    value, shapes, loc, weights = _slot_inputs()

    def run(v, sl, w):
        return core(v, shapes, sl, w)

    assert slot_module.maybe_ms_deform_attn(value, torch.tensor(shapes), loc, weights) is None
    stock = _grads(run, value, loc, weights)
    with tpa.applied(groups=["libreyolo.kernels"], strict=True):
        ours = _grads(run, value, loc, weights)
    assert op_calls == [tuple(value.shape)]
    _close(ours, stock)


@pytest.mark.skipif(
    not (torch.cuda.is_available() and hasattr(_core, "ms_deform_attn_forward_cuda")),
    reason="needs a GPU and a CUDA build",
)
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_msda_slot_on_cuda_comes_before_libreyolos_providers(grad, op_calls):
    """On a GPU the slot holds LibreYOLO's Triton kernel (inference only) and maybe its Hub
    one; ours comes first, for inference and for training, matching grid_sample in float32."""
    core = _module("rtdetr").deformable_attention_core_func
    value, shapes, loc, weights = (
        t.cuda().float() if isinstance(t, torch.Tensor) else t for t in _slot_inputs()
    )

    def run(v, sl, w):
        return core(v, shapes, sl, w)

    def outputs():
        if grad:
            return _grads(run, value, loc, weights)
        with torch.no_grad():
            return [run(value, loc, weights)]

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LIBREYOLO_KERNELS", "off")  # LibreYOLO's grid_sample port: the reference
        registry.clear_cache()
        reference = outputs()
    registry.clear_cache()
    with tpa.applied(groups=["libreyolo.kernels"], strict=True):
        assert registry.resolve("ms_deform_attn") is frontends.libreyolo_ms_deform_attn
        ours = outputs()
    assert op_calls
    _close(ours, reference, rtol=1e-5, atol=1e-5)


def test_msda_slot_declines_what_our_op_does_not_take(op_calls):
    value, shapes, loc, weights = _slot_inputs()
    shapes = torch.tensor(shapes)
    with tpa.applied(groups=["libreyolo.kernels"], strict=True):
        # mixed float64/float32 outside autocast, and the wrong rank: LibreYOLO's path runs
        assert frontends.libreyolo_ms_deform_attn(value, shapes, loc.float(), weights) is None
        assert frontends.libreyolo_ms_deform_attn(value[0], shapes, loc, weights) is None
        assert slot_module.maybe_ms_deform_attn(value, shapes, loc, weights) is not None
    assert len(op_calls) == 1


def test_libreyolo_kernels_off_still_forces_the_reference():
    with tpa.applied(groups=["libreyolo.kernels"], strict=True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LIBREYOLO_KERNELS", "off")
            assert registry.resolve("fake_quant_fp8") is fake_quant.fake_quant_fp8
            mp.setenv("LIBREYOLO_KERNELS", "turbo_physai")
            assert registry.resolve("fake_quant_fp8") is our_quant.fake_quant_fp8


def test_the_slots_option_picks_slots():
    options = {"libreyolo.kernels": {"slots": ["fake_quant_fp8"]}}
    config = tpa.OptimizationConfig.for_groups("libreyolo.kernels", **options)
    with tpa.applied(config, strict=True):
        assert registry.active()["fake_quant_fp8"] == "turbo_physai"
        assert registry.active()["ms_deform_attn"] != "turbo_physai"


def test_providers_registered_into_other_slots_while_applied_survive_rollback():
    def gemm(*args):
        return None

    with tpa.applied(groups=["libreyolo.kernels"], strict=True):
        registry.register("fp8_gemm", gemm, name="late")
    try:
        assert [e["name"] for e in registry._REGISTRY["fp8_gemm"]][0] == "late"
    finally:
        registry.unregister("fp8_gemm", "late")


def _blocked(options=None, force=False):
    config = tpa.OptimizationConfig.for_groups(
        "libreyolo.kernels", **({"libreyolo.kernels": options} if options else {})
    )
    report = tpa.check(config, force_groups=["libreyolo.kernels"] if force else [])
    group = report.group("libreyolo.kernels")
    assert group.decision == "block", str(report)
    return group


def test_other_libreyolo_releases_are_blocked_and_force_does_not_help(monkeypatch):
    monkeypatch.setattr(
        tpa.CompatibilityContext, "package_version", staticmethod(lambda name: "1.7.0")
    )
    group = _blocked(force=True)
    assert group.reasons == ["compatibility.incompatible"]
    assert "libreyolo 1.7.0 is not a validated release" in str(group.to_dict()["checks"])
    report = tpa.check(groups=FAMILY_IDS)
    assert {g.reasons[0] for g in report.groups} == {"compatibility.incompatible"}


def test_a_slot_whose_signature_changed_is_blocked_naming_it(monkeypatch):
    def fake_quant_fp8(x, scale, axis=0):  # a release that grew a parameter
        return x

    monkeypatch.setattr(fake_quant, "fake_quant_fp8", fake_quant_fp8)
    checks = str(_blocked().to_dict()["checks"])
    assert "slot 'fake_quant_fp8': LibreYOLO calls (x, scale, axis=0)" in checks


def test_a_registry_of_another_layout_is_blocked(monkeypatch):
    monkeypatch.setitem(registry._REGISTRY, "fake_quant_fp8", [("reference", print)])
    assert "entries are not {name, impl, predicate} dicts" in str(_blocked().to_dict()["checks"])
    monkeypatch.setitem(
        registry._REGISTRY,
        "fake_quant_fp8",
        [{"name": "turbo_physai", "impl": print, "predicate": None}],
    )
    assert "already has an implementation named 'turbo_physai'" in str(
        _blocked().to_dict()["checks"]
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"slots": ["no_such_slot"]}, "no such slot ['no_such_slot']"),
        ({"slots": "fake_quant_fp8"}, "must be a non-empty list"),
        ({"slot": ["fake_quant_fp8"]}, "takes only the option 'slots'"),
    ],
)
def test_bad_options_block_the_group_naming_the_problem(options, message):
    stock_fp8 = registry.resolve("fake_quant_fp8")
    group = _blocked(options)
    assert group.reasons == ["options.invalid"]
    assert message in str(group.to_dict()["checks"])
    assert registry.resolve("fake_quant_fp8") is stock_fp8


# --- the family groups ---------------------------------------------------------------------


FLAT_POINTS = {("rtdetrv2", 0), ("dfine", 0), ("deim", 0), ("ec", 1), ("ovdeim", 0)}


def _family_call(family, site=0, points_list=None):
    """(function of three leaves, the leaves): the family's MSDA core at call site ``site``
    called the way its attention module calls it, in its own layouts."""
    value, shapes, loc, weights = _slot_inputs()
    n, _, m, d = value.shape
    lq, levels, points = loc.shape[1], len(shapes), loc.shape[4]
    module = _module(family, site)
    gen = torch.Generator().manual_seed(3)
    if (family, site) in FLAT_POINTS:  # points of all levels in one axis
        points_list = points_list or [points] * levels
        total = sum(points_list)
        loc = torch.rand(n, lq, m, total, 2, generator=gen, dtype=value.dtype) * 1.2 - 0.1
        weights = torch.rand(n, lq, m, total, generator=gen, dtype=value.dtype)
    sizes = [h * w for h, w in shapes]

    def call(v, sl, w):
        if family == "rtdetr":
            return module.deformable_attention_core_func(v, shapes, sl, w)
        if family == "grounding_dino":
            return module._msda(v, shapes, sl, w)
        if family in ("rtdetrv2", "ovdeim"):
            return module.deformable_attention_core_func_v2(v, shapes, sl, w, points_list)
        per_level = v.permute(0, 2, 3, 1).split(sizes, -1)  # one (N, M, D, H*W) per level
        if (family, site) in {("dfine", 0), ("deim", 0), ("ec", 1)}:
            return module.deformable_attention_core_func_v2(
                list(per_level), shapes, sl, w, points_list
            )
        if family == "ec":  # the pose decoder: one (N*M, D, H*W) per level
            pose = tuple(t.reshape(n * m, d, -1) for t in per_level)
            return module._ms_deform_attn_core_pytorch_pose(pose, shapes, sl, w)
        if family == "lwdetr":  # value (N, M, D, S), weights flattened over (levels, points)
            return module.ms_deform_attn_core_pytorch(
                v.permute(0, 2, 3, 1), shapes, sl, w.flatten(3, 4)
            )
        return module.ms_deform_attn_core_pytorch(v, torch.tensor(shapes), sl, w)

    if family != "rfdetr":
        return call, (value, loc, weights)
    # RF-DETR calls the slot from its attention module's forward: query and reference points in
    torch.manual_seed(0)
    attn = module.MSDeformAttn(d_model=m * d, n_levels=levels, n_heads=m, n_points=points)
    attn = attn.double()
    starts = torch.tensor([0, sizes[0]])
    query = torch.randn(n, lq, m * d, generator=gen, dtype=value.dtype)
    ref = torch.rand(n, lq, levels, 2, generator=gen, dtype=value.dtype)

    def attend(v, q, r):
        return attn(q, r, v.flatten(2), torch.tensor(shapes), starts, None, shapes)

    return attend, (value, query, ref)


@pytest.mark.parametrize("family, site", SITES, ids=[f"{f}[{i}]" for f, i in SITES])
def test_family_call_site_forward_and_gradients_match(family, site, op_calls):
    group_id = f"libreyolo.{family}.msda"
    fn, leaves = _family_call(family, site)
    module = _module(family, site)
    before = dict(vars(module))
    stock = _grads(fn, *leaves)
    with tpa.applied(groups=[group_id], strict=True):
        ours = _grads(fn, *leaves)
    assert len(op_calls) == 1
    assert_identical({"module": before}, {"module": dict(vars(module))})
    _close(ours, stock)


@pytest.mark.parametrize("family, site", sorted(FLAT_POINTS))
def test_uneven_points_per_level_reach_our_op_and_match(family, site, op_calls):
    # D-FINE's and DEIM's own configs sample 3, 6 and 3 points on three levels
    fn, leaves = _family_call(family, site, points_list=[2, 4])
    stock = _grads(fn, *leaves)
    with tpa.applied(groups=[f"libreyolo.{family}.msda"], strict=True):
        ours = _grads(fn, *leaves)
    assert len(op_calls) == 1
    _close(ours, stock)


def test_under_torch_compile_the_family_group_keeps_our_op_in_one_graph(op_calls):
    """LibreYOLO switches its slot off while compiling (the slot group alone changes nothing
    there); the family group's functions trace, with our op as one node: fullgraph=True raises
    on any graph break, aot_eager traces the backward too."""
    fn, leaves = _family_call("rtdetr")
    stock = _grads(fn, *leaves)
    torch._dynamo.reset()
    try:
        with tpa.applied(groups=["libreyolo.kernels"], strict=True):
            _grads(torch.compile(fn, backend="aot_eager", fullgraph=True), *leaves)
        assert not op_calls  # LibreYOLO's own switch: grid_sample in the graph
        torch._dynamo.reset()
        with tpa.applied(groups=["libreyolo.rtdetr.msda"], strict=True):
            compiled = _grads(torch.compile(fn, backend="aot_eager", fullgraph=True), *leaves)
        assert op_calls
    finally:
        torch._dynamo.reset()
    _close(compiled, stock)


def test_torch_export_holds_our_op():
    fn, leaves = _family_call("deformable_detr")

    class Core(torch.nn.Module):
        def forward(self, v, sl, w):
            return fn(v, sl, w)

    with tpa.applied(groups=["libreyolo.deformable_detr.msda"], strict=True):
        exported = torch.export.export(Core(), leaves)
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert "turbo_physai.ms_deform_attn.default" in targets
    assert not any("grid_sampler" in t for t in targets)
    _close([exported.module()(*leaves)], [fn(*leaves)])


def test_onnx_export_keeps_libreyolos_portable_path(monkeypatch, op_calls):
    fn, leaves = _family_call("rtdetr")
    monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: True)
    with tpa.applied(groups=["libreyolo.rtdetr.msda"], strict=True):
        fn(*leaves)
    assert not op_calls


def test_every_group_checks_on_the_installed_release():
    report = tpa.check(groups=[g.id for g in catalog.GROUPS])
    assert [g.id for g in report.groups] == [g.id for g in catalog.GROUPS]
    assert all(g.decision == "apply" for g in report.groups), str(report)
    shipped = tpa.check("turbo_physai.libreyolo")
    assert [g.id for g in shipped.groups] == [
        g.id for g in (catalog.KERNELS, *catalog.FAMILY_GROUPS)]


def test_apply_by_the_shipped_id_and_rollback_restore_every_module():
    before = _registry_state()
    report = tpa.apply("turbo_physai.libreyolo", strict=True)
    try:
        assert {g.status for g in report.groups} == {"applied"}
        assert (
            _module("dfine").maybe_ms_deform_attn_v2
            is not before["dfine[0]"]["maybe_ms_deform_attn_v2"]
        )
    finally:
        outcome = tpa.rollback()
    assert not outcome["drifted"] and not outcome["failed"], outcome
    assert not registry._RESOLVED
    assert_identical(before, _registry_state())


def test_ci_installs_libreyolo_beside_the_pinned_torch_pair():
    """CI (tools/setup.sh test) pins torch/torchvision, then installs the test extra: the
    extra must name libreyolo in the validated range, and libreyolo's own requirements must
    accept the pinned pair, or pip would swap the pair for a PyPI one."""
    import importlib.metadata
    import re
    from pathlib import Path

    import tomllib
    from packaging.requirements import Requirement
    from packaging.version import Version

    root = Path(__file__).resolve().parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["test"]
    [wanted] = [Requirement(r) for r in extra if Requirement(r).name == "libreyolo"]
    assert str(wanted.specifier) == str(Requirement(f"libreyolo{slots.VALIDATED}").specifier)
    assert Version(importlib.metadata.version("libreyolo")) in wanted.specifier
    setup = (root / "tools" / "setup.sh").read_text()
    pins = dict(re.findall(r"\b(torch|torchvision)==([\w.+]+)", setup.split("tpa_install_test")[1]))
    assert set(pins) == {"torch", "torchvision"}, pins
    needs = {
        r.name: r
        for r in map(Requirement, importlib.metadata.requires("libreyolo"))
        if r.marker is None
    }
    for name, version in pins.items():
        assert Version(version) in needs[name].specifier, (name, version, needs[name])
