// csrc/kernels/fake_quant_fp8/fake_quant_fp8.cu: fake_quant_fp8 on CUDA, 4 elements a thread.
#include "fake_quant_fp8/fake_quant_fp8_cuda.h"
#include "fake_quant_fp8/fp8_e4m3fn.h"
#include "quant_math/cuda_launch.cuh"

namespace turbo_physai::kernels {
namespace {

// Python hands contiguous rows (x_row_stride == out_row_stride == cols), the layout this kernel
// takes: element i is row i / cols.
template <bool kStraightThrough>
__global__ void fake_quant_fp8_kernel(FakeQuantFp8Args a, bool vector) {
    const std::int64_t total = a.rows * a.cols;
    const auto row_scale = [&a](std::int64_t i) {
        return fake_quant_fp8_scale(a.scale[(i / a.cols) * a.scale_stride]);
    };
    const auto quantize = [](float x, float s) {
        const float q = fake_quant_fp8_value(x, s);
        return kStraightThrough ? quant::straight_through(q, x) : q;
    };
    for (std::int64_t i = quant::first_of_group(); i < total; i += quant::group_stride())
        quant::map4(a.x, a.out, i, total, vector, row_scale, quantize);
}

}  // namespace

cudaError_t fake_quant_fp8_cuda(const FakeQuantFp8Args &given, cudaStream_t stream) {
    if (given.rows <= 0 || given.cols <= 0)
        return cudaSuccess;
    FakeQuantFp8Args args = given;
    if (args.rows == 1)  // a single row's stride is never used
        args.x_row_stride = args.out_row_stride = args.cols;
    if (args.x_row_stride != args.cols || args.out_row_stride != args.cols)
        return cudaErrorInvalidValue;  // the binding refuses these first, with a message
    const bool vector = args.cols % quant::kPerThread == 0 && quant::aligned16(args.x) &&
                        quant::aligned16(args.out);
    const unsigned blocks = quant::blocks_for(args.rows * args.cols);
    if (args.straight_through)
        fake_quant_fp8_kernel<true><<<blocks, quant::kThreads, 0, stream>>>(args, vector);
    else
        fake_quant_fp8_kernel<false><<<blocks, quant::kThreads, 0, stream>>>(args, vector);
    return cudaGetLastError();
}

}  // namespace turbo_physai::kernels
