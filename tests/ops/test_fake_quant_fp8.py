"""fake_quant_fp8: the C++ kernel against torch's float8_e4m3fn reference, bit for bit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from turbo_physai import _core, kernels  # noqa: E402
from turbo_physai.kernels import reference  # noqa: E402
from turbo_physai.ops import fake_quant_fp8 as op_module  # noqa: E402
from turbo_physai.testing import check_conformance  # noqa: E402

OP = torch.ops.turbo_physai.fake_quant_fp8.default


def native(x, scale):
    """The C++ kernel alone, without the custom op around it."""
    out = torch.empty_like(x)
    _core.fake_quant_fp8_cpu(x, scale.reshape(-1), out)
    return out


def assert_bitwise(got, want, nan_payloads=True):
    """Equal bits. ``nan_payloads=False``: a NaN only has to meet a NaN (IEEE leaves payloads
    and the sign of a NaN to the hardware; CUDA's multiply returns 0x7fffffff where torch's
    elementwise kernels may keep another NaN)."""
    gb, wb = got.view(torch.int32), want.view(torch.int32)
    bad = gb != wb
    if not nan_payloads:
        bad &= ~(got.isnan() & want.isnan())
    if bad.any():
        i = int(bad.nonzero()[0][0]) if bad.dim() else 0
        raise AssertionError(
            f"{int(bad.sum())} mismatches; first at flat index {i}: "
            f"got {hex(int(gb.view(-1)[i]) & 0xFFFFFFFF)}, "
            f"want {hex(int(wb.view(-1)[i]) & 0xFFFFFFFF)}"
        )


SCALES = [1.0, 0.125, 3.7, 1e-13, 0.0, -2.0, 1e-45, 1e30, float("inf")]


@pytest.mark.parametrize("scale", SCALES)
def test_strided_sample_of_all_float32_bit_patterns(scale):
    # Every 251st bit pattern (251 is prime, so all exponent/mantissa residues are visited):
    # about 17 million inputs per scale, processed in chunks to bound memory.
    s = torch.tensor(scale, dtype=torch.float32)
    step, chunk = 251, 1 << 22
    for start in range(0, 1 << 32, step * chunk):
        bits = torch.arange(start, min(start + step * chunk, 1 << 32), step, dtype=torch.int64)
        x = (bits - (1 << 32) * (bits >= (1 << 31))).to(torch.int32).view(torch.float32)
        assert_bitwise(native(x, s), reference.fake_quant_fp8_forward(x, s))


def fp8_boundaries():
    """Every fp8 value, every midpoint between neighbours (the ties), and their float32
    neighbours, with both signs: where round-to-nearest-even and saturation decide."""
    codes = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn)
    values = codes.to(torch.float64)  # 0 .. 448, increasing
    mids = (values[1:] + values[:-1]) / 2
    edges = torch.cat([values, mids, torch.tensor([464.0, 472.0, 480.0, 512.0, 1e38])])
    edges = edges.to(torch.float32)
    up = torch.nextafter(edges, torch.tensor(float("inf")))
    down = torch.nextafter(edges, torch.tensor(-float("inf")))
    all_positive = torch.cat([edges, up, down])
    return torch.cat([all_positive, -all_positive])


def test_fp8_rounding_boundaries_and_specials():
    x = fp8_boundaries()
    nan_payloads = torch.tensor(
        [0x7FC00000, 0x7F800001, 0x7FFFFFFF, -0x400000, -1], dtype=torch.int32
    )
    specials = torch.cat(
        [
            torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1e-45, -1e-45, 1.17e-38]),
            nan_payloads.view(torch.float32),
        ]
    )
    x = torch.cat([x, specials])
    for scale in SCALES + [2.0**-9, 448.0]:
        s = torch.tensor(scale)
        assert_bitwise(native(x, s), reference.fake_quant_fp8_forward(x, s))


def test_nan_scale_gives_nan():
    # Only NaN-ness is compared: with both operands NaN, which payload torch's own `q * s`
    # returns depends on whether the element landed in a SIMD body or a scalar tail.
    x = torch.randn(100)
    s = torch.tensor(float("nan"))
    assert native(x, s).isnan().all()
    assert reference.fake_quant_fp8_forward(x, s).isnan().all()


def test_per_channel_scales_and_strided_rows():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(7, 33, generator=gen) * 500
    s = torch.rand(7, generator=gen) * 3
    s[2], s[4], s[5] = 0.0, 1e-20, float("inf")
    assert_bitwise(native(x, s), reference.fake_quant_fp8_forward(x, s))
    # A view whose rows are not adjacent still works in the kernel (row stride is a parameter).
    wide = torch.randn(7, 50, generator=gen) * 100
    view = wide[:, 5:38]
    out = torch.empty(7, 33)
    _core.fake_quant_fp8_cpu(view, s, out)
    assert_bitwise(out, reference.fake_quant_fp8_forward(view, s))
    # And through the op with a transposed (non-contiguous) input.
    xt = torch.randn(33, 7, generator=gen).t()
    assert_bitwise(OP(xt, s), reference.fake_quant_fp8_forward(xt, s))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes_take_the_reference_math(dtype):
    x = (torch.randn(4, 9) * 100).to(dtype)
    s = torch.tensor([0.5, 1.0, 2.0, 3.0])
    got, want = OP(x, s), reference.fake_quant_fp8_forward(x, s)
    assert got.dtype == dtype and torch.equal(got, want)


def test_straight_through_gradient():
    x = (torch.randn(3, 5) * 600).requires_grad_()
    s = torch.tensor([1.0, 2.0, 0.5], requires_grad=True)
    g = torch.randn(3, 5)
    OP(x, s).backward(g)
    assert torch.equal(x.grad, g)
    assert s.grad is None


@pytest.mark.parametrize("scale_shape", [(), (4,), (4, 1), (1, 6)])
@pytest.mark.parametrize("straight_through", [False, True])
def test_opcheck(scale_shape, straight_through):
    x = torch.randn(4, 6) * 300
    s = torch.rand(scale_shape) + 0.1
    torch.library.opcheck(OP, (x, s, straight_through))
    torch.library.opcheck(OP, (x.clone().requires_grad_(), s, straight_through))


def test_bad_inputs_name_the_problem():
    x = torch.randn(4, 6)
    with pytest.raises(
        ValueError, match=r"implementation 'reference'\): scale must have 1 element .* shape \(4,\)"
    ):
        reference.fake_quant_fp8(x, torch.ones(3))
    with pytest.raises(
        ValueError, match=r"'turbo_physai::fake_quant_fp8'\): scale .*got shape \(2, 2\)"
    ):
        OP(x, torch.ones(2, 2))
    with pytest.raises(TypeError, match="x must be a floating tensor, got torch.int32"):
        kernels.fake_quant_fp8(x.int(), torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"out has shape \(4, 5\), expected x's shape \(4, 6\)"):
        _core.fake_quant_fp8_cpu(x, torch.ones(1), torch.empty(4, 5))
    with pytest.raises(TypeError):
        _core.fake_quant_fp8_cpu(x.double(), torch.ones(1), torch.empty(4, 6))


def test_registered_implementations_conform():
    names = {e["name"]: e["impl"] for e in kernels.implementations("fake_quant_fp8")}
    in_tree = [names[n] for n in ("cpp", "cuda") if n in names]
    assert in_tree, "the C++ implementation is not registered"
    shapes = [(), (1,), (5,), (3, 17), (2, 3, 4), (0, 3)]
    for impl in in_tree:
        assert check_conformance("fake_quant_fp8", impl, shapes, [torch.float32]) > 0


def test_slot_runs_the_cpp_kernel_for_float32_cpu():
    x, s = torch.randn(8, 8), torch.tensor(0.5)
    assert kernels.resolve("fake_quant_fp8", x, s) is op_module.fake_quant_fp8
    assert kernels.resolve("fake_quant_fp8", x.half(), s) is reference.fake_quant_fp8
    # active() names the newest registration: the CUDA one where it can run.
    newest = "cuda" if torch.cuda.is_available() and _core.cuda_kernels else "cpp"
    assert kernels.active()["fake_quant_fp8"] == newest


def _implementations():
    return {e["name"]: e["impl"] for e in kernels.implementations("fake_quant_fp8")}


EMPTY_CASES = """
import json, torch
from turbo_physai import kernels
from turbo_physai.kernels import reference
shapes = {}
for x_shape, s_shape in [((4, 0), (1,)), ((4, 0, 3), (1,)), ((4, 0), (4,)), ((4, 0, 3), (4,)),
                         ((0, 3), (1,)), ((4, 0), (4, 1))]:
    x, s = torch.zeros(x_shape), torch.ones(s_shape)
    got, want = kernels.fake_quant_fp8(x, s), reference.fake_quant_fp8(x, s)
    shapes[str((x_shape, s_shape))] = [list(got.shape), list(want.shape)]
