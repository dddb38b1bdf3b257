"""Portable references of the built-in slots: they define the numbers, kernels make them fast."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from turbo_physai.kernels._torch import exporting

FP8_E4M3_MAX = 448.0
SCALE_MIN = 1e-12


def broadcast_shape(a, b) -> tuple[int, ...] | None:
    """torch's broadcast of two shapes, or None where they do not broadcast. Plain Python:
    ``torch.broadcast_shapes`` costs tens of microseconds a call (it goes through torch._refs)."""
    if torch.jit.is_tracing():  # jit.trace records sizes as tensors: let torch compare them
        try:
            return tuple(torch.broadcast_shapes(a, b))
        except RuntimeError:
            return None
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for p, q in zip(a, b, strict=True):
        if p != q and p != 1 and q != 1:
            return None
        out.append(q if p == 1 else p)
    return tuple(out)


def fp8_per_channel(x: torch.Tensor, scale: torch.Tensor) -> bool:
    """The slot's one departure from broadcasting: a 1-D scale as long as x's dim 0 scales the
    rows of x (per-channel), where torch would broadcast it along x's last dim."""
    return scale.dim() == 1 and scale.numel() != 1 and x.dim() >= 1 and scale.shape[0] == x.shape[0]


def check_fake_quant_fp8(x: torch.Tensor, scale: torch.Tensor, impl: str) -> None:
    """Raise a ValueError/TypeError naming the implementation, the tensor and what was expected."""
    where = f"fake_quant_fp8 (implementation {impl!r})"
    for label, t in (("x", x), ("scale", scale)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{where}: {label} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{where}: {label} must be a floating tensor, got {t.dtype}")
    if scale.device != x.device:
        raise ValueError(f"{where}: scale is on {scale.device}, x on {x.device}")
    if not fp8_per_channel(x, scale) and broadcast_shape(x.shape, scale.shape) is None:
        channels = x.shape[0] if x.dim() else 1
        raise ValueError(
            f"{where}: scale must have 1 element (per-tensor) or shape ({channels},) "
            f"(per-channel along dim 0 of x with shape {tuple(x.shape)}) or a shape that "
            f"broadcasts against x's, got shape {tuple(scale.shape)}"
        )


def fake_quant_fp8_forward(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``(x / s).clamp(+-448) -> float8_e4m3fn -> float32 * s`` with ``s = max(scale, 1e-12)``,
    computed in float32 and returned in x's dtype, with the shape x and scale broadcast to.
    No autograd: see :func:`fake_quant_fp8`."""
    s = scale.to(torch.float32).clamp(min=SCALE_MIN)
    if fp8_per_channel(x, s):
        s = s.reshape((-1,) + (1,) * (x.dim() - 1))
    q = (x.to(torch.float32) / s).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    return (q.to(torch.float8_e4m3fn).to(torch.float32) * s).to(x.dtype)


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        ctx.x_shape = x.shape
        return fake_quant_fp8_forward(x, scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad.sum_to_size(ctx.x_shape), None


def fake_quant_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Reference of the ``fake_quant_fp8`` slot: per-tensor, per-channel (dim 0) or broadcast
    scale, straight-through gradient to ``x`` (summed where x was broadcast), none to ``scale``."""
    check_fake_quant_fp8(x, scale, "reference")
    if exporting():  # an autograd.Function would be traced as an opaque PythonOp
        return fake_quant_fp8_forward(x, scale)
    return _StraightThrough.apply(x, scale)


_MSDA_HALVES = (torch.float16, torch.bfloat16)
_MSDA_FLOATS = (*_MSDA_HALVES, torch.float32, torch.float64)
#: Sampling points per query and head (L*P) the op takes: the CPU forward keeps a row's points
#: at hand, and no model comes near (Deformable DETR: 16); a huge expanded P is refused at once.
MSDA_MAX_POINTS = 1 << 16


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def check_ms_deform_attn(
    value, spatial_shapes, level_start_index, sampling_locations, attention_weights
):
    """Raise TypeError/ValueError naming the tensor, what was expected and what came.

    Only metadata is read (ranks, sizes, dtypes, devices), so this also runs on fake tensors at
    trace time. The data-dependent checks (level_start_index against spatial_shapes, the level
    areas against S) happen in the kernel front, which raises ValueError as well.
    Returns spatial_shapes and level_start_index as int64.
    """
    named = {"value": value, "spatial_shapes": spatial_shapes,
             "level_start_index": level_start_index, "sampling_locations": sampling_locations,
             "attention_weights": attention_weights}
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.layout is not torch.strided:
            raise TypeError(f"{name}: expected a dense (strided) tensor, got layout {t.layout}")
    layouts = {"value": (4, "(N, S, M, D)"), "spatial_shapes": (2, "(L, 2)"),
               "level_start_index": (1, "(L,)"), "sampling_locations": (6, "(N, Lq, M, L, P, 2)"),
               "attention_weights": (5, "(N, Lq, M, L, P)")}
    for name, (rank, layout) in layouts.items():
        if named[name].dim() != rank:
            raise ValueError(f"{name}: expected a {rank}-d tensor {layout}, "
                             f"got shape {_shape(named[name])}")
    if value.dtype not in _MSDA_FLOATS:
        raise TypeError(f"value: expected a floating dtype {_MSDA_FLOATS}, got {value.dtype}")
    # Locations and weights share a dtype: value's, or float32 with a 16-bit value (mixed
    # precision: a 16-bit projection with float32 reference points and softmax weights).
    points = sampling_locations.dtype
    if points != value.dtype and not (value.dtype in _MSDA_HALVES and points == torch.float32):
        mixed = " or torch.float32 (mixed precision)" if value.dtype in _MSDA_HALVES else ""
        raise TypeError(f"sampling_locations: expected dtype {value.dtype} (the dtype of value)"
                        f"{mixed}, got {points}")
    if attention_weights.dtype != points:
        raise TypeError(f"attention_weights: expected dtype {points} (the dtype of "
                        f"sampling_locations), got {attention_weights.dtype}")
    for name in ("spatial_shapes", "level_start_index"):
        if named[name].dtype.is_floating_point or named[name].dtype.is_complex \
                or named[name].dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer dtype (int64), got {named[name].dtype}")
    for name, t in named.items():
        if t.device != value.device:
            raise ValueError(f"{name}: expected device {value.device} (the device of value), "
                             f"got {t.device}")

    n, _, m, _ = value.shape
    levels = spatial_shapes.shape[0]
    lq, points = sampling_locations.shape[1], sampling_locations.shape[4]
    expected = {"spatial_shapes": (levels, 2), "level_start_index": (levels,),
                "sampling_locations": (n, lq, m, levels, points, 2),
                "attention_weights": (n, lq, m, levels, points)}
    sources = {"spatial_shapes": "L rows of (H, W)", "level_start_index": "L of spatial_shapes",
               "sampling_locations": "N, M of value, L of spatial_shapes",
               "attention_weights": "N, M of value, Lq, L, P of sampling_locations"}
    for name, shape in expected.items():
        if _shape(named[name]) != shape:
            raise ValueError(f"{name}: expected shape {shape} ({sources[name]}), "
                             f"got {_shape(named[name])}")
    if levels * points > MSDA_MAX_POINTS:
        raise ValueError(f"sampling_locations: expected at most {MSDA_MAX_POINTS} sampling "
                         f"points per query and head (L*P), got L = {levels}, P = {points}")
    return spatial_shapes.to(torch.int64), level_start_index.to(torch.int64)



def _check_levels(value, spatial_shapes, level_start_index) -> list[tuple[int, int]]:
    """The data-dependent checks the C++ front makes for the kernel, for the reference path."""
    shapes = [(int(h), int(w)) for h, w in spatial_shapes.tolist()]
    starts, total = [], 0
    for h, w in shapes:
        if h < 0 or w < 0:
            raise ValueError(f"spatial_shapes: expected non-negative (H, W), got {shapes}")
        starts.append(total)
        total += h * w
    for i, (got, want) in enumerate(zip(level_start_index.tolist(), starts, strict=True)):
        if got != want:
            raise ValueError(f"level_start_index[{i}] = {got}, expected {want} (the sum of the "
                             "H*W of spatial_shapes before it)")
    if total != value.shape[1]:
        raise ValueError(f"value: expected S = {total} (sum of H*W over spatial_shapes), "
                         f"got S = {value.shape[1]}")
    return shapes


def ms_deform_attn(value: torch.Tensor, spatial_shapes: torch.Tensor,
                             level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                             attention_weights: torch.Tensor) -> torch.Tensor:
    """Reference of the ``ms_deform_attn`` slot: one ``grid_sample`` per level (what
    transformers runs on CPU).

    Inputs are checked as the op checks them, with the same messages. A 16-bit value with float32
    locations (mixed precision) is sampled in float32: the result has the locations' dtype.
    """
    spatial_shapes, level_start_index = check_ms_deform_attn(
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
    shapes = _check_levels(value, spatial_shapes, level_start_index)
    value = value.to(sampling_locations.dtype)
    n, _, m, d = value.shape
    _, lq, _, levels, points, _ = sampling_locations.shape
    value_list = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * sampling_locations - 1
    sampled = []
    for level, (h, w) in enumerate(shapes):
        # (N, H*W, M, D) -> (N*M, D, H, W); grid (N, Lq, M, P, 2) -> (N*M, Lq, P, 2)
        value_l = value_list[level].flatten(2).transpose(1, 2).reshape(n * m, d, h, w)
        grid_l = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(F.grid_sample(value_l, grid_l, mode="bilinear", padding_mode="zeros",
                                     align_corners=False))
    weights = attention_weights.transpose(1, 2).reshape(n * m, 1, lq, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1).view(n, m * d, lq)
    return out.transpose(1, 2).contiguous()
