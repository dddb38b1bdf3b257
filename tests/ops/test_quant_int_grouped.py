"""Grouped integer weights and their unpack against LibreYOLO's references, bit for bit (CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
lib = pytest.importorskip("libreyolo.quant.fake_quant")
packing = pytest.importorskip("libreyolo.quant.packing")

from tpa_quant_cases import assert_bitwise, grads_like, mixed  # noqa: E402

from turbo_physai.ops import quant  # noqa: E402

NAN, INF = float("nan"), float("inf")


def run(fn, w0, *args, grad=None):
    w = w0.clone().requires_grad_()
    out = fn(w, *args)
    out.backward(grad)
    return out.detach(), w.grad


@pytest.mark.parametrize("bits,group", [(4, 128), (2, 64), (4, 32), (3, 7), (8, 16), (1, 5),
                                        (4, 1), (4, 500)])
@pytest.mark.parametrize("in_features", [256, 100, 1])
def test_dynamic_scales(bits, group, in_features):
    gen = torch.Generator().manual_seed(bits * 1000 + group + in_features)
    w = mixed((6, in_features), gen, 0.5, special_every=40)
    grad = grads_like(w, gen)
    got, want = run(quant.fake_quant_int_grouped, w, bits, group, grad=grad), \
        run(lib.fake_quant_int_grouped, w, bits, group, grad=grad)
    assert_bitwise(got[0], want[0])
    assert_bitwise(got[1], want[1])


@pytest.mark.parametrize("scale_shape", [(6, 4), (4,), (6, 1), (1, 4), (), (1,)])
def test_given_and_broadcast_scales(scale_shape):
    gen = torch.Generator().manual_seed(7)
    w = mixed((6, 100), gen, 0.5)
    s = torch.rand(scale_shape, generator=gen) * 0.1
    s.view(-1)[0] = 0.0
    if s.numel() > 2:
        s.view(-1)[1], s.view(-1)[2] = NAN, INF
    grad = grads_like(w, gen)
    got = run(quant.fake_quant_int_grouped, w, 4, 32, s, grad=grad)
    want = run(lib.fake_quant_int_grouped, w, 4, 32, s, grad=grad)
    assert_bitwise(got[0], want[0])
    assert_bitwise(got[1], want[1])


def test_non_contiguous_weight_and_other_dtypes():
    gen = torch.Generator().manual_seed(8)
    w = mixed((40, 30), gen, 0.5)
    for view in (w.t(), w[::3], w[:, 5:]):
        assert_bitwise(quant.fake_quant_int_grouped(view, 4, 8),
                       lib.fake_quant_int_grouped(view, 4, 8))
    for dtype in (torch.float16, torch.float64, torch.bfloat16):
        assert_bitwise(quant.fake_quant_int_grouped(w.to(dtype), 4, 8),
                       lib.fake_quant_int_grouped(w.to(dtype), 4, 8))
    s64 = torch.rand(40, 4, generator=gen, dtype=torch.float64)
    assert_bitwise(quant.fake_quant_int_grouped(w, 4, 8, s64),
                   lib.fake_quant_int_grouped(w, 4, 8, s64))


def test_no_input_features():
    w = torch.zeros(4, 0)
    assert_bitwise(quant.fake_quant_int_grouped(w, 4, 128), lib.fake_quant_int_grouped(w, 4, 128))


@pytest.mark.parametrize("weight,bits,group", [
    (torch.zeros(0, 8), 4, 128), (torch.zeros(2, 3, 4), 4, 2), (torch.zeros(4), 4, 2),
    (torch.zeros(4, 8), 4, 0)])
def test_inputs_the_reference_rejects_are_rejected(weight, bits, group):
    with pytest.raises((RuntimeError, ValueError, ZeroDivisionError)):
        lib.fake_quant_int_grouped(weight, bits, group)
    with pytest.raises((RuntimeError, ValueError, ZeroDivisionError)):
        quant.fake_quant_int_grouped(weight, bits, group)


# --- unpack --------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits,group", [(4, 128), (2, 64), (4, 16), (2, 4)])
@pytest.mark.parametrize("in_features", [256, 250, 129, 1])
def test_unpack_packed_weights(bits, group, in_features):
    gen = torch.Generator().manual_seed(bits + group + in_features)
    w = torch.randn(5, in_features, generator=gen)
    payload, scale = packing.pack_int_grouped_weight(w, bits, group)
    want = packing.unpack_int_grouped_weight(payload, scale, bits, group, in_features)
    assert_bitwise(quant.unpack_int_grouped(payload, scale, bits, group, in_features), want)
    # the unpack of a pack is the fake quantization of the masters (LibreYOLO's invariant)
    assert_bitwise(want, lib.fake_quant_int_grouped(w, bits, group, scale))


@pytest.mark.parametrize("in_features", [64, 60, 1, 0, -5, 1000])
@pytest.mark.parametrize("scale_shape", [(3, 2), (2,), (3, 1), ()])
def test_unpack_every_byte_and_odd_arguments(in_features, scale_shape):
    gen = torch.Generator().manual_seed(9)
    payload = torch.randint(0, 256, (3, 32), generator=gen, dtype=torch.uint8)  # 4-bit: 64 codes
    scale = torch.rand(scale_shape, generator=gen)
    scale.view(-1)[0] = -0.0
    if scale.numel() > 2:
        scale.view(-1)[1], scale.view(-1)[2] = NAN, INF
    for bits, group in ((4, 32), (2, 64)):
        assert_bitwise(quant.unpack_int_grouped(payload, scale, bits, group, in_features),
                       packing.unpack_int_grouped_weight(payload, scale, bits, group, in_features))


def test_unpack_rejects_what_the_reference_rejects():
    payload, scale = torch.zeros(2, 8, dtype=torch.uint8), torch.ones(2, 1)
    for bits, group in ((3, 8), (4, 5), (8, 16)):
        for fn in (packing.unpack_int_grouped_weight, quant.unpack_int_grouped):
            with pytest.raises((AssertionError, RuntimeError)):
                fn(payload, scale, bits, group, 16)
