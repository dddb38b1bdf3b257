"""LibreYOLO's quantization arithmetic as portable torch code: the oracle our kernels match.

Each function computes what the reference of the LibreYOLO slot of the same name computes
(``libreyolo.quant.fake_quant`` and ``libreyolo.quant.packing``, 1.6.0): the same torch steps on
the same dtypes, so the bits, the output dtype and shape, and the errors are the same. The
fronts in :mod:`turbo_physai.ops.quant` run these where no kernel of ours takes the inputs
(other dtypes or devices, a scale that needs a gradient, jit tracing and ONNX export), and the
tests hold our kernels to them and to LibreYOLO's own functions. Nothing here needs libreyolo.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

EPS = 1e-12
E4M3_MAX = 448.0
E2M1_MAX = 6.0
NVFP4_BLOCK = 16
MXFP4_BLOCK = 32
#: E2M1 magnitudes by code (the sign is the code's fourth bit) and the midpoints between them.
E2M1_LEVELS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def straight_through(q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Forward ``q``, gradient identity to ``x``; in float32 ``x + (q - x)`` is not always q."""
    return x + (q - x).detach()


def fake_quant_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    s = scale.clamp(min=EPS)
    q = (x / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32) * s
    return straight_through(q, x)


def int8_weight_scale(weight: torch.Tensor, ch_axis: int) -> torch.Tensor:
    """Symmetric per-channel scale ``max(amax / 127, 1e-12)`` over every dim but ch_axis."""
    amax = weight.detach().abs()
    dims = [d for d in range(weight.dim()) if d != ch_axis]
    if dims:
        amax = amax.amax(dim=dims)
    return (amax / 127.0).clamp(min=EPS)


def fake_quant_int8_per_channel(weight: torch.Tensor, ch_axis: int = 0,
                                scale: torch.Tensor | None = None) -> torch.Tensor:
    if scale is None:
        scale = int8_weight_scale(weight, ch_axis)
    scale = scale.to(device=weight.device, dtype=torch.float32)
    zero_point = torch.zeros(scale.shape, dtype=torch.int32, device=weight.device)
    return torch.fake_quantize_per_channel_affine(weight, scale, zero_point, ch_axis, -128, 127)


