"""The int8 slots against LibreYOLO's references (torch.fake_quantize_*), bit for bit (CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
lib = pytest.importorskip("libreyolo.quant.fake_quant")

from tpa_quant_cases import assert_bitwise, bit_patterns, grads_like, mixed  # noqa: E402

from turbo_physai.ops import quant  # noqa: E402

NAN, INF = float("nan"), float("inf")


def forward_and_grad(fn, x0, *args, grad=None, gen=None):
    """fn's output and x's gradient for ``grad`` (fresh leaves each call)."""
    x = x0.clone().requires_grad_()
    out = fn(x, *args)
    if grad is None:
        grad = grads_like(out, gen)
    out.backward(grad)
    return out.detach(), x.grad, grad


def assert_same_forward_and_grad(ours, theirs, x0, *args, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out, grad_x, grad = forward_and_grad(theirs, x0, *args, gen=gen)
    got, got_grad, _ = forward_and_grad(ours, x0, *args, grad=grad)
    assert_bitwise(got, out)
    assert_bitwise(got_grad, grad_x)


# --- per channel ---------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [0.1, 1e-12, 3.0, 0.0, -0.5, 1e-40, INF, NAN, 2e38])
def test_per_channel_bit_patterns(scale):
    # Every 12289th bit pattern as 8 channels; one channel's scale under test, codes past both
    # ends of the range, NaN and Inf inputs (which x86's int64 conversion sends to -128).
    x = bit_patterns(12289)
    x = x[: x.numel() // 8 * 8].view(8, -1)
    s = torch.tensor([scale, 0.5, 1.0, 2.0, 1e-3, 1e3, 7.0, 0.25])
    assert_same_forward_and_grad(quant.fake_quant_int8_per_channel,
                                 lib.fake_quant_int8_per_channel, x, 0, s)


@pytest.mark.parametrize("shape,axis", [((16, 3, 3, 3), 0), ((8, 5, 7), 1), ((4, 6, 2, 3), 3),
                                        ((40,), 0), ((1, 1), 0), ((3, 1000), 0)])
def test_dynamic_scale(shape, axis):
    gen = torch.Generator().manual_seed(1)
    for w in (mixed(shape, gen, 2.0, special_every=50), torch.randn(shape, generator=gen)):
        assert_same_forward_and_grad(quant.fake_quant_int8_per_channel,
                                     lib.fake_quant_int8_per_channel, w, axis)


def test_given_scale_shapes_and_dtypes():
    gen = torch.Generator().manual_seed(2)
    w = mixed((6, 4, 5), gen, 3.0)
    for axis in (0, 1, 2):
        s = torch.rand(w.shape[axis], generator=gen, dtype=torch.float64) * 0.1
        assert_same_forward_and_grad(quant.fake_quant_int8_per_channel,
                                     lib.fake_quant_int8_per_channel, w, axis, s)
    # a given scale with an empty non-channel dim: the reference returns the empty tensor
    empty, s = torch.zeros(4, 0), torch.ones(4)
    assert_bitwise(quant.fake_quant_int8_per_channel(empty, 0, s),
                   lib.fake_quant_int8_per_channel(empty, 0, s))


def test_non_contiguous_weight():
    gen = torch.Generator().manual_seed(3)
    w = mixed((12, 20), gen, 2.0).t()[::2]
    assert_same_forward_and_grad(quant.fake_quant_int8_per_channel,
                                 lib.fake_quant_int8_per_channel, w, 1)


REJECTED = [
    (torch.tensor(1.0), 0, None),           # 0-d: the scale is not 1-D
    (torch.zeros(0, 3), 0, None),           # no channels
    (torch.zeros(4, 0), 0, None),           # an empty amax reduction
    (torch.randn(3, 4), -1, None),          # negative axis
    (torch.randn(3, 4), 2, None),           # axis past the last dim
    (torch.randn(3, 4), 0, torch.ones(3, 1)),  # a 2-D scale
    (torch.randn(3, 4), 0, torch.ones(4)),  # the wrong length
    (torch.randn(3, 4), 0, torch.ones(3, requires_grad=True)),  # not differentiable in scale
]


@pytest.mark.parametrize("weight,axis,scale", REJECTED)
def test_inputs_the_reference_rejects_are_rejected(weight, axis, scale):
    with pytest.raises((RuntimeError, IndexError)):
        lib.fake_quant_int8_per_channel(weight, axis, scale)
    with pytest.raises((RuntimeError, IndexError)):
        quant.fake_quant_int8_per_channel(weight, axis, scale)


# --- affine --------------------------------------------------------------------------------------

RANGES = [(-1.5, 3.0), (0.5, 2.0), (-3.0, -1.0), (0.0, 0.0), (-1e-20, 1e-20), (-3e38, 3e38),
          (NAN, 1.0), (0.0, NAN), (-INF, 1.0), (0.0, INF), (-0.0, 7.0)]


@pytest.mark.parametrize("lo,hi", RANGES)
def test_affine_ranges(lo, hi):
    gen = torch.Generator().manual_seed(4)
    x = torch.cat([mixed((2000,), gen, 3.0), bit_patterns(65521)])
    lo_t, hi_t = torch.tensor([lo]), torch.tensor(hi)  # the reference takes any 1-element shapes
    assert_same_forward_and_grad(quant.fake_quant_int8_affine, lib.fake_quant_int8_affine, x,
                                 lo_t, hi_t)


@pytest.mark.parametrize("lo,hi", RANGES)
def test_affine_scalars_mode(lo, hi):
    gen = torch.Generator().manual_seed(5)
    x = mixed((3, 50), gen, 3.0)
    lo_t, hi_t = torch.tensor([lo]), torch.tensor([hi])
    try:
        want = lib.fake_quant_int8_affine(x, lo_t, hi_t, True)
    except RuntimeError:  # a NaN bound gives a zero point torch refuses
        with pytest.raises(ValueError, match="zero point"):
            quant.fake_quant_int8_affine(x, lo_t, hi_t, True)
        return
    assert_bitwise(quant.fake_quant_int8_affine(x, lo_t, hi_t, True), want)


def test_affine_shapes():
    lo, hi = torch.tensor([-1.0]), torch.tensor([2.0])
    for shape in [(), (0,), (4, 0, 3), (1,), (2, 3, 4, 5)]:
        x = torch.randn(shape)
        assert_bitwise(quant.fake_quant_int8_affine(x, lo, hi),
                       lib.fake_quant_int8_affine(x, lo, hi))


def test_affine_range_needing_a_gradient():
    x = torch.randn(5)
    lo, hi = torch.tensor([-1.0], requires_grad=True), torch.tensor([2.0])
    for fn in (lib.fake_quant_int8_affine, quant.fake_quant_int8_affine):
        with pytest.raises(RuntimeError, match="not differentiable"):
            fn(x, lo, hi)
    # scalars=True reads them as numbers: fine for both
    assert_bitwise(quant.fake_quant_int8_affine(x, lo, hi, True),
                   lib.fake_quant_int8_affine(x, lo, hi, True))


def test_affine_other_dtypes():
    gen = torch.Generator().manual_seed(6)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        x = (torch.randn(64, generator=gen) * 3).to(dtype)
        lo, hi = torch.tensor([-1.0], dtype=dtype), torch.tensor([2.0], dtype=dtype)
        assert_bitwise(quant.fake_quant_int8_affine(x, lo, hi),
                       lib.fake_quant_int8_affine(x, lo, hi))
