"""``linear_sum_assignment``: scipy's assignment on the cost matrix's device, no host copy.

DETR-family losses (transformers' HungarianMatcher) copy each cost matrix to the host for
``scipy.optimize.linear_sum_assignment``; that synchronization keeps a training step out of a
CUDA graph. ``torch.ops.turbo_physai.linear_sum_assignment(cost) -> (rows, cols, status)`` runs
scipy's algorithm step for step (csrc/kernels/linear_sum_assignment) on the CPU or the GPU, so
its pairs are scipy's, ties included; scipy's errors come back as an int32 status (0 ok, 1 NaN or
-inf entries, 2 infeasible), which :func:`linear_sum_assignment` turns into scipy's ValueError
through :func:`~turbo_physai.optimizations.common.graph_checks.check_later`: at once, or after
the replay when a CUDA graph is captured.

A ``torch.library`` custom op with a fake implementation, so it stays in ``torch.compile`` and
``torch.export`` graphs. Any strides (views such as ``cost.split(sizes, -1)[i][b]``); float16
and bfloat16 widen to float32 exactly, and the kernels compute in float64 as scipy does.
"""

from __future__ import annotations

import torch

from turbo_physai import _core
from turbo_physai.ops._dlpack import capsules, current_stream
from turbo_physai.ops._quant_ops import define
from turbo_physai.optimizations.common.graph_checks import check_later

_NAME = "turbo_physai::linear_sum_assignment"
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check(cost) -> None:
    if (isinstance(cost, torch.Tensor) and cost.dim() == 2 and cost.dtype in _DTYPES
            and cost.layout is torch.strided):
        return
    got = (f"shape {tuple(cost.shape)}, dtype {cost.dtype}, layout {cost.layout}"
           if isinstance(cost, torch.Tensor) else type(cost).__name__)
    raise ValueError("linear_sum_assignment: cost must be a 2-d strided tensor of float16, "
                     f"bfloat16, float32 or float64, got {got}")


def _outputs(cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = cost.new_empty((torch.sym_min(cost.shape[0], cost.shape[1]),), dtype=torch.int64)
    return rows, torch.empty_like(rows), cost.new_empty((), dtype=torch.int32)


def _native(cost: torch.Tensor) -> torch.Tensor:
    """What the kernels read: float32 or float64 (a 16-bit float widens exactly), detached
    (DLPack exports no tensor that requires grad)."""
    cost = cost.detach()
    return cost if cost.dtype in (torch.float32, torch.float64) else cost.float()


def _cpu(cost: torch.Tensor):
    _check(cost)
    out = _outputs(cost)
    _core.linear_sum_assignment_cpu(*capsules(_native(cost), *out))
    return out


def solve_cuda(cost: torch.Tensor, threads: int = 0):
    """The CUDA kernel on the current stream: ``(rows, cols, status)``. ``threads``: a block's
    (0: the kernel's choice by width; benchmarks/linear_sum_assignment.py can sweep it)."""
    out = _outputs(cost)
    # Torch's caching allocator hands out 512-byte aligned blocks (the kernel wants 256).
    workspace = torch.empty(_core.linear_sum_assignment_cuda_workspace_bytes(*cost.shape),
                            dtype=torch.uint8, device=cost.device)
    _core.linear_sum_assignment_cuda(*capsules(_native(cost), *out, workspace), threads,
                                     current_stream(cost))
    return out


def _cuda(cost: torch.Tensor):
    _check(cost)
    return solve_cuda(cost)


def _fake(cost: torch.Tensor):
    _check(cost)
    return _outputs(cost)


_op = define(_NAME, "(Tensor cost) -> (Tensor rows, Tensor cols, Tensor status)", _cpu,
             _cuda if _core.cuda_kernels else None, _fake)


def linear_sum_assignment(cost: torch.Tensor, *, assume_finite: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``scipy.optimize.linear_sum_assignment(cost)`` as int64 tensors on cost's device:
    ``(rows, cols)``, min(cost.shape) pairs sorted by row, the same pairs as scipy's. Raises
    scipy's ValueError for NaN or -inf entries and for an infeasible matrix; on CUDA it does not
    synchronize except to read the status (``check_later``: deferred past a CUDA graph's replay
    while one is captured). ``assume_finite``: the caller guarantees finite entries (a finite
    matrix is always feasible), so on CUDA the status is not read at all (no synchronization;
    pairs of a matrix that breaks the promise are unspecified); elsewhere it is still checked."""
    _check(cost)
    rows, cols, status = _op(cost)
    if not (assume_finite and cost.device.type == "cuda"):
        check_later(status != 0, lambda: _ERRORS[int(status)],
                    deferred=" or ".join(_ERRORS.values()))
    return rows, cols


_ERRORS = {1: "matrix contains invalid numeric entries", 2: "cost matrix is infeasible"}
