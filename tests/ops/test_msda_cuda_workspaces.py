"""tests/ops/test_msda_cuda_workspaces.py: which workspace the CUDA backward gets in deterministic
mode and in float16/bfloat16 (ops/_msda_kernels.py); the kernels themselves are tested in
test_ms_deform_attn_cuda.py.

Runs on the CPU: the choice is plain Python around the binding's scheme and size queries, which
are replaced here, so no GPU (or CUDA build) is needed.
"""

import pytest

torch = pytest.importorskip("torch")

from tpa_msda_cases import make_inputs  # noqa: E402

from turbo_physai import _core  # noqa: E402
from turbo_physai.ops import _msda_kernels  # noqa: E402


@pytest.fixture
def inputs():
    value, _, _, loc, attn = make_inputs(n=2, lq=5, m=2, d=4, p=3)
    grad_output = torch.randn(2, 5, 8, dtype=torch.float64)
    return grad_output, value, loc, attn


def report_sorted_by_blocks(monkeypatch, by_blocks):
    calls = []

    def query(*sizes):
        calls.append(sizes)
        return by_blocks

    monkeypatch.setattr(_core, "ms_deform_attn_sorted_by_blocks", query, raising=False)
    return calls


def report_sorted_bytes(monkeypatch, nbytes):
    calls = []

    def query(*sizes):
        calls.append(sizes)
        return nbytes

    monkeypatch.setattr(_core, "ms_deform_attn_sorted_workspace_bytes", query, raising=False)
    return calls


def test_the_sorted_workspace_when_the_binding_sizes_one(inputs, monkeypatch):
    calls = report_sorted_bytes(monkeypatch, 4096)
    workspace, bound, flags = _msda_kernels._deterministic_scratch(*inputs)
    assert workspace.dtype == torch.uint8 and workspace.shape == (4096,)
    assert bound is None and flags is None
    # N, S, M, D of value, Lq, L, P of the locations, the device (-1: the CPU here), the scheme.
    assert calls == [(2, 42, 2, 4, 5, 2, 3, -1, "auto")]


def test_the_sorted_scheme_setting_reaches_the_size_query(inputs, monkeypatch):
    # The backward binding gets the same scheme (backward_cuda passes sorted_scheme to both).
    calls = report_sorted_bytes(monkeypatch, 4096)
    monkeypatch.setattr(_msda_kernels, "sorted_scheme", "anchors")
    _msda_kernels._deterministic_scratch(*inputs)
    assert calls[-1][-1] == "anchors"


def test_the_fixed_point_workspace_beyond_32_bit_entries(inputs, monkeypatch):
    report_sorted_bytes(monkeypatch, 0)
    workspace, bound, flags = _msda_kernels._deterministic_scratch(*inputs)
    value = inputs[1]
    assert workspace.dtype == torch.int64 and workspace.shape == value.shape
    assert bound.dtype == torch.float64 and bound.shape == ()
    assert flags.dtype == torch.int32 and flags.shape == ((value.numel() + 7) // 8,)


def test_the_fixed_point_workspace_when_the_sorted_one_does_not_fit(inputs, monkeypatch):
    report_sorted_bytes(monkeypatch, 4096)
    fail_allocations_of(monkeypatch, 4096)  # only the sorted workspace's 4096 bytes fail
    workspace, bound, flags = _msda_kernels._deterministic_scratch(*inputs)
    assert workspace.dtype == torch.int64 and bound is not None and flags is not None


def fail_allocations_of(monkeypatch, nbytes):
    real_storage = torch.UntypedStorage

    def out_of_memory(size, *args, **kwargs):
        if size == nbytes:
            raise torch.OutOfMemoryError(f"no room for {nbytes} bytes")
        return real_storage(size, *args, **kwargs)

    monkeypatch.setattr(torch, "UntypedStorage", out_of_memory)


@pytest.fixture
def half_inputs(inputs):
    _, value, loc, _ = inputs
    return value.half(), loc.half()


def test_reduced_precision_problems_sorted_by_blocks_get_the_sorted_workspace(half_inputs,
                                                                             monkeypatch):
    queries = report_sorted_by_blocks(monkeypatch, True)
    sizes = report_sorted_bytes(monkeypatch, 4096)
    workspace = _msda_kernels._reduced_precision_workspace(*half_inputs)
    assert workspace.dtype == torch.uint8 and workspace.shape == (4096,)
    # N, S, M of value, Lq, L, P of the locations, the scheme setting; then the sizes with D and
    # the device (-1: the CPU here).
    assert queries == [(2, 42, 2, 5, 2, 3, "auto")]
    assert sizes == [(2, 42, 2, 4, 5, 2, 3, -1, "auto")]


def test_reduced_precision_problems_not_sorted_by_blocks_get_a_float32_workspace(half_inputs,
                                                                                  monkeypatch):
    report_sorted_by_blocks(monkeypatch, False)
    sizes = report_sorted_bytes(monkeypatch, 4096)
    workspace = _msda_kernels._reduced_precision_workspace(*half_inputs)
    assert workspace.dtype == torch.float32 and workspace.shape == half_inputs[0].shape
    assert not sizes


def test_reduced_precision_falls_back_to_float32_when_the_sorted_one_does_not_fit(
        half_inputs, monkeypatch):
    report_sorted_by_blocks(monkeypatch, True)
    report_sorted_bytes(monkeypatch, 4096)
    fail_allocations_of(monkeypatch, 4096)
    workspace = _msda_kernels._reduced_precision_workspace(*half_inputs)
    assert workspace.dtype == torch.float32 and workspace.shape == half_inputs[0].shape


def test_other_allocation_errors_are_not_taken_for_a_full_memory(inputs, monkeypatch):
    report_sorted_bytes(monkeypatch, 4096)

    def broken(*args, **kwargs):
        raise RuntimeError("not an out-of-memory error")

    monkeypatch.setattr(torch, "UntypedStorage", broken)
    with pytest.raises(RuntimeError, match="not an out-of-memory error"):
        _msda_kernels._deterministic_scratch(*inputs)


@pytest.mark.skipif(not hasattr(_core, "ms_deform_attn_sorted_scheme"),
                    reason="needs a CUDA build (no GPU: a host-side rule)")
def test_the_sorted_scheme_the_kernels_take():
    def scheme(queries, asked="auto"):  # N = 1, S = 100, M = 2, L = 1, P = 4: 8 points a query
        return _core.ms_deform_attn_sorted_scheme(1, 100, 2, queries, 1, 4, asked)

    assert scheme(24) == "corners" and scheme(25) == "anchors"  # fewer points than 200 rows
    assert scheme(1000, "corners") == "corners" and scheme(1, "anchors") == "anchors"
    with pytest.raises(ValueError, match="ms_deform_attn_sorted_scheme: sizes must be >= 0"):
        scheme(-1)
    with pytest.raises(ValueError, match="scheme: expected 'auto', 'corners' or 'anchors'"):
        scheme(5, "diagonal")
