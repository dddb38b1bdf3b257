"""Fused attention policy: fused in eager runs, manual math under jit.trace and ONNX export."""

from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")

from turbo_physai.kernels import attention  # noqa: E402

F = torch.nn.functional
# fp32, random init: fused SDPA and manual softmax(QK^T)V differ by summation order only. On the
# tiny models below the largest difference measured was 7.5e-8 (ViT) and 0 (Swin), torch 2.14 CPU;
# the stated bound leaves room for other CPUs' SIMD widths.
ATOL, RTOL = 1e-5, 1e-4


class _Block(torch.nn.Module):
    def __init__(self, fused):
        super().__init__()
        self.fused_attn = fused
        self.other = torch.nn.Linear(2, 2)


def test_set_fused_attention_counts_and_sets_flags():
    model = torch.nn.Sequential(_Block(True), _Block(False), torch.nn.Linear(2, 2))
    model[2].fused_attn = "not a bool"  # not timm's convention: left alone
    assert attention.set_fused_attention(model, enabled=False) == 2
    assert model[0].fused_attn is False and model[1].fused_attn is False
    assert attention.set_fused_attention(model) == 2
    assert bool(model[0].fused_attn) and model[2].fused_attn == "not a bool"


def _qkv(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, 5, 8, generator=gen) for _ in range(3)]


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"is_causal": True}, {"scale": 0.3}, {"attn_mask": "bool"}, {"attn_mask": "float"}],
)
def test_manual_math_matches_sdpa(kwargs):
    q, k, v = _qkv()
    if kwargs.get("attn_mask") == "bool":
        kwargs = {"attn_mask": torch.rand(5, 5, generator=torch.Generator().manual_seed(1)) > 0.3}
        kwargs["attn_mask"][:, 0] = True  # no fully masked row
    elif kwargs.get("attn_mask") == "float":
        kwargs = {"attn_mask": torch.randn(5, 5)}
    fused = attention.scaled_dot_product_attention(q, k, v, **kwargs)
    traced = torch.jit.trace(
        lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, **kwargs), (q, k, v)
    )
    assert "scaled_dot_product_attention" not in str(traced.graph)
    torch.testing.assert_close(traced(q, k, v), fused, atol=ATOL, rtol=RTOL)


class _SdpaCounter:
    """Counts calls to F.scaled_dot_product_attention while installed."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = F.scaled_dot_product_attention

        def counting(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(F, "scaled_dot_product_attention", counting)


def _tiny_timm_models():
    try:  # timm imports torchvision, whose wheel must match the installed torch build
        import timm
        from timm.models.swin_transformer import SwinTransformer
        from timm.models.vision_transformer import VisionTransformer
    except Exception as exc:
        pytest.skip(f"timm is not usable here: {type(exc).__name__}: {exc}")

    torch.manual_seed(0)
    vit = VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10
    )
    swin = SwinTransformer(
        img_size=32,
        patch_size=4,
        window_size=4,
        embed_dim=32,
        depths=(2, 2),
        num_heads=(2, 4),
        num_classes=10,
    )
    assert timm.__version__
    return {"vit": vit.eval(), "swin": swin.eval()}


@pytest.mark.parametrize("name", ["vit", "swin"])
def test_timm_fused_and_manual_agree(name, monkeypatch):
    model = _tiny_timm_models()[name]
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    counter = _SdpaCounter(monkeypatch)
    assert attention.set_fused_attention(model, enabled=False) > 0
    with torch.no_grad():
        manual = model(x)
    assert counter.calls == 0
    assert attention.set_fused_attention(model, enabled=True) > 0
    with torch.no_grad():
        fused = model(x)
    assert counter.calls > 0  # the fused path really ran
    torch.testing.assert_close(fused, manual, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", ["vit", "swin"])
def test_timm_trace_and_onnx_export_take_the_manual_path(name, monkeypatch):
    model = _tiny_timm_models()[name]
    attention.set_fused_attention(model, enabled=True)
    x = torch.randn(1, 3, 32, 32)
    counter = _SdpaCounter(monkeypatch)
    traced = torch.jit.trace(model, (x,), check_trace=False)
    assert counter.calls == 0
    assert "scaled_dot_product_attention" not in str(traced.inlined_graph)
    pytest.importorskip("onnxscript")
    torch.onnx.export(model, (x,), io.BytesIO(), dynamo=True)
    assert counter.calls == 0
    with torch.no_grad():
        model(x)
    assert counter.calls > 0  # and eager mode is fused again afterwards
