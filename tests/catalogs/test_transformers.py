"""The transformers catalog: every MSDA group gives the same outputs and gradients as
transformers' own code (float64, tolerance below), routes through our op, and rolls back to the
identical objects; compile groups keep our op in one graph; kernelize is detected."""

import importlib
import types
import warnings

import pytest

import turbo_physai as tpa
from turbo_physai.catalogs import transformers as catalog

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from turbo_physai import zoo  # noqa: E402
from turbo_physai.ops import frontends  # noqa: E402
from turbo_physai.optimizations.common.transformers import msda  # noqa: E402

# float64 on both sides: the op and grid_sample differ only in summation order.
RTOL, ATOL = 1e-9, 1e-11
MODEL_IDS = [g.id for g in catalog.GROUPS if g.id.endswith(".msda")]


def _module(model):
    return importlib.import_module(f"transformers.models.{model}.modeling_{model}")


def _target(group):
    path = group.declarations[0].target
    owner, name = path.rsplit(".", 1)
    if name == "forward":
        owner, cls = owner.rsplit(".", 1)
        return vars(getattr(importlib.import_module(owner), cls)), name
    return vars(importlib.import_module(owner)), name


@pytest.fixture
def op_calls(monkeypatch):
    calls = []

    def counting(*args):
        calls.append(args[0].shape)
        return original(*args)

    original = frontends._msda
    monkeypatch.setattr(frontends, "_msda", counting)
    return calls


