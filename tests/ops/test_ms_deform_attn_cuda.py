"""tests/ops/test_ms_deform_attn_cuda.py: the CUDA ms_deform_attn against a float64 reference.

Skipped without a GPU or without a CUDA build. Reference: the CPU op in float64 on the same
(already rounded) inputs, so only the kernel's own rounding is measured. Tolerances (rtol, atol):
float32 1e-5/1e-5, float16 2e-3/2e-3, bfloat16 1.6e-2/1.6e-2 for outputs (a few units of the
output's last place); gradients 1e-4 (float32) and 3e-2 of the largest entry (float16/bfloat16,
whose loads of value and grad_output are themselves rounded).
"""

import pytest

torch = pytest.importorskip("torch")

from tpa_msda_cases import CASES as BASE_CASES  # noqa: E402
from tpa_msda_cases import (  # noqa: E402
    LEVELS_5,
    RecordOps,
    make_inputs,
    non_finite_agree,
    spy_paths,
    with_non_finite,
)

from turbo_physai import _core, kernels  # noqa: E402
from turbo_physai.ops import _msda_kernels, frontends, ms_deform_attn  # noqa: E402
from turbo_physai.testing import check_conformance  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (hasattr(_core, "ms_deform_attn_forward_cuda") and torch.cuda.is_available()),
    reason="needs a GPU and a CUDA build")

OUT_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
HALVES = [torch.float16, torch.bfloat16]
GRAD_TOL = {torch.float32: 1e-4, torch.float16: 3e-2, torch.bfloat16: 3e-2}
CASES = {
    **BASE_CASES,
    "d256": {"d": 256, "lq": 2},  # more channels than one warp row: two chunks
    "many_points": {"levels": LEVELS_5, "p": 8},  # 40 points: two batches of 32
}


def make(dtype=torch.float32, points=None, **kwargs):
    """Inputs on the GPU, value in `dtype`, locations and weights in `points` (default: `dtype`);
    locations spill past both borders (zero padding, x = -1 edges)."""
    value, shapes, starts, loc, attn = make_inputs(**kwargs)
    if loc.numel():
        loc.view(-1)[:2] = 0.0  # pixel -0.5: inside, on the x = -1 / y = -1 edge
    points = points or dtype
    return [value.to("cuda", dtype), shapes.cuda(), starts.cuda(), loc.to("cuda", points),
            attn.to("cuda", points)]


def cpu64(args):
    return [t.cpu().double() if t.is_floating_point() else t.cpu() for t in args]


#: The two ways into the kernels: the public function (eager fast path: the kernels called
#: directly, its own autograd.Function) and the custom op (dispatcher, registered autograd).
PATHS = {"fast": ms_deform_attn, "op": torch.ops.turbo_physai.ms_deform_attn}


def forward_backward(path, args, grad_output):
    """The output and the value, location and weight gradients through PATHS[path] (or `path`
    itself, a function of the op's arguments); the leaves share storage with args (a CUDA-graph
    replay sees new data copied into args)."""
    value, shapes, starts, loc, attn = args
    leaves = [t.detach().requires_grad_() for t in (value, loc, attn)]
    fn = PATHS[path] if isinstance(path, str) else path
    out = fn(leaves[0], shapes, starts, leaves[1], leaves[2])
    return out, torch.autograd.grad(out, leaves, grad_output)


def grads(args, seed=1, path="fast"):
    args = [t.detach().clone() for t in args]
    shape = (args[0].shape[0], args[3].shape[1], args[0].shape[2] * args[0].shape[3])
    g = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out, g_inputs = forward_backward(path, args, g.to(args[3]))  # the output's dtype
    return out.detach(), g_inputs


def close(mine, ref, tol):
    scale = ref.abs().max().item() if ref.numel() else 0.0
    torch.testing.assert_close(mine.cpu().double(), ref, rtol=tol, atol=tol * max(1.0, scale))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", list(OUT_TOL), ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_and_gradients_match_float64(case, dtype, path):
    args = make(dtype=dtype, **CASES[case])
    out, (g_value, g_loc, g_attn) = grads(args, path=path)
    ref_out, (r_value, r_loc, r_attn) = grads(cpu64(args))
    torch.testing.assert_close(out.cpu().double(), ref_out, rtol=OUT_TOL[dtype],
                               atol=OUT_TOL[dtype])
    for mine, ref in ((g_value, r_value), (g_loc, r_loc), (g_attn, r_attn)):
        assert mine.dtype == dtype and mine.is_cuda
        close(mine, ref, GRAD_TOL[dtype])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("low", HALVES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_mixed_precision_matches_float64(case, low, path):
    # A 16-bit value with float32 locations and weights (what autocast hands the op): the value
    # is read and its gradient written in 16 bits; output, location and weight gradients are
    # float32 and as accurate as float32's (the reference takes the same 16-bit value).
    args = make(dtype=low, points=torch.float32, **CASES[case])
    out, (g_value, g_loc, g_attn) = grads(args, path=path)
    ref_out, (r_value, r_loc, r_attn) = grads(cpu64(args))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu().double(), ref_out, rtol=OUT_TOL[torch.float32],
                               atol=OUT_TOL[torch.float32])
    assert g_value.dtype == low
    close(g_value, r_value, GRAD_TOL[low])
    for mine, ref in ((g_loc, r_loc), (g_attn, r_attn)):
        assert mine.dtype == torch.float32
        close(mine, ref, GRAD_TOL[torch.float32])


