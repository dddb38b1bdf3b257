// csrc/kernels/fake_quant_fp4/fake_quant_fp4.h: MXFP4 / NVFP4 fake quantization and NVFP4 unpack.
#pragma once

#include <cstdint>

namespace turbo_physai::kernels {

/// The two FP4 formats of LibreYOLO: E2M1 elements in blocks along the last dimension.
/// MX: 32-element blocks, power-of-two (E8M0) block scales. NV: 16-element blocks, an E4M3
/// block scale times a float32 tensor scale `max(tensor_amax / 2688, 1e-12)`.
enum class Fp4Format { mx, nv };

inline std::int64_t fp4_block(Fp4Format f) { return f == Fp4Format::mx ? 32 : 16; }

/// A contiguous rows x cols float32 `x` (cols: the last dimension; a short last block reads as
/// zero-padded) quantized to `out` (same layout): `fake_quant_e2m1(x / eff) * eff` with eff the
/// block's effective scale, which is also written to `block_scales` (rows x ceil(cols / block))
/// for the backward. NV reads `*tensor_amax`, or with a null `tensor_amax` takes max |x| over
/// the whole tensor (NaN if any is NaN); on CUDA it reduces that into `amax_scratch`, one float
/// of device memory the caller zeroed.
struct Fp4Args {
    const float *x;
    float *out;
    float *block_scales;
    std::int64_t rows;
    std::int64_t cols;
    Fp4Format format;
    const float *tensor_amax;
    float *amax_scratch;
};

/// Autograd's gradient through `(e2m1 straight-through of x / eff) * eff`: `(grad * eff) / eff`,
/// which is not grad where the product rounds, overflows or goes subnormal.
struct Fp4BackwardArgs {
    const float *grad;
    const float *block_scales;
    float *grad_x;
    std::int64_t rows;
    std::int64_t cols;
    std::int64_t block;
};

/// LibreYOLO's unpack_nvfp4_weight: `payload` rows of `payload_cols` bytes (`payload_row_stride`
/// apart), two E2M1 codes a byte, low nibble first (code = sign << 3 | level index). Code k of a
/// row dequantizes to `level * sign * max(block_scale * ts, 1e-12)` with its 16-code block's
/// float32 block_scale (at r * block_row_stride + b * block_stride; strides may be 0) and
/// ts = max(*tensor_amax / 2688, 1e-12). The first `width` values of each row go to the
/// contiguous rows x width `out`.
struct UnpackNvfp4Args {
    const std::uint8_t *payload;
    std::int64_t payload_row_stride;
    const float *block_scale;
    std::int64_t block_row_stride;
    std::int64_t block_stride;
    const float *tensor_amax;
    float *out;
    std::int64_t rows;
    std::int64_t width;
};

void fake_quant_fp4_cpu(const Fp4Args &args, int max_threads);
void fake_quant_fp4_backward_cpu(const Fp4BackwardArgs &args, int max_threads);
void unpack_nvfp4_cpu(const UnpackNvfp4Args &args, int max_threads);

}  // namespace turbo_physai::kernels
