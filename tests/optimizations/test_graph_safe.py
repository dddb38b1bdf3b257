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
    with pytest.raises(ValueError, match="takes no options, got \\['margin'\\]"):
        graph_safe.finite_clamp_wrapper(lambda self, x: x, {"margin": 1})
