"""The calls of the compiled ms_deform_attn kernels: one function per direction and device.

Both ways into the kernels run these same functions, so they give the same bits: the custom ops
``turbo_physai::ms_deform_attn`` / ``::ms_deform_attn_backward`` register them as their CPU and
CUDA kernels, and the eager fast path of :func:`turbo_physai.ops.ms_deform_attn` calls them
directly. Ranks, shapes, dtypes, devices and level metadata are checked by the binding
(``csrc/bindings/msda_checks.cpp``), with the messages of the Python checks; here the inputs
only get what the kernels need, each step skipped when the tensor already qualifies (the host
cost of a small call is mostly such steps). No ``detach()``: ``torch._C._to_dlpack`` exports
tensors that require grad, and the kernels only read them.
"""

from __future__ import annotations

import math
import os

import torch

from turbo_physai import _core
from turbo_physai.kernels.reference import check_ms_deform_attn as check_inputs
from turbo_physai.ops._dlpack import capsules, current_stream, exported

_to_dlpack = torch._C._to_dlpack
_INT64 = torch.int64
_STRIDED = torch.strided
_FLOAT32 = torch.float32
_FLOAT64 = torch.float64
_REDUCED = (torch.float16, torch.bfloat16)
_HOST_BYTES = (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
               if hasattr(os, "sysconf") else math.inf)

#: How the sorted deterministic CUDA backward records its terms: "auto" (the kernels choose by
#: density), "corners" or "anchors" (ms_deform_attn_cuda.h); set by tests and benchmarks that
#: compare the two.
sorted_scheme = "auto"


def check_grad_output(grad_output, value, sampling_locations):
    """The Python check of grad_output: fake tensors, reduced precision on the CPU, and any rank
    but the op's 3 (the binding would also take (N, Lq, M, D), which the op's fake refuses)."""
    if grad_output.layout is not _STRIDED:
        raise TypeError(f"grad_output: expected a dense (strided) tensor, got layout "
                        f"{grad_output.layout}")
    n, _, m, d = value.shape
    expected = (n, sampling_locations.shape[1], m * d)
    if tuple(grad_output.shape) != expected:
        raise ValueError(f"grad_output: expected shape {expected} (N, Lq, M*D), "
                         f"got {tuple(grad_output.shape)}")
    if grad_output.dtype != sampling_locations.dtype:
        raise TypeError(f"grad_output: expected dtype {sampling_locations.dtype} (the dtype of "
                        f"sampling_locations), got {grad_output.dtype}")


def _index(t: torch.Tensor) -> torch.Tensor:
    # The kernels read int64 level metadata; other integer dtypes are converted (L elements).
    # Anything else goes as is, for the binding to reject with the Python check's message.
    dtype = t.dtype
    if dtype is _INT64 or dtype.is_floating_point or dtype.is_complex or dtype is torch.bool:
        return t
    return t.to(_INT64)


def _dense_channels(t: torch.Tensor) -> torch.Tensor:
    # The CPU kernel vectorizes over the last dimension and needs it at stride 1; any other
    # stride is read as is. is_contiguous() first: it is the usual answer and the cheapest call.
    return t if t.is_contiguous() or t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()


def _dense(t: torch.Tensor) -> torch.Tensor:
    # The CUDA kernels read dense arrays (16-byte loads of channel rows).
    return t if t.is_contiguous() else t.contiguous()


