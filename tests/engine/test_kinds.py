"""Signatures the engine compares: torch.autograd.Function.apply is seen through to forward."""

import inspect

import pytest

from turbo_physai.engine import kinds

torch = pytest.importorskip("torch")


class WithCtx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, offset, bias=None, stride=1):
        return input

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None


class WithSetupContext(torch.autograd.Function):
    @staticmethod
    def forward(input, scale=2.0):
        return input * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass


def test_apply_reports_forward_without_ctx():
    assert str(kinds.signature_of(WithCtx.apply)) == "(input, offset, bias=None, stride=1)"
    # What we see through: (*args, **kwargs) up to torch 2.13, no signature at all from 2.14.
    try:
        plain = str(inspect.signature(WithCtx.apply))
    except ValueError:
        plain = None
    assert plain in (None, "(*args, **kwargs)")


def test_setup_context_style_forward_keeps_all_parameters():
    assert str(kinds.signature_of(WithSetupContext.apply)) == "(input, scale=2.0)"


def test_replacement_is_checked_against_forward():
    def good(input, offset, bias=None, stride=1):
        return input

    def missing_stride(input, offset, bias=None):
        return input

    original = kinds.signature_of(WithCtx.apply)
    assert kinds.accepts(original, inspect.signature(good)) is None
    assert "too many positional" in kinds.accepts(original, inspect.signature(missing_stride))


def test_other_methods_named_apply_are_untouched():
    class Plain:
        @classmethod
        def apply(cls, *args, **kwargs):
            return args

    assert str(kinds.signature_of(Plain.apply)) == "(*args, **kwargs)"
