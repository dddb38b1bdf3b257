"""tests/ops/test_ms_deform_attn.py: ms_deform_attn against the float64 grid_sample reference."""

import os
import signal

import pytest

torch = pytest.importorskip("torch")

from tpa_msda_cases import CASES as BASE_CASES  # noqa: E402
from tpa_msda_cases import LEVELS_5, make_inputs, non_finite_agree, with_non_finite  # noqa: E402
from tpa_msda_cases import forward_and_grads as grads  # noqa: E402

from turbo_physai import _core, kernels  # noqa: E402
from turbo_physai.ops import ms_deform_attn, ms_deform_attn_reference  # noqa: E402
from turbo_physai.testing import check_conformance  # noqa: E402

# The newest built-in implementation: the CUDA kernel registers after the CPU one where it can run.
NEWEST = ("cuda" if hasattr(_core, "ms_deform_attn_forward_cuda") and torch.cuda.is_available()
          else "cpp")
CASES = {**BASE_CASES, "many_heads": {"m": 8, "d": 8}}


def make(dtype=torch.float64, **kwargs):
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in make_inputs(**kwargs))


def as64(args):
    return [t.double() if t.is_floating_point() else t for t in args]




@pytest.mark.parametrize("case", CASES)
def test_float64_matches_reference_forward_and_backward(case):
    args = make(seed=list(CASES).index(case), **CASES[case])
    out, g = grads(ms_deform_attn, args)
    ref_out, ref_g = grads(ms_deform_attn_reference, args)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    for ours, theirs in zip(g, ref_g, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-2),
                                       (torch.bfloat16, 5e-2)])
def test_low_precision_against_float64_reference(dtype, tol):
    args = make(d=32, levels=LEVELS_5, dtype=dtype, seed=5)
    out, g = grads(ms_deform_attn, args)
    ref_out, ref_g = grads(ms_deform_attn_reference, as64(args))
    assert out.dtype == dtype and all(t.dtype == dtype for t in g)
    torch.testing.assert_close(out.double(), ref_out, rtol=tol, atol=tol)
    # Location gradients scale with the map size (d(pixel)/d(loc) = W): compare relative to it.
    for ours, theirs in zip(g, ref_g, strict=True):
        scale = theirs.abs().max().clamp_min(1)
        torch.testing.assert_close(ours.double() / scale, theirs / scale, rtol=tol, atol=tol)


