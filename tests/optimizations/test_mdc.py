"""mmcv.mdc replacement: forward and gradients against the fixture's stock MDC (mmcv's math,
tap by tap), runtime condition, shape errors, version check."""

import pytest
from openmmlab_env import openmmlab_packages

from turbo_physai.optimizations.common.mmcv import mdc

torch = pytest.importorskip("torch")

# (N, C, H, W, Cout, kh, kw, stride, padding, dilation, groups, deform_groups, bias, spread)
# spread scales the offsets: 4.0 sends many taps outside the image, and beyond -1 / H.
CASES = [
    (1, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1, 1, True, 1.0),
    (2, 4, 7, 6, 6, 3, 2, (2, 1), (1, 2), (1, 2), 2, 2, True, 4.0),
    (2, 6, 6, 7, 4, 1, 3, 1, 0, (2, 1), 2, 3, False, 2.0),
    (1, 4, 9, 8, 8, 3, 3, 2, 2, 2, 4, 1, True, 4.0),
    (3, 3, 4, 4, 3, 2, 2, 1, 0, 1, 3, 3, True, 0.5),
]


@pytest.fixture
def stock_mdc():
    with openmmlab_packages():
        from mmcv.ops import modulated_deform_conv2d

        yield modulated_deform_conv2d


def make_inputs(case, dtype=torch.float64, seed=0):
    n, c, h, w, c_out, kh, kw, stride, pad, dil, groups, dg, with_bias, spread = case
    gen = torch.Generator().manual_seed(seed)
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (pad, pad) if isinstance(pad, int) else pad
    dh, dw = (dil, dil) if isinstance(dil, int) else dil
    ho = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    wo = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, dtype=dtype) * scale).requires_grad_()

    tensors = [
        rand(n, c, h, w),
        rand(n, dg * 2 * kh * kw, ho, wo, scale=spread),
        torch.rand(n, dg * kh * kw, ho, wo, generator=gen, dtype=dtype).requires_grad_(),
        rand(c_out, c // groups, kh, kw),
        rand(c_out) if with_bias else None,
    ]
    return tensors, (stride, pad, dil, groups, dg)


def grads(fn, tensors, params, grad_out=None):
    out = fn(*tensors, *params)
    if grad_out is None:
        grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1),
                               dtype=out.dtype)
    leaves = [t for t in tensors if t is not None]
    return out, torch.autograd.grad(out, leaves, grad_out), grad_out


@pytest.mark.parametrize("case", CASES)
def test_forward_and_gradients_match_mmcv_math_in_float64(case, stock_mdc):
    tensors, params = make_inputs(case)
    ref, ref_grads, grad_out = grads(stock_mdc, tensors, params)
    out, our_grads, _ = grads(mdc.modulated_deform_conv2d, tensors, params, grad_out)
    # float64 and two formulations of the same sums: agreement to rounding noise.
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    names = ["input", "offset", "mask", "weight", "bias"]
    for name, ours, theirs in zip(names[: len(ref_grads)], our_grads, ref_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-11, atol=1e-11, msg=name)


def test_gradients_are_derivatives():
    tensors, params = make_inputs((1, 2, 4, 4, 2, 2, 2, 1, 1, 1, 2, 2, True, 2.0))

    def fn(*t):
        return mdc.modulated_deform_conv2d(*t, *params)

    assert torch.autograd.gradcheck(fn, tuple(tensors), eps=1e-6, atol=1e-6)


def test_float32_within_stated_tolerance_of_float64(stock_mdc):
    tensors, params = make_inputs(CASES[1])
    ref = stock_mdc(*tensors, *params)
    low = [t.detach().float() if t is not None else None for t in tensors]
    out = mdc.modulated_deform_conv2d(*low, *params)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref.detach(), rtol=1e-5, atol=1e-5)


def test_channels_last_in_channels_last_out(stock_mdc):
    tensors, params = make_inputs(CASES[0])
    cl = [t.detach().contiguous(memory_format=torch.channels_last) for t in tensors[:4]]
    out = mdc.modulated_deform_conv2d(*cl, tensors[4].detach(), *params)
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    torch.testing.assert_close(out, stock_mdc(*tensors, *params).detach(), rtol=0, atol=1e-12)


def test_runtime_condition_needs_all_four_channels_last():
    tensors, _ = make_inputs(CASES[0])
    cl = [t.detach().contiguous(memory_format=torch.channels_last) for t in tensors[:4]]
    assert mdc.supports_channels_last(*cl, None, 1, 0, 1, 1, 1) is True
    assert mdc.supports_channels_last(*cl[:3], tensors[3], None) is False


def test_shape_errors_name_the_tensor():
    tensors, params = make_inputs(CASES[0])
    bad_offset = tensors[1].detach()[:, :-1]
    with pytest.raises(ValueError, match=r"offset has shape \(1, 17, 5, 5\), expected"):
        mdc.modulated_deform_conv2d(tensors[0], bad_offset, *tensors[2:], *params)
    with pytest.raises(ValueError, match="must be divisible by groups=3"):
        mdc.modulated_deform_conv2d(*tensors, 1, 1, 1, 3, 1)


class Versions:
    def __init__(self, **versions):
        self.versions = versions

    def package_version(self, name):
        return self.versions.get(name.replace("-", "_"))


@pytest.mark.parametrize(
    "versions, compatible",
    [
        ({"mmcv_full": "1.7.1"}, True),
        ({"mmcv_full": "1.4.0"}, True),
        ({"mmcv_full": "1.3.9"}, False),
        ({"mmcv": "2.1.0"}, True),
        ({"mmcv": "1.7.0"}, False),  # mmcv-lite 1.x has no ops
        ({"mmcv": "3.0.0"}, False),
        ({"mmcv": "not-a-version"}, False),
        ({}, True),  # not installed: the unresolved target blocks the group instead
    ],
)
def test_version_check(versions, compatible):
    result = mdc.check_mmcv_version(Versions(**versions))
    assert result.compatible is compatible, result
    assert result.expected == mdc.VALIDATED
