"""The Ultralytics catalog on RT-DETR as users build it (``RTDETR("rtdetr-l.yaml")``, random
init, nothing downloaded): stock and ours agree in eval outputs, training loss and gradients;
the shipped config works through apply, check and ``run --config``; code that is not a
validated version is blocked."""

import importlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ultralytics")

import tpa_hosts  # noqa: E402

import turbo_physai as tpa  # noqa: E402
from turbo_physai import hosts_zoo  # noqa: E402
from turbo_physai.ops import frontends  # noqa: E402
from turbo_physai.optimizations.common.ultralytics import msda  # noqa: E402

GROUP = "ultralytics.rtdetr.msda"
CONFIG = "turbo_physai.ultralytics"
# 64 px: the smallest side whose stride-32 level is 2x2, so bilinear sampling mixes pixels on
# every level. rtdetr-x at that size takes about as long as rtdetr-l at 160 (CI: 2 cores).
SIDE = 64


def _modules():
    utils = importlib.import_module("ultralytics.nn.modules.utils")
    transformer = importlib.import_module("ultralytics.nn.modules.transformer")
    return utils, transformer


@pytest.mark.parametrize("scale", ["l", "x"])
def test_rtdetr_from_yaml_matches_stock_in_eval_and_training_and_rolls_back(
    scale, no_network, op_calls
):
    host = hosts_zoo.ultralytics_rtdetr(scale, side=SIDE, batch=2)
    tpa_hosts.scramble_msda(host.model)
    _, transformer = _modules()
    stock, ours = tpa_hosts.stock_and_ours(
        host, vars(transformer), "multi_scale_deformable_attn_pytorch", op_calls
    )
    tpa_hosts.assert_match(stock, ours)
    assert no_network == []


def test_call_site_forward_and_gradients_match_in_float64(op_calls):
    """The replaced function as MSDeformAttn calls it: folded (L*P) points, points past the
    borders (zero padding), unequal level sizes."""
    utils, transformer = _modules()
    value, shapes, loc, weights = _inputs()

    def call():
        leaves = [t.clone().requires_grad_() for t in (value, loc, weights)]
        out = transformer.multi_scale_deformable_attn_pytorch(leaves[0], shapes, *leaves[1:])
        return [out, *torch.autograd.grad((out * out).sum(), leaves)]

    stock = call()
    with tpa.applied(groups=[GROUP], strict=True):
        assert utils.multi_scale_deformable_attn_pytorch is frontends.ultralytics_function
        ours = call()
    assert op_calls
    for a, b in zip(ours, stock, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def _inputs(n=2, lq=5, m=2, d=4, levels=((6, 5), (3, 2), (1, 1)), p=3):
    gen = torch.Generator().manual_seed(0)
    s = sum(h * w for h, w in levels)
    value = torch.randn(n, s, m, d, generator=gen, dtype=torch.float64)
    loc = torch.rand(n, lq, m, len(levels) * p, 2, generator=gen, dtype=torch.float64) * 1.4 - 0.2
    weights = torch.rand(n, lq, m, len(levels) * p, generator=gen, dtype=torch.float64)
    return value, [list(hw) for hw in levels], loc, weights


def test_unvalidated_code_is_blocked_naming_the_release_and_force_does_not_help(monkeypatch):
    utils, transformer = _modules()

    def edited(value, value_spatial_shapes, sampling_locations, attention_weights):
        return None  # any other code: another fingerprint

    for module in (utils, transformer):
        monkeypatch.setattr(module, "multi_scale_deformable_attn_pytorch", edited)
    report = tpa.check(CONFIG, force_groups=[GROUP])
    group = report.group(GROUP)
    assert group.reasons == ["compatibility.incompatible"]
    text = str(group.to_dict()["checks"])
    release = importlib.metadata.version("ultralytics")
    assert f"ultralytics {release}: the code of {msda.FUNCTION} is not a validated" in text
    assert "tests/catalogs/test_ultralytics.py" in text
    assert utils.multi_scale_deformable_attn_pytorch is edited  # nothing installed


def test_cuda_graph_is_blocked_where_predict_is_not_validated_code(monkeypatch):
    """Its training path runs predict's layer loop itself (ultralytics/graphs.py): a release
    whose predict differs is blocked, naming it, and nothing is installed."""
    from ultralytics.nn.tasks import RTDETRDetectionModel

    def edited(self, x, profile=False, batch=None, augment=False, embed=None):
        return None  # any other code: another fingerprint

    monkeypatch.setattr(RTDETRDetectionModel, "predict", edited)
    group_id = "ultralytics.rtdetr.cuda_graph"
    report = tpa.check(groups=[group_id])
    group = report.group(group_id)
    assert group.reasons == ["compatibility.incompatible"]
    text = str(group.to_dict()["checks"])
    release = importlib.metadata.version("ultralytics")
    path = "ultralytics.nn.tasks.RTDETRDetectionModel.predict"
    assert f"ultralytics {release}: the code of {path} is not a validated" in text
    assert vars(RTDETRDetectionModel)["predict"] is edited


def test_the_shipped_config_checks_and_runs_from_the_cli(tmp_path):
    out = tpa_hosts.check_and_run_config(
        tmp_path,
        CONFIG,
        GROUP,
        """\
        import torch
        from ultralytics.nn.modules import transformer
        from turbo_physai.ops import frontends
        assert transformer.multi_scale_deformable_attn_pytorch is frontends.ultralytics_function
        attn = transformer.MSDeformAttn(d_model=16, n_levels=2, n_heads=2, n_points=2)
        shapes = [[4, 4], [2, 2]]
        out = attn(torch.randn(1, 3, 16), torch.rand(1, 3, 1, 2), torch.randn(1, 20, 16), shapes)
        print("patched", tuple(out.shape))
        """,
    )
    assert "patched (1, 3, 16)" in out
