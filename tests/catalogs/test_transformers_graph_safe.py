"""transformers.<model>.graph_safe: the encoder layers' overflow guard decided on the device.

The stock guard ``if not torch.isfinite(h).all(): h = clamp(h)`` reads the answer on the host;
the rewritten forward must give the same values and gradients bit for bit (finite or not, with
dropout drawing the same masks), trace in train mode without a graph break, keep gradient
checkpointing, and roll back to the very function it replaced.
"""

from __future__ import annotations

import pytest

import turbo_physai as tpa
from turbo_physai.catalogs import transformers as catalog

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from turbo_physai import zoo  # noqa: E402
from turbo_physai.engine.paths import ResolutionError, resolve  # noqa: E402

GROUP_IDS = [g.id for g in catalog.GROUPS if g.id.endswith(".graph_safe")]
DETR = "transformers.deformable_detr.graph_safe"


def _layer_class(group_id):
    """The class of the group's target method; skip where this release lacks it."""
    path = next(g for g in catalog.GROUPS if g.id == group_id).declarations[0].target
    try:
        return resolve(path.rsplit(".", 1)[0]).found
    except ResolutionError as err:
        pytest.skip(f"transformers {transformers.__version__}: {err}")


def _train_step(model, pixels, seed=0):
    """Outputs and the gradients of every parameter, dropout drawn from ``seed``. A parameter
    the outputs do not reach counts as a zero gradient: eager autograd leaves it None, a compiled
    whole model (RT-DETR's detached query selection) returns zeros."""
    model.train().zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model(pixel_values=pixels)
    (out.logits.sum() + out.pred_boxes.sum()).backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]
    return [out.logits.detach(), out.pred_boxes.detach()], grads


def _hidden(output):
    """A layer's hidden states (4.x layers return a tuple with the attention weights)."""
    return output[0] if isinstance(output, tuple) else output


def _assert_identical(got, want):
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b) or (a.isnan() == b.isnan()).all() and torch.equal(
            a.nan_to_num(), b.nan_to_num()), (a - b).abs().max()


@pytest.mark.parametrize("group_id", GROUP_IDS)
def test_the_guard_of_each_models_layer_is_found_and_rewritten(group_id):
    cls = _layer_class(group_id)
    original = vars(cls)["forward"]
    with tpa.applied(groups=[group_id], strict=True):
        rewritten = vars(cls)["forward"]
        assert rewritten is not original and rewritten._turbo_physai_rewritten
        # A check while applied does not judge our own function.
        assert tpa.check(groups=[group_id]).group(group_id).decision == "apply"
    assert vars(cls)["forward"] is original


def _deformable_detr():
    built = zoo.build("deformable_detr", "tiny")
    return built.model, built.inputs["pixel_values"]


def test_training_values_and_gradients_are_the_stock_ones_bit_for_bit():
    model, pixels = _deformable_detr()
    stock = _train_step(model, pixels)
    with tpa.applied(groups=[DETR], strict=True):
        ours = _train_step(model, pixels)
    _assert_identical(ours[0], stock[0])
    _assert_identical(ours[1], stock[1])


def test_a_non_finite_layer_output_is_clamped_as_stock_does():
    """+-Inf in the final layer norm's output: the guard's clamp branch runs on both sides."""
    model, pixels = _deformable_detr()
    layer = model.model.encoder.layers[0]
    outputs = []

    def poisoned(module, args, output):
        output = output.clone()
        output[0, 0, :2] = torch.tensor([float("inf"), -float("inf")])
        return output

    layer.final_layer_norm.register_forward_hook(poisoned)
    layer.register_forward_hook(lambda module, args, out: outputs.append(_hidden(out).detach()))
    stock = _train_step(model, pixels)
    with tpa.applied(groups=[DETR], strict=True):
        ours = _train_step(model, pixels)
    largest = torch.finfo(outputs[0].dtype).max - 1000
    for out in outputs:  # clamped, by stock's branch and by ours
        assert out[0, 0, :2].tolist() == [largest, -largest]
        assert torch.isfinite(out).all()
    _assert_identical(outputs[1:], outputs[:1])
    _assert_identical(ours[0], stock[0])
    _assert_identical(ours[1], stock[1])


