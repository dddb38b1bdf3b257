"""The transformers catalog: every MSDA group gives the same outputs and gradients as
transformers' own code (float64, tolerance below; on CUDA, float32 no farther from the float64
truth than transformers' own float32 code), routes through our op, and rolls back to the
identical objects; compile groups keep our op in one graph; kernelize is detected; only code
the tests passed on is accepted. Runs on every transformers release (tools/compat_matrix.sh):
groups whose structure a release lacks skip."""

import importlib
import sys
import types
import warnings

import pytest

import turbo_physai as tpa
from turbo_physai.catalogs import transformers as catalog

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from turbo_physai import _core, zoo  # noqa: E402
from turbo_physai.engine.paths import ResolutionError, resolve  # noqa: E402
from turbo_physai.ops import frontends  # noqa: E402
from turbo_physai.optimizations.common import host_code  # noqa: E402
from turbo_physai.optimizations.common.transformers import evidence, msda  # noqa: E402

# float64 on both sides: the op and grid_sample differ only in summation order.
RTOL, ATOL = 1e-9, 1e-11
# dynamo before torch 2.13 breaks the graph at a Dispatcher's call and at a stored attribute's
# read (engine/traced_dispatch.py; values right, checked on 2.11): one graph from 2.13 on
ONE_GRAPH = torch.torch_version.TorchVersion(torch.__version__) >= "2.13"
MODEL_IDS = list(catalog.MSDA_IDS)
GROUPS = {g.id: g for g in catalog.GROUPS}
CUDA = pytest.mark.skipif(
    not (hasattr(_core, "ms_deform_attn_forward_cuda") and torch.cuda.is_available()),
    reason="needs a GPU and a CUDA build")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]


@pytest.fixture
def exact_cuda_math():
    """No TF32 in convolutions and matrix products: float32 error is then the kernels' own."""
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def _model_group(name):
    try:
        return catalog.msda_group(name)
    except LookupError as err:
        pytest.skip(f"transformers {transformers.__version__}: {err}")


def _require(group_id):
    """Skip where the installed release lacks the group's target (another structure)."""
    decl = GROUPS[group_id].declarations[0]
    try:
        resolve(getattr(decl, "owner", decl.target))  # replace_stored: a name it adds
    except ResolutionError as err:
        pytest.skip(f"transformers {transformers.__version__}: {err}")


def _module(model):
    return importlib.import_module(f"transformers.models.{model}.modeling_{model}")


def _target(group):
    """(namespace, name) of the place the group writes (``.get``: replace_stored adds it)."""
    path = group.declarations[0].target
    owner, name = path.rsplit(".", 1)
    if name == "forward" or group.declarations[0].kind == "replace_stored":
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


def _scrambled(name, dtype=torch.float64, device="cpu"):
    # transformers' init leaves some projections near zero (RT-DETR's attention output is
    # ~1e-10), which would make any MSDA look right; noise on every weight makes it matter.
    built = zoo.build(name, "tiny", dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in built.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.1)
    built.model.to(device=device, dtype=dtype)
    built.inputs = {k: v.to(device=device, dtype=dtype) for k, v in built.inputs.items()}
    return built


def _close(got, want):
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


def _no_farther(got, stock, truth):
    """float32 on CUDA: each tensor of ``got`` is no farther from the float64 ``truth`` than
    transformers' own float32 result ``stock`` is (4x that, plus a few float32 ulps)."""
    for a, b, t in zip(got, stock, truth, strict=True):
        t = t.cpu()
        scale = max(t.norm().item(), 1e-30)
        mine, theirs = ((x.cpu().double() - t).norm().item() / scale for x in (a, b))
        assert mine <= 4 * theirs + 1e-6, (mine, theirs, tuple(t.shape))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", zoo.MODELS)
