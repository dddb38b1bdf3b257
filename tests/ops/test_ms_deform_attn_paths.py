"""tests/ops/test_ms_deform_attn_paths.py: the eager fast path against the custom op.

turbo_physai.ops.ms_deform_attn calls the kernels directly in plain eager execution and goes
through the custom op turbo_physai::ms_deform_attn wherever something else watches the call. Both
run the same kernel functions, so they must agree bit for bit; these tests check that, which way
each context takes (counted, and recorded at the dispatcher), and that errors stay the same.
"""

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from tpa_msda_cases import LEVELS_5, RecordOps, make_inputs, spy_paths  # noqa: E402
from tpa_msda_cases import forward_and_grads as run  # noqa: E402

from turbo_physai.ops import ms_deform_attn, ms_deform_attn_reference  # noqa: E402
from turbo_physai.ops.ms_deform_attn import _backward_op  # noqa: E402

OP = "turbo_physai.ms_deform_attn.default"
BACKWARD_OP = "turbo_physai.ms_deform_attn_backward.default"


def make(dtype=torch.float64, **kwargs):
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in make_inputs(**kwargs))


class _Passthrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16],
                         ids=str)
def test_fast_path_and_custom_op_agree_bit_for_bit(dtype, monkeypatch):
    args = make(dtype=dtype, d=8, levels=LEVELS_5, seed=2)
    counts = spy_paths(monkeypatch)
    with torch.no_grad():
        fast_no_grad = ms_deform_attn(*args)
    fast_out, fast_grads = run(ms_deform_attn, args)
    assert counts == {"fast": 2, "op": 0}
    op_out, op_grads = run(torch.ops.turbo_physai.ms_deform_attn, args)
    assert fast_out.dtype == dtype and all(g.dtype == dtype for g in fast_grads)
    assert torch.equal(fast_no_grad, op_out) and torch.equal(fast_out, op_out)
    for fast, op in zip(fast_grads, op_grads, strict=True):
        assert torch.equal(fast, op)


def test_fast_path_computes_only_requested_gradients(monkeypatch):
    value, shapes, starts, loc, attn = make()
    counts = spy_paths(monkeypatch)
    loc = loc.clone().requires_grad_()
    (grad_loc,) = torch.autograd.grad(ms_deform_attn(value, shapes, starts, loc, attn).sum(),
                                      [loc])
    assert counts["fast"] == 1 and value.grad is None and attn.grad is None
    _, (_, want, _) = run(torch.ops.turbo_physai.ms_deform_attn, (value, shapes, starts, loc, attn))
    assert grad_loc.shape == want.shape


def test_int32_level_metadata_is_accepted_on_both_paths(monkeypatch):
    value, shapes, starts, loc, attn = make()
    counts = spy_paths(monkeypatch)
    fast = ms_deform_attn(value, shapes.int(), starts.int(), loc, attn)
    with _Passthrough():
        op = ms_deform_attn(value, shapes.int(), starts.int(), loc, attn)
    assert counts == {"fast": 1, "op": 1}
    assert torch.equal(fast, op)