@pytest.mark.parametrize("low", HALVES, ids=str)
def test_mixed_precision_deterministic_backward(low, accumulation):
    args = make(dtype=low, points=torch.float32, n=2, lq=64, levels=((4, 3), (2, 2)), m=2, d=32,
                p=4)
    deterministic_grads_match_float64(args, dtype=low, runs=2)


@pytest.mark.parametrize("dtype", list(OUT_TOL), ids=str)
def test_forward_reads_no_value_for_points_outside_the_map(dtype):
    # Every point outside, every value NaN: nothing is read, so zeros (as grid_sample gives).
    value, shapes, starts, loc, attn = make(dtype=dtype, d=32, lq=37)
    value = torch.full_like(value, float("nan"))
    out = ms_deform_attn(value, shapes, starts, torch.full_like(loc, 3.0), attn)
    assert not out.isnan().any() and not out.any()
    # One point inside, on the centre of pixel (x 2, y 3) of level 0 (5 wide, 6 high), where
    # head 0 of batch 0 is all ones; every other point outside.
    loc = torch.full_like(loc, -2.0)
    loc[0, 0, 0, 0, 0] = torch.tensor([2.5 / 5, 3.5 / 6])
    value[0, :, 0] = 1.0
    out = ms_deform_attn(value, shapes, starts, loc, attn)
    assert not out.isnan().any() and not out.view(-1)[32:].any()
    torch.testing.assert_close(out[0, 0, :32], attn[0, 0, 0, 0, 0].expand(32),
                               rtol=OUT_TOL[dtype], atol=OUT_TOL[dtype])


@pytest.mark.parametrize("points", [None, torch.float32], ids=["16-bit", "mixed"])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_16_bit_backward_of_decoders_sums_sorted_in_every_mode(dtype, points, monkeypatch):
    # Fewer sampling points than grad_value rows and heads that blocks sort (a decoder): the
    # sorted sums, deterministic even outside deterministic mode, so both modes give the same
    # bits.
    args = make(dtype=dtype, points=points, n=2, lq=7, levels=((9, 8), (5, 4)), m=2, d=32, p=2)
    workspaces = []  # the dtypes of the float16/bfloat16 workspaces outside deterministic mode
    real = _msda_kernels._reduced_precision_workspace

    def spy(*args):
        workspace = real(*args)
        workspaces.append(workspace.dtype)
        return workspace

    monkeypatch.setattr(_msda_kernels, "_reduced_precision_workspace", spy)
    default = [grads(args)[1] for _ in range(2)]
    torch.use_deterministic_algorithms(True)
    try:
        deterministic = grads(args)[1]
    finally:
        torch.use_deterministic_algorithms(False)
    assert workspaces == [torch.uint8] * 2
    for run in (default[1], deterministic):
        for a, b in zip(default[0], run, strict=True):
            assert torch.equal(a, b)
    _, refs = grads(cpu64(args))
    for mine, ref in zip(default[0], refs, strict=True):
        close(mine, ref, GRAD_TOL[dtype])
    # Denser problems (an encoder's) keep float atomics into a float32 workspace, and so do
    # sparse ones whose heads hold more entries than a block sorts (2600 * 2 * 4 > 20480).
    monkeypatch.setattr(_msda_kernels, "sorted_scheme", "anchors")
    grads(args)
    assert workspaces[2:] == [torch.float32]
    monkeypatch.setattr(_msda_kernels, "sorted_scheme", "auto")
    value, _, _, loc, _ = make(dtype=dtype, n=1, lq=2600, levels=((200, 100),), m=1, d=32, p=2)
    assert real(value, loc).dtype == torch.float32