def _empty_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def _bare(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A new dense tensor on a storage of its own, never filled: for memory that a CUDA kernel
    writes before anything reads it. (In deterministic mode torch.empty fills every new tensor,
    ``torch.utils.deterministic.fill_uninitialized_memory``.)"""
    storage = torch.UntypedStorage(math.prod(shape) * dtype.itemsize, device=device)
    return torch.empty(0, dtype=dtype, device=device).set_(storage, 0, shape)


def _unfilled(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.empty for an output that a CUDA kernel writes all of; in deterministic mode a bare
    one (the fill is a pass over memory the kernel overwrites: RT-DETR's grad_value, 275 MB)."""
    if torch.are_deterministic_algorithms_enabled():
        return _bare(shape, dtype, device)
    return torch.empty(shape, dtype=dtype, device=device)


def _cpu_inputs(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    """The five inputs as capsules for the CPU binding (``exported``: with their sign)."""
    return (exported(_dense_channels(value)), exported(_index(spatial_shapes)),
            exported(_index(level_start_index)), exported(sampling_locations),
            exported(attention_weights))


def _cuda_inputs(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    """The five inputs as capsules for the CUDA binding."""
    return (exported(_dense(value)), exported(_dense(_index(spatial_shapes))),
            exported(_dense(_index(level_start_index))), exported(_dense(sampling_locations)),
            exported(_dense(attention_weights)))


def _float32(t: torch.Tensor) -> torch.Tensor:
    """A float16/bfloat16 input in float32 for the CPU kernel. Dimensions expanded with stride 0
    stay expanded (the kernels read any strides): a huge expanded input is converted at the size
    of its data, not of its shape (``.to()`` would materialize it: 2^40 expanded queries)."""
    expanded = [d for d in range(t.dim()) if t.stride(d) == 0 and t.shape[d] > 1]
    if not expanded:
        return t.to(_FLOAT32)
    base = t
    for d in expanded:
        base = base.narrow(d, 0, 1)
    return base.to(_FLOAT32).expand(t.shape)


def _allocated(name: str, shape, make, host_itemsize: int = 0):
    """``make()``, a new output of `shape`; torch's allocation errors (RuntimeError) become a
    MemoryError naming the output, or a ValueError where its size does not even fit 64 bits
    (huge expanded inputs: issue 24). A host output (`host_itemsize` given) larger than the
    machine's physical memory is refused before allocating: where memory is overcommitted the
    allocation succeeds and the kernel pages for hours until the OOM killer comes (seen on a
    128 GiB host with 2^40 expanded queries)."""
    if host_itemsize:  # (the CUDA calls skip this: they are the host-bound ones)
        numel = math.prod(shape)
        if numel * host_itemsize > _HOST_BYTES and numel < 2**62:
            raise MemoryError(f"{name}: cannot allocate {tuple(shape)}: it needs "
                              f"{numel * host_itemsize / 2**30:.3g} GiB, more than this "
                              f"machine's {_HOST_BYTES / 2**30:.3g} GiB of memory")
    try:
        return make()
    except RuntimeError as e:
        numel = math.prod(shape)
        if numel >= 2**62:
            raise ValueError(f"{name}: {tuple(shape)} has {numel} elements, more than a tensor "
                             "can hold (the inputs' sizes multiply beyond 2^62)") from None
        raise MemoryError(f"{name}: cannot allocate {tuple(shape)}: {e}") from None


def forward_cpu(value: torch.Tensor, spatial_shapes: torch.Tensor,
                level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                attention_weights: torch.Tensor) -> torch.Tensor:
    if value.dtype in _REDUCED:
        # The CPU kernel has no reduced-precision variant: check here (a conversion would hide
        # wrong dtypes from the binding), compute in float32, give the output the locations'
        # dtype (value's, or float32 with mixed precision).
        check_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                     attention_weights)
        out = forward_cpu(_float32(value), spatial_shapes, level_start_index,
                          _float32(sampling_locations), _float32(attention_weights))
        return out.to(sampling_locations.dtype)
    n, _, m, d = value.shape
    # (N, Lq, M*D) directly: the binding splits the last dimension into heads and channels.
    shape = (n, sampling_locations.shape[1], m * d)
    out = _allocated("output", shape, lambda: value.new_empty(shape), value.element_size())
    _core.ms_deform_attn_forward(
        *_cpu_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                     attention_weights), _to_dlpack(out), torch.get_num_threads())
    return out


def backward_cpu(grad_output: torch.Tensor, value: torch.Tensor, spatial_shapes: torch.Tensor,
                 level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                 attention_weights: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if grad_output.dim() != 3 or grad_output.layout is not _STRIDED:
        check_grad_output(grad_output, value, sampling_locations)
    if value.dtype in _REDUCED:  # as in forward_cpu
        check_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                     attention_weights)
        check_grad_output(grad_output, value, sampling_locations)
        grads = backward_cpu(_float32(grad_output), _float32(value), spatial_shapes,
                             level_start_index, _float32(sampling_locations),
                             _float32(attention_weights))
        return tuple(g.to(t.dtype) for g, t in zip(grads, (value, sampling_locations,
                                                            attention_weights), strict=True))
    grads = tuple(_allocated(name, t.shape, lambda t=t: _empty_like(t), t.element_size())
                  for name, t in (("grad_value", value), ("grad_sampling_locations",
                                                          sampling_locations),
                                  ("grad_attention_weights", attention_weights)))
    _core.ms_deform_attn_backward(
        *_cpu_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                     attention_weights), exported(_dense_channels(grad_output)),
        *map(_to_dlpack, grads), torch.get_num_threads())
    return grads


def forward_cuda(value: torch.Tensor, spatial_shapes: torch.Tensor,
                 level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                 attention_weights: torch.Tensor) -> torch.Tensor:
    n, _, m, d = value.shape
    shape = (n, sampling_locations.shape[1], m * d)
    out = _allocated("output", shape,
                     lambda: _unfilled(shape, sampling_locations.dtype, value.device))
    _core.ms_deform_attn_forward_cuda(
        *_cuda_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                      attention_weights), _to_dlpack(out), current_stream(value))
    return out