print(json.dumps(shapes))
"""


def test_empty_inputs_through_the_registry_return_empty_results():
    # Issue 24 item 10: a (4, 0) x divided by a zero column count in the C++ kernel (SIGFPE, the
    # process died). A subprocess, so that a regression fails this test instead of the run.
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(op_module.__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", EMPTY_CASES], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for case, (got, want) in json.loads(done.stdout).items():
        assert got == want, case


@pytest.mark.parametrize(
    "x_shape,s_shape",
    [((), (1,)), ((), ()), ((1,), ()), ((), (1, 1)), ((3,), (1,)), ((2, 3), (2, 1))],
)
def test_every_implementation_returns_the_references_shape(x_shape, s_shape):
    # Issue 24 item 16: the C++ kernel returned () for a 0-d x with a (1,) scale, the
    # reference (1,).
    x, s = torch.randn(x_shape) * 100, torch.rand(s_shape) + 0.5
    want = reference.fake_quant_fp8(x, s)
    for name, impl in _implementations().items():
        device = "cuda" if name == "cuda" else "cpu"
        got = impl(x.to(device), s.to(device)).cpu()
        assert got.shape == want.shape, name
        assert torch.equal(got, want), name
    assert OP(x, s).shape == want.shape


@pytest.mark.parametrize(
    "x_shape,s_shape", [((8, 33), (8, 1)), ((8, 33), (1, 33)), ((4, 5, 6), (5, 1)), ((33,), (8, 1))]
)
def test_the_slot_takes_broadcast_scales(x_shape, s_shape):
    gen = torch.Generator().manual_seed(5)
    x, s = torch.randn(x_shape, generator=gen) * 300, torch.rand(s_shape, generator=gen) + 0.1
    want = reference.fake_quant_fp8_forward(x, s)
    assert want.shape == torch.broadcast_shapes(x_shape, s_shape)
    assert_bitwise(kernels.fake_quant_fp8(x, s), want)
    assert_bitwise(OP(x, s), want)


def test_a_row_long_1d_scale_is_per_channel_in_this_slot():
    # The slot's convention (dim 0) where torch broadcasting would scale columns; LibreYOLO's
    # slot (turbo_physai.ops.quant.fake_quant_fp8) broadcasts.
    x, s = torch.randn(4, 4) * 100, torch.tensor([0.5, 1.0, 2.0, 4.0])
    assert_bitwise(kernels.fake_quant_fp8(x, s), reference.fake_quant_fp8_forward(x, s[:, None]))


def test_straight_through_flag_gives_libreyolos_forward():
    from turbo_physai.ops import quant_reference

    x = torch.randn(64, 64) * torch.logspace(-4, 4, 64)
    s = torch.rand(64, 1) + 0.01
    want = quant_reference.fake_quant_fp8(x, s)
    assert not torch.equal(want, reference.fake_quant_fp8_forward(x, s))
    assert_bitwise(OP(x, s, True), want)
    assert_bitwise(op_module.run(x, s, True), want)


class _Quantize(torch.nn.Module):
    def forward(self, x):
        return kernels.fake_quant_fp8(x, torch.tensor(0.25)) * 2


def test_custom_op_stays_in_export_graphs():
    exported = torch.export.export(_Quantize(), (torch.randn(4, 4),))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert "turbo_physai.fake_quant_fp8.default" in targets
    x = torch.randn(4, 4) * 100
    assert torch.equal(exported.module()(x), _Quantize()(x))


def test_torch_compile_gives_the_same_numbers():
    x = torch.randn(16, 16) * 100
    compiled = torch.compile(_Quantize(), backend="eager")
    assert torch.equal(compiled(x), _Quantize()(x))


def test_jit_trace_records_portable_math():
    traced = torch.jit.trace(_Quantize(), (torch.randn(4, 4),))
    kinds = {node.kind() for node in traced.graph.nodes()}
    assert not any("turbo_physai" in k or k == "prim::PythonOp" for k in kinds), kinds
    assert {"aten::div", "aten::clamp", "aten::mul"} <= kinds
    x = torch.randn(4, 4) * 100
    assert torch.equal(traced(x), _Quantize()(x))


needs_cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and _core.cuda_kernels), reason="needs a GPU and a CUDA build"
)


@needs_cuda
@pytest.mark.parametrize("scale", SCALES)
def test_cuda_kernel_matches_the_reference_bitwise(scale):
    step = 251
    bits = torch.arange(0, 1 << 32, step, dtype=torch.int64)
    x = (bits - (1 << 32) * (bits >= (1 << 31))).to(torch.int32).view(torch.float32)
    x = torch.cat([x, fp8_boundaries()])
    s = torch.tensor(scale)
    got = OP(x.cuda(), s.cuda()).cpu()
    assert_bitwise(got, reference.fake_quant_fp8_forward(x, s), nan_payloads=False)
    assert_bitwise(
        got, reference.fake_quant_fp8_forward(x.cuda(), s.cuda()).cpu(), nan_payloads=False
    )


@needs_cuda
def test_cuda_implementation_conforms_and_is_selected():
    x, s = torch.randn(8, 8, device="cuda"), torch.tensor(0.5, device="cuda")
    assert kernels.active()["fake_quant_fp8"] == "cuda"
    # The registered callable is the eager front (it runs the kernel directly), as on the CPU.
    assert kernels.resolve("fake_quant_fp8", x, s) is op_module.fake_quant_fp8
    shapes = [(), (5,), (3, 17), (2, 3, 4), (0, 3)]
    for impl in (op_module.fake_quant_fp8, OP):
        assert check_conformance("fake_quant_fp8", impl, shapes, [torch.float32], device="cuda") > 0


@needs_cuda
def test_cuda_kernel_runs_on_the_current_stream_and_in_graphs():
    x = torch.randn(64, 128, device="cuda") * 300
    s = torch.rand(64, device="cuda") + 0.1
    want = reference.fake_quant_fp8_forward(x, s)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = kernels.fake_quant_fp8(x, s)
    side.synchronize()
    assert_bitwise(got, want)
    static_out = kernels.fake_quant_fp8(x, s)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = kernels.fake_quant_fp8(x, s)
    x.mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    assert_bitwise(static_out, reference.fake_quant_fp8_forward(x, s))


@needs_cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_cuda_kernel_runs_on_the_tensors_gpu_not_the_current_one():
    # torch leaves cuda:0 current for a tensor on cuda:1; the binding switches for the launch
    x = torch.randn(64, 128, device="cuda:1") * 300
    s = torch.rand(64, device="cuda:1") + 0.1
    assert torch.cuda.current_device() == 0
    got = kernels.fake_quant_fp8(x, s)
    assert torch.cuda.current_device() == 0
    assert got.device == x.device
    assert_bitwise(got.cpu(), reference.fake_quant_fp8_forward(x.cpu(), s.cpu()))