def int8_affine_qparams(lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor ``(scale, zero_point)`` of a calibrated range widened to contain 0."""
    lo = torch.minimum(lo, torch.zeros_like(lo))
    hi = torch.maximum(hi, torch.zeros_like(hi))
    scale = ((hi - lo) / 255.0).clamp(min=EPS).reshape(1)
    zero_point = torch.clamp(torch.round(-128.0 - lo / scale), -128, 127).to(torch.int32)
    return scale, zero_point.reshape(1)


def fake_quant_int8_affine(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
                           scalars: bool = False) -> torch.Tensor:
    scale, zero_point = int8_affine_qparams(lo, hi)
    if scalars:  # python numbers, which ONNX export bakes in as constants
        return torch.fake_quantize_per_tensor_affine(
            x, float(scale.item()), int(zero_point.item()), -128, 127)
    return torch.fake_quantize_per_tensor_affine(x, scale, zero_point, -128, 127)


def _padded(x: torch.Tensor, block: int) -> tuple[torch.Tensor, int]:
    """x zero-padded along its last dim to whole blocks, and the padding."""
    pad = (-x.shape[-1]) % block
    return (F.pad(x, (0, pad)) if pad else x), pad


def int_group_scale(weight: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    """(out, groups) symmetric scales ``max(amax / (2^(bits-1) - 1), 1e-12)``."""
    w, _ = _padded(weight.detach().float(), group_size)
    groups = w.reshape(weight.shape[0], -1, group_size)
    return (groups.abs().amax(dim=-1) / float(2 ** (bits - 1) - 1)).clamp(min=EPS)


def fake_quant_int_grouped(weight: torch.Tensor, bits: int, group_size: int,
                           scale: torch.Tensor | None = None) -> torch.Tensor:
    out_features, in_features = weight.shape
    if scale is None:
        scale = int_group_scale(weight, bits, group_size)
    w, _ = _padded(weight.float(), group_size)
    groups = w.reshape(out_features, -1, group_size)
    s = scale.unsqueeze(-1).clamp(min=EPS)
    q = torch.clamp(torch.round(groups / s), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1) * s
    return straight_through(q.reshape(out_features, -1)[:, :in_features], weight)


def fake_quant_e2m1(y: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value of y (already scaled into [-6, 6]; ties go to the smaller level),
    straight-through."""
    levels = torch.tensor(E2M1_LEVELS, dtype=y.dtype, device=y.device)
    midpoints = torch.tensor(E2M1_MIDPOINTS, dtype=y.dtype, device=y.device)
    index = torch.bucketize(y.abs().clamp(max=E2M1_MAX), midpoints)
    return straight_through(levels[index] * torch.sign(y), y)


def _blockwise(x: torch.Tensor, block: int, block_scale) -> torch.Tensor:
    """``fake_quant_e2m1(blocks / eff) * eff`` with eff = block_scale(amax of each block)."""
    last = x.shape[-1]
    x, pad = _padded(x, block)
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // block, block)
    eff = block_scale(blocks.abs().amax(dim=-1, keepdim=True).detach())
    q = (fake_quant_e2m1(blocks / eff) * eff).reshape(*x.shape)
    return q[..., :last] if pad else q


def e8m0_scale(amax: torch.Tensor) -> torch.Tensor:
    """OCP MX power-of-two block scale ``2^(floor(log2(amax)) - 2)``, exponent in [-127, 127]."""
    exponent = torch.floor(torch.log2(amax.clamp(min=1e-30))) - 2.0
    return torch.exp2(exponent.clamp(-127.0, 127.0))


def fake_quant_mxfp4_weight(weight: torch.Tensor) -> torch.Tensor:
    return _blockwise(weight, MXFP4_BLOCK, e8m0_scale)


def fake_quant_mxfp4_dynamic(x: torch.Tensor) -> torch.Tensor:
    return _blockwise(x, MXFP4_BLOCK, e8m0_scale)


def quantize_e4m3(x: torch.Tensor) -> torch.Tensor:
    """x clamped to [1e-12, 448] and rounded to float8_e4m3fn, as float32."""
    return x.clamp(min=EPS, max=E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def _nvfp4(x: torch.Tensor, tensor_scale: torch.Tensor) -> torch.Tensor:
    tensor_scale = tensor_scale.clamp(min=EPS)

    def block_scale(amax):
        return (quantize_e4m3(amax / (E2M1_MAX * tensor_scale)) * tensor_scale).clamp(min=EPS)

    return _blockwise(x, NVFP4_BLOCK, block_scale)


def fake_quant_nvfp4_weight(weight: torch.Tensor, tensor_amax: torch.Tensor) -> torch.Tensor:
    return _nvfp4(weight, tensor_amax / (E4M3_MAX * E2M1_MAX))


def fake_quant_nvfp4_dynamic(x: torch.Tensor) -> torch.Tensor:
    return _nvfp4(x, x.abs().amax().detach() / (E4M3_MAX * E2M1_MAX))


def _unpacked_codes(payload: torch.Tensor, bits: int) -> torch.Tensor:
    """(out, cols * 8 / bits) uint8 codes, the lowest bits of each byte first, spelled as the
    packing contract spells them (which matters only for a payload that is not uint8)."""
    per_byte = 8 // bits
    codes = torch.empty((payload.shape[0], payload.shape[1] * per_byte), dtype=torch.uint8,
                        device=payload.device)
    if bits == 4:
        codes[:, 0::2] = payload & 0x0F
        codes[:, 1::2] = payload >> 4
    else:
        codes[:, 0::4] = payload & 0x03
        codes[:, 1::4] = (payload >> 2) & 0x03
        codes[:, 2::4] = (payload >> 4) & 0x03
        codes[:, 3::4] = (payload >> 6) & 0x03
    return codes


def unpack_int_grouped(payload: torch.Tensor, scale: torch.Tensor, bits: int, group_size: int,
                       in_features: int) -> torch.Tensor:
    assert bits in (2, 4), bits
    q = _unpacked_codes(payload, bits).float() + -(2 ** (bits - 1))
    s = scale.float().clamp(min=EPS).unsqueeze(-1)
    groups = q.reshape(payload.shape[0], -1, group_size) * s
    return groups.reshape(payload.shape[0], -1)[:, :in_features].contiguous()


def unpack_nvfp4(payload: torch.Tensor, block_scale: torch.Tensor, tensor_amax: torch.Tensor,
                 in_features: int) -> torch.Tensor:
    codes = _unpacked_codes(payload, 4)
    levels = torch.tensor(E2M1_LEVELS, dtype=torch.float32, device=payload.device)
    values = levels[(codes & 0x07).long()] * torch.where((codes & 0x08).bool(), -1.0, 1.0)
    tensor_scale = (tensor_amax.float() / (E4M3_MAX * E2M1_MAX)).clamp(min=EPS)
    eff = (block_scale.float() * tensor_scale).clamp(min=EPS)
    blocks = values.reshape(payload.shape[0], -1, NVFP4_BLOCK) * eff.unsqueeze(-1)
    return blocks.reshape(payload.shape[0], -1)[:, :in_features].contiguous()
