"""MXFP4 / NVFP4 fake quantization and NVFP4 unpack against LibreYOLO's references (CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
lib = pytest.importorskip("libreyolo.quant.fake_quant")
packing = pytest.importorskip("libreyolo.quant.packing")

from tpa_quant_cases import assert_bitwise, grads_like, mixed, near_powers_of_two  # noqa: E402

from turbo_physai.ops import quant  # noqa: E402

NAN, INF = float("nan"), float("inf")
DYNAMIC = [
    (quant.fake_quant_mxfp4_weight, lib.fake_quant_mxfp4_weight),
    (quant.fake_quant_mxfp4_dynamic, lib.fake_quant_mxfp4_dynamic),
    (quant.fake_quant_nvfp4_dynamic, lib.fake_quant_nvfp4_dynamic),
]
SHAPES = [(8, 64), (5, 100), (3, 7), (2, 3, 48), (33,), (1, 1), (4, 17)]


def forward_and_grad(fn, x0, *args, grad):
    x = x0.clone().requires_grad_()
    out = fn(x, *args)
    out.backward(grad)
    return out.detach(), x.grad


def assert_same(ours, theirs, x, *args, seed=0):
    grad = grads_like(x, torch.Generator().manual_seed(seed))
    got, want = forward_and_grad(ours, x, *args, grad=grad), forward_and_grad(theirs, x, *args,
                                                                              grad=grad)
    assert_bitwise(got[0], want[0])
    assert_bitwise(got[1], want[1])  # (grad * eff) / eff: rounds, overflows, goes subnormal


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ours,theirs", DYNAMIC)
def test_dynamic_formats(ours, theirs, shape):
    gen = torch.Generator().manual_seed(len(shape) * 100 + shape[-1])
    for x in (mixed(shape, gen, 3.0, special_every=64), torch.randn(shape, generator=gen) * 1e-3,
              torch.randn(shape, generator=gen) * 1e30):
        assert_same(ours, theirs, x)


@pytest.mark.parametrize("ours,theirs", DYNAMIC[:2])
def test_block_scales_next_to_powers_of_two(ours, theirs):
    # Block maxima within 24 ulps of every power of two from 2^-100 to 2^127: float32 log2
    # rounds up to the next integer just below them, and the block scale follows that rounding.
    amax = near_powers_of_two()
    x = torch.zeros(amax.numel(), 32)
    x[:, 0] = amax
    x[:, 1:] = amax.unsqueeze(1) * torch.linspace(-1, 1, 31)
    assert_same(ours, theirs, x)


@pytest.mark.parametrize("amax", [2.5, 0.0, 1e-30, 3e38, INF, NAN, -1.0])
@pytest.mark.parametrize("amax_shape", [(), (1,), (1, 1, 1)])
def test_nvfp4_weight(amax, amax_shape):
    gen = torch.Generator().manual_seed(11)
    w = mixed((6, 40), gen, 2.0, special_every=60)
    a = torch.full(amax_shape, amax)
    assert_same(quant.fake_quant_nvfp4_weight, lib.fake_quant_nvfp4_weight, w, a)


@pytest.mark.parametrize("shape", [(4, 0), (0, 32), (0,), (2, 0, 16)])
def test_empty_inputs(shape):
    x = torch.zeros(shape)
    for ours, theirs in DYNAMIC[:2]:
        assert_bitwise(ours(x), theirs(x))
    a = torch.tensor(1.0)
    assert_bitwise(quant.fake_quant_nvfp4_weight(x, a), lib.fake_quant_nvfp4_weight(x, a))
    for fn in (lib.fake_quant_nvfp4_dynamic, quant.fake_quant_nvfp4_dynamic):
        with pytest.raises(RuntimeError):  # the dynamic amax of nothing
            fn(x)


def test_zero_dim_inputs_are_rejected():
    x = torch.tensor(1.0)
    for fn in (lib.fake_quant_mxfp4_dynamic, quant.fake_quant_mxfp4_dynamic,
               lib.fake_quant_nvfp4_dynamic, quant.fake_quant_nvfp4_dynamic):
        with pytest.raises(IndexError):
            fn(x)


def test_non_contiguous_and_other_dtypes():
    gen = torch.Generator().manual_seed(12)
    x = mixed((40, 64), gen, 2.0)
    for view in (x.t(), x[:, ::2], x[::3]):
        for ours, theirs in DYNAMIC:
            assert_bitwise(ours(view), theirs(view))
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        for ours, theirs in DYNAMIC:
            assert_bitwise(ours(x.to(dtype)), theirs(x.to(dtype)))
    a = torch.tensor(2.0, requires_grad=True)  # an amax that needs a gradient: the reference's path
    assert_same(quant.fake_quant_nvfp4_weight, lib.fake_quant_nvfp4_weight, x, a)


# --- unpack --------------------------------------------------------------------------------------

@pytest.mark.parametrize("in_features", [64, 50, 16, 1])
def test_unpack_packed_weights(in_features):
    gen = torch.Generator().manual_seed(in_features)
    w = torch.randn(5, in_features, generator=gen)
    amax = w.abs().amax()
    payload, block_scale = packing.pack_nvfp4_weight(w, amax)
    want = packing.unpack_nvfp4_weight(payload, block_scale, amax, in_features)
    assert_bitwise(quant.unpack_nvfp4(payload, block_scale, amax, in_features), want)
    # the unpack of a pack is the fake quantization of the masters (LibreYOLO's invariant), up
    # to the sign of zero: unpacking gives -0.0 for a negative code 0, the straight-through sum
    # of the simulation +0.0
    assert torch.equal(want, lib.fake_quant_nvfp4_weight(w, amax))


@pytest.mark.parametrize("in_features", [32, 30, 0, -3, 100])
@pytest.mark.parametrize("amax", [2.5, 0.0, INF, NAN])
def test_unpack_every_byte_and_odd_arguments(in_features, amax):
    gen = torch.Generator().manual_seed(13)
    payload = torch.randint(0, 256, (3, 16), generator=gen, dtype=torch.uint8)
    stored = torch.rand(3, 2, generator=gen) * 448
    stored[0, 0], stored[1, 0], stored[2, 1] = 0.0, NAN, INF
    for block_scale in (stored, stored.to(torch.float8_e4m3fn), stored[:, :1], stored[0]):
        for a in (torch.tensor(amax), torch.tensor([amax])):
            assert_bitwise(quant.unpack_nvfp4(payload, block_scale, a, in_features),
                           packing.unpack_nvfp4_weight(payload, block_scale, a, in_features))


def test_unpack_rejects_what_the_reference_rejects():
    payload = torch.zeros(2, 4, dtype=torch.uint8)  # 8 codes: not whole 16-code blocks
    for fn in (packing.unpack_nvfp4_weight, quant.unpack_nvfp4):
        with pytest.raises(RuntimeError):
            fn(payload, torch.ones(2, 1), torch.tensor(1.0), 8)