def test_whole_model_outputs_and_gradients_match_and_roll_back(name, device, op_calls,
                                                               exact_cuda_math):
    if name == "mask2former":
        pytest.importorskip("scipy")  # transformers builds Mask2FormerLoss with the model
    group = GROUPS[_model_group(name)]
    dtype = torch.float64 if device == "cpu" else torch.float32
    built = _scrambled(name, dtype, device)
    namespace, attr = _target(group)
    original = namespace.get(attr)
    stock = _run(built)
    with tpa.applied(groups=[group.id], strict=True):
        assert namespace.get(attr) is not original
        optimized = _run(built)
    assert op_calls, "the model never reached ms_deform_attn"
    assert namespace.get(attr) is original
    if device == "cpu":
        _close(optimized[0], stock[0])
        _close(optimized[1], stock[1])
    else:
        truth = _run(_scrambled(name))
        _no_farther(optimized[0] + optimized[1], stock[0] + stock[1], truth[0] + truth[1])
    calls = len(op_calls)
    after = _run(built)
    assert len(op_calls) == calls
    # grid_sample's CUDA backward adds with atomics: only its forward repeats bit for bit there.
    repeat = after[0] + after[1] if device == "cpu" else after[0]
    for a, b in zip(repeat, stock[0] + stock[1], strict=False):
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


def _form(group):
    """How the model calls the group's target: a module's forward, the function, v2's, or
    v2's stored on the attention module (replace_stored)."""
    decl = group.declarations[0]
    if decl.kind == "replace_stored":
        return "stored"
    if decl.target.endswith(".forward"):
        return "class"
    return "v2" if decl.target.endswith("_v2") else "function"


def _stored_instance(group):
    """An attention module built before apply() (transformers' default config of the model),
    holding transformers' function: what replace_stored must reach."""
    decl = group.declarations[0]
    cls = resolve(decl.owner).found
    config = getattr(transformers, cls.__name__.replace("MultiscaleDeformableAttention", "Config"))
    instance = cls(config())
    assert vars(instance)[decl.attribute] is resolve(decl.original).found
    return instance


def _call(form, fn, value, shapes, shape_list, loc, weights):
    if form == "class":
        starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
        return fn(value, shapes, shape_list, starts, loc, weights, 64)
    if form == "function":
        return fn(value, shape_list, loc, weights)
    n, lq, m, levels, p, _ = loc.shape  # v2 and stored: v2's signature
    return fn(value, shape_list, loc.flatten(3, 4), weights.flatten(3, 4), [p] * levels)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("group_id", MODEL_IDS)
def test_call_site_forward_and_gradients_match(group_id, device, op_calls):
    """Every group, at the exact callable the model calls, as the model calls it."""
    _require(group_id)
    name = group_id.split(".")[1]
    group = GROUPS[group_id]
    form = _form(group)
    module = _module(name)
    fn = None
    if form == "class":
        instance = module.MultiScaleDeformableAttention()
        fn = instance  # nn.Module.__call__ looks forward up on the class at each call
    elif form == "stored":
        instance = _stored_instance(group)
        attribute = group.declarations[0].attribute
        fn = lambda *args: getattr(instance, attribute)(*args)  # noqa: E731 (read at each call)
    inputs = _call_site_inputs()

    def run(dtype=torch.float64, on=device):
        tensors = [t.to(on, dtype) for t in (inputs[0], inputs[3], inputs[4])]
        leaves = [t.requires_grad_() for t in tensors]
        call = fn or vars(module)[group.declarations[0].target.rsplit(".", 1)[1]]
        out = _call(form, call, leaves[0], inputs[1].to(on), inputs[2], leaves[1], leaves[2])
        grads = torch.autograd.grad((out * out).sum(), leaves)
        return [out.detach(), *grads]

    dtype = torch.float64 if device == "cpu" else torch.float32
    namespace, attr = _target(group)
    original = namespace.get(attr)
    replaced = resolve(getattr(group.declarations[0], "original", group.declarations[0].target))
    assert evidence.math_problems(replaced.found) == []
    stock = run(dtype)
    with tpa.applied(groups=[group_id], strict=True):
        optimized = run(dtype)
    assert op_calls
    assert namespace.get(attr) is original
    if device == "cpu":
        _close(optimized, stock)
    else:
        _no_farther(optimized, stock, run(torch.float64, "cpu"))


