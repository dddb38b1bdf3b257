"""Multi-scale deformable attention (Deformable DETR), SPEC §6: the op, its checks and reference.

Layouts: value ``(N, S, M, D)``, spatial_shapes ``(L, 2)`` integer ``(H, W)``, level_start_index
``(L,)``, sampling_locations ``(N, Lq, M, L, P, 2)`` as ``(x, y)`` in ``[0, 1]``,
attention_weights ``(N, Lq, M, L, P)``; the result is ``(N, Lq, M*D)``. Sampling is bilinear at
``loc * size - 0.5`` with zero padding, exactly ``grid_sample(align_corners=False)``.

Two ``torch.library`` custom ops represent it: ``turbo_physai::ms_deform_attn`` and
``turbo_physai::ms_deform_attn_backward``, each with a fake (shape-only) implementation, the first
with autograd through the second, so both stay whole inside ``torch.compile`` and
``torch.export`` graphs and work with fake tensors, modes and ``torch.jit.trace``. The CPU kernel
is C++ (``csrc/kernels/ms_deform_attn``); on CUDA builds the CUDA kernels (same folder, ``*.cu``)
are registered on the same ops for ``cuda`` tensors and run on the current stream, allocating
only through torch (CUDA-graph capture safe).

Two ways in: :func:`ms_deform_attn` calls the custom op only where something needs the dispatcher
(see :func:`turbo_physai.ops._eager.dispatcher_needed`; also tensor subclasses and tensors on
other devices than CPU/CUDA). In plain eager execution, autocast included (it casts the inputs
as the op's autocast kernel would, ``_promoted``), it takes a fast path instead: the kernel
functions of ``_msda_kernels`` (the very ones registered on the ops) are called directly, through a
``torch.autograd.Function`` when a gradient is needed (not twice differentiable, like the op), and
the binding checks the inputs with the Python checks' messages. Both ways give the same bits; the
fast one skips torch's custom-op machinery, most of a small call's host time (BENCHMARKS.md).
Under the autograd profiler the fast path records ``turbo_physai::ms_deform_attn`` (and
``..._backward``), as the op would. ``torch.func.grad`` and its kin are not supported (the custom
op's autograd cannot run under them) and raise NotImplementedError; ``vmap`` is one call for
the whole batch (``_forward_vmap``).

Dtypes: on the CPU float32 and float64 run natively; float16 and bfloat16 are checked and
converted to float32 in Python (``_msda_kernels``), computed in float32 and the results cast
back. On CUDA float32, float16 and bfloat16 run natively with float32 accumulation (float64 is
CPU only). Locations and weights share a dtype, which the output and their gradients have: value's,
or float32 with a float16/bfloat16 value (mixed precision: the CUDA kernels read the 16-bit value
and write its gradient in 16 bits, everything else in float32; the CPU computes in float32).
Other mixes are refused, except under autocast, where the op promotes them to the widest
(``_autocast_forward``), as autocast does ``grid_sample``, keeping a 16-bit value as it is.

Determinism: the CPU backward is always bit-identical run after run and for any thread count, with
or without ``torch.use_deterministic_algorithms`` (each gradient element has one owning thread).
The CUDA forward is always deterministic; the CUDA backward adds value gradients with float
atomics unless ``torch.are_deterministic_algorithms_enabled()`` (or, in float16/bfloat16, where
the sorted sums below sort by blocks: most decoders, for which they are faster than atomics into
a float32 workspace). Then the terms become entries
(one per point keyed by its top-left corner with four slot coefficients when there are at least
as many points as value rows, else one per point and corner keyed by value row) that a stable
radix sort groups by key, and each key's terms are summed in their original order (bit-identical
run after run on one GPU model, IEEE sums for Inf and NaN; a transient workspace, 1.2-1.5x the
default backward's time on large shapes: docs/ops.md). Problems beyond that path's 32-bit
indexing, or whose workspace does not fit in memory, add them as 64-bit fixed-point integers
instead (order-independent) scaled from ``max|grad_output| * sum|attention_weights|`` over finite
entries, with per-element flags giving Inf and NaN terms the IEEE sum. See docs/ops.md.
On CUDA the level metadata (``spatial_shapes``, ``level_start_index``) is not read on the host
(that would synchronize the stream): a level that does not fit inside ``value`` is read as empty
(zeros) instead of raising as on the CPU.

Kernel registry: slot ``ms_deform_attn`` has the ``grid_sample`` formulation
(:func:`turbo_physai.kernels.reference.ms_deform_attn`) as its reference; :func:`register_kernels`
adds :func:`ms_deform_attn` as the built-in ``cpp`` implementation for CPU tensors and ``cuda`` for
CUDA tensors.
"""