def test_double_backward_is_refused():
    value, shapes, starts, loc, attn = make()
    value.requires_grad_()
    out = ms_deform_attn(value, shapes, starts, loc, attn)
    (grad,) = torch.autograd.grad(out.square().sum(), [value], create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad.sum().backward()


# --- which way each context goes ---------------------------------------------------------------

def test_plain_eager_takes_the_fast_path_and_never_reaches_the_dispatcher(monkeypatch):
    args = make()
    counts = spy_paths(monkeypatch)
    run(ms_deform_attn, args)
    with torch.no_grad():
        ms_deform_attn(*args)
    with torch.inference_mode():
        ms_deform_attn(*args)
    assert counts == {"fast": 3, "op": 0}


def test_a_dispatch_mode_sees_the_op_and_its_backward(monkeypatch):
    args = make()
    counts = spy_paths(monkeypatch)
    with RecordOps() as record:
        out, grads = run(ms_deform_attn, args)
    assert counts == {"fast": 0, "op": 1}
    assert OP in record.names and BACKWARD_OP in record.names
    assert torch.equal(out, ms_deform_attn(*args))


def test_a_mode_entered_around_backward_sees_the_backward_op(monkeypatch):
    value, shapes, starts, loc, attn = make()
    value.requires_grad_()
    counts = spy_paths(monkeypatch)
    out = ms_deform_attn(value, shapes, starts, loc, attn)
    with RecordOps() as record:
        out.sum().backward()
    assert counts == {"fast": 1, "op": 0} and BACKWARD_OP in record.names


def test_compiled_autograd_traces_the_backward_op():
    value, shapes, starts, loc, attn = make()
    leaf = value.clone().requires_grad_()
    ms_deform_attn(leaf, shapes, starts, loc, attn).square().sum().backward()
    value.requires_grad_()
    loss = ms_deform_attn(value, shapes, starts, loc, attn).square().sum()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append({str(node.target) for node in gm.graph.nodes})
        return gm.forward

    with torch._dynamo.compiled_autograd._enable(torch.compile(backend=backend, fullgraph=True)):
        loss.backward()
    assert any(BACKWARD_OP in targets for targets in graphs)
    assert torch.equal(value.grad, leaf.grad)


def test_fake_tensors_go_through_the_op(monkeypatch):
    counts = spy_paths(monkeypatch)
    args = make(n=3, lq=7, d=5)
    with FakeTensorMode() as mode:
        out = ms_deform_attn(*[mode.from_tensor(t) for t in args])
    assert counts == {"fast": 0, "op": 1}
    assert out.shape == (3, 7, 2 * 5)


def test_meta_tensors_go_through_the_op(monkeypatch):
    counts = spy_paths(monkeypatch)
    out = ms_deform_attn(*[t.to("meta") for t in make(n=3, lq=7, d=5)])
    assert counts == {"fast": 0, "op": 1}
    assert out.is_meta and out.shape == (3, 7, 2 * 5)


def test_torch_function_mode_and_tensor_subclasses_go_through_the_op(monkeypatch):
    value, shapes, starts, loc, attn = make()
    counts = spy_paths(monkeypatch)
    with _Passthrough():
        ms_deform_attn(value, shapes, starts, loc, attn)
    ms_deform_attn(torch.nn.Parameter(value), shapes, starts, loc, attn)
    assert counts == {"fast": 0, "op": 2}


def test_vmap_goes_through_the_op_and_grad_transforms_raise(monkeypatch):
    value, shapes, starts, loc, attn = make()
    counts = spy_paths(monkeypatch)
    batched = [t.expand(3, *t.shape) for t in (value, loc, attn)]
    out = torch.func.vmap(lambda v, lo, a: ms_deform_attn(v, shapes, starts, lo, a))(*batched)
    # The vmapped call, then its batching rule's one call on the whole batch (not one per entry).
    assert counts == {"fast": 0, "op": 2}
    assert torch.equal(out[1], ms_deform_attn(value, shapes, starts, loc, attn))
    with pytest.raises(NotImplementedError, match="torch.func transforms"):
        torch.func.grad(lambda v: ms_deform_attn(v, shapes, starts, loc, attn).sum())(value)


@pytest.mark.parametrize("in_dims", [(0, 0, 0), (None, 0, 0), (0, None, 0), (0, 0, None),
                                     (None, 3, None), (2, None, 1)], ids=str)
def test_vmap_is_one_call_for_the_whole_batch(in_dims, monkeypatch):
    # in_dims of (value, locations, weights). With value vmapped its dimension joins N; with value
    # shared it joins the queries. The result equals the entries computed one at a time.
    size = 3
    value, shapes, starts, loc, attn = make(seed=4)
    gen = torch.Generator().manual_seed(4)
    inputs = [t if dim is None
              else torch.rand((size, *t.shape), generator=gen, dtype=t.dtype).movedim(0, dim)
              for t, dim in zip((value, loc, attn), in_dims, strict=True)]

    def one(v, lo, a):
        return ms_deform_attn(v, shapes, starts, lo, a)

    looped = torch.stack([one(*(t if d is None else t.select(d, i)
                                for t, d in zip(inputs, in_dims, strict=True)))
                          for i in range(size)])
    counts = spy_paths(monkeypatch)
    out = torch.func.vmap(one, in_dims=in_dims)(*inputs)
    # The vmapped call and the batching rule's one call (torch's per-entry fallback would run
    # the kernel per entry below the Python op, without a second call here).
    assert counts == {"fast": 0, "op": 2}
    assert torch.equal(out, looped)


def test_vmap_of_mixed_precision_inputs_keeps_their_dtypes():
    value, shapes, starts, loc, attn = make(dtype=torch.float32)
    low = value.bfloat16()

    def one(v, lo, a):
        return ms_deform_attn(v, shapes, starts, lo, a)

    batched = [t.expand(3, *t.shape) for t in (low, loc, attn)]
    out = torch.func.vmap(one)(*batched)
    assert out.dtype == torch.float32 and torch.equal(out[1], one(low, loc, attn))
    empty = torch.func.vmap(one)(*(t[:0] for t in batched))
    assert empty.dtype == torch.float32 and empty.shape == (0, *out.shape[1:])


def test_vmap_of_level_metadata_runs_each_entry_and_empty_and_nested_vmaps_work():
    value, shapes, starts, loc, attn = make()

    def one(s, lo):
        return ms_deform_attn(value, s, starts, lo, attn)

    out = torch.func.vmap(one)(shapes.expand(2, *shapes.shape), loc.expand(2, *loc.shape))
    assert torch.equal(out[1], one(shapes, loc))
    empty = torch.func.vmap(lambda lo: one(shapes, lo))(loc.expand(0, *loc.shape))
    assert empty.shape == (0, *one(shapes, loc).shape)
    nested = torch.func.vmap(torch.func.vmap(lambda lo: one(shapes, lo)))(
        torch.rand(2, 3, *loc.shape, dtype=loc.dtype))
    assert nested.shape == (2, 3, *one(shapes, loc).shape)


def test_vmap_reports_bad_entries_like_a_plain_call():
    value, shapes, starts, loc, attn = make()
    short = loc[:, :, :1]
    with pytest.raises(ValueError) as plain:
        ms_deform_attn(value, shapes, starts, short, attn)
    with pytest.raises(ValueError) as vmapped:
        torch.func.vmap(lambda lo: ms_deform_attn(value, shapes, starts, lo, attn))(
            short.expand(3, *short.shape))
    assert str(vmapped.value) == str(plain.value)


def test_torch_compile_graph_holds_the_op(monkeypatch):
    args = make()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append({str(node.target) for node in gm.graph.nodes})
        return gm.forward

    compiled = torch.compile(lambda *a: ms_deform_attn(*a) * 2, fullgraph=True, backend=backend)
    expected = ms_deform_attn(*args) * 2
    counts = spy_paths(monkeypatch)
    torch.testing.assert_close(compiled(*args), expected, rtol=0, atol=0)
    assert counts["fast"] == 0  # dynamo took the op branch (it replays the spy's count there)
    assert len(graphs) == 1 and any("turbo_physai.ms_deform_attn" in t for t in graphs[0])


def test_jit_trace_records_the_op(monkeypatch):
    args = make()
    counts = spy_paths(monkeypatch)
    traced = torch.jit.trace(ms_deform_attn, args, check_trace=False)
    assert counts == {"fast": 0, "op": 1}
    assert "turbo_physai::ms_deform_attn" in str(traced.graph)
    assert torch.equal(traced(*args), ms_deform_attn(*args))


# --- mixed precision and autocast -------------------------------------------------------------

@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16], ids=str)
def test_a_16_bit_value_with_float32_locations_on_every_way_in(low, monkeypatch):
    # What a model under autocast passes: a 16-bit value (a linear projection), float32 locations
    # and weights. The output and the location and weight gradients are float32, value's gradient
    # 16-bit; on the CPU all of it is the float32 computation on the 16-bit value.
    value, shapes, starts, loc, attn = make(dtype=torch.float32, d=8)
    low_value = value.to(low)
    expected_out, expected = run(ms_deform_attn, (low_value.float(), shapes, starts, loc, attn))
    counts = spy_paths(monkeypatch)
    for fn in (ms_deform_attn, torch.ops.turbo_physai.ms_deform_attn):
        out, grads = run(fn, (low_value, shapes, starts, loc, attn))
        assert out.dtype == torch.float32 and torch.equal(out, expected_out)
        assert grads[0].dtype == low and torch.equal(grads[0], expected[0].to(low))
        assert torch.equal(grads[1], expected[1]) and torch.equal(grads[2], expected[2])
    assert counts == {"fast": 1, "op": 0}
    ref_out, ref = run(ms_deform_attn_reference, (low_value, shapes, starts, loc, attn))
    assert ref_out.dtype == torch.float32 and ref[0].dtype == low
    torch.testing.assert_close(ref_out, expected_out)
    with FakeTensorMode() as mode:
        fake = ms_deform_attn(*map(mode.from_tensor, (low_value, shapes, starts, loc, attn)))
    assert fake.dtype == torch.float32 and fake.shape == expected_out.shape


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16], ids=str)
def test_autocast_keeps_a_16_bit_value_and_promotes_the_rest(low, monkeypatch):
    value, shapes, starts, loc, attn = make(dtype=torch.float32, d=8)
    low_value = value.to(low)
    expected_out, expected = run(ms_deform_attn, (low_value, shapes, starts, loc, attn))
    widened = ms_deform_attn(low_value, shapes, starts, loc, attn.to(low).float())
    counts = spy_paths(monkeypatch)
    for fn in (ms_deform_attn, torch.ops.turbo_physai.ms_deform_attn):
        with torch.autocast("cpu", dtype=low):
            out, grads = run(fn, (low_value, shapes, starts, loc, attn))
        assert out.dtype == torch.float32 and torch.equal(out, expected_out)
        for mine, want in zip(grads, expected, strict=True):
            assert mine.dtype == want.dtype and torch.equal(mine, want)
        # 16-bit weights are widened to the locations' float32; value stays 16-bit.
        with torch.autocast("cpu", dtype=low):
            out, grads = run(fn, (low_value, shapes, starts, loc, attn.to(low)))
        assert out.dtype == torch.float32 and grads[2].dtype == low
        assert torch.equal(out, widened)
    assert counts == {"fast": 2, "op": 0}  # the public function cast as the op does, then fast
    with pytest.raises(TypeError, match="attention_weights: expected dtype torch.float32"):
        ms_deform_attn(low_value, shapes, starts, loc, attn.to(low))  # outside autocast


