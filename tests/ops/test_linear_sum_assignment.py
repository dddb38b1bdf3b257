"""linear_sum_assignment: scipy's pairs and errors, ties included, from the CPU and CUDA kernels."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
scipy_optimize = pytest.importorskip("scipy.optimize")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from turbo_physai import _core  # noqa: E402
from turbo_physai.ops import linear_sum_assignment  # noqa: E402
from turbo_physai.optimizations.common.graph_checks import collecting  # noqa: E402

OP = torch.ops.turbo_physai.linear_sum_assignment.default
# The package's attribute of that name is the function: the module by its full name.
lsap = importlib.import_module("turbo_physai.ops.linear_sum_assignment")
INF, NAN = float("inf"), float("nan")
needs_cuda = pytest.mark.skipif(not (torch.cuda.is_available() and _core.cuda_kernels),
                                reason="needs a GPU and a CUDA build")

SHAPES = [(1, 1), (1, 7), (7, 1), (2, 3), (3, 2), (300, 5), (5, 300), (300, 20), (300, 100),
          (100, 300), (100, 100)]
# normal: distinct values; levels: integers 0..2 or 0..9 (many ties); constant: all tied.
KINDS = ["normal", "levels3", "levels10", "constant"]


def make(shape, kind: str, seed: int, device="cpu", dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if kind == "normal":
        cost = torch.randn(shape, generator=gen, dtype=torch.float64)
    elif kind == "constant":
        cost = torch.full(shape, 3.0, dtype=torch.float64)
    else:
        cost = torch.randint(0, int(kind.removeprefix("levels")), shape, generator=gen)
    return cost.to(device=device, dtype=dtype)


def scipy_pairs(cost: torch.Tensor) -> tuple[list[int], list[int]]:
    rows, cols = scipy_optimize.linear_sum_assignment(cost.detach().cpu().double().numpy())
    return rows.tolist(), cols.tolist()


def ours(cost: torch.Tensor) -> tuple[list[int], list[int]]:
    rows, cols = linear_sum_assignment(cost)
    n = min(cost.shape)
    for t in (rows, cols):
        assert (t.dtype, t.device, t.shape) == (torch.int64, cost.device, (n,))
    return rows.tolist(), cols.tolist()


def assert_like_scipy(cost: torch.Tensor) -> None:
    """Our pairs are scipy's, or we raise scipy's error."""
    try:
        want = scipy_pairs(cost)
    except ValueError as e:
        with pytest.raises(ValueError, match=f"^{e}$"):
            linear_sum_assignment(cost)
        return
    assert ours(cost) == want


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_named_shapes_match_scipy(shape, kind):
    for seed in range(3):
        assert_like_scipy(make(shape, kind, seed))


@settings(max_examples=400, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), kind=st.sampled_from(KINDS),
       seed=st.integers(0, 2**31 - 1))
def test_random_shapes_match_scipy(rows, cols, kind, seed):
    assert_like_scipy(make((rows, cols), kind, seed, dtype=torch.float64))


@pytest.mark.parametrize("shape", [(6, 6), (4, 9), (9, 4), (40, 30)], ids=str)
def test_infinite_entries(shape):
    # Sparse +inf: feasible, the infinite pairs avoided; dense: often infeasible (scipy's error).
    for seed in range(20):
        cost = make(shape, "levels3", seed, dtype=torch.float64)
        gen = torch.Generator().manual_seed(seed)
        density = 0.2 if seed % 2 else 0.8
        cost[torch.rand(shape, generator=gen) < density] = INF
        assert_like_scipy(cost)


@pytest.mark.parametrize("bad", [NAN, -INF])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (5, 3)], ids=str)
def test_invalid_entries_raise(shape, bad):
    cost = make(shape, "normal", 0)
    cost[-1, -1] = bad
    with pytest.raises(ValueError, match="^matrix contains invalid numeric entries$"):
        linear_sum_assignment(cost)
    rows, cols, status = OP(cost)
    assert int(status) == 1 and rows.tolist() == cols.tolist() == [-1] * min(shape)


def test_assume_finite_still_checks_on_the_cpu():
    # Reading the status costs nothing here: a broken promise still raises scipy's error.
    with pytest.raises(ValueError, match="^matrix contains invalid numeric entries$"):
        linear_sum_assignment(torch.tensor([[1.0, NAN]]), assume_finite=True)
    cost = make((30, 7), "levels3", 2)
    assert linear_sum_assignment(cost, assume_finite=True)[1].tolist() == scipy_pairs(cost)[1]


@pytest.mark.parametrize("cost", [[[1.0, INF], [INF, INF]], [[INF, INF, INF]], [[1.0, INF]] * 3])
def test_infeasible_raises(cost):
    with pytest.raises(ValueError, match="^cost matrix is infeasible$"):
        linear_sum_assignment(torch.tensor(cost))
    assert int(OP(torch.tensor(cost))[2]) == 2


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0, 0)], ids=str)
def test_empty(shape):
    assert ours(torch.empty(shape)) == scipy_pairs(torch.empty(shape)) == ([], [])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtypes(dtype):
    for shape in [(30, 7), (7, 30), (25, 25)]:
        for kind in ("normal", "levels10"):
            cost = make(shape, kind, 1, dtype=dtype)
            assert ours(cost) == scipy_pairs(cost)  # scipy on the same values in float64


def views(device="cpu"):
    """Non-contiguous costs: transposed, a DETR matcher's split slice, stride 2, expanded."""
    base = make((3, 300, 40), "levels10", 5, device=device)
    yield "transposed", base[0].T
    yield "split slice", base.split([5, 20, 15], -1)[1][2]
    yield "stride 2", base[1, ::2, ::2]
    yield "expanded row", base[0, :1].expand(6, 40)