def _finite_norm(t: torch.Tensor, order: float) -> torch.Tensor:
    # Inf and NaN terms are flagged by the kernel instead; they must not reach the bound (an
    # infinite bound leaves no usable scale for the finite terms).
    finite = torch.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0)
    return torch.linalg.vector_norm(finite, order, dtype=_FLOAT64)


def _fixed_point_bound(grad_output, attention_weights):
    # max|grad_output| * sum|weights| over finite entries bounds every grad_value element's sum of
    # finite terms (each point touches an element through at most one corner, with a bilinear
    # weight <= 1). float64: the product of two large float32 norms must not overflow.
    if grad_output.numel() == 0 or attention_weights.numel() == 0:
        return torch.zeros((), dtype=_FLOAT64, device=grad_output.device)
    return _finite_norm(grad_output, float("inf")) * _finite_norm(attention_weights, 1)


def _sorted_workspace(value, sampling_locations):
    """The uint8 workspace of the sorted accumulation (``sorted_scheme``), or None for problems
    beyond its 32-bit indexing and when it does not fit in memory."""
    n, s, m, d = value.shape
    _, lq, _, levels, points, _ = sampling_locations.shape
    nbytes = _core.ms_deform_attn_sorted_workspace_bytes(n, s, m, d, lq, levels, points,
                                                         value.get_device(), sorted_scheme)
    if nbytes:
        try:
            # Hundreds of MB that the kernels write before reading them: not filled.
            return _bare((nbytes,), torch.uint8, value.device)
        except torch.OutOfMemoryError:
            pass
    return None


def _deterministic_scratch(grad_output, value, sampling_locations, attention_weights):
    """(workspace, bound, flags) of a deterministic backward: a uint8 workspace for the sorted
    accumulation (bit-reproducible float sums, ``sorted_scheme``), or the int64 fixed-point
    workspace with its bound and non-finite flags for problems beyond the sorted path's 32-bit
    indexing, and when the sorted workspace does not fit in memory (the fixed-point path needs 8
    bytes per element of value instead)."""
    workspace = _sorted_workspace(value, sampling_locations)
    if workspace is not None:
        return workspace, None, None
    # The kernels zero both before use: not filled either.
    return (_bare(value.shape, _INT64, value.device),
            _fixed_point_bound(grad_output, attention_weights),
            _bare(((value.numel() + 7) // 8,), torch.int32, value.device))


def _reduced_precision_workspace(value, sampling_locations):
    """The workspace of a float16/bfloat16 backward outside deterministic mode. Where the sorted
    sums sort by blocks (fewer sampling points than grad_value rows and a head's entries within a
    block: most decoders), those: on the H200 they took 0.33 ms where float atomics into a float32
    workspace of value's shape took 0.57 (RT-DETR's decoder, fwd+bwd; that workspace is zeroed,
    added into and cast back), 1.2-3.2x faster on the decoder shapes measured, and deterministic
    besides. Elsewhere that float32 workspace: with a device-wide sort (900 queries of 16 points)
    the sorted sums measured 0.84-1.03x its speed, with anchors (encoders, BEV) 0.8-0.9x. Also the
    workspace when the sorted one does not fit in memory."""
    n, s, m, _ = value.shape
    _, lq, _, levels, points, _ = sampling_locations.shape
    if _core.ms_deform_attn_sorted_by_blocks(n, s, m, lq, levels, points, sorted_scheme):
        workspace = _sorted_workspace(value, sampling_locations)
        if workspace is not None:
            return workspace
    return value.new_empty(value.shape, dtype=_FLOAT32)


def backward_cuda(grad_output: torch.Tensor, value: torch.Tensor, spatial_shapes: torch.Tensor,
                  level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                  attention_weights: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if grad_output.dim() != 3 or grad_output.layout is not _STRIDED:
        check_grad_output(grad_output, value, sampling_locations)
    grads = tuple(_allocated(name, t.shape, lambda t=t: _unfilled(t.shape, t.dtype, t.device))
                  for name, t in (("grad_value", value), ("grad_sampling_locations",
                                                          sampling_locations),
                                  ("grad_attention_weights", attention_weights)))
    grad_output = _dense(grad_output)
    workspace = bound = flags = None
    if torch.are_deterministic_algorithms_enabled():
        workspace, bound, flags = _deterministic_scratch(grad_output, value, sampling_locations,
                                                         attention_weights)
    elif value.dtype is not _FLOAT32:
        workspace = _reduced_precision_workspace(value, sampling_locations)
    _core.ms_deform_attn_backward_cuda(
        *_cuda_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                      attention_weights), exported(grad_output), *map(_to_dlpack, grads),
        *capsules(workspace, bound, flags), current_stream(value), sorted_scheme)
    return grads