from __future__ import annotations

import functools

import torch
from torch.autograd.function import once_differentiable

from turbo_physai import _core
from turbo_physai.kernels.reference import check_ms_deform_attn as check_inputs
from turbo_physai.kernels.reference import ms_deform_attn as ms_deform_attn_reference
from turbo_physai.ops._eager import dispatcher_needed, profiled
from turbo_physai.ops._msda_kernels import (
    backward_cpu,
    backward_cuda,
    check_grad_output,
    forward_cpu,
    forward_cuda,
)

__all__ = ["SLOT", "ms_deform_attn", "ms_deform_attn_reference", "register_kernels"]

SLOT = "ms_deform_attn"
_OP = "turbo_physai::ms_deform_attn"
_BACKWARD_OP = "turbo_physai::ms_deform_attn_backward"
_Tensor = torch.Tensor

# --- the custom ops: graphs, fake tensors, modes and transforms -------------------------------

_forward_op = torch.library.custom_op(_OP, forward_cpu, mutates_args=(), device_types="cpu")
_forward_op.register_kernel("cuda", forward_cuda)
_backward_op = torch.library.custom_op(_BACKWARD_OP, backward_cpu, mutates_args=(),
                                       device_types="cpu")
_backward_op.register_kernel("cuda", backward_cuda)


