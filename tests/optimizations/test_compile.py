"""Compile wrap factories: options, laziness (check() builds, never compiles), same results."""

import pytest
from openmmlab_env import openmmlab_packages

from turbo_physai.optimizations.common import compile as lazy
from turbo_physai.optimizations.models.bevformer.compile import compile_wrapper
from turbo_physai.optimizations.models.bevfusion.gaussian import (
    compiled_draw_heatmap_gaussian_wrapper,
    draw_heatmap_gaussian,
)

torch = pytest.importorskip("torch")

EAGER = {"backend": "eager"}  # graph capture without code generation: seconds, not minutes


def test_defaults_are_the_seed_documents():
    assert lazy.compile_options({}) == {
        "mode": "max-autotune-no-cudagraphs",
        "fullgraph": False,
        "dynamic": None,
        "backend": "inductor",
    }


def test_mode_goes_to_inductor_only_and_unknown_options_are_named():
    assert "mode" not in lazy.compile_options({"backend": "eager", "mode": "reduce-overhead"})
    assert lazy.compile_options({"fullgraph": True})["fullgraph"] is True
    with pytest.raises(ValueError, match=r"unknown compile option\(s\) \['modes'\]"):
        compile_wrapper(lambda x: x, {"modes": "default"})


def test_matmul_precision_holds_for_the_compiled_call_only(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    seen = []

    def probe(x):
        seen.append(torch.get_float32_matmul_precision())
        if x is None:
            raise KeyError("inside")
        return x

    before = torch.get_float32_matmul_precision()
    wrapped = compile_wrapper(probe, {"matmul_precision": "high"})
    assert wrapped(1) == 1 and seen == ["high"]
    assert torch.get_float32_matmul_precision() == before
    with pytest.raises(KeyError, match="inside"):  # put back on errors too
        wrapped(None)
    assert torch.get_float32_matmul_precision() == before
    compile_wrapper(probe, {})(2)  # the default leaves the process's precision alone
    assert seen[-1] == before


def test_matmul_precision_is_checked_when_the_group_is_built():
    assert "matmul_precision" not in lazy.compile_options({"matmul_precision": "high"})
    with pytest.raises(ValueError, match=r"matmul_precision must be one of .*got 'tf32'"):
        compile_wrapper(lambda x: x, {"matmul_precision": "tf32"})


def test_building_does_not_compile_first_call_does_once(monkeypatch):
    calls = []

    def fake_compile(fn, **kwargs):
        calls.append(kwargs)
        return fn

    def double(x):
        """doc"""
        return 2 * x

    monkeypatch.setattr(torch, "compile", fake_compile)
    wrapped = compile_wrapper(double, {"backend": "aot_eager", "dynamic": True})
    assert calls == []
    assert wrapped.__wrapped__ is double and wrapped.__name__ == "double"
    assert wrapped(3) == 6 and wrapped(4) == 8
    assert calls == [{"fullgraph": False, "dynamic": True, "backend": "aot_eager"}]


def test_bevformer_layer_compiled_equals_eager():
    with openmmlab_packages():
        from projects.mmdet3d_plugin.bevformer.modules.encoder import BEVFormerLayer

        torch.manual_seed(0)
        layer = BEVFormerLayer().eval()
        query, pos = torch.randn(2, 10, 32), torch.randn(2, 10, 32)
        wrapped = compile_wrapper(BEVFormerLayer.forward, EAGER)
        with torch.no_grad():
            expected = layer(query, bev_pos=pos, bev_h=2, bev_w=5)
            got = wrapped(layer, query, bev_pos=pos, bev_h=2, bev_w=5)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_compiled_heatmap_wrapper_equals_uncompiled():
    wrapped = compiled_draw_heatmap_gaussian_wrapper(object(), EAGER)
    assert wrapped.__wrapped__ is draw_heatmap_gaussian
    a, b = torch.zeros(16, 16), torch.zeros(16, 16)
    for center in (torch.tensor([3, 4], dtype=torch.int32), torch.tensor([15, 0])):
        wrapped(a, center, 4)
        draw_heatmap_gaussian(b, center, 4)
    assert torch.equal(a, b) and a.max() == 1