def test_rt_detr_v2_keeps_discrete_sampling_on_transformers_code():
    _require("transformers.rt_detr_v2.msda")
    module = _module("rt_detr_v2")
    value, shapes, shape_list, loc, weights = _call_site_inputs(p=2)
    args = (value, shape_list, loc.flatten(3, 4), weights.flatten(3, 4), [2, 2])
    stock = module.multi_scale_deformable_attention_v2(*args, method="discrete")
    with tpa.applied(groups=["transformers.rt_detr_v2.msda"], strict=True) as report:
        got = module.multi_scale_deformable_attention_v2(*args, method="discrete")
    (counts,) = report.group("transformers.rt_detr_v2.msda").to_dict()["dispatchers"].values()
    assert counts == {"replacement": 0, "original": 1}
    assert torch.equal(got, stock)


def test_rt_detr_v2_uneven_points_per_level_reach_our_op_and_match(op_calls):
    """D-FINE style [3, 6, 3]: padded to even counts with zero weights outside the map."""
    _require("transformers.rt_detr_v2.msda")
    module = _module("rt_detr_v2")
    value, shapes, shape_list, loc, weights = _call_site_inputs(p=2)
    uneven = [1, 3]  # the same 4 points in all, split unevenly over the 2 levels

    def call(v, sl, w):
        return module.multi_scale_deformable_attention_v2(v, shape_list, sl, w, uneven)

    def grads(*leaves):
        leaves = [t.clone().requires_grad_() for t in leaves]
        out = call(*leaves)
        return [out.detach(), *torch.autograd.grad((out * out).sum(), leaves)]

    leaves = (value, loc.flatten(3, 4), weights.flatten(3, 4))
    stock = grads(*leaves)
    with tpa.applied(groups=["transformers.rt_detr_v2.msda"], strict=True):
        ours = grads(*leaves)
    assert len(op_calls) == 1
    _close(ours, stock)


def test_rt_detr_v2_compiles_with_its_runtime_condition_in_one_graph(op_calls):
    """The group's Dispatcher at the module function is traced by torch.compile, condition
    included (engine/traced_dispatch.py): fullgraph=True, forward and backward (aot_eager).
    Before torch 2.13 the call is a graph break: the values are checked there."""
    _require("transformers.rt_detr_v2.msda")
    module = _module("rt_detr_v2")
    value, shapes, shape_list, loc, weights = _call_site_inputs(p=2)
    leaves = (value, loc.flatten(3, 4), weights.flatten(3, 4))

    def run(fn):
        tensors = [t.clone().requires_grad_() for t in leaves]
        out = fn(*tensors)
        return [out.detach(), *torch.autograd.grad((out * out).sum(), tensors)]

    def call(v, sl, w):
        return module.multi_scale_deformable_attention_v2(v, shape_list, sl, w, [2, 2])

    stock = run(call)
    torch._dynamo.reset()
    with tpa.applied(groups=["transformers.rt_detr_v2.msda"], strict=True):
        ours = run(torch.compile(call, backend="aot_eager", fullgraph=ONE_GRAPH))
    torch._dynamo.reset()
    assert op_calls
    _close(ours, stock)


@pytest.mark.parametrize("model", list(catalog.STORED_V2_MODELS))
def test_stored_function_is_ours_for_every_instance_and_theirs_after(model):
    """Built before or while applied, every attention module reads our function while applied
    and transformers' after: nothing of ours stays in an instance."""
    group_id = _model_group(model)
    decl = GROUPS[group_id].declarations[0]
    theirs = resolve(decl.original).found
    before = _stored_instance(GROUPS[group_id])
    with tpa.applied(groups=[group_id], strict=True):
        during = _stored_instance(GROUPS[group_id])
        for instance in (before, during):
            assert isinstance(getattr(instance, decl.attribute), _core.Dispatcher)
    for instance in (before, during):
        assert getattr(instance, decl.attribute) is theirs
        assert vars(instance)[decl.attribute] is theirs