@_forward_op.register_fake
def _forward_fake(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights):
    check_inputs(value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
    n, _, m, d = value.shape
    return sampling_locations.new_empty((n, sampling_locations.shape[1], m * d))


@_forward_op.register_vmap
def _forward_vmap(info, in_dims, value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights):
    """``torch.func.vmap``: one call for the whole vmapped batch. With value vmapped, the vmapped
    dimension joins N (locations and weights expanded where they are not vmapped); with value
    shared, it joins the queries Lq instead, so value is not copied once per entry. Vmapped
    level metadata (each entry could have its own levels) runs one call per entry."""
    v_dim, shapes_dim, starts_dim, loc_dim, attn_dim = in_dims
    size = info.batch_size
    if shapes_dim is not None or starts_dim is not None or size == 0:
        args = (value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
        outs = [_forward_op(*(t if d is None else t.select(d, i) for t, d in zip(args, in_dims,
                                                                                  strict=True)))
                for i in range(size)]
        return torch.stack(outs) if outs else _empty_vmapped(info, in_dims, *args), 0

    def leading(t, dim):  # the vmapped dimension first, expanded where t is shared
        return t.movedim(dim, 0) if dim is not None else t.expand(size, *t.shape)

    if v_dim is not None:  # (B, N, ...) -> (B*N, ...)
        def fold(t, dim):
            t = leading(t, dim)
            return t.reshape(size * t.shape[1], *t.shape[2:])

        out = _forward_op(fold(value, v_dim), spatial_shapes, level_start_index,
                          fold(sampling_locations, loc_dim), fold(attention_weights, attn_dim))
        return out.view(size, -1, *out.shape[1:]), 0

    def fold_queries(t, dim):  # (B, N, Lq, ...) -> (N, B*Lq, ...)
        t = leading(t, dim).movedim(0, 1)
        return t.reshape(t.shape[0], size * t.shape[2], *t.shape[3:])

    out = _forward_op(value, spatial_shapes, level_start_index,
                      fold_queries(sampling_locations, loc_dim),
                      fold_queries(attention_weights, attn_dim))
    return out.view(out.shape[0], size, -1, out.shape[2]), 1


def _empty_vmapped(info, in_dims, value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights):
    # A vmapped batch of 0 entries: the output shape, from the entries' shapes.
    v_dim, _, _, loc_dim, _ = in_dims
    n, _, m, d = value.shape if v_dim is None else value.movedim(v_dim, 0).shape[1:]
    lq = (sampling_locations.shape if loc_dim is None
          else sampling_locations.movedim(loc_dim, 0).shape[1:])[1]
    return sampling_locations.new_empty((0, n, lq, m * d))  # the output has the points' dtype


@_backward_op.register_fake
def _backward_fake(grad_output, value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights):
    check_grad_output(grad_output, value, sampling_locations)
    return (value.new_empty(value.shape), sampling_locations.new_empty(sampling_locations.shape),
            attention_weights.new_empty(attention_weights.shape))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _input_grads(ctx, grads):
    # The kernel computes all three; autograd gets only those it asked for.
    need = ctx.needs_input_grad
    return (grads[0] if need[0] else None, None, None, grads[1] if need[3] else None,
            grads[2] if need[4] else None)


def _autograd_backward(ctx, grad_output):
    return _input_grads(ctx, _backward_op(grad_output, *ctx.saved_tensors))


_forward_op.register_autograd(_autograd_backward, setup_context=_setup_context)

# --- autocast: the op promotes, as torch's autocast does grid_sample, keeping 16-bit values ----

_forward_overload = torch.ops.turbo_physai.ms_deform_attn.default
_FLOAT32 = torch.float32
_HALVES = (torch.float16, torch.bfloat16)
_AUTOCAST = (torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
             | torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA))
_autocast_lib = torch.library.Library("turbo_physai", "IMPL")


def _autocast_forward(value, spatial_shapes, level_start_index, sampling_locations,
                      attention_weights):
    """Under autocast, value, locations and weights of different floating dtypes are promoted to
    the widest of them, then the op runs with autocast off, so the output has the dtype autocast
    gives grid_sample, the op this one replaces. Under CUDA autocast a model passes a
    float16/bfloat16 value (a linear projection) with float32 locations and softmax weights: that
    value stays as it is (the kernels read it in 16 bits and accumulate in float32, the same sums
    as on a float32 copy of it, without the copy), the rest is float32. Narrowing the locations
    instead would misplace points by up to a third of a pixel on a 167-pixel map."""
    with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST):
        value, sampling_locations, attention_weights = _promoted(value, sampling_locations,
                                                                 attention_weights)
        return _forward_overload(value, spatial_shapes, level_start_index, sampling_locations,
                                 attention_weights)


def _promoted(value, sampling_locations, attention_weights):
    """The inputs as autocast hands them to the op (``_autocast_forward``); the eager fast path
    casts the same way under autocast."""
    floats = [t.dtype for t in (value, sampling_locations, attention_weights)
              if t.is_floating_point()]
    dtype = functools.reduce(torch.promote_types, floats) if floats else None

    def cast(t):
        return t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t

    mixed = dtype is _FLOAT32 and value.dtype in _HALVES
    return (value if mixed else cast(value)), cast(sampling_locations), cast(attention_weights)


for _key in ("AutocastCPU", "AutocastCUDA"):
    _autocast_lib.impl("ms_deform_attn", _autocast_forward, _key)

# --- the eager fast path: the same kernel functions, without the dispatcher --------------------