def test_points_outside_and_exactly_on_borders():
    # Sizes and locations are binary fractions, so that loc*W-0.5 and grid_sample's
    # ((2*loc-1)+1)*W/2-0.5 land on the same side of each pixel edge (other values may round
    # to opposite sides of an edge, where the location gradient jumps).
    h, w = 4, 8
    xs = [-1.0, -1.5 / w, -0.5 / w, 0.0, 0.5 / w, 1.0 / w, 0.5, 1 - 0.5 / w, 1.0, 1 + 0.5 / w,
          1 + 1 / w, 2.0, float("inf"), float("-inf"), float("nan")]
    ys = [-0.5 / h, -0.25 / h, 0.0, 1 / h, 0.5, 1 - 0.5 / h, 1.0, 1 + 0.5 / h]
    grid = torch.tensor([(x, y) for x in xs for y in ys], dtype=torch.float64)
    value, shapes, starts, _, _ = make(n=1, lq=len(grid), levels=((h, w),), m=1, d=3, p=1)
    loc = grid.view(1, len(grid), 1, 1, 1, 2)
    attn = torch.ones(1, len(grid), 1, 1, 1, dtype=torch.float64)
    finite = grid.isfinite().all(-1)
    out = ms_deform_attn(value, shapes, starts, loc, attn)
    ref = ms_deform_attn_reference(value, shapes, starts, loc[:, finite], attn[:, finite])
    torch.testing.assert_close(out[:, finite], ref, rtol=0, atol=1e-15)
    # NaN and +-Inf locations sample NaN, as grid_sample does (issue 24; they read 0 before).
    assert out[:, ~finite].isnan().all()
    assert torch.equal(ms_deform_attn_reference(value, shapes, starts, loc, attn).isnan(),
                       out.isnan())
    # Far outside reads nothing; at loc = 0 (pixel -0.5) a quarter of the corner pixel is read.
    corner = value[0, 0, 0] * 0.25
    at_origin = xs.index(0.0) * len(ys) + ys.index(0.0)
    torch.testing.assert_close(out[0, at_origin], corner, rtol=0, atol=1e-15)
    # Gradients at these points (finite ones) agree with grid_sample's.
    args = (value, shapes, starts, loc[:, finite].contiguous(), attn[:, finite].contiguous())
    _, g = grads(ms_deform_attn, args)
    _, ref_g = grads(ms_deform_attn_reference, args)
    for ours, theirs in zip(g, ref_g, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


def test_gradcheck_float64():
    value, shapes, starts, loc, attn = make(n=1, lq=2, levels=((3, 4), (2, 2)), m=2, d=3, p=2,
                                            loc_low=0.05, loc_high=0.95)
    inputs = [t.requires_grad_() for t in (value, loc, attn)]
    assert torch.autograd.gradcheck(
        lambda v, lo, a: ms_deform_attn(v, shapes, starts, lo, a), inputs)


def test_empty_batch_and_no_queries():
    for n, lq in ((0, 4), (2, 0)):
        args = make(n=n, lq=lq)
        out, g = grads(ms_deform_attn, args)
        assert out.shape == (n, lq, 2 * 4)
        assert [t.shape for t in g] == [args[0].shape, args[3].shape, args[4].shape]
        # With no queries the value gradient is still written: all zeros.
        assert torch.equal(g[0], torch.zeros_like(g[0]))


def test_non_finite_grad_output_gives_the_ieee_value_gradient():
    # +Inf and -Inf reaching one value element sum to NaN, one of them to the infinity; the rest
    # stays finite. (Location and weight gradients can be NaN where grid_sample's are +-Inf: the
    # kernels difference per-corner dot products, docs/ops.md.)
    args = make(n=2, lq=64, levels=((4, 3), (2, 2)), m=2, d=8, p=4)
    g = with_non_finite(torch.randn(2, 64, 16, generator=torch.Generator().manual_seed(3),
                                    dtype=torch.float64))
    _, (mine, _, _) = grads(ms_deform_attn, args, grad_output=g)
    _, (ref, _, _) = grads(ms_deform_attn_reference, args, grad_output=g)
    finite = non_finite_agree(mine, ref)
    torch.testing.assert_close(mine[finite], ref[finite])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_poisoned_outputs_are_fully_written(dtype):
    value, shapes, starts, loc, attn = make(d=5, levels=LEVELS_5, dtype=dtype, seed=3)
    n, lq, m = loc.shape[:3]
    out = torch.full((n, lq, m, 5), float("nan"), dtype=dtype)
    _core.ms_deform_attn_forward(value, shapes, starts, loc, attn, out)
    ref = ms_deform_attn_reference(value, shapes, starts, loc, attn).view(out.shape)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    grad_out = torch.randn(out.shape, dtype=dtype)
    poisoned = [torch.full_like(t, float("nan")) for t in (value, loc, attn)]
    _core.ms_deform_attn_backward(value, shapes, starts, loc, attn, grad_out, *poisoned)
    leaves = [t.detach().requires_grad_() for t in (value, loc, attn)]
    out_op = ms_deform_attn(leaves[0], shapes, starts, leaves[1], leaves[2])
    expected = torch.autograd.grad(out_op, leaves, grad_out.view(n, lq, -1))
    for got, want in zip(poisoned, expected, strict=True):
        assert not got.isnan().any()
        assert torch.equal(got, want)


def test_non_contiguous_inputs_give_identical_results():
    value, shapes, starts, loc, attn = make(n=2, lq=6, d=6, seed=9)
    # Channel-strided value, every-other-query locations, permuted-storage weights.
    value_t = value.transpose(2, 3).contiguous().transpose(2, 3)
    loc_big = torch.zeros(2, 12, *loc.shape[2:], dtype=loc.dtype)
    loc_big[:, ::2] = loc
    attn_t = attn.permute(4, 3, 2, 1, 0).contiguous().permute(4, 3, 2, 1, 0)
    starts_t = torch.stack([starts, starts], 1)[:, 0]
    shapes_t = shapes.t().contiguous().t()
    assert not value_t.is_contiguous() and not loc_big[:, ::2].is_contiguous()
    views = (value_t, shapes_t, starts_t, loc_big[:, ::2], attn_t)
    out, g = grads(ms_deform_attn, views)
    ref_out, ref_g = grads(ms_deform_attn, (value, shapes, starts, loc, attn))
    assert torch.equal(out, ref_out)
    for ours, theirs in zip(g, ref_g, strict=True):
        assert torch.equal(ours, theirs)


def test_backward_is_bit_identical_run_after_run_and_across_thread_counts():
    args = make(n=2, lq=64, m=4, d=16, p=4, levels=LEVELS_5, dtype=torch.float32, seed=4)
    threads = torch.get_num_threads()
    runs = []
    try:
        with torch.inference_mode(False):
            torch.use_deterministic_algorithms(True)
            for count in (threads, threads, 1):
                torch.set_num_threads(count)
                runs.append(grads(ms_deform_attn, args))
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)
    for out, g in runs[1:]:
        assert torch.equal(out, runs[0][0])
        for a, b in zip(g, runs[0][1], strict=True):
            assert torch.equal(a, b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_like_a_dataloader_worker():
    # With torch loaded, the kernel runs on torch's OpenMP team, and an OpenMP team does not
    # survive fork: in a child, torch's own parallel ops hang as well. DataLoader workers therefore
    # run with torch.set_num_threads(1), which the op follows (it runs on the calling thread).
    args = make(n=2, lq=64, m=4, d=16, p=4, levels=LEVELS_5, dtype=torch.float32)
    expected = ms_deform_attn(*args)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        signal.alarm(30)
        torch.set_num_threads(1)
        code = 0 if torch.equal(ms_deform_attn(*args), expected) else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_opcheck_forward_and_backward_ops():
    args = make(n=2, lq=3, d=4)
    leaves = [t.requires_grad_() if t.is_floating_point() else t for t in args]
    torch.library.opcheck(torch.ops.turbo_physai.ms_deform_attn.default, leaves)
    grad_out = torch.randn(2, 3, 2 * 4, dtype=torch.float64)
    torch.library.opcheck(torch.ops.turbo_physai.ms_deform_attn_backward.default,
                          (grad_out, *[t.detach() for t in args]))


class _Block(torch.nn.Module):
    """A deformable-attention step as models use it: projections around the op."""

    def __init__(self, d_model=8, heads=2, levels=2, points=2):
        super().__init__()
        self.heads, self.levels, self.points = heads, levels, points
        self.value_proj = torch.nn.Linear(d_model, d_model)
        self.offsets = torch.nn.Linear(d_model, heads * levels * points * 2)
        self.weights = torch.nn.Linear(d_model, heads * levels * points)

    def forward(self, query, value, shapes, starts, reference):
        n, lq, _ = query.shape
        v = self.value_proj(value).view(n, value.shape[1], self.heads, -1)
        offsets = self.offsets(query).view(n, lq, self.heads, self.levels, self.points, 2)
        loc = reference[:, :, None, None, None, :] + 0.1 * offsets.tanh()
        attn = self.weights(query).view(n, lq, self.heads, -1).softmax(-1)
        attn = attn.view(n, lq, self.heads, self.levels, self.points)
        return ms_deform_attn(v, shapes, starts, loc, attn)


def _block_inputs():
    gen = torch.Generator().manual_seed(0)
    shapes = torch.tensor([[6, 5], [3, 2]])
    starts = torch.tensor([0, 30])
    return (torch.randn(2, 4, 8, generator=gen), torch.randn(2, 36, 8, generator=gen), shapes,
            starts, torch.rand(2, 4, 2, generator=gen))


def test_torch_compile_fullgraph_forward_and_backward():
    torch.manual_seed(0)
    block = _Block()
    inputs = _block_inputs()
    eager = block(*inputs)
    eager.square().sum().backward()
    eager_grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    out = compiled(*inputs)
    out.square().sum().backward()
    torch.testing.assert_close(out, eager)
    for p, g in zip(block.parameters(), eager_grads, strict=True):
        torch.testing.assert_close(p.grad, g)


def test_torch_compile_inductor_forward():
    torch.manual_seed(0)
    block = _Block()
    inputs = _block_inputs()
    compiled = torch.compile(block, fullgraph=True)
    torch.testing.assert_close(compiled(*inputs), block(*inputs))


def test_torch_export_keeps_the_op():
    torch.manual_seed(0)
    block = _Block().eval()
    inputs = _block_inputs()
    exported = torch.export.export(block, inputs)
    targets = {str(node.target) for node in exported.graph.nodes}
    assert "turbo_physai.ms_deform_attn.default" in targets
    torch.testing.assert_close(exported.module()(*inputs), block(*inputs))


BAD = {
    "value rank": (lambda a: a.update(value=a["value"][0]), ValueError,
                   ["value", "4-d", "(N, S, M, D)", "(42, 2, 4)"]),
    "locations batch": (lambda a: a.update(sampling_locations=a["sampling_locations"][:1]),
                        ValueError, ["sampling_locations", "(2, 5, 2, 2, 3, 2)",
                                     "(1, 5, 2, 2, 3, 2)"]),
    "heads": (lambda a: a.update(value=a["value"][:, :, :1]), ValueError,
              ["sampling_locations", "(2, 5, 1, 2, 3, 2)", "(2, 5, 2, 2, 3, 2)"]),
    "levels": (lambda a: a.update(spatial_shapes=a["spatial_shapes"][:1],
                                  level_start_index=a["level_start_index"][:1]), ValueError,
               ["sampling_locations", "(2, 5, 2, 1, 3, 2)", "(2, 5, 2, 2, 3, 2)"]),
    "points": (lambda a: a.update(attention_weights=a["attention_weights"][..., :2]), ValueError,
               ["attention_weights", "(2, 5, 2, 2, 3)", "(2, 5, 2, 2, 2)"]),
    "start index length": (lambda a: a.update(level_start_index=a["level_start_index"][:1]),
                           ValueError, ["level_start_index", "(2,)", "(1,)"]),
    "start index values": (lambda a: a.update(level_start_index=torch.tensor([0, 29])),
                           ValueError, ["level_start_index[1]", "29", "30"]),
    "areas vs S": (lambda a: a.update(value=a["value"][:, :30]), ValueError,
                   ["value", "S = 42", "S = 30"]),
    "integer value": (lambda a: a.update(value=a["value"].long()), TypeError,
                      ["value", "torch.int64"]),
    "integer locations": (lambda a: a.update(sampling_locations=a["sampling_locations"].long()),
                          TypeError, ["sampling_locations", "torch.float64", "torch.int64"]),
    "float shapes": (lambda a: a.update(spatial_shapes=a["spatial_shapes"].double()), TypeError,
                     ["spatial_shapes", "integer", "torch.float64"]),
    "mixed float dtypes": (lambda a: a.update(attention_weights=a["attention_weights"].float()),
                           TypeError, ["attention_weights", "torch.float64", "torch.float32"]),
    "devices": (lambda a: a.update(sampling_locations=a["sampling_locations"].to("meta")),
                ValueError, ["sampling_locations", "device cpu", "meta"]),
    "not a tensor": (lambda a: a.update(spatial_shapes=[[6, 5], [3, 4]]), TypeError,
                     ["spatial_shapes", "torch.Tensor", "list"]),
    "value not a tensor": (lambda a: a.update(value=a["value"].tolist()), TypeError,
                           ["value", "torch.Tensor", "list"]),
    "locations rank": (lambda a: a.update(sampling_locations=a["sampling_locations"][0]),
                       ValueError, ["sampling_locations", "6-d", "(5, 2, 2, 3, 2)"]),
    "weights rank": (lambda a: a.update(attention_weights=a["attention_weights"][0]),
                     ValueError, ["attention_weights", "5-d", "(5, 2, 2, 3)"]),
    "shapes columns": (lambda a: a.update(spatial_shapes=torch.ones(2, 3, dtype=torch.int64)),
                       ValueError, ["spatial_shapes", "(2, 2)", "(2, 3)"]),
    "negative size": (lambda a: a.update(spatial_shapes=torch.tensor([[-6, 5], [3, 4]])),
                      ValueError, ["spatial_shapes", "-6"]),
    "bool starts": (lambda a: a.update(level_start_index=a["level_start_index"].bool()),
                    TypeError, ["level_start_index", "integer", "torch.bool"]),
    "value on meta": (lambda a: a.update(value=a["value"].to("meta")), ValueError,
                      ["spatial_shapes", "device meta", "cpu"]),
    "float16 mixed": (lambda a: a.update(value=a["value"].half()), TypeError,
                      ["sampling_locations", "torch.float16", "or torch.float32 (mixed precision)",
                       "torch.float64"]),
    "float32 value, float16 points": (
        lambda a: a.update(value=a["value"].float(), sampling_locations=a[
            "sampling_locations"].half(), attention_weights=a["attention_weights"].half()),
        TypeError, ["sampling_locations: expected dtype torch.float32 (the dtype of value), got "
                    "torch.float16"]),
    "mixed precision, 16-bit weights": (
        lambda a: a.update(value=a["value"].bfloat16(), sampling_locations=a[
            "sampling_locations"].float(), attention_weights=a["attention_weights"].bfloat16()),
        TypeError, ["attention_weights: expected dtype torch.float32 (the dtype of "
                    "sampling_locations), got torch.bfloat16"]),
}


class _Passthrough(torch.overrides.TorchFunctionMode):
    """Any active mode sends ms_deform_attn through the custom op (its Python checks)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _with_grad(**kwargs):
    # Floating inputs that require grad take the fast path's autograd.Function.
    return ms_deform_attn(**{k: v.detach().requires_grad_()
                             if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                             for k, v in kwargs.items()})


def _through_op(**kwargs):
    with _Passthrough():
        return ms_deform_attn(**kwargs)


PATHS = {"fast": ms_deform_attn, "fast_grad": _with_grad, "op": _through_op,
         "reference": ms_deform_attn_reference}


def _error(impl, case):
    edit, error, _ = BAD[case]
    names = ("value", "spatial_shapes", "level_start_index", "sampling_locations",
             "attention_weights")
    kwargs = dict(zip(names, make(), strict=True))
    edit(kwargs)
    with pytest.raises(error) as info:
        impl(**kwargs)
    return str(info.value)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", BAD)
def test_bad_inputs_name_tensor_expected_and_actual(case, path):
    message = _error(PATHS[path], case)
    for fragment in BAD[case][2]:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("case", [c for c in BAD if c != "integer value"])
def test_fast_path_and_op_raise_the_same_message(case):
    # The binding's checks (fast path) word their messages as the Python checks (op path) do.
    # Not "integer value": the binding names the dtypes its CPU kernel itself takes.
    fast = _error(ms_deform_attn, case)
    assert fast == _error(_with_grad, case) == _error(_through_op, case)


def test_registered_on_the_kernel_registry_slot():
    assert kernels.active()["ms_deform_attn"] == NEWEST
    args = make()
    torch.testing.assert_close(kernels.ms_deform_attn(*args), ms_deform_attn_reference(*args),
                               rtol=0, atol=1e-12)
    # Bad input through the slot: every candidate refuses it, the error names the tensor.
    with pytest.raises(ValueError, match="attention_weights"):
        kernels.ms_deform_attn(*args[:4], args[4][..., :1])
    assert kernels.active()["ms_deform_attn"] == NEWEST  # a bad call disables nothing


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_conformance_gate(dtype):
    checked = check_conformance("ms_deform_attn", ms_deform_attn,
                                shapes=[(1, 4, 1, 1, 1, 1), (2, 7, 2, 3, 2, 3)], dtypes=[dtype])
    assert checked == 2