@pytest.mark.parametrize("low", HALVES, ids=str)
def test_cuda_autocast_keeps_a_16_bit_value_with_float32_locations(low):
    args = make(dtype=low, points=torch.float32, d=32)
    grad_output = torch.randn(2, 5, 64, device="cuda")  # float32, as the promoted output
    torch.use_deterministic_algorithms(True)  # grad_value summed in a fixed order: same bits
    try:
        expected_out, expected = forward_backward("fast", args, grad_output)
        with torch.autocast("cuda", dtype=low):
            runs = [forward_backward(path, args, grad_output) for path in PATHS]
            with RecordOps() as record:  # a mode: the op's autocast kernel
                runs.append(forward_backward("fast", args, grad_output))
    finally:
        torch.use_deterministic_algorithms(False)
    # The op got the 16-bit value itself: no float32 copy of it, nor a cast of its gradient.
    assert "aten._to_copy.default" not in record.names, record.names
    for out, grads_ in runs:
        assert out.dtype == torch.float32 and torch.equal(out, expected_out)
        for mine, want in zip(grads_, expected, strict=True):
            assert mine.dtype == want.dtype and torch.equal(mine, want)
    # As accurate as the float32 computation on the same 16-bit value.
    wide = [t.float() if t.is_floating_point() else t for t in args]
    wide_out, wide_grads = forward_backward("fast", wide, grad_output)
    close(out, wide_out.cpu().double(), OUT_TOL[torch.float32])
    close(grads_[0], wide_grads[0].cpu().double(), GRAD_TOL[low])
    for mine, want in zip(grads_[1:], wide_grads[1:], strict=True):
        close(mine, want.cpu().double(), GRAD_TOL[torch.float32])


@pytest.fixture(params=["corners", "anchors", "fixed_point"])
def accumulation(request, monkeypatch):
    """The deterministic backward's ways of summing grad_value: sorted entries (what every
    problem within 32-bit indexing gets), each scheme on every shape whatever its density (the
    kernels pick by density), and the int64 fixed-point workspace (the rest; forced here by
    reporting that the sorted workspace does not apply)."""
    if request.param == "fixed_point":
        monkeypatch.setattr(_core, "ms_deform_attn_sorted_workspace_bytes", lambda *a: 0)
    else:
        monkeypatch.setattr(_msda_kernels, "sorted_scheme", request.param)
    return request.param


@pytest.mark.parametrize("dtype", list(OUT_TOL), ids=str)
def test_each_path_is_taken_and_both_agree_bit_for_bit(dtype, monkeypatch, accumulation):
    args = make(dtype=dtype, d=32)
    counts = spy_paths(monkeypatch)
    fast = ms_deform_attn(*args)
    with RecordOps() as record:
        op = ms_deform_attn(*args)
    assert counts == {"fast": 1, "op": 1} and "turbo_physai.ms_deform_attn.default" in record.names
    assert torch.equal(fast, op)  # the forward is deterministic; the backward below is made so
    torch.use_deterministic_algorithms(True)
    try:
        runs = [grads(args, path=path)[1] for path in PATHS]
    finally:
        torch.use_deterministic_algorithms(False)
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


