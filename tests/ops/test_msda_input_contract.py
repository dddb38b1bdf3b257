"""tests/ops/test_msda_input_contract.py: ms_deform_attn's input contract (issue 24 items 11-15).

Signed views (negative bit) of every tensor argument and of grad_output, grid_sample's NaN
semantics for non-finite locations and weights, empty work returning at once, Ctrl-C stopping a
long call, empty outputs' backward, and the errors for layouts and sizes the op cannot take.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tpa_msda_cases import forward_and_grads as grads  # noqa: E402
from tpa_msda_cases import make_inputs  # noqa: E402

import turbo_physai  # noqa: E402
from turbo_physai.ops import (  # noqa: E402
    ms_deform_attn,
    ms_deform_attn_reference,
    quant_reference,
)
from turbo_physai.ops.quant import fake_quant_fp8, fake_quant_int8_per_channel  # noqa: E402

# Where the package under test was imported from (src/ in a dev build, site-packages in CI).
SRC = Path(turbo_physai.__file__).resolve().parents[1]
NAMES = ("value", "spatial_shapes", "level_start_index", "sampling_locations", "attention_weights")


def neg_view(t):
    """Equal to t, but stored negated with the negative bit set (issue 24's construction)."""
    if t.is_floating_point():
        v = torch.complex(torch.zeros_like(t), -t).conj().imag
    else:
        v = torch._neg_view(-t)
    assert v.is_neg() and torch.equal(v, t)
    return v


def assert_same_nan_pattern(mine, ref):
    for kind in (torch.isnan, torch.isposinf, torch.isneginf):
        assert torch.equal(kind(mine), kind(ref)), kind.__name__
    finite = torch.isfinite(ref)
    tol = 1e-9 if ref.dtype == torch.float64 else 1e-4
    torch.testing.assert_close(mine[finite], ref[finite], rtol=tol, atol=tol)


# --- item 11: the negative bit -----------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 4])
@pytest.mark.parametrize("index", range(5), ids=NAMES)
def test_a_negative_view_of_any_argument_gives_the_plain_result(index, d):
    args = make_inputs(d=d, seed=index)
    expected = grads(ms_deform_attn, args)
    signed = list(args)
    signed[index] = neg_view(args[index])
    value, shapes, starts, loc, attn = signed
    # The signed view itself is the leaf (clone() would resolve the bit).
    leaves = [
        t.requires_grad_() if t.is_neg() else t.detach().clone().requires_grad_()
        for t in (value, loc, attn)
    ]
    assert index in (1, 2) or any(t.is_neg() for t in leaves)
    out = ms_deform_attn(leaves[0], shapes, starts, leaves[1], leaves[2])
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    got = torch.autograd.grad(out, leaves, g)
    torch.testing.assert_close(out, expected[0], rtol=0, atol=0)
    for mine, theirs in zip(got, expected[1], strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


def test_a_negative_view_of_a_leaf_keeps_its_sign_in_the_kernels():
    # The leaf itself carries the bit (no clone in between): what the kernels read directly.
    value, shapes, starts, loc, attn = make_inputs(d=1)
    plain = ms_deform_attn(value, shapes, starts, loc, attn)
    for i in (0, 3, 4):
        args = [value, shapes, starts, loc, attn]
        args[i] = neg_view(args[i])
        torch.testing.assert_close(ms_deform_attn(*args), plain, rtol=0, atol=0)


def test_a_negative_view_of_grad_output_gives_the_plain_gradients():
    args = make_inputs(d=4)
    g = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    _, expected = grads(ms_deform_attn, args, grad_output=g)
    _, got = grads(ms_deform_attn, args, grad_output=neg_view(g))
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


@pytest.mark.parametrize("contiguous", [True, False])
def test_quant_ops_read_negative_views_with_their_sign(contiguous):
    # A contiguous negative view survives .contiguous() with its bit: the export resolves it.
    def signed(t):
        v = torch._neg_view(-t) if contiguous else neg_view(t)
        assert v.is_neg() and torch.equal(v, t)
        return v

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    scale = torch.tensor([0.05])
    expected = fake_quant_fp8(x, scale)
    torch.testing.assert_close(fake_quant_fp8(signed(x), scale), expected, rtol=0, atol=0)
    torch.testing.assert_close(fake_quant_fp8(x, signed(scale)), expected, rtol=0, atol=0)
    torch.testing.assert_close(
        fake_quant_int8_per_channel(signed(x)), fake_quant_int8_per_channel(x), rtol=0, atol=0
    )


@pytest.mark.parametrize("layout", ["sparse", "mkldnn"])
def test_quant_ops_take_sparse_and_mkldnn_inputs_as_the_reference_does(layout):
    # The quantization slots promise the reference's outcome, errors included: such tensors go
    # to the reference's steps instead of reaching the kernels' data pointers.
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(4))
    x = x.to_sparse() if layout == "sparse" else x.to_mkldnn()
    for ours, theirs in (
        (fake_quant_fp8, quant_reference.fake_quant_fp8),
        (fake_quant_int8_per_channel, quant_reference.fake_quant_int8_per_channel),
    ):
        args = (x, torch.tensor([0.05])) if ours is fake_quant_fp8 else (x,)
        try:
            expected = theirs(*args)
        except Exception as e:  # noqa: BLE001 - the kind of error is what is compared
            with pytest.raises(type(e)):
                ours(*args)
        else:
            torch.testing.assert_close(ours(*args), expected)


# --- item 12: NaN and +-Inf locations and weights ----------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("where", ["x", "y", "both", "weight", "weight_outside"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_points_give_the_reference_nan_pattern(where, bad, dtype):
    value, shapes, starts, loc, attn = (
        t.to(dtype) if t.is_floating_point() else t for t in make_inputs(d=3, seed=4)
    )
    loc, attn = loc.clone(), attn.clone()
    if where in ("x", "both"):
        loc[0, 1, 0, 1, 2, 0] = bad
    if where in ("y", "both"):
        loc[0, 1, 0, 1, 2, 1] = bad
    if where == "weight":
        attn[1, 2, 1, 0, 0] = bad
        loc[1, 2, 1, 0, 0] = 0.5  # inside the map: a * bilinear sample
    if where == "weight_outside":
        attn[1, 2, 1, 0, 0] = bad
        loc[1, 2, 1, 0, 0] = 3.0  # outside: a * 0
    args = (value, shapes, starts, loc, attn)
    out, g = grads(ms_deform_attn, args)
    ref_out, ref_g = grads(ms_deform_attn_reference, args)
    assert not out.isfinite().all()
    assert_same_nan_pattern(out, ref_out)
    for mine, theirs in zip(g, ref_g, strict=True):
        assert_same_nan_pattern(mine, theirs)


CUDA = torch.cuda.is_available() and hasattr(
    __import__("turbo_physai")._core, "ms_deform_attn_forward_cuda"
)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA build and a GPU")
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("where", ["x", "y", "both", "weight", "weight_outside"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_points_on_cuda_give_the_reference_nan_pattern(where, bad, dtype, deterministic):
    # The CUDA kernels follow the CPU's rules (unusual.h); the float64 CPU reference decides.
    value, shapes, starts, loc, attn = make_inputs(d=8, seed=4)
    loc, attn = loc.clone(), attn.clone()
    if where in ("x", "both"):
        loc[0, 1, 0, 1, 2, 0] = bad
    if where in ("y", "both"):
        loc[0, 1, 0, 1, 2, 1] = bad
    if where.startswith("weight"):
        attn[1, 2, 1, 0, 0] = bad
        loc[1, 2, 1, 0, 0] = 0.5 if where == "weight" else 3.0
    g64 = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ref_out, ref_g = grads(
        ms_deform_attn_reference, (value, shapes, starts, loc, attn), grad_output=g64
    )
    cuda = [
        t.cuda().to(dtype) if t.is_floating_point() else t.cuda()
        for t in (value, shapes, starts, loc, attn)
    ]
    torch.use_deterministic_algorithms(deterministic)  # the sorted/fixed-point paths too
    try:
        out, g = grads(ms_deform_attn, cuda, grad_output=g64.cuda().to(dtype))
    finally:
        torch.use_deterministic_algorithms(False)
    for mine, theirs in zip((out, *g), (ref_out, *ref_g), strict=True):
        for kind in (torch.isnan, torch.isposinf, torch.isneginf):
            assert torch.equal(kind(mine.cpu()), kind(theirs)), kind.__name__


# --- item 13: empty work, and Ctrl-C -----------------------------------------------------------


def _python(code, timeout):
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.parametrize("dtype", ["float", "half"])
def test_an_empty_output_returns_whatever_the_expanded_sizes(dtype):
    # D = 0 with 2^40 expanded queries ran for minutes (issue 24); a hang fails by the timeout.
    done = _python(
        f"""
        import torch
        from turbo_physai.ops import ms_deform_attn
        v = torch.randn(1, 12, 1, 0).{dtype}(); ss = torch.tensor([[3, 4]])
        st = torch.tensor([0])
        # float16 is computed in float32 on the CPU: converted at the size of its data
        loc = torch.rand(1, 1, 1, 1, 4, 2).{dtype}().expand(1, 2**40, 1, 1, 4, 2)
        a = torch.rand(1, 1, 1, 1, 4).{dtype}().expand(1, 2**40, 1, 1, 4)
        print(tuple(ms_deform_attn(v, ss, st, loc, a).shape))
    """,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "1099511627776,", "0)"]


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_ctrl_c_stops_a_long_call(direction):
    # One call of minutes (2^16 points per query over wide channels; small tensors, expanded
    # locations): SIGINT must raise KeyboardInterrupt out of the running call (the GIL is
    # released meanwhile) well before it would end; a call that ignores it fails by the timeout.
    forward = direction == "forward"
    lq, d = (16384, 64) if forward else (4, 2**16)
    code = f"""
        import torch
        from turbo_physai.ops import ms_deform_attn
        v = torch.randn(1, 16, 1, {d})
        ss = torch.tensor([[4, 4]]); st = torch.tensor([0])
        loc = torch.rand(1, 1, 1, 1, 2**16, 2).expand(1, {lq}, 1, 1, 2**16, 2)
        a = torch.rand(1, 1, 1, 1, 2**16).expand(1, {lq}, 1, 1, 2**16)
        g = torch.ones(1, {lq}, {d})
        def call(v, loc, a, g):
            if {forward}:
                ms_deform_attn(v, ss, st, loc, a)
            else:
                torch.ops.turbo_physai.ms_deform_attn_backward(g, v, ss, st, loc, a)
        call(v[..., :1], loc[:, :1, ..., :1, :], a[:, :1, ..., :1], g[:, :1, :1])  # warm-up
        try:
            print("start", flush=True)
            call(v, loc, a, g)
            print("finished", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout.readline().strip() == "start"
        time.sleep(0.5)  # into the kernel
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert out.strip() == "interrupted", err


# --- item 14: empty outputs' backward, expanded grad_output ------------------------------------


@pytest.mark.parametrize("sizes", [{"n": 0}, {"lq": 0}, {"d": 0}, {"m": 0}])
def test_backward_of_an_empty_output(sizes):
    value, shapes, starts, loc, attn = (
        t.requires_grad_() if t.is_floating_point() else t for t in make_inputs(**sizes)
    )
    ms_deform_attn(value, shapes, starts, loc, attn).sum().backward()
    for t in (value, loc, attn):
        assert t.grad.shape == t.shape and not t.grad.any()


def test_an_expanded_grad_output_is_read_as_its_dense_copy():
    args = make_inputs()
    g = torch.randn(1, 1, 8, dtype=torch.float64).expand(2, 5, 8)
    _, expected = grads(ms_deform_attn, args, grad_output=g.contiguous())
    _, got = grads(ms_deform_attn, args, grad_output=g)
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


# --- item 15: layouts and sizes the op cannot take ---------------------------------------------


@pytest.mark.parametrize("layout", ["sparse", "mkldnn"])
@pytest.mark.parametrize("index", range(5), ids=NAMES)
def test_sparse_and_mkldnn_tensors_are_refused_by_name(index, layout):
    args = [t.float() if t.is_floating_point() else t for t in make_inputs()]
    t = args[index]
    if layout == "mkldnn" and (not t.is_floating_point() or t.dim() > 5):
        pytest.skip("mkldnn holds floating tensors of at most 5 dimensions")
    args[index] = t.to_sparse() if layout == "sparse" else t.to_mkldnn()
    with pytest.raises(TypeError, match=rf"^{NAMES[index]}: expected a dense \(strided\) tensor"):
        ms_deform_attn(*args)


def test_a_huge_expanded_p_is_refused_by_name():
    value, shapes, starts, loc, attn = make_inputs(p=1)
    loc = loc.expand(*loc.shape[:4], 2**40, 2)
    attn = attn.expand(*attn.shape[:4], 2**40)
    with pytest.raises(ValueError, match=r"^sampling_locations: expected at most 65536 sampling"):
        ms_deform_attn(value, shapes, starts, loc, attn)
    with pytest.raises(ValueError, match=r"^sampling_locations: expected at most 65536 sampling"):
        ms_deform_attn_reference(value, shapes, starts, loc, attn)


def test_an_output_beyond_memory_is_a_memory_error_naming_it():
    value, shapes, starts, loc, attn = make_inputs(n=1, lq=1)
    loc = loc.expand(1, 2**40, *loc.shape[2:])
    attn = attn.expand(1, 2**40, *attn.shape[2:])
    with pytest.raises(MemoryError, match=r"^output: cannot allocate \(1, 1099511627776, 8\)"):
        ms_deform_attn(value, shapes, starts, loc, attn)


def test_a_host_output_beyond_physical_memory_is_refused_before_allocating(monkeypatch):
    # Where memory is overcommitted, torch's allocation of such an output succeeds and the kernel
    # pages until the OOM killer: the op compares with the machine's memory first.
    kernels = sys.modules["turbo_physai.ops._msda_kernels"]
    value, shapes, starts, loc, attn = make_inputs(n=1, lq=64)
    loc.requires_grad_()
    out = ms_deform_attn(value, shapes, starts, loc, attn)
    limit = out.numel() * out.element_size() - 1
    monkeypatch.setattr(kernels, "_HOST_BYTES", limit)
    with pytest.raises(MemoryError, match=r"^output: cannot allocate \(1, 64, 8\): it needs .*"
                                          r"more than this machine's"):
        ms_deform_attn(value, shapes, starts, loc, attn)
    monkeypatch.setattr(kernels, "_HOST_BYTES", limit + 1)  # the output fits, a gradient not
    assert loc.numel() > out.numel()
    out = ms_deform_attn(value, shapes, starts, loc, attn)
    with pytest.raises(MemoryError, match=r"^grad_\w+: cannot allocate .* it needs"):
        out.sum().backward()
