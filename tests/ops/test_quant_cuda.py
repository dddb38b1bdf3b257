"""The quantization slots on CUDA against LibreYOLO's references run on the same GPU.

torch's CUDA kernels round differently from its CPU ones in places (a CPU scalar divides as a
multiplication by its reciprocal; float-to-int conversions saturate, and map NaN to INT64_MIN
going to int64 but to 0 going to int32; the int8 codes pass through int64, so a zero code is +0),
so our CUDA kernels are held to the reference on CUDA, bit for bit (CUDA's NaN is one canonical
pattern: NaN payloads are not compared). Skipped without a GPU and a CUDA build.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
lib = pytest.importorskip("libreyolo.quant.fake_quant")
packing = pytest.importorskip("libreyolo.quant.packing")

from tpa_quant_cases import (  # noqa: E402
    assert_bitwise,
    bit_patterns,
    grads_like,
    mixed,
    near_powers_of_two,
)

from turbo_physai import _core  # noqa: E402
from turbo_physai.ops import quant  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and _core.cuda_kernels), reason="needs a GPU and a CUDA build"
)
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


@pytest.mark.parametrize(
    "x_shape,s_shape",
    [
        ((8, 33), (8, 1)),
        ((8, 33), (33,)),
        ((), (1,)),
        ((33,), (8, 1)),
        ((4, 0), (1,)),
        ((64, 1024), ()),
    ],
)
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
    same_forward_and_grad(
        quant.fake_quant_int8_per_channel, lib.fake_quant_int8_per_channel, x, 0, s
    )


@pytest.mark.parametrize(
    "shape,axis",
    [
        ((64, 3, 3, 3), 0),
        ((8, 5, 7), 1),
        ((4, 6, 2, 3), 3),
        ((40,), 0),
        ((3, 100003), 0),
        ((1024, 1024), 0),
    ],
)
def test_int8_dynamic_scale(shape, axis):
    gen = torch.Generator().manual_seed(2)
    for w in (
        mixed(shape, gen, 2.0, special_every=5000, device="cuda"),
        torch.randn(shape, generator=gen).cuda(),
    ):
        same_forward_and_grad(
            quant.fake_quant_int8_per_channel, lib.fake_quant_int8_per_channel, w, axis
        )


@pytest.mark.parametrize("scale", [None, 0.5, -0.5])
def test_int8_zero_codes_take_the_sign_of_the_scale_alone(scale):
    # torch 2.11's _fake_quant_per_channel_cachemask_cuda_helper computes
    # `static_cast<int64_t>(std::nearbyint(x * inv_scale)) + zero_point`, clamps in int64 and
    # multiplies that int64 by the scale: a code that rounds to -0 (a small negative x, a product
    # that underflows) dequantizes to +0 * scale, unlike on the CPU.
    w = torch.tensor([[1e4, -1e-45, 1e-45, -3e-42, -0.0, -0.3, 0.3, 5.0]], device="cuda")
    args = () if scale is None else (0, torch.tensor([scale], device="cuda"))
    same_forward_and_grad(
        quant.fake_quant_int8_per_channel, lib.fake_quant_int8_per_channel, w, *args
    )


RANGES = [
    (-1.5, 3.0),
    (0.5, 2.0),
    (-3.0, -1.0),
    (0.0, 0.0),
    (-1e-20, 1e-20),
    (-3e38, 3e38),
    (NAN, 1.0),
    (0.0, NAN),
    (-INF, 1.0),
    (0.0, INF),
]


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


FP4 = [
    (quant.fake_quant_mxfp4_weight, lib.fake_quant_mxfp4_weight),
    (quant.fake_quant_mxfp4_dynamic, lib.fake_quant_mxfp4_dynamic),
    (quant.fake_quant_nvfp4_dynamic, lib.fake_quant_nvfp4_dynamic),
]


@pytest.mark.parametrize("shape", [(8, 64), (5, 100), (3, 7), (2, 3, 48), (33,), (1024, 1024)])
@pytest.mark.parametrize("ours,theirs", FP4)
def test_fp4_formats(ours, theirs, shape):
    gen = torch.Generator().manual_seed(6)
    for x in (
        mixed(shape, gen, 3.0, special_every=64, device="cuda"),
        torch.randn(shape, generator=gen).cuda() * 1e30,
    ):
        same_forward_and_grad(ours, theirs, x)


@pytest.mark.parametrize("ours,theirs", FP4[:2])
def test_mx_block_scales_next_to_powers_of_two(ours, theirs):
    # CUDA's log2f is not correctly rounded: the kernels call the same function torch does.
    amax = near_powers_of_two().cuda()
    x = torch.zeros(amax.numel(), 32, device="cuda")
    x[:, 0] = amax
    x[:, 1:] = amax.unsqueeze(1) * torch.linspace(-1, 1, 31, device="cuda")
    same_forward_and_grad(ours, theirs, x)


@pytest.mark.parametrize("amax", [2.5, 0.0, 3e38, INF, NAN])
def test_nvfp4_weight(amax):
    gen = torch.Generator().manual_seed(7)
    w = mixed((64, 40), gen, 2.0, special_every=60, device="cuda")
    same_forward_and_grad(
        quant.fake_quant_nvfp4_weight,
        lib.fake_quant_nvfp4_weight,
        w,
        torch.tensor(amax, device="cuda"),
    )


@pytest.mark.parametrize("bits,group", [(4, 128), (2, 64), (3, 7), (8, 16), (1, 5), (4, 500)])
def test_int_grouped(bits, group):
    gen = torch.Generator().manual_seed(8)
    w = mixed((16, 300), gen, 0.5, special_every=40, device="cuda")
    same_forward_and_grad(quant.fake_quant_int_grouped, lib.fake_quant_int_grouped, w, bits, group)
    s = (torch.rand(16, -(-300 // group), generator=gen) * 0.1).cuda()
    same_forward_and_grad(
        quant.fake_quant_int_grouped, lib.fake_quant_int_grouped, w, bits, group, s
    )


@pytest.mark.parametrize("in_features", [256, 250, 1, -3])
def test_unpacks(in_features):
    gen = torch.Generator().manual_seed(9)
    payload = torch.randint(0, 256, (6, 128), generator=gen, dtype=torch.uint8).cuda()
    scale = (torch.rand(6, 2, generator=gen) * 0.1).cuda()
    scale[0, 0], scale[1, 1] = NAN, 0.0
    for bits in (4, 2):
        group = 128 * (8 // bits) // 2
        assert_bitwise(
            quant.unpack_int_grouped(payload, scale, bits, group, in_features),
            packing.unpack_int_grouped_weight(payload, scale, bits, group, in_features),
        )
    block_scale = (torch.rand(6, 16, generator=gen) * 448).to(torch.float8_e4m3fn).cuda()
    for amax in (torch.tensor(3.0), torch.tensor([NAN]), torch.tensor(0.0)):
        amax = amax.cuda()
        assert_bitwise(
            quant.unpack_nvfp4(payload, block_scale, amax, in_features),
            packing.unpack_nvfp4_weight(payload, block_scale, amax, in_features),
        )


def test_affine_bounds_on_another_device_are_refused():
    # torch's CUDA kernel reads the qparams tensors through device pointers: CPU bounds would be
    # read from a host address (an illegal access that poisons the CUDA context).
    x = torch.randn(8, device="cuda")
    with pytest.raises(ValueError, match="lo and hi must be on x's device"):
        quant.fake_quant_int8_affine(x, torch.tensor([-1.0]), torch.tensor([1.0]))
    assert_bitwise(
        quant.fake_quant_int8_affine(x, torch.tensor([-1.0]), torch.tensor([1.0]), True),
        lib.fake_quant_int8_affine(x, torch.tensor([-1.0]), torch.tensor([1.0]), True),
    )


def test_kernels_run_on_the_current_stream_and_in_graphs():
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(64, 256, generator=gen).cuda()
    lo, hi = torch.tensor([-2.0], device="cuda"), torch.tensor([2.0], device="cuda")
    s = torch.rand(64, 1, generator=gen).cuda() + 0.01

    def step():
        return (
            quant.fake_quant_int8_per_channel(w)
            + quant.fake_quant_int8_affine(w, lo, hi)
            + quant.fake_quant_fp8(w, s)
            + quant.fake_quant_nvfp4_dynamic(w)
            + quant.fake_quant_mxfp4_weight(w)
            + quant.fake_quant_int_grouped(w, 4, 128)
        )

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
