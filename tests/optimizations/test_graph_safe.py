"""optimizations.common.graph_safe: the rewrite of transformers' finite check, on host code
written here (the catalog's groups on the real layers: test_transformers_graph_safe.py)."""

from __future__ import annotations

import re
import traceback

import pytest

import turbo_physai as tpa
from turbo_physai.optimizations.common import graph_safe

from .conftest import host_module

torch = pytest.importorskip("torch")

HOST = '''
import functools

import torch


class Layer:
    def forward(self, hidden_states, scale=1.0):
        hidden_states = hidden_states * scale
        if self.training:
            if not torch.isfinite(hidden_states).all():
                clamp_value = torch.finfo(hidden_states.dtype).max - 1000
                hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
        return hidden_states

    training = True


class OldLayer:  # transformers 4.x
    def forward(self, x):
        if torch.isinf(x).any() or torch.isnan(x).any():
            clamp_value = torch.finfo(x.dtype).max - 1000
            x = torch.clamp(x, min=-clamp_value, max=clamp_value)
        return x


class OtherMargin:
    def forward(self, hidden_states):
        if not torch.isfinite(hidden_states).all():
            clamp_value = torch.finfo(hidden_states.dtype).max - 100
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
        return hidden_states


def decorate(f):
    return f


class Decorated:
    @decorate
    def forward(self, x):
        return x


def _make_closure():
    factor = 2

    def forward(self, x):
        return x * factor

    return forward


class Closure:
    forward = _make_closure()


class Raising:
    def forward(self, hidden_states):
        if not torch.isfinite(hidden_states).all():
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
        raise RuntimeError("from the host's line")
'''


@pytest.fixture
def host(tmp_path, monkeypatch):
    yield from host_module(tmp_path, monkeypatch, "tpa_graph_safe_host", HOST)


def _wrapped(cls):
    return graph_safe.finite_clamp_wrapper(vars(cls)["forward"], {})


@pytest.mark.parametrize("name", ["Layer", "OldLayer"])
def test_both_forms_give_the_guards_values(host, name):
    cls = getattr(host, name)
    rewritten = _wrapped(cls)
    x = torch.tensor([1.0, float("inf"), -float("inf"), float("nan"), 3e38])
    for t in (x, x[:1], x.half()):
        got, want = rewritten(cls(), t), cls().forward(t)
        assert torch.equal(got.nan_to_num(), want.nan_to_num())
        assert torch.equal(got.isnan(), want.isnan())
    assert "_turbo_physai_finite_clamp" not in vars(host)  # the helper is no module global


def test_defaults_names_and_lines_are_the_originals(host):
    rewritten = _wrapped(host.Layer)
    assert rewritten.__defaults__ == (1.0,) and rewritten.__qualname__ == "Layer.forward"
    assert torch.equal(rewritten(host.Layer(), torch.ones(2), 3.0), torch.full((2,), 3.0))
    raising = _wrapped(host.Raising)
    with pytest.raises(RuntimeError) as info:
        raising(host.Raising(), torch.ones(1))
    last = traceback.extract_tb(info.tb)[-1]
    assert last.filename == host.__file__
    assert last.line == 'raise RuntimeError("from the host\'s line")'


@pytest.mark.parametrize(
    "name, reason",
    [
        ("OtherMargin", "OtherMargin.forward has no finite check in a known form"),
        ("Decorated", "Decorated.forward is decorated or not a plain def"),
        ("Closure", "has closure cells ('factor',)"),
    ],
)
def test_a_forward_it_cannot_rewrite_blocks_the_group_naming_it(host, name, reason):
    with pytest.raises(graph_safe.NotRewritable, match=re.escape(reason)):
        _wrapped(getattr(host, name))
    target = f"tpa_graph_safe_host.{name}.forward"
    group = tpa.group(
        "host.graph_safe",
        tpa.wrap(target, "turbo_physai.optimizations.common.graph_safe.finite_clamp_wrapper"),
        compatibility_check="turbo_physai.optimizations.common.graph_safe.check",
    )
    original = vars(getattr(host, name))["forward"]
    report = tpa.apply(groups=[group])
    try:
        found = report.group("host.graph_safe")
        assert found.reasons == ["compatibility.incompatible"]
        assert f"{target}: " in str(found.to_dict()["checks"]) and reason in str(found.to_dict())
    finally:
        tpa.rollback()
    assert vars(getattr(host, name))["forward"] is original