def test_stored_groups_compile_with_the_op_in_one_graph(op_calls):
    """Under torch.compile the runtime condition is traced, not a graph break: the uneven 3/6/3
    call compiles with fullgraph=True (aot_eager: forward and backward; ONE_GRAPH) and matches
    stock."""
    group = GROUPS[_model_group("d_fine")]
    instance = _stored_instance(group)
    value, shapes, shape_list, loc, weights = _call_site_inputs(levels=((6, 5), (3, 2), (2, 2)),
                                                                p=6)
    uneven = [3, 6, 3]
    leaves = (value, loc.flatten(3, 4)[..., :12, :], weights.flatten(3, 4)[..., :12])

    def run(fn):
        tensors = [t.clone().requires_grad_() for t in leaves]
        out = fn(tensors[0], shape_list, tensors[1], tensors[2], uneven)
        return [out.detach(), *torch.autograd.grad((out * out).sum(), tensors)]

    stock = run(instance.ms_deformable_attn_core)
    torch._dynamo.reset()
    with tpa.applied(groups=[group.id], strict=True):
        compiled = torch.compile(lambda *args: instance.ms_deformable_attn_core(*args),
                                 backend="aot_eager", fullgraph=ONE_GRAPH)
        ours = run(compiled)
    torch._dynamo.reset()
    assert op_calls
    _close(ours, stock)


def test_a_changed_init_of_a_stored_group_is_blocked_naming_it(monkeypatch):
    """The __init__ storing the function is evidence too (no math markers: it has none)."""
    group_id = _model_group("d_fine")
    decl = GROUPS[group_id].declarations[0]
    known = {host_code.fingerprint(resolve(p).found): {"code": p, "releases": ["1.0"]}
             for p in (decl.original, *decl.callers)}
    monkeypatch.setattr(host_code, "validated", lambda _: known)
    monkeypatch.delenv(evidence.EVIDENCE.env, raising=False)
    group = tpa.check(groups=[group_id]).group(group_id)
    assert group.reasons == ["compatibility.incompatible"]
    text = str(group.to_dict()["checks"])
    assert "DFineMultiscaleDeformableAttention.__init__ is not a validated version" in text
    assert "no longer does" not in text and "math markers" not in text


def test_every_group_whose_code_this_release_has_applies():
    """Blocked only where the release lacks the structure (or what depends on it)."""
    # graph_safe and the layer compile group both wrap DeformableDetrEncoderLayer.forward, and
    # cuda_graph (which needs graph_safe) and compile_model the model's forward: they conflict
    # (documented); both have their own tests (test_transformers_graph_safe.py,
    # test_transformers_cuda_graph.py).
    report = tpa.check(groups=[g.id for g in catalog.GROUPS
                               if not g.id.endswith((".graph_safe", ".cuda_graph"))])
    for g in report.groups:
        assert g.decision == "apply" or set(g.reasons) <= {"target.unresolved",
                                                           "dependency.blocked"}, str(report)
    applied = {g.id for g in report.groups if g.decision == "apply"}
    reached = {g.split(".")[1] for g in applied & set(MODEL_IDS)}
    assert {"deformable_detr", "rt_detr", "mask2former"} <= reached, reached
    assert all(catalog.COMMON in GROUPS[i].depends_on for i in MODEL_IDS)


def test_validated_code_is_accepted_under_any_version(monkeypatch):
    group_id = catalog.msda_group("rt_detr")
    namespace, attr = _target(GROUPS[group_id])
    known = {host_code.fingerprint(namespace[attr]): {"code": attr, "releases": ["1.0"]}}
    monkeypatch.setattr(host_code, "validated", lambda _: known)
    monkeypatch.setattr(tpa.CompatibilityContext, "package_version", staticmethod(lambda n: "9.1"))
    monkeypatch.delenv(evidence.EVIDENCE.env, raising=False)
    assert tpa.check(groups=[group_id]).group(group_id).decision == "apply"
    # The same release, code no test ran on:
    monkeypatch.setattr(host_code, "validated", lambda _: {})
    assert tpa.check(groups=[group_id]).group(group_id).decision == "block"


@pytest.mark.parametrize("model", ["rt_detr", "rt_detr_v2"])  # a replacement, a dispatcher
def test_a_check_while_applied_does_not_judge_our_own_replacement(model):
    group_id = _model_group(model)
    with tpa.applied(groups=[group_id], strict=True):
        group = tpa.check(groups=[group_id]).group(group_id)
    assert "not a validated version" not in str(group.to_dict()["checks"])


