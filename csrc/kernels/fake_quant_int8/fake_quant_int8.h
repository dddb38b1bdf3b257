// csrc/kernels/fake_quant_int8/fake_quant_int8.h: LibreYOLO's int8 fake quantization, framework-free.
#pragma once

#include <cstdint>

namespace turbo_physai::kernels {

/// A contiguous float32 tensor viewed as outer x channels x inner; channel c uses scale[c]
/// (torch.fake_quantize_per_channel_affine, zero point 0, range [-128, 127]). With `dynamic`
/// the kernel first writes scale[c] = max(amax_c / 127, 1e-12), amax_c the largest |x| of the
/// channel (LibreYOLO's int8_weight_qparams); otherwise it reads the given scale.
struct Int8PerChannelArgs {
    const float *x;
    float *out;
    float *scale;
    std::int64_t outer;
    std::int64_t channels;
    std::int64_t inner;
    bool dynamic;
};

/// The backward of either: grad_x = grad * mask, the mask torch keeps (code inside the range
/// before clamping), recomputed from x and the scale the forward used.
struct Int8PerChannelBackwardArgs {
    const float *grad;
    const float *x;
    const float *scale;
    float *grad_x;
    std::int64_t outer;
    std::int64_t channels;
    std::int64_t inner;
};

/// Per-tensor affine int8 of `n` contiguous floats with the qparams LibreYOLO derives from a
/// calibrated range: lo and hi point to one float each (on the kernel's device).
struct Int8AffineArgs {
    const float *x;
    float *out;
    std::int64_t n;
    const float *lo;
    const float *hi;
};

struct Int8AffineBackwardArgs {
    const float *grad;
    const float *x;
    float *grad_x;
    std::int64_t n;
    const float *lo;
    const float *hi;
};

void fake_quant_int8_per_channel_cpu(const Int8PerChannelArgs &args, int max_threads);
void fake_quant_int8_per_channel_backward_cpu(const Int8PerChannelBackwardArgs &args,
                                              int max_threads);
void fake_quant_int8_affine_cpu(const Int8AffineArgs &args, int max_threads);
void fake_quant_int8_affine_backward_cpu(const Int8AffineBackwardArgs &args, int max_threads);

/// The zero point LibreYOLO's int8_act_qparams gives [lo, hi] by the CPU's rules (INT32_MIN
/// from a NaN on x86) or CUDA's (0): its `scalars=True` path refuses one outside [-128, 127].
std::int64_t int8_affine_zero_point(float lo, float hi, bool cuda_rules);

}  // namespace turbo_physai::kernels