def test_a_training_forward_traces_without_a_graph_break():
    from torch._dynamo.exc import Unsupported

    cls = _layer_class(DETR)
    model, pixels = _deformable_detr()
    layer = model.model.encoder.layers[0].train()
    captured = {}

    def capture(module, args, kwargs, output):
        captured.update(args=args, kwargs=kwargs)

    layer.register_forward_hook(capture, with_kwargs=True)
    model.train()(pixel_values=pixels)
    args, kwargs = captured["args"], captured["kwargs"]

    def compiled_call():
        torch._dynamo.reset()
        return torch.compile(layer, backend="eager", fullgraph=True)(*args, **kwargs)

    with pytest.raises(Unsupported):  # stock: the host branch on the finite check
        compiled_call()
    with tpa.applied(groups=[DETR], strict=True):
        assert vars(cls)["forward"]._turbo_physai_rewritten
        torch.manual_seed(0)
        got = compiled_call()
    torch.manual_seed(0)
    want = layer(*args, **kwargs)
    torch._dynamo.reset()
    assert torch.equal(_hidden(got), _hidden(want))


def test_gradient_checkpointing_still_runs_through_the_rebuilt_wrapper():
    model, pixels = _deformable_detr()
    layers = model.model.encoder.layers
    model.gradient_checkpointing_enable({"use_reentrant": False})
    if not hasattr(layers[0], "_gradient_checkpointing_func"):
        pytest.skip("this release's layers do not checkpoint through _gradient_checkpointing_func")
    stock = _train_step(model, pixels)
    calls = []
    original_func = layers[0]._gradient_checkpointing_func
    for layer in layers:
        layer._gradient_checkpointing_func = lambda *a, **k: calls.append(1) or original_func(
            *a, **k)
    with tpa.applied(groups=[DETR], strict=True):
        ours = _train_step(model, pixels)
    assert calls, "the rebuilt wrapper did not checkpoint"
    _assert_identical(ours[0], stock[0])
    _assert_identical(ours[1], stock[1])


@pytest.mark.parametrize("model_name", ["deformable_detr", "rt_detr"])
def test_the_whole_model_compiles_in_one_graph_for_training_with_it(model_name):
    """compile_model (the whole <Model>.forward) with fullgraph=True in train mode: a graph
    break at the first encoder layer without graph_safe (an error with fullgraph), none with it,
    and the values and gradients of eager with our op."""
    from turbo_physai.catalogs.transformers import msda_group

    msda = next(g for g in catalog.GROUPS if g.id == f"transformers.{model_name}.msda")
    try:  # compile_model depends on it: 4.50 on
        resolve(msda.declarations[0].target)
    except ResolutionError as err:
        pytest.skip(f"transformers {transformers.__version__}: {err}")
    built = zoo.build(model_name, "tiny")
    model, pixels = built.model, built.inputs["pixel_values"]
    compile_id = f"transformers.{model_name}.compile_model"
    safe = f"transformers.{model_name}.graph_safe"
    options = {compile_id: {"backend": "aot_eager", "fullgraph": True, "dynamic": False}}
    with tpa.applied(groups=[msda_group(model_name)], strict=True):
        eager = _train_step(model, pixels)  # eager with our op: what compiling must keep
    for groups, breaks in (([compile_id], True), ([compile_id, safe], False)):
        config = tpa.OptimizationConfig.for_groups(msda_group(model_name), *groups, **options)
        torch._dynamo.reset()
        with tpa.applied(config, strict=True):
            if breaks:
                with pytest.raises(Exception, match="(?i)graph break|data-dependent|Unsupported"):
                    _train_step(model, pixels)
                continue
            compiled = _train_step(model, pixels)
    torch._dynamo.reset()
    _assert_identical(compiled[0], eager[0])  # aot_eager runs the same kernels
    _assert_identical(compiled[1], eager[1])