def test_validating_lets_new_code_through_on_that_release_only(monkeypatch):
    group_id = catalog.msda_group("rt_detr")
    monkeypatch.setattr(host_code, "validated", lambda _: {})
    monkeypatch.setattr(tpa.CompatibilityContext, "package_version", staticmethod(lambda n: "5.30"))
    for validating, decision in (("5.30", "apply"), ("5.31", "block")):
        monkeypatch.setenv(evidence.EVIDENCE.env, validating)
        assert tpa.check(groups=[group_id]).group(group_id).decision == decision, validating


def test_unvalidated_code_is_blocked_naming_the_release_and_the_command(monkeypatch):
    monkeypatch.setattr(tpa.CompatibilityContext, "package_version", staticmethod(lambda n: "5.30"))
    monkeypatch.setattr(host_code, "validated", lambda _: {})
    monkeypatch.delenv(evidence.EVIDENCE.env, raising=False)
    group_id = catalog.msda_group("rt_detr")
    report = tpa.check(groups=[group_id], force_groups=[group_id])
    group = report.group(group_id)
    assert group.reasons == ["compatibility.incompatible"]
    text = str(group.to_dict()["checks"])
    assert "transformers 5.30: the code of transformers.models.rt_detr" in text
    assert "fingerprint msda-ast-v1:" in text and "no test ran on this code" in text
    assert "`tools/compat_matrix.sh --record 5.30`" in text


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
    _require("transformers.deformable_detr.msda")
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


def _transformers_kernelize(monkeypatch, model):
    """Let transformers' own kernelize run here, with kernels' kernelize binding per instance
    (the real one needs a supported kernels release; see _kernelize_like_kernels): the module
    function (5.17 on) or the method PreTrainedModel.kernelize (4.57 to 5.10)."""
    modeling_utils = importlib.import_module("transformers.modeling_utils")
    modes = types.SimpleNamespace(INFERENCE=0, TRAINING=1, ALL=2)
    if hasattr(modeling_utils, "kernelize"):
        hub = importlib.import_module("transformers.integrations.hub_kernels")
        monkeypatch.setattr(hub, "is_kernels_available", lambda: True)
        monkeypatch.setattr(hub, "_kernels_kernelize",
                            lambda m, **kw: _kernelize_like_kernels(m), raising=False)
        for name in ("Mode", "KernelizeFallback"):
            monkeypatch.setattr(hub, name, modes, raising=False)
        monkeypatch.setattr(hub, "Device", lambda type: type, raising=False)  # 5.17 uses it
        return lambda: modeling_utils.kernelize(model)
    if not hasattr(modeling_utils.PreTrainedModel, "kernelize"):
        pytest.skip(f"transformers {transformers.__version__} has no kernelize")
    kernels = types.ModuleType("kernels")  # what the method imports
    kernels.Device, kernels.Mode = (lambda type: type), modes
    kernels.kernelize = lambda m, **kw: _kernelize_like_kernels(m)
    monkeypatch.setitem(sys.modules, "kernels", kernels)
    monkeypatch.setattr(modeling_utils, "is_kernels_available", lambda: True)
    return lambda: model.kernelize()


def test_kernelize_after_apply_is_reported_not_claimed(hub_extensible, monkeypatch):
    built = zoo.build("deformable_detr", "tiny")
    kernelize = _transformers_kernelize(monkeypatch, built.model)
    with tpa.applied(groups=["transformers.deformable_detr.msda"], strict=True) as report:
        with pytest.warns(RuntimeWarning, match="kernelize bound a forward to 4 module") as seen:
            kernelize()
        assert len([w for w in seen if "kernelize bound" in str(w.message)]) == 1
        group = report.group("transformers.deformable_detr.msda")
        assert "kernelize.bypass" in group.reasons
        assert len(msda.bypassing(built.model)) == 4
    for module in built.model.modules():  # later tests must not see kernelized instances
        vars(module).pop("forward", None)


def test_compile_groups_keep_the_op_in_one_graph(op_calls):
    """fullgraph=True raises on any graph break; aot_eager traces forward and backward."""
    _require("transformers.deformable_detr.msda")
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
    group = GROUPS[group_id]
    _require(group.depends_on[0])
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