def _run(built):
    """Outputs and gradients (input and every parameter) of one forward/backward. A parameter
    the outputs do not depend on counts as a zero gradient: eager autograd leaves it None, a
    compiled whole model (RT-DETR's detached query-selection heads) returns zeros."""
    built.model.zero_grad()
    pixels = built.inputs["pixel_values"].clone().requires_grad_()
    outputs = built.outputs(built.model(pixel_values=pixels))
    sum(o.sum() for o in outputs).backward()
    params = list(built.model.parameters())
    grads = [pixels.grad] + [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
    return [o.detach().clone() for o in outputs], [g.clone() for g in grads]


def _scrambled(name):
    # transformers' init leaves some projections near zero (RT-DETR's attention output is
    # ~1e-10), which would make any MSDA look right; noise on every weight makes it matter.
    built = zoo.build(name, "tiny", dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in built.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.1)
    return built


def _close(got, want):
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", zoo.MODELS)
def test_whole_model_outputs_and_gradients_match_and_roll_back(name, op_calls):
    if name == "mask2former":
        pytest.importorskip("scipy")  # transformers builds Mask2FormerLoss with the model
    built = _scrambled(name)
    group = next(g for g in catalog.GROUPS if g.id == f"transformers.{name}.msda")
    namespace, attr = _target(group)
    original = namespace[attr]
    stock = _run(built)
    with tpa.applied(groups=[group.id], strict=True):
        assert namespace[attr] is not original
        optimized = _run(built)
    assert op_calls, "the model never reached ms_deform_attn"
    assert namespace[attr] is original
    _close(optimized[0], stock[0])
    _close(optimized[1], stock[1])
    after = _run(built)
    for a, b in zip(after[0] + after[1], stock[0] + stock[1], strict=True):
        assert torch.equal(a, b)


def _call_site_inputs(n=2, lq=5, m=2, d=4, levels=((6, 5), (3, 2)), p=3):
    gen = torch.Generator().manual_seed(0)
    shapes = torch.tensor(levels)
    s = int(shapes.prod(1).sum())
    value = torch.randn(n, s, m, d, generator=gen, dtype=torch.float64)
    # Spill past [0, 1] so zero padding at the borders is exercised too.
    loc = torch.rand(n, lq, m, len(levels), p, 2, generator=gen, dtype=torch.float64) * 1.2 - 0.1
    weights = torch.rand(n, lq, m, len(levels), p, generator=gen, dtype=torch.float64)
    return value, shapes, [tuple(x) for x in levels], loc, weights


def _call(name, fn, value, shapes, shape_list, loc, weights):
    if name in catalog.CLASS_MODELS:
        starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
        return fn(value, shapes, shape_list, starts, loc, weights, 64)
    if name in catalog.FUNCTION_MODELS:
        return fn(value, shape_list, loc, weights)
    n, lq, m, levels, p, _ = loc.shape
    return fn(value, shape_list, loc.flatten(3, 4), weights.flatten(3, 4), [p] * levels)


@pytest.mark.parametrize("group_id", MODEL_IDS)
def test_call_site_forward_and_gradients_match(group_id, op_calls):
    """Every group, at the exact callable the model calls, as the model calls it."""
    name = group_id.split(".")[1]
    group = next(g for g in catalog.GROUPS if g.id == group_id)
    module = _module(name)
    if name in catalog.CLASS_MODELS:
        instance = module.MultiScaleDeformableAttention()
        fn = instance  # nn.Module.__call__ looks forward up on the class at each call
    else:
        fn = None
    inputs = _call_site_inputs()

    def run():
        leaves = [t.clone().requires_grad_() for t in (inputs[0], inputs[3], inputs[4])]
        call = fn or vars(module)[group.declarations[0].target.rsplit(".", 1)[1]]
        out = _call(name, call, leaves[0], inputs[1], inputs[2], leaves[1], leaves[2])
        grads = torch.autograd.grad((out * out).sum(), leaves)
        return [out.detach(), *grads]

    namespace, attr = _target(group)
    original = namespace[attr]
    stock = run()
    with tpa.applied(groups=[group_id], strict=True):
        optimized = run()
    assert op_calls
    assert namespace[attr] is original
    _close(optimized, stock)


def test_rt_detr_v2_keeps_discrete_sampling_and_uneven_points_on_transformers_code():
    module = _module("rt_detr_v2")
    value, shapes, shape_list, loc, weights = _call_site_inputs(p=2)
    flat_loc, flat_w = loc.flatten(3, 4), weights.flatten(3, 4)
    uneven = [1, 3]  # 4 points in all, unevenly split: our op cannot take it
    calls = [((value, shape_list, flat_loc, flat_w, [2, 2]), {"method": "discrete"}),
             ((value, shape_list, flat_loc, flat_w, uneven), {})]
    stock = [module.multi_scale_deformable_attention_v2(*a, **k) for a, k in calls]
    with tpa.applied(groups=["transformers.rt_detr_v2.msda"], strict=True) as report:
        got = [module.multi_scale_deformable_attention_v2(*a, **k) for a, k in calls]
    (counts,) = report.group("transformers.rt_detr_v2.msda").to_dict()["dispatchers"].values()
    assert counts == {"replacement": 0, "original": 2}
    for a, b in zip(got, stock, strict=True):
        assert torch.equal(a, b)


def test_every_group_applies_on_the_validated_release():
    report = tpa.check(groups=[g.id for g in catalog.GROUPS])
    assert all(g.decision == "apply" for g in report.groups), str(report)
    assert all(catalog.COMMON in g.depends_on for g in catalog.GROUPS if g.id in MODEL_IDS)


def test_other_transformers_releases_are_blocked_and_force_does_not_help(monkeypatch):
    monkeypatch.setattr(tpa.CompatibilityContext, "package_version", staticmethod(lambda n: "5.30"))
    report = tpa.check(groups=["transformers.rt_detr.msda"],
                       force_groups=["transformers.rt_detr.msda"])
    group = report.group("transformers.rt_detr.msda")
    assert group.reasons == ["compatibility.incompatible"]
    assert "5.30 is not a validated release" in str(group.to_dict()["checks"])


def _kernelize_like_kernels(model):
    """What kernels' kernelize does with its fallback: bind the class's forward per instance."""
    for module in model.modules():
        if hasattr(type(module), "kernel_layer_name"):
            module.forward = types.MethodType(type(module).forward, module)
    return model


@pytest.fixture
def hub_extensible(monkeypatch):
    # transformers marks the class with kernels' decorator only when a kernels release it
    # supports is installed; mark it the way kernels.replace_kernel_forward_from_hub does.
    cls = _module("deformable_detr").MultiScaleDeformableAttention
    monkeypatch.setattr(cls, "kernel_layer_name", "MultiScaleDeformableAttention", raising=False)
    return cls


def test_instances_kernelized_before_apply_block_the_group(hub_extensible):
    built = zoo.build("deformable_detr", "tiny")
    kernels = pytest.importorskip("kernels")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no kernel mapping found": it falls back, as we want
        kernels.kernelize(built.model, mode=kernels.Mode.INFERENCE, device="cpu")
    report = tpa.check(groups=["transformers.deformable_detr.msda"])
    group = report.group("transformers.deformable_detr.msda")
    assert group.reasons == ["compatibility.incompatible"]
    assert "4 live MultiScaleDeformableAttention instance(s)" in str(group.to_dict()["checks"])
    del built  # left to the cycle collector, which the check runs before blaming an instance
    assert tpa.check(groups=["transformers.deformable_detr.msda"]).ok


def test_kernelize_after_apply_is_reported_not_claimed(hub_extensible, monkeypatch):
    hub = importlib.import_module("transformers.integrations.hub_kernels")
    built = zoo.build("deformable_detr", "tiny")
    # Let transformers' own kernelize run here: kernels available, its kernelize binding per
    # instance (the real one needs a supported kernels release; see _kernelize_like_kernels).
    monkeypatch.setattr(hub, "is_kernels_available", lambda: True)
    monkeypatch.setattr(hub, "_kernels_kernelize", lambda m, **kw: _kernelize_like_kernels(m),
                        raising=False)
    for name in ("Mode", "KernelizeFallback"):
        monkeypatch.setattr(hub, name, types.SimpleNamespace(INFERENCE=0, TRAINING=1, ALL=2),
                            raising=False)
    with tpa.applied(groups=["transformers.deformable_detr.msda"], strict=True) as report:
        modeling_utils = importlib.import_module("transformers.modeling_utils")
        with pytest.warns(RuntimeWarning, match="kernelize bound a forward to 4 module"):
            modeling_utils.kernelize(built.model)
        group = report.group("transformers.deformable_detr.msda")
        assert "kernelize.bypass" in group.reasons
        assert len(msda.bypassing(built.model)) == 4
    for module in built.model.modules():  # later tests must not see kernelized instances
        vars(module).pop("forward", None)


def test_compile_groups_keep_the_op_in_one_graph(op_calls):
    """fullgraph=True raises on any graph break; aot_eager traces forward and backward."""
    built = _scrambled("deformable_detr")
    stock = _run(built)
    options = {"backend": "aot_eager", "fullgraph": True, "dynamic": False}
    config = tpa.OptimizationConfig.for_groups("transformers.deformable_detr.compile",
                                               **{"transformers.deformable_detr.compile": options})
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    with tpa.applied(config, strict=True) as report:
        assert "transformers.deformable_detr.msda" in [g.id for g in report.groups]
        compiled = _run(built)
    assert counters["stats"]["unique_graphs"] >= 2, dict(counters)  # encoder and decoder layer
    assert op_calls  # traced through our front end into the graph
    torch._dynamo.reset()
    _close(compiled[0], stock[0])
    _close(compiled[1], stock[1])


@pytest.mark.parametrize("group_id", ["transformers.rt_detr.compile",
                                      "transformers.rt_detr.compile_model",
                                      "transformers.deformable_detr.compile_model"])
def test_compile_groups_run_fullgraph_and_roll_back(group_id, op_calls):
    """aot_eager traces forward and backward; fullgraph=True raises on any graph break."""
    group = next(g for g in catalog.GROUPS if g.id == group_id)
    namespace, attr = _target(group)
    original = namespace[attr]
    built = _scrambled(group_id.split(".")[1])
    # The whole model is one graph. The decoder layers share theirs, but with autograd on the
    # first layer's input is detached (RT-DETR's query selection) and the others' is not: two.
    graphs = 1 if group_id.endswith("compile_model") else 2
    stock = _run(built)
    options = {"backend": "aot_eager", "fullgraph": True, "dynamic": False}
    config = tpa.OptimizationConfig.for_groups(group_id, **{group_id: options})
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    with tpa.applied(config, strict=True):
        compiled = _run(built)
    assert counters["stats"]["unique_graphs"] == graphs, dict(counters)
    assert op_calls  # traced through our front end into the graph
    assert namespace[attr] is original
    torch._dynamo.reset()
    _close(compiled[0], stock[0])
    _close(compiled[1], stock[1])