def test_every_output_element_is_written():
    value, shapes, starts, loc, attn = make(d=32)
    out = torch.full((2, 5, 2, 32), float("nan"), device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    _core.ms_deform_attn_forward_cuda(value, shapes, starts, loc, attn, out, stream)
    torch.testing.assert_close(out.view(2, 5, 64), ms_deform_attn(value, shapes, starts, loc, attn))
    poisoned = [torch.full_like(t, float("nan")) for t in (value, loc, attn)]
    _core.ms_deform_attn_backward_cuda(value, shapes, starts, loc, attn, out, *poisoned, None,
                                       None, None, stream)
    assert all(torch.isfinite(g).all() for g in poisoned)


@pytest.mark.parametrize("dtype", list(OUT_TOL), ids=str)
@pytest.mark.parametrize("d", [4, 3], ids=["d4", "d3"])
def test_float_atomics_start_from_zero_on_every_row(d, dtype):
    # 40000 rows per head and five queries: most rows get no term. grad_value and the float32
    # workspace of the 16-bit types start as NaN; every row must end as its sum from zero.
    args = make(dtype=dtype, n=2, lq=5, levels=((200, 200),), m=3, d=d, p=2)
    value, shapes, starts, loc, attn = args
    grad_output = torch.randn(2, 5, 3 * d, device="cuda", dtype=loc.dtype)
    grads_ = [torch.full_like(t, float("nan")) for t in (value, loc, attn)]
    workspace = None if dtype is torch.float32 else torch.full(value.shape, float("nan"),
                                                               device="cuda")
    _core.ms_deform_attn_backward_cuda(value, shapes, starts, loc, attn, grad_output, *grads_,
                                       workspace, None, None,
                                       torch.cuda.current_stream().cuda_stream)
    _, refs = forward_backward("fast", cpu64(args), grad_output.cpu().double())
    for mine, ref in zip(grads_, refs, strict=True):
        assert torch.isfinite(mine).all()
        close(mine, ref, GRAD_TOL[dtype])
    assert (grads_[0] == 0).float().mean() > 0.99


def test_the_deterministic_scratch_is_checked_by_the_binding():
    value, shapes, starts, loc, attn = make(d=32)
    grad_output = torch.randn(2, 5, 64, device="cuda")
    grads = [torch.empty_like(t) for t in (value, loc, attn)]
    workspace = torch.empty(value.shape, dtype=torch.int64, device="cuda")
    bound = torch.full((), 1e6, dtype=torch.float64, device="cuda")  # above any sum here
    flags = torch.empty(((value.numel() + 7) // 8,), dtype=torch.int32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream

    def backward(bound, flags):
        _core.ms_deform_attn_backward_cuda(value, shapes, starts, loc, attn, grad_output, *grads,
                                           workspace, bound, flags, stream)

    with pytest.raises(ValueError, match="bound, flags: an int64 workspace needs both"):
        backward(bound, None)
    with pytest.raises(TypeError, match="bound: expected dtype torch.float64"):
        backward(bound.float(), flags)
    with pytest.raises(ValueError, match="flags: expected shape"):
        backward(bound, flags[:-1])
    backward(bound, flags)  # well formed: runs
    torch.cuda.synchronize()
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("scheme", ["corners", "anchors"])
def test_the_sorted_workspace_is_checked_by_the_binding(scheme, monkeypatch):
    monkeypatch.setattr(_msda_kernels, "sorted_scheme", scheme)
    value, shapes, starts, loc, attn = make(d=32)
    grad_output = torch.randn(2, 5, 64, device="cuda")
    grads = [torch.full_like(t, float("nan")) for t in (value, loc, attn)]
    n, s, m, d = value.shape
    nbytes = _core.ms_deform_attn_sorted_workspace_bytes(n, s, m, d, 5, 2, 3, 0, scheme)
    room = torch.empty(nbytes + 256, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream

    def backward(workspace, scheme=scheme):
        _core.ms_deform_attn_backward_cuda(value, shapes, starts, loc, attn, grad_output, *grads,
                                           workspace, None, None, stream, scheme)

    other = "anchors" if scheme == "corners" else "corners"
    assert _core.ms_deform_attn_sorted_workspace_bytes(n, s, m, d, 5, 2, 3, 0, other) != nbytes
    with pytest.raises(ValueError, match="workspace: expected shape"):
        backward(room[:nbytes], scheme=other)  # sized for the other scheme
    with pytest.raises(ValueError, match="scheme: expected"):
        backward(room[:nbytes], scheme="diagonal")
    with pytest.raises(ValueError, match="workspace: expected shape"):
        backward(room[: nbytes - 1])
    with pytest.raises(ValueError, match="256-byte alignment"):
        backward(room[1 : nbytes + 1])
    backward(room[:nbytes])  # well formed: runs and writes every gradient
    torch.cuda.synchronize()
    assert all(torch.isfinite(g).all() for g in grads)
    torch.use_deterministic_algorithms(True)
    try:
        _, expected = forward_backward("fast", [value, shapes, starts, loc, attn], grad_output)
    finally:
        torch.use_deterministic_algorithms(False)
    for mine, ref in zip(grads, expected, strict=True):
        assert torch.equal(mine, ref)


def test_the_sorted_workspace_covers_32_bit_indexing_only():
    # Sizes only (no allocation); 0 means the int64 workspace. (N, S, M, D, Lq, L, P, device).
    def nbytes(s, lq, levels, scheme):
        return _core.ms_deform_attn_sorted_workspace_bytes(1, s, 1, 32, lq, levels, 1, 0, scheme)

    # corners: N*Lq*M*L*P*4 entries below 2^31
    assert nbytes(4, 2**29 - 1, 1, "corners") > 0 and nbytes(4, 2**29, 1, "corners") == 0
    # anchors: point indices in 28 bits, keys (N*S*M*L) below 2^31
    assert nbytes(4, 2**28, 1, "anchors") > 0 and nbytes(4, 2**28 + 1, 1, "anchors") == 0
    assert nbytes(2**29, 1, 3, "anchors") > 0 and nbytes(2**29, 1, 4, "anchors") == 0
    for scheme in ("corners", "anchors", "auto"):  # rows (N*S*M) below 2^31
        assert nbytes(2**31, 1, 1, scheme) == 0
    # auto: corners when there are fewer points than rows, else anchors
    assert nbytes(100, 33, 3, "auto") == nbytes(100, 33, 3, "corners")
    assert nbytes(100, 34, 3, "auto") == nbytes(100, 34, 3, "anchors")
    assert nbytes(100, 34, 3, "anchors") != nbytes(100, 34, 3, "corners")
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        nbytes(4, -1, 1, "auto")
    with pytest.raises(ValueError, match="scheme: expected 'auto', 'corners' or 'anchors'"):
        nbytes(4, 1, 1, "diagonal")


def deterministic_grads_match_float64(args, dtype=torch.float32, runs=2, path="fast"):
    """Deterministic-mode gradients through `path`: bit-identical over `runs` runs and within
    GRAD_TOL[dtype] of the float64 reference."""
    _, refs = grads(cpu64(args))
    torch.use_deterministic_algorithms(True)
    try:
        results = [grads(args, path=path)[1] for _ in range(runs)]
    finally:
        torch.use_deterministic_algorithms(False)
    for run in results[1:]:
        for a, b in zip(results[0], run, strict=True):
            assert torch.equal(a, b)
    for mine, ref in zip(results[0], refs, strict=True):
        close(mine, ref, GRAD_TOL[dtype])


@pytest.mark.parametrize("case", list(CASES))
def test_deterministic_backward_matches_float64_in_every_case(case, accumulation):
    deterministic_grads_match_float64(make(**CASES[case]))


@pytest.mark.parametrize("d", [32, 33, 260])
def test_deterministic_backward_when_one_value_row_takes_every_point(d, accumulation):
    # Every point of a head at one place: each of its four corner rows gets a run of 100 * 5
    # entries, far longer than the lanes that read a batch of them (and not a multiple of it),
    # or than a block sort's share of a group (about 2000 / 64), next to rows no entry touches.
    # 33 and 260 channels: several chunks of lanes, the last one partly idle.
    args = make(n=3, lq=100, levels=((3, 4),), m=2, d=d, p=5)
    args[3].fill_(0.5 / 3)  # pixel (x, y) = (1/6, 0): weight on corners (0, 0) and (1, 0)
    deterministic_grads_match_float64(args)


@pytest.mark.parametrize(("lq", "levels"), [
    (1024, ((512, 511),)), (1025, ((512, 511),)), (1280, ((6, 5),)), (1281, ((6, 5),)),
    (320, ((6, 5), (3, 4))), (321, ((6, 5), (3, 4)))])
def test_deterministic_backward_at_the_limits_of_the_block_sorts(lq, levels, accumulation):
    # corners sorts each head's entries (Lq*L*P*4) in one block when they fit it (20480) and
    # their index and row fit one 32-bit word: 16384 entries (14 bits) on 261632 rows (18 bits
    # with the mark of corners outside the map) fill all 32 bits, one more query needs a 15th;
    # 1280 queries fill the block, 1281 do not. Past either limit the global sort runs. Each
    # (head, level) gets its own block when a level's entries fit 5120: 320 queries of two
    # levels do, 321 take a block per head.
    deterministic_grads_match_float64(make(n=1, lq=lq, levels=levels, m=1, d=4, p=4))


@pytest.mark.parametrize(("n", "m"), [(1, 8), (5, 4), (4, 8), (9, 8)])
def test_deterministic_backward_with_each_number_of_block_sort_parts(n, m, accumulation):
    # A block sort's slice is summed by as many blocks (parts, each the runs that begin in its
    # share) as give each SM one, up to 4: on an H200 (132 SMs) 16, 40, 64 and 144 slices of
    # (head, level) get 4, 3, 2 and 1 parts.
    deterministic_grads_match_float64(make(n=n, lq=50, levels=((6, 5), (3, 4)), m=m, d=32, p=4))


def test_deterministic_backward_falls_back_to_fixed_point_when_the_sorted_workspace_fails(
        monkeypatch):
    # 4 M points on a 2x2 map: the sorted workspace is ~140 MB, the fixed-point one 128 bytes of
    # value. With the allocator capped at the fixed-point call's own peak plus half the sorted
    # workspace, allocating that workspace raises OutOfMemoryError and the call takes the
    # fixed-point path: its gradients are bit-identical to a call forced onto that path.
    args = make(n=1, lq=2**20, levels=((2, 2),), m=1, d=4, p=4)
    g = torch.randn(1, 2**20, 4, device="cuda")
    nbytes = _core.ms_deform_attn_sorted_workspace_bytes(1, 4, 1, 4, 2**20, 1, 4, 0)
    assert nbytes > 100 * 2**20
    bounds = []
    real_bound = _msda_kernels._fixed_point_bound
    monkeypatch.setattr(_msda_kernels, "_fixed_point_bound",
                        lambda *a: bounds.append(1) or real_bound(*a))

    def deterministic_grads():
        torch.use_deterministic_algorithms(True)
        try:
            return forward_backward("fast", args, g)[1]
        finally:
            torch.use_deterministic_algorithms(False)

    with monkeypatch.context() as forced:
        forced.setattr(_core, "ms_deform_attn_sorted_workspace_bytes", lambda *a: 0)
        expected = deterministic_grads()
        # The peak of a second such call, `expected` held as it will be in the capped one.
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        deterministic_grads()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_reserved()
    assert len(bounds) == 2
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction((peak + nbytes // 2) / total)
    try:
        grads_ = deterministic_grads()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert len(bounds) == 3  # the fixed-point path ran
    for mine, ref in zip(grads_, expected, strict=True):
        assert torch.equal(mine, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("lq", [2, 60])
def test_deterministic_backward_with_overlapping_levels(lq, dtype, accumulation):
    # A 6x5 and a 5x6 level over the same 30 rows of value (the CUDA op does not read the level
    # metadata on the host, so nothing refuses it; the CPU op does). With 60 queries the anchors
    # keys (head, level, anchor) outnumber the rows: runs past the partial sums' capacity are
    # summed from their entries; corners adds the levels onto the rows one after the other.
    # Reference: each level as a one-level problem on value's rows, summed (float64, CPU, on the
    # inputs rounded to dtype).
    gen = torch.Generator().manual_seed(5)
    value = torch.randn(2, 30, 2, 32, generator=gen, dtype=torch.float64)
    shapes, starts = torch.tensor([[6, 5], [5, 6]]), torch.tensor([0, 0])
    loc = torch.rand(2, lq, 2, 2, 3, 2, generator=gen, dtype=torch.float64) * 1.3 - 0.15
    attn = torch.rand(2, lq, 2, 2, 3, generator=gen, dtype=torch.float64)
    g = torch.randn(2, lq, 64, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    value, loc, attn, g = (t.to(dtype).double() for t in (value, loc, attn, g))
    leaves = [t.clone().requires_grad_() for t in (value, loc, attn)]
    out = sum(ms_deform_attn(leaves[0], shapes[lv : lv + 1], starts[:1],
                             leaves[1][:, :, :, lv : lv + 1], leaves[2][:, :, :, lv : lv + 1])
              for lv in range(2))
    refs = torch.autograd.grad(out, leaves, g)
    args = [t.cuda().to(dtype) if t.is_floating_point() else t.cuda()
            for t in (value, shapes, starts, loc, attn)]
    torch.use_deterministic_algorithms(True)
    try:
        runs = [grads(args)[1] for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(False)
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)
    for mine, ref in zip(runs[0], refs, strict=True):
        close(mine, ref, GRAD_TOL[dtype])


@pytest.mark.parametrize("scheme", ["corners", "anchors"])
def test_sorted_sums_keep_the_precision_of_small_rows_next_to_large_ones(scheme, monkeypatch):
    # Head 0's grad_output around 1e-30, head 1's around 1e30, in one call: each head's value
    # gradient keeps float32 precision relative to its own size (float sums; the int64 path's
    # one scale for the whole tensor would leave head 0 all zeros).
    monkeypatch.setattr(_msda_kernels, "sorted_scheme", scheme)
    args = make(n=2, lq=64, levels=((4, 3), (2, 2)), m=2, d=32, p=4)
    g = torch.randn(2, 64, 2, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    g[:, :, 0] *= 1e-30
    g[:, :, 1] *= 1e30
    _, refs = forward_backward("fast", cpu64(args), g.view(2, 64, 64))
    torch.use_deterministic_algorithms(True)
    try:
        _, mine = forward_backward("fast", args, g.view(2, 64, 64).float().cuda())
    finally:
        torch.use_deterministic_algorithms(False)
    for head in range(2):
        ref = refs[0][:, :, head]
        assert ref.abs().max() > (1e-31 if head == 0 else 1e29)
        torch.testing.assert_close(mine[0][:, :, head].cpu().double(), ref, rtol=1e-4,
                                   atol=1e-4 * ref.abs().max().item())


@pytest.mark.parametrize("shape", [{"n": 0}, {"lq": 0}, {"d": 0}])
def test_empty_sizes(shape):
    args = make(**shape)
    out, (g_value, g_loc, g_attn) = grads(args)
    ref_out, refs = grads(cpu64(args))
    assert out.shape == ref_out.shape
    for mine, ref in zip((g_value, g_loc, g_attn), refs, strict=True):
        torch.testing.assert_close(mine.cpu().double(), ref)


def test_all_points_outside_give_zeros():
    value, shapes, starts, loc, attn = make()
    loc = torch.full_like(loc, 3.0)
    out, (g_value, g_loc, g_attn) = grads([value, shapes, starts, loc, attn])
    assert not out.any() and not g_value.any() and not g_loc.any() and not g_attn.any()


def test_bad_level_metadata_reads_no_memory_outside_value():
    # On CUDA the levels are not read on the host; a level past S is treated as empty.
    value, shapes, starts, loc, attn = make()
    shapes = shapes.clone()
    shapes[1, 0] = 1000
    out = ms_deform_attn(value, shapes, starts, loc, attn)
    torch.cuda.synchronize()
    good = ms_deform_attn(value, shapes[:1], starts[:1], loc[:, :, :, :1], attn[:, :, :, :1])
    torch.testing.assert_close(out, good)


def test_warps_that_loop_over_several_query_tiles():
    # The grid holds at most a few blocks per SM (cuda_common.cuh's TPA_MSDA_BLOCKS_PER_SM, 16);
    # with one head and 8 warps of one query each (18 points: one row per warp), 64 blocks per SM
    # worth of queries makes every warp take several tiles, the last one partly filled.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lq = sms * 64 * 8 + 37
    args = make(n=1, lq=lq, levels=((5, 3), (2, 2)), m=1, d=4, p=9)
    out, (g_value, g_loc, g_attn) = grads(args)
    ref_out, (r_value, r_loc, r_attn) = grads(cpu64(args))
    close(out, ref_out, OUT_TOL[torch.float32])
    for mine, ref in ((g_value, r_value), (g_loc, r_loc), (g_attn, r_attn)):
        close(mine, ref, GRAD_TOL[torch.float32])


def test_rows_beyond_32_bit_indexing_are_refused():
    # M*D = 2^29 + 2^18 float16 channels (1 GiB, uninitialised): a value row's stride in bytes
    # would not fit the kernels' 32 bits, so the binding refuses it before any launch.
    value = torch.empty((1, 1, 2**15, 2**14 + 8), dtype=torch.float16, device="cuda")
    shapes = torch.tensor([[1, 1]], device="cuda")
    starts = torch.zeros(1, dtype=torch.int64, device="cuda")
    loc = torch.zeros((1, 1, 2**15, 1, 1, 2), dtype=torch.float16, device="cuda")
    attn = torch.zeros((1, 1, 2**15, 1, 1), dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="32-bit integers"):
        ms_deform_attn(value, shapes, starts, loc, attn)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", list(OUT_TOL), ids=str)
def test_deterministic_backward_is_bit_identical_and_accurate(dtype, path, accumulation):
    args = make(n=2, lq=64, levels=((4, 3), (2, 2)), m=2, d=32, p=4, dtype=dtype)
    deterministic_grads_match_float64(args, dtype=dtype, runs=3, path=path)


def non_finite_inputs(dtype):
    """Inputs and a grad_output with +Inf, -Inf and NaN entries (with_non_finite; queries 3 and 4
    share corners of the 4x3 + 2x2 map), and an infinite attention weight."""
    args = make(n=2, lq=64, levels=((4, 3), (2, 2)), m=2, d=32, p=4, dtype=dtype)
    g = with_non_finite(torch.randn(2, 64, 64, generator=torch.Generator().manual_seed(3)))
    args[4][1, 30, 1, 0, 2] = float("inf")
    return args, g.to(args[0])


@pytest.mark.parametrize("dtype", list(OUT_TOL), ids=str)
def test_deterministic_backward_gives_non_finite_sums_as_float_atomics_do(dtype, accumulation):
    # Fixed point: before the flags, one Inf made the scale unusable (every finite element of
    # grad_value lost its fraction). Sorted: float sums, IEEE by construction.
    args, g = non_finite_inputs(dtype)
    _, default = forward_backward("fast", args, g)
    torch.use_deterministic_algorithms(True)
    try:
        runs = [forward_backward("fast", args, g)[1] for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(False)
    for a, b in zip(*runs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    mine, theirs = runs[0][0], default[0]
    finite = non_finite_agree(mine, theirs)
    close(mine[finite], theirs[finite].cpu().double(), GRAD_TOL[dtype])


@pytest.mark.parametrize("path", PATHS)
def test_runs_on_the_callers_stream(path):
    args = make(d=32)
    g = torch.randn(2, 5, 64, device="cuda")
    expected, expected_grads = forward_backward(path, args, g)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # nothing in here may copy from the host (that would block)
        torch.cuda._sleep(50_000_000)  # keeps `side` busy: a kernel queued behind it waits
        out, grads_ = forward_backward(path, args, g)
    assert not side.query()
    side.synchronize()
    torch.testing.assert_close(out, expected)
    for mine, ref in zip(grads_, expected_grads, strict=True):
        torch.testing.assert_close(mine, ref)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("path", PATHS)
def test_tensors_on_a_gpu_that_is_not_the_current_device(path, deterministic):
    # torch leaves cuda:0 current for tensors on cuda:1: the bindings switch device for the
    # launch (else it would run on cuda:0 with cuda:1's stream and pointers) and switch back.
    args = make(d=32)
    g = torch.randn(2, 5, 64, device="cuda")
    torch.use_deterministic_algorithms(deterministic)
    try:
        expected, expected_grads = forward_backward(path, args, g)
        assert torch.cuda.current_device() == 0
        out, grads_ = forward_backward(path, [t.to("cuda:1") for t in args], g.to("cuda:1"))
        assert torch.cuda.current_device() == 0
    finally:
        torch.use_deterministic_algorithms(False)
    assert out.device == torch.device("cuda:1")
    torch.testing.assert_close(out.cpu(), expected.cpu(), rtol=0, atol=0)  # deterministic
    for mine, ref in zip(grads_, expected_grads, strict=True):
        torch.testing.assert_close(mine.cpu(), ref.cpu())


@pytest.mark.parametrize("scheme", [None, "corners", "anchors"])  # None: not deterministic
@pytest.mark.parametrize("path", PATHS)
def test_cuda_graph_capture_and_replay(path, scheme, monkeypatch):
    deterministic = scheme is not None
    if deterministic:
        monkeypatch.setattr(_msda_kernels, "sorted_scheme", scheme)
    args = make(d=32)
    value, shapes, starts, loc, attn = args
    g = torch.randn(2, 5, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.use_deterministic_algorithms(deterministic)  # the sorted backward: a sort in the graph
    try:
        with torch.cuda.stream(side):  # warm-up outside capture, as torch asks
            forward_backward(path, args, g)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out, grads_ = forward_backward(path, args, g)
        for seed in (3, 4):
            fresh = make(d=32, seed=seed)
            for dst, src in zip((value, loc, attn), (fresh[0], fresh[3], fresh[4]),
                                strict=True):
                dst.copy_(src)
            graph.replay()
            torch.cuda.synchronize()
            expected, expected_grads = forward_backward(path, args, g)
            torch.testing.assert_close(out, expected, rtol=0, atol=0)
            for mine, ref in zip(grads_, expected_grads, strict=True):
                if deterministic:
                    assert torch.equal(mine, ref)
                else:
                    torch.testing.assert_close(mine, ref)
    finally:
        torch.use_deterministic_algorithms(False)


def test_transformers_function_with_a_shape_list_under_graph_capture(monkeypatch):
    # Under capture the (H, W) list becomes tensors through fill kernels, never the cache (a
    # host copy would break the capture; a cached tensor could be freed before a replay).
    cache = {}
    monkeypatch.setattr(frontends, "_LEVELS", cache)
    value, shapes, starts, loc, attn = make(d=32)
    as_list = [tuple(s) for s in shapes.tolist()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        frontends.transformers_function(value, as_list, loc, attn)
    torch.cuda.current_stream().wait_stream(side)
    cache.clear()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = frontends.transformers_function(value, as_list, loc, attn)
    assert not cache
    value.copy_(make(d=32, seed=5)[0])
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, ms_deform_attn(value, shapes, starts, loc, attn))


def doubled(value, shapes, starts, loc, attn):
    """The op inside a graph: an elementwise op before it, a reduction after it."""
    return ms_deform_attn(value * 2, shapes, starts, loc, attn).sum(-1)


def compiled_doubled(**options):
    """`doubled` compiled by a fresh dynamo with cleared counters."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    return torch.compile(doubled, fullgraph=True, dynamic=False, **options)


def assert_cuda_graphs_recorded():
    inductor = torch._dynamo.utils.counters["inductor"]
    assert inductor["cudagraph_skips"] == 0, dict(inductor)
    assert inductor["cudagraph_recorded_non_static_inputs"] > 0
    torch._dynamo.reset()


def test_torch_compile_fullgraph():
    args = make(d=32)
    torch.testing.assert_close(compiled_doubled(backend="aot_eager")(*args), doubled(*args))


def test_torch_compile_reduce_overhead_records_and_replays_a_cuda_graph():
    """mode="reduce-overhead" (inductor + CUDA graph trees), as the transformers compile
    groups can be configured: the op must not make inductor skip the graph, and replays with
    new inputs must give the eager results."""
    compiled = compiled_doubled(mode="reduce-overhead")
    for seed in range(4):  # warm-up run, recording, then replays
        args = make(d=32, seed=seed)
        # clone(): the next replay overwrites the graph's output buffer.
        torch.testing.assert_close(compiled(*args).clone(), doubled(*args))
    assert_cuda_graphs_recorded()


def test_torch_compile_cudagraphs_backend_replays_forward_and_backward():
    """backend="cudagraphs" (the ATen graph replayed by CUDA graph trees, no code generation),
    which the compile groups take as their backend option: neither the forward nor the backward
    graph may be skipped, and replays with new inputs give the eager results."""
    compiled = compiled_doubled(backend="cudagraphs")
    g = torch.randn(2, 5, device="cuda")  # doubled's output: (N, Lq) of make()'s inputs
    for seed in range(4):  # warm-up run, recording, then replays
        args = make(d=32, seed=seed)
        out, grads_ = forward_backward(compiled, args, g)
        mine = [t.clone() for t in (out, *grads_)]  # the next replay overwrites them
        expected, expected_grads = forward_backward(doubled, args, g)
        for got, ref in zip(mine, (expected, *expected_grads), strict=True):
            torch.testing.assert_close(got, ref)
    assert_cuda_graphs_recorded()


def test_registry_picks_cuda_for_gpu_tensors():
    args = make(d=32)
    assert kernels.resolve("ms_deform_attn", *args) is ms_deform_attn
    names = [impl["name"] for impl in kernels.implementations("ms_deform_attn")]
    assert "cuda" in names
    torch.testing.assert_close(kernels.ms_deform_attn(*args), ms_deform_attn(*args))


def test_conformance_gate():
    shapes = [(1, 4, 1, 1, 1, 1), (2, 7, 2, 3, 2, 3), (2, 9, 2, 32, 3, 4)]
    checked = check_conformance("ms_deform_attn", ms_deform_attn, shapes=shapes,
                                dtypes=[torch.float32], device="cuda")
    assert checked == 3