def test_options_are_refused():
    with pytest.raises(ValueError, match="take no options, got \\['margin'\\]"):
        graph_safe.finite_clamp_wrapper(lambda self, x: x, {"margin": 1})


LOSS_HOST = '''
import torch


def corners(boxes1):
    if not (boxes1[:, 2:] >= boxes1[:, :2]).all():
        raise ValueError(f"boxes1 must be in corner format, but got {boxes1}")
    if (boxes1 < 0).any():
        raise RuntimeError("negative")
    return boxes1.sum()


def kept(x):
    if not (x > 0).all():
        raise ValueError("x") from None
    if (x > 0).any():
        raise ValueError("y")
    else:
        pass
    return x


class Loss:
    def forward(self, targets, world_size=1):
        num_boxes = torch.as_tensor([float(len(targets))])
        num_boxes = torch.clamp(num_boxes / world_size, min=1).item()
        return num_boxes


class Matcher:
    @torch.no_grad()
    def forward(self, cost_matrix, batch_size, num_queries, sizes):
        cost_matrix = cost_matrix.view(batch_size, num_queries, -1).cpu()
        return [linear_sum_assignment(c[i]) for i, c in enumerate(cost_matrix.split(sizes, -1))]


def linear_sum_assignment(cost):
    raise AssertionError("the module's own, not the rewrite's")
'''


@pytest.fixture
def loss_host(tmp_path, monkeypatch):
    yield from host_module(tmp_path, monkeypatch, "tpa_graph_safe_loss_host", LOSS_HOST)


def test_raise_checks_raise_the_same_errors_eagerly(loss_host):
    rewritten = graph_safe.loss_wrapper(loss_host.corners, {})
    good = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    assert torch.equal(rewritten(good), loss_host.corners(good))
    for bad in (torch.tensor([[0.0, 0.0, -1.0, 1.0]]), torch.tensor([[-2.0, 0.0, -1.0, 1.0]])):
        with pytest.raises(Exception) as want:
            loss_host.corners(bad)
        with pytest.raises(want.type) as got:
            rewritten(bad)
        assert str(got.value) == str(want.value)


def test_raise_checks_it_does_not_know_stay_and_alone_block(loss_host):
    with pytest.raises(graph_safe.NotRewritable, match="kept has no host synchronization"):
        graph_safe.loss_wrapper(loss_host.kept, {})


def test_the_box_count_and_the_matchers_cost_rewritten(loss_host):
    loss = graph_safe.loss_wrapper(vars(loss_host.Loss)["forward"], {})
    assert loss(loss_host.Loss(), [1, 2, 3], world_size=2) == 1.5
    calls = []

    def on_device(cost):
        calls.append(cost.device)
        return cost.argmin(0), torch.arange(cost.shape[1])

    rules, helpers = graph_safe.LOSS_RULES, {**dict.fromkeys(
        ("_turbo_physai_check_later", "_turbo_physai_host_item")), "linear_sum_assignment":
        on_device}
    matcher = graph_safe.rewrite(vars(loss_host.Matcher)["forward"], rules, helpers)
    cost = torch.rand(2 * 4, 3, device="meta")  # .cpu() of a meta tensor would raise
    found = matcher(loss_host.Matcher(), cost, 2, 4, [1, 2])
    assert [tuple(r.shape) for r, _ in found] == [(1,), (2,)]
    assert calls == [torch.device("meta")] * 2
    assert matcher.__wrapped__._turbo_physai_rewritten  # torch.no_grad's wrapper rebuilt