def test_autocast_leaves_inputs_of_one_dtype_alone():
    args = make(dtype=torch.bfloat16, d=8)
    with torch.autocast("cpu", dtype=torch.float16):
        out = ms_deform_attn(*args)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ms_deform_attn(*args))


def test_autocast_still_names_bad_inputs():
    value, shapes, starts, loc, attn = make(dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(
            ValueError, match="attention_weights: expected shape"):
        ms_deform_attn(value.bfloat16(), shapes, starts, loc, attn[..., :1])


def test_autocast_inside_a_compiled_function():
    value, shapes, starts, loc, attn = make(dtype=torch.float32, d=8)

    def f(value, loc, attn):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return ms_deform_attn(value, shapes, starts, loc, attn)

    low_value = value.bfloat16()
    out = torch.compile(f, fullgraph=True)(low_value, loc, attn)
    assert out.dtype == torch.float32
    assert torch.equal(out, ms_deform_attn(low_value.float(), shapes, starts, loc, attn))


# --- the profiler ------------------------------------------------------------------------------

def test_profiler_names_the_fast_path_calls(monkeypatch):
    value, shapes, starts, loc, attn = make()
    value.requires_grad_()
    counts = spy_paths(monkeypatch)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        ms_deform_attn(value, shapes, starts, loc, attn).sum().backward()
    assert counts == {"fast": 1, "op": 0}
    names = {event.name for event in prof.events()}
    assert {"turbo_physai::ms_deform_attn", "turbo_physai::ms_deform_attn_backward"} <= names


# --- the backward op: its kernels (binding checks) and its fake (Python checks) agree ----------

GRAD_OUTPUT_EDITS = {
    "channels": lambda g: g[..., :-1],
    "rank 4": lambda g: g.view(2, 5, 2, 4),  # the binding's other layout: not the op's
    "dtype": lambda g: g.float(),
}


@pytest.mark.parametrize("bad", GRAD_OUTPUT_EDITS)
def test_backward_op_refuses_grad_output_as_its_fake_does(bad):
    args = make(d=4)
    grad_output = GRAD_OUTPUT_EDITS[bad](torch.randn(2, 5, 8, dtype=torch.float64))
    with pytest.raises((TypeError, ValueError)) as eager:
        _backward_op(grad_output, *args)
    with FakeTensorMode() as mode, pytest.raises((TypeError, ValueError)) as fake:
        _backward_op(*[mode.from_tensor(t) for t in (grad_output, *args)])
    assert eager.type is fake.type and str(eager.value) == str(fake.value)
    assert str(eager.value).startswith("grad_output: expected")