@pytest.mark.parametrize("name", [name for name, _ in views()])
def test_views(name):
    cost = dict(views())[name]
    assert not cost.is_contiguous()
    assert ours(cost) == scipy_pairs(cost)


def test_cost_that_requires_grad():
    cost = make((20, 8), "normal", 2).requires_grad_()
    assert ours(cost) == scipy_pairs(cost)


@pytest.mark.parametrize("cost", [torch.ones(3), torch.ones(2, 2, 2),
                                  torch.ones(3, 3, dtype=torch.int64),
                                  torch.ones(2, 2, dtype=torch.complex64), [[1.0]]],
                         ids=["1-d", "3-d", "int64", "complex64", "list"])
def test_bad_cost_is_named(cost):
    with pytest.raises(ValueError, match="linear_sum_assignment: cost must be a 2-d strided "
                                         "tensor of float16, bfloat16, float32 or float64, got"):
        linear_sum_assignment(cost)


def test_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        for shape in [(300, 5), (5, 300), (0, 4)]:
            rows, cols, status = OP(torch.empty(shape, dtype=torch.bfloat16))
            assert rows.shape == cols.shape == (min(shape),) and status.shape == ()
            assert (rows.dtype, cols.dtype, status.dtype) == (torch.int64, torch.int64,
                                                              torch.int32)


def test_opcheck():
    for shape in [(30, 7), (7, 30), (0, 3)]:
        torch.library.opcheck(OP, (make(shape, "levels3", 0),))


def test_compiled_fullgraph():
    @torch.compile(fullgraph=True, backend="aot_eager", dynamic=False)
    def solve(cost):
        rows, cols, status = torch.ops.turbo_physai.linear_sum_assignment(cost * 2)
        return rows, cols, status

    for shape in [(300, 20), (20, 300)]:
        cost = make(shape, "levels10", 3)
        rows, cols, status = solve(cost)
        assert (rows.tolist(), cols.tolist()) == scipy_pairs(cost * 2) and int(status) == 0


# CUDA: the kernel's parallel scan and tie-breaking reduction against the CPU solver and scipy.

def all_three_agree(cost_cpu: torch.Tensor) -> None:
    want = scipy_pairs(cost_cpu)
    assert ours(cost_cpu) == want
    assert ours(cost_cpu.cuda()) == want


@needs_cuda
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES + [(20, 3000), (3000, 20), (300, 3000)], ids=str)
def test_cuda_matches_cpu_and_scipy(shape, kind):
    for seed in range(2):
        all_three_agree(make(shape, kind, seed))


@needs_cuda
@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 70), cols=st.integers(1, 70), kind=st.sampled_from(KINDS),
       seed=st.integers(0, 2**31 - 1))
def test_cuda_random_shapes(rows, cols, kind, seed):
    all_three_agree(make((rows, cols), kind, seed, dtype=torch.float64))


@needs_cuda
@pytest.mark.parametrize("threads", [32, 64, 128, 256, 512])
def test_cuda_every_block_size(threads):
    for shape in [(33, 70), (70, 33), (100, 600)]:
        for kind in ("normal", "levels3", "constant"):
            cost = make(shape, kind, 4, device="cuda")
            rows, cols, status = lsap.solve_cuda(cost, threads)
            assert (rows.tolist(), cols.tolist()) == scipy_pairs(cost) and int(status) == 0


@needs_cuda
def test_cuda_errors_empty_and_views():
    for cost in ([[1.0, NAN]], [[-INF], [1.0]], [[1.0, INF], [INF, INF]]):
        assert_like_scipy(torch.tensor(cost, device="cuda"))
    for shape in [(0, 4), (4, 0), (0, 0)]:
        assert ours(torch.empty(shape, device="cuda")) == ([], [])
    for _, cost in views("cuda"):
        assert ours(cost) == scipy_pairs(cost)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        cost = make((40, 9), "levels10", 1, device="cuda", dtype=dtype)
        assert ours(cost) == scipy_pairs(cost)


@needs_cuda
def test_cuda_assume_finite_reads_nothing_back(monkeypatch):
    # The status stays on the device: no check is made (a read would synchronize).
    monkeypatch.setattr(lsap, "check_later", lambda *a, **k: pytest.fail("status read"))
    cost = make((300, 9), "levels10", 3, device="cuda")
    rows, cols = linear_sum_assignment(cost, assume_finite=True)
    assert (rows.tolist(), cols.tolist()) == scipy_pairs(cost)


@needs_cuda
def test_cuda_graph_replays_on_new_values():
    static = make((300, 12), "normal", 0, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        linear_sum_assignment(static)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), collecting() as checks:  # seals its flags inside the capture
        rows, cols = linear_sum_assignment(static)
    for seed, kind in [(1, "normal"), (2, "levels3"), (3, "constant")]:
        fresh = make((300, 12), kind, seed, device="cuda")
        static.copy_(fresh)
        graph.replay()
        checks.raise_failed()
        assert (rows.tolist(), cols.tolist()) == scipy_pairs(fresh)
    static[0, 0] = NAN
    graph.replay()
    with pytest.raises(ValueError, match="matrix contains invalid numeric entries"):
        checks.raise_failed()
