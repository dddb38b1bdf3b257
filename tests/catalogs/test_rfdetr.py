"""The RF-DETR catalog on models built from rfdetr's config classes (random init, no weights
downloaded: ``turbo_physai.hosts_zoo.rfdetr`` says how): stock and ours agree in eval outputs,
training loss and gradients; the shipped config works through apply, check and
``run --config``; code that is not a validated version is blocked."""

import importlib
import importlib.metadata

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("rfdetr")

import tpa_hosts  # noqa: E402

import turbo_physai as tpa  # noqa: E402
from turbo_physai import hosts_zoo  # noqa: E402
from turbo_physai.ops import frontends  # noqa: E402
from turbo_physai.optimizations.common.rfdetr import msda  # noqa: E402

GROUP = "rfdetr.msda"
CONFIG = "turbo_physai.rfdetr"
# Small on purpose (CI has 2 cores): 20 queries in 2 training groups instead of 300 in 13.
# The variants' own configs otherwise, at the smallest side their windows allow; medium also
# with three levels (the variants use P4 alone), for the level order in a whole model.
SMALL = {"num_queries": 20, "num_select": 20, "group_detr": 2}
CASES = {
    "base": dict(variant="base", side=56),
    "medium-p3p4p5": dict(variant="medium", side=64, projector_scale=["P3", "P4", "P5"]),
}


def _core_module():
    return importlib.import_module("rfdetr.models.ops.modules.ms_deform_attn")


@pytest.mark.parametrize("case", sorted(CASES))
def test_model_from_config_matches_stock_in_eval_and_training_and_rolls_back(
    case, no_network, op_calls
):
    host = hosts_zoo.rfdetr(**CASES[case], batch=2, **SMALL)
    tpa_hosts.scramble_msda(host.model)
    stock, ours = tpa_hosts.stock_and_ours(
        host, vars(_core_module()), "ms_deform_attn_core_pytorch", op_calls
    )
    tpa_hosts.assert_match(stock, ours)
    assert no_network == []


def _inputs(n=2, lq=5, m=2, d=4, levels=((6, 5), (3, 2), (1, 1)), p=3):
    gen = torch.Generator().manual_seed(0)
    s = sum(h * w for h, w in levels)
    value = torch.randn(n, m, d, s, generator=gen, dtype=torch.float64)  # RF-DETR's layout
    loc = torch.rand(n, lq, m, len(levels), p, 2, generator=gen, dtype=torch.float64) * 1.4 - 0.2
    weights = torch.rand(n, lq, m, len(levels) * p, generator=gen, dtype=torch.float64)
    return value, torch.tensor(levels), [tuple(hw) for hw in levels], loc, weights


@pytest.mark.parametrize("folded", [False, True], ids=["eager-rank6", "export-rank5"])
@pytest.mark.parametrize("with_hw", [False, True], ids=["shapes-tensor", "shapes-list"])
def test_call_site_forward_and_gradients_match_in_float64(folded, with_hw, op_calls):
    """The replaced function as MSDeformAttn calls it, on both of its location layouts, with
    and without the Python (H, W) pairs; points past the borders, unequal level sizes."""
    module = _core_module()
    value, shapes, shapes_hw, loc, weights = _inputs()
    if folded:
        loc = loc.flatten(3, 4)

    def call():
        leaves = [t.clone().requires_grad_() for t in (value, loc, weights)]
        out = module.ms_deform_attn_core_pytorch(
            leaves[0],
            shapes,
            leaves[1],
            leaves[2],
            value_spatial_shapes_hw=shapes_hw if with_hw else None,
        )
        return [out, *torch.autograd.grad((out * out).sum(), leaves)]

    stock = call()
    with tpa.applied(groups=[GROUP], strict=True):
        assert module.ms_deform_attn_core_pytorch is frontends.rfdetr_function
        ours = call()
    assert op_calls
    for a, b in zip(ours, stock, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def _edited(*args, **kwargs):
    return None  # any other code: another fingerprint


@pytest.mark.parametrize("path", [msda.FUNCTION, msda.GRID_SAMPLE])
def test_unvalidated_code_is_blocked_naming_the_release_and_force_does_not_help(path, monkeypatch):
    """Either the replaced core or the grid_sample helper it relies on."""
    owner, name = path.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(owner), name, _edited)
    report = tpa.check(CONFIG, force_groups=[GROUP])
    group = report.group(GROUP)
    assert group.reasons == ["compatibility.incompatible"]
    text = str(group.to_dict()["checks"])
    release = importlib.metadata.version("rfdetr")
    assert f"rfdetr {release}: the code of {path} is not a validated version" in text
    assert "tests/catalogs/test_rfdetr.py" in text


def test_a_missing_helper_is_blocked(monkeypatch):
    owner, name = msda.GRID_SAMPLE.rsplit(".", 1)
    monkeypatch.delattr(importlib.import_module(owner), name)
    group = tpa.check(CONFIG).group(GROUP)
    assert group.reasons == ["compatibility.incompatible"]
    assert f"{msda.GRID_SAMPLE} is missing" in str(group.to_dict()["checks"])


def test_the_shipped_config_checks_and_runs_from_the_cli(tmp_path):
    out = tpa_hosts.check_and_run_config(
        tmp_path,
        CONFIG,
        GROUP,
        """\
        import torch
        from rfdetr.models.ops.modules import ms_deform_attn
        from turbo_physai.ops import frontends
        assert ms_deform_attn.ms_deform_attn_core_pytorch is frontends.rfdetr_function
        attn = ms_deform_attn.MSDeformAttn(d_model=16, n_levels=2, n_heads=2, n_points=2)
        shapes = torch.tensor([[4, 4], [2, 2]])
        starts = torch.tensor([0, 16])
        out = attn(torch.randn(1, 3, 16), torch.rand(1, 3, 2, 2), torch.randn(1, 20, 16), shapes,
                   starts)
        print("patched", tuple(out.shape))
        """,
    )
    assert "patched (1, 3, 16)" in out
