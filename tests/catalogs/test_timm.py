"""The timm catalog: models built while ``timm.fused_attention`` is applied get our fused
attention policy on every attention module; rollback() restores each flag exactly."""

import pytest

import turbo_physai as tpa
from turbo_physai.catalogs import timm as catalog

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")  # needs torchvision: the CI venv has it, system python not

from turbo_physai.kernels.attention import FUSED_WHEN_EAGER  # noqa: E402

GROUP = "timm.fused_attention"


def _vit(create=None):
    create = create or timm.create_model
    return create("vit_tiny_patch16_224", pretrained=False, num_classes=5, img_size=32,
                  patch_size=8, depth=2)


def _flags(model):
    return [vars(m)["fused_attn"] for m in model.modules() if "fused_attn" in vars(m)]


def test_models_built_while_applied_get_the_policy_and_rollback_restores_the_flags():
    stock = _vit()
    assert _flags(stock) == [True, True]  # timm's default on a torch with SDPA
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = stock(x)
    before = timm.models._factory.create_model
    report = tpa.apply(groups=[GROUP], strict=True)
    assert timm.create_model is timm.models.create_model is timm.models._factory.create_model
    assert timm.create_model is not before
    model = _vit()
    model.load_state_dict(stock.state_dict())
    assert _flags(model) == [FUSED_WHEN_EAGER, FUSED_WHEN_EAGER]
    assert _flags(stock) == [True, True]  # built before apply: not reached (documented)
    with torch.no_grad():
        torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6)
    assert report.group(GROUP).status == "applied"
    outcome = tpa.rollback()
    assert timm.models._factory.create_model is before and timm.create_model is before
    assert _flags(model) == [True, True]
    assert all(type(f) is bool for f in _flags(model))
    assert len(outcome["restored"]) == 3 + 2  # the function, its two aliases, two flags


def test_export_takes_manual_math_while_eager_runs_fused():
    with tpa.applied(groups=[GROUP], strict=True):
        model = _vit().eval()
        attention = model.blocks[0].attn
        calls = []
        original = torch.nn.functional.scaled_dot_product_attention

        def counting(*args, **kwargs):
            calls.append(torch.jit.is_tracing())
            return original(*args, **kwargs)

        torch.nn.functional.scaled_dot_product_attention = counting
        try:
            x = torch.randn(1, 17, 192)
            eager = attention(x)
            traced = torch.jit.trace(attention, x, check_trace=False)
        finally:
            torch.nn.functional.scaled_dot_product_attention = original
    assert calls == [False]  # fused in eager mode, manual math under tracing
    torch.testing.assert_close(traced(x), eager, rtol=1e-5, atol=1e-6)


def test_a_wrapper_kept_past_rollback_leaves_models_stock():
    with tpa.applied(groups=[GROUP], strict=True):
        kept = timm.create_model
    model = _vit(kept)
    assert _flags(model) == [True, True]


def test_the_group_takes_no_options():
    config = tpa.OptimizationConfig.for_groups(GROUP, **{GROUP: {"enabled": False}})
    report = tpa.check(config)
    assert report.group(GROUP).decision == "block"
    assert "takes no options" in str(report.group(GROUP).to_dict()["checks"])


def test_catalog_declares_one_wrap_with_the_aliases():
    (decl,) = catalog.FUSED_ATTENTION.declarations
    assert decl.kind == "wrap" and set(decl.aliases) == {"timm.create_model",
                                                          "timm.models.create_model"}
