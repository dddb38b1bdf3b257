"""turbo_physai.ops.quant.fake_quant_fp8 against LibreYOLO's reference, bit for bit (CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
lib = pytest.importorskip("libreyolo.quant.fake_quant")

from tpa_quant_cases import assert_bitwise, bit_patterns, grads_like, mixed  # noqa: E402

from turbo_physai.ops import quant  # noqa: E402

SCALES = [1.0, 0.125, 3.7, 1e-13, 0.0, -2.0, 1e-45, 1e30, float("inf")]


@pytest.mark.parametrize("scale", SCALES)
def test_float32_bit_patterns(scale):
    # One in 4099 of all bit patterns (every exponent, both signs), NaN payloads compared: with
    # a finite scale a NaN input meets no other NaN.
    x = bit_patterns(4099)
    s = torch.tensor([scale])
    assert_bitwise(quant.fake_quant_fp8(x, s), lib.fake_quant_fp8(x, s), nan_payloads=True)


def test_straight_through_rounding_is_reproduced():
    # x + (q - x) differs from q in float32 for a good share of wide-range inputs: the test
    # below would fail for a kernel that returned q.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=gen) * torch.logspace(-6, 6, 4096)
    s = torch.tensor([0.01])
    want = lib.fake_quant_fp8(x, s)
    q = (x / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s
    assert (want != q).float().mean() > 0.05
    assert_bitwise(quant.fake_quant_fp8(x, s), want)


BROADCASTS = [
    ((8, 33), (8, 1)), ((8, 33), (1, 33)), ((8, 33), (33,)), ((8, 33), (1,)), ((8, 33), ()),
    ((8, 33), (8, 33)), ((8, 33), (2, 8, 1)), ((33,), (8, 1)), ((4, 5, 6), (4, 1, 1)),
    ((4, 5, 6), (1, 5, 1)), ((4, 5, 6), (5, 1)), ((4, 5, 6), (4, 5, 1)), ((4, 5, 6), (6,)),
    ((4, 4), (4,)), ((), (1,)), ((), ()), ((), (3,)), ((1,), (1,)), ((7,), (7,)),
]


@pytest.mark.parametrize("x_shape,s_shape", BROADCASTS)
def test_broadcast_scales(x_shape, s_shape):
    gen = torch.Generator().manual_seed(1)
    x = mixed(x_shape, gen, 300)
    s = torch.rand(s_shape, generator=gen) * 3
    s.view(-1)[0] = 0.0  # floored to 1e-12
    assert_bitwise(quant.fake_quant_fp8(x, s), lib.fake_quant_fp8(x, s))


@pytest.mark.parametrize("x_shape", [(4, 0), (0, 3), (4, 0, 3), (0,)])
@pytest.mark.parametrize("s_shape", [(1,), ()])
def test_empty_inputs(x_shape, s_shape):
    x, s = torch.zeros(x_shape), torch.ones(s_shape)
    assert_bitwise(quant.fake_quant_fp8(x, s), lib.fake_quant_fp8(x, s))


def test_non_contiguous_inputs():
    gen = torch.Generator().manual_seed(2)
    x = mixed((40, 30), gen, 100).t()[:, ::3]
    s = (torch.rand(30, 2, generator=gen) + 0.1)[:, :1]
    assert_bitwise(quant.fake_quant_fp8(x, s), lib.fake_quant_fp8(x, s))


@pytest.mark.parametrize("x_shape,s_shape", [((8, 33), (8, 1)), ((33,), (8, 1)), ((), (1,))])
def test_gradients(x_shape, s_shape):
    gen = torch.Generator().manual_seed(3)
    x0 = mixed(x_shape, gen, 300)
    s = torch.rand(s_shape, generator=gen) + 0.5
    grad = grads_like(lib.fake_quant_fp8(x0, s), gen)
    outs = []
    for fn in (quant.fake_quant_fp8, lib.fake_quant_fp8):
        x, sc = x0.clone().requires_grad_(), s.clone().requires_grad_()
        out = fn(x, sc)
        out.backward(grad)
        assert sc.grad is None  # the reference detaches its quantized term
        outs.append((out.detach(), x.grad))
    assert_bitwise(outs[0][0], outs[1][0])
    assert_bitwise(outs[0][1], outs[1][1])


def test_a_scale_that_needs_a_gradient_does_not_make_the_output_need_one():
    x, s = torch.randn(4, 5), torch.ones(1, requires_grad=True)
    assert quant.fake_quant_fp8(x, s).requires_grad == lib.fake_quant_fp8(x, s).requires_grad


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_other_dtypes_give_the_references_result(dtype):
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(6, 7, generator=gen) * 100).to(dtype)
    for s in (torch.tensor([0.5]), torch.tensor([[0.5]], dtype=torch.float16)):
        assert_bitwise(quant.fake_quant_fp8(x, s), lib.fake_quant_fp8(x, s))


def test_shapes_that_do_not_broadcast_raise_like_the_reference():
    x, s = torch.randn(8, 33), torch.ones(4)
    with pytest.raises(RuntimeError):
        lib.fake_quant_fp8(x, s)
    with pytest.raises(RuntimeError, match="must match"):
        quant.fake_quant_fp8(x, s)
