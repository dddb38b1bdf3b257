"""The quantization slots on CUDA against LibreYOLO's references run on the same GPU.

torch's CUDA kernels round differently from its CPU ones in places (a CPU scalar divides as a
multiplication by its reciprocal, float-to-int conversions saturate and map NaN to 0, one fused
multiply-add), so our CUDA kernels are held to the reference on CUDA, bit for bit (CUDA's NaN is
one canonical pattern: NaN payloads are not compared). Skipped without a GPU and a CUDA build.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
lib = pytest.importorskip("libreyolo.quant.fake_quant")
packing = pytest.importorskip("libreyolo.quant.packing")

from tpa_quant_cases import assert_bitwise, bit_patterns, grads_like, mixed  # noqa: E402

from turbo_physai import _core  # noqa: E402
from turbo_physai.ops import quant  # noqa: E402

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and _core.cuda_kernels),
                                reason="needs a GPU and a CUDA build")
NAN, INF = float("nan"), float("inf")


def same_forward_and_grad(ours, theirs, x0, *args, seed=0):
    grad = grads_like(x0, torch.Generator().manual_seed(seed)).cuda()
    results = []
    for fn in (ours, theirs):
        x = x0.clone().requires_grad_()
        out = fn(x, *args)
        out.backward(grad)
        results.append((out.detach(), x.grad))
    assert_bitwise(results[0][0], results[1][0])
    assert_bitwise(results[0][1], results[1][1])


@pytest.mark.parametrize("scale", [1.0, 0.125, 3.7, 1e-13, 0.0, -2.0, 1e-45, 1e30, INF])
def test_fp8_bit_patterns(scale):
    x = bit_patterns(251).cuda()
    s = torch.tensor([scale], device="cuda")
    assert_bitwise(quant.fake_quant_fp8(x, s), lib.fake_quant_fp8(x, s))


@pytest.mark.parametrize("x_shape,s_shape", [((8, 33), (8, 1)), ((8, 33), (33,)), ((), (1,)),
                                             ((33,), (8, 1)), ((4, 0), (1,)), ((64, 1024), ())])
def test_fp8_shapes_and_gradients(x_shape, s_shape):
    gen = torch.Generator().manual_seed(1)
    x = mixed(x_shape, gen, 300, device="cuda")
    s = (torch.rand(s_shape, generator=gen) + 0.01).cuda()
    assert_bitwise(quant.fake_quant_fp8(x, s), lib.fake_quant_fp8(x, s))
    if x.numel():
        grad = grads_like(lib.fake_quant_fp8(x, s), gen).cuda()
        grads = []
        for fn in (quant.fake_quant_fp8, lib.fake_quant_fp8):
            leaf = x.clone().requires_grad_()
            fn(leaf, s).backward(grad)
            grads.append(leaf.grad)
        assert_bitwise(grads[0], grads[1])


@pytest.mark.parametrize("scale", [0.1, 1e-12, 3.0, 0.0, -0.5, 1e-40, INF, NAN, 2e38])
def test_int8_per_channel_bit_patterns(scale):
    x = bit_patterns(1021)
    x = x[: x.numel() // 8 * 8].view(8, -1).cuda()
    s = torch.tensor([scale, 0.5, 1.0, 2.0, 1e-3, 1e3, 7.0, 0.25], device="cuda")
    same_forward_and_grad(quant.fake_quant_int8_per_channel, lib.fake_quant_int8_per_channel, x,
                          0, s)


@pytest.mark.parametrize("shape,axis", [((64, 3, 3, 3), 0), ((8, 5, 7), 1), ((4, 6, 2, 3), 3),
                                        ((40,), 0), ((3, 100003), 0), ((1024, 1024), 0)])
def test_int8_dynamic_scale(shape, axis):
    gen = torch.Generator().manual_seed(2)
    for w in (mixed(shape, gen, 2.0, special_every=5000, device="cuda"),
              torch.randn(shape, generator=gen).cuda()):
        same_forward_and_grad(quant.fake_quant_int8_per_channel, lib.fake_quant_int8_per_channel,
                              w, axis)


def test_int8_products_that_underflow_keep_torchs_sign_of_zero():
    # torch's CUDA kernel fuses x * (1 / s) + 0 into one multiply-add: a negative product too
    # small for float32 rounds to -0 there, and the dequantized code keeps that sign.
    w = torch.tensor([[1e4, -1e-45, 1e-45, -3e-42, 5.0]], device="cuda")
    same_forward_and_grad(quant.fake_quant_int8_per_channel, lib.fake_quant_int8_per_channel, w)


RANGES = [(-1.5, 3.0), (0.5, 2.0), (-3.0, -1.0), (0.0, 0.0), (-1e-20, 1e-20), (-3e38, 3e38),
          (NAN, 1.0), (0.0, NAN), (-INF, 1.0), (0.0, INF)]


@pytest.mark.parametrize("lo,hi", RANGES)
def test_int8_affine(lo, hi):
    gen = torch.Generator().manual_seed(3)
    x = torch.cat([mixed((5000,), gen, 3.0), bit_patterns(4099)]).cuda()
    lo_t, hi_t = torch.tensor([lo], device="cuda"), torch.tensor([hi], device="cuda")
    same_forward_and_grad(quant.fake_quant_int8_affine, lib.fake_quant_int8_affine, x, lo_t, hi_t)
    try:
        want = lib.fake_quant_int8_affine(x, lo_t, hi_t, True)
    except RuntimeError:
        with pytest.raises(ValueError, match="zero point"):
            quant.fake_quant_int8_affine(x, lo_t, hi_t, True)
    else:
        assert_bitwise(quant.fake_quant_int8_affine(x, lo_t, hi_t, True), want)


def test_slots_without_cuda_kernels_give_the_references_bits():
    gen = torch.Generator().manual_seed(4)
    w = mixed((16, 100), gen, 1.0).cuda()
    amax = torch.tensor(3.0, device="cuda")
    pairs = [(quant.fake_quant_mxfp4_weight(w), lib.fake_quant_mxfp4_weight(w)),
             (quant.fake_quant_nvfp4_dynamic(w), lib.fake_quant_nvfp4_dynamic(w)),
             (quant.fake_quant_nvfp4_weight(w, amax), lib.fake_quant_nvfp4_weight(w, amax)),
             (quant.fake_quant_int_grouped(w, 4, 32), lib.fake_quant_int_grouped(w, 4, 32))]
    payload, scale = packing.pack_int_grouped_weight(w.cpu().nan_to_num(0.0), 4, 32)
    payload, scale = payload.cuda(), scale.cuda()
    pairs.append((quant.unpack_int_grouped(payload, scale, 4, 32, 100),
                  packing.unpack_int_grouped_weight(payload, scale, 4, 32, 100)))
    for got, want in pairs:
        assert_bitwise(got, want)


def test_kernels_run_on_the_current_stream_and_in_graphs():
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(64, 256, generator=gen).cuda()
    lo, hi = torch.tensor([-2.0], device="cuda"), torch.tensor([2.0], device="cuda")
    s = torch.rand(64, 1, generator=gen).cuda() + 0.01

    def step():
        return (quant.fake_quant_int8_per_channel(w) + quant.fake_quant_int8_affine(w, lo, hi)
                + quant.fake_quant_fp8(w, s))

    want = step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = step()
    side.synchronize()
    assert_bitwise(got, want)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    w.mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    assert_bitwise(static_out, step())