class _Function(torch.autograd.Function):
    """Autograd of the fast path. Its backward calls the backward kernel function directly as
    well, unless something now needs the dispatcher (a mode entered around ``backward()``,
    compiled autograd tracing it), which then sees ``turbo_physai::ms_deform_attn_backward``.
    The backward is not itself differentiable (neither is the custom op's)."""

    @staticmethod
    def forward(ctx, value, spatial_shapes, level_start_index, sampling_locations,
                attention_weights):
        ctx.save_for_backward(value, spatial_shapes, level_start_index, sampling_locations,
                              attention_weights)
        kernel = forward_cuda if value.is_cuda else forward_cpu
        return kernel(value, spatial_shapes, level_start_index, sampling_locations,
                      attention_weights)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        saved = ctx.saved_tensors
        if dispatcher_needed():
            return _input_grads(ctx, _backward_op(grad_output, *saved))
        kernel = backward_cuda if saved[0].is_cuda else backward_cpu
        return _input_grads(ctx, profiled(_BACKWARD_OP, kernel, grad_output, *saved))


def _fast(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    if value.dim() != 4 or sampling_locations.dim() != 6:
        # The output's shape is read from these; the checks name the tensor (and raise).
        check_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                     attention_weights)
    if torch.is_grad_enabled() and (value.requires_grad or sampling_locations.requires_grad
                                    or attention_weights.requires_grad):
        return _Function.apply(value, spatial_shapes, level_start_index, sampling_locations,
                               attention_weights)
    kernel = forward_cuda if value.is_cuda else forward_cpu
    return kernel(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights)


def ms_deform_attn(value: torch.Tensor, spatial_shapes: torch.Tensor,
                   level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                   attention_weights: torch.Tensor) -> torch.Tensor:
    """Multi-scale deformable attention, ``(N, Lq, M*D)``; differentiable in value, locations
    and weights. Bad inputs raise TypeError/ValueError naming the tensor. See the module doc."""
    args = (value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
    if not dispatcher_needed() and type(value) is _Tensor and type(spatial_shapes) is _Tensor \
            and type(level_start_index) is _Tensor and type(sampling_locations) is _Tensor \
            and type(attention_weights) is _Tensor and (value.is_cpu or value.is_cuda):
        if torch._C._is_any_autocast_enabled() and torch.is_autocast_enabled(value.device.type):
            # What the op's autocast kernel would do (usually nothing: a 16-bit value with
            # float32 locations and weights is taken as it is).
            value, sampling_locations, attention_weights = _promoted(
                value, sampling_locations, attention_weights)
            args = (value, spatial_shapes, level_start_index, sampling_locations,
                    attention_weights)
        try:
            return profiled(_OP, _fast, *args)
        except (BufferError, RuntimeError):
            # DLPack cannot carry a tensor, so it is not on value's device (it is on the meta
            # device, say), or torch cannot give its data (a sparse or mkldnn layout): the checks
            # name it. Anything else is raised as it came.
            check_inputs(*args)
            raise
    if torch._C._are_functorch_transforms_active() and torch.is_grad_enabled() and any(
            isinstance(t, _Tensor) and t.requires_grad
            for t in (value, sampling_locations, attention_weights)):
        # torch's custom-op autograd cannot run under torch.func transforms; say so plainly.
        raise NotImplementedError(
            "turbo_physai.ops.ms_deform_attn: differentiating through torch.func transforms "
            "(grad, vjp, jacrev...) is not supported; use torch.autograd")
    if not torch._C._is_any_autocast_enabled():  # else the op's autocast kernel casts first
        spatial_shapes, level_start_index = check_inputs(*args)
    return _forward_op(value, spatial_shapes, level_start_index, sampling_locations,
                       attention_weights)


def register_kernels(register) -> None:
    """Built-in provider hook (turbo_physai.kernels.providers.BUILTIN): the C++ CPU kernel and,
    on CUDA builds with a GPU, the CUDA kernel (float32/float16/bfloat16)."""
    register(SLOT, ms_deform_attn, name="cpp", requires={"device": "cpu", "args": [0, 3, 4]})
    if hasattr(_core, "ms_deform_attn_forward_cuda") and torch.cuda.is_available():
        register(SLOT, ms_deform_attn, name="cuda",
                 requires={"device": "cuda", "dtype": ["float32", "float16", "bfloat16"],
                           "args": [0, 3, 4]})
