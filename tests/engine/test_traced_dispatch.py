"""engine.traced_dispatch: torch.compile traces a runtime_condition Dispatcher read as a module
attribute (no graph break), and keeps the graph break, with right values, for a method's."""

import pytest

import turbo_physai as tpa
from turbo_physai import _core, group, replace
from turbo_physai.engine import traced_dispatch

torch = pytest.importorskip("torch")
Unsupported = torch._dynamo.exc.Unsupported
# dynamo takes the twin from torch 2.13 on; before, each call is a graph break (engine module doc)
one_graph = pytest.mark.skipif(torch.torch_version.TorchVersion(torch.__version__) < "2.13",
                               reason="dynamo before torch 2.13 ignores the twin")


def scaled(x):
    return x + 1


def doubled(x):
    return x * 2


def wide(x):
    return x.shape[0] > 3


def not_a_bool(x):
    return x.shape[0]


def calls_scaled(x):
    return scaled(x) - 1  # read from this module's globals at each call: the Dispatcher


class Layer:
    def scaled(self, x):
        return x + 1

    @staticmethod
    def shifted(x):
        return x + 1


def layer_doubled(self, x):
    return x * 2


def layer_wide(self, x):
    return x.shape[0] > 3


def _selection(condition="wide"):
    return group("traced", replace(f"{__name__}.scaled", f"{__name__}.doubled",
                                   runtime_condition=f"{__name__}.{condition}"))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@one_graph
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_module_functions_condition_is_traced_in_one_graph(dynamic):
    x4, x2 = torch.ones(4), torch.ones(2)
    with tpa.applied(groups=[_selection()], strict=True) as report:
        assert isinstance(scaled, _core.Dispatcher)
        compiled = torch.compile(calls_scaled, backend="eager", fullgraph=True, dynamic=dynamic)
        assert torch.equal(compiled(x4), x4 * 2 - 1)  # the condition chose ours
        assert torch.equal(compiled(x2), x2)  # a guard on the shape it read: the original
        assert scaled.counts == {"replacement": 0, "original": 0}  # compiled calls: not counted
        assert torch.equal(calls_scaled(x4), x4 * 2 - 1)  # eager: the native Dispatcher
        assert report.group("traced").to_dict()["dispatchers"] == {
            f"{__name__}.scaled": {"replacement": 1, "original": 0}}
    torch._dynamo.reset()
    assert torch.equal(torch.compile(calls_scaled, backend="eager", fullgraph=True)(x4), x4)


def test_a_condition_that_returns_no_bool_raises_its_type_error_when_compiled():
    with tpa.applied(groups=[_selection("not_a_bool")], strict=True):
        with pytest.raises(TypeError, match=r"runtime_condition .*returned int, expected bool"):
            torch.compile(calls_scaled, backend="eager")(torch.ones(4))


def test_a_methods_condition_keeps_the_graph_break_with_the_right_values():
    # dynamo reads layer.scaled without the Dispatcher's __get__: a twin would not see self
    g = group("method", replace(f"{__name__}.Layer.scaled", f"{__name__}.layer_doubled",
                                runtime_condition=f"{__name__}.layer_wide"))
    layer, x = Layer(), torch.ones(4)
    with tpa.applied(groups=[g], strict=True):
        assert torch.equal(torch.compile(lambda t: layer.scaled(t) - 1, backend="eager")(x),
                           x * 2 - 1)
        torch._dynamo.reset()
        with pytest.raises(Unsupported):
            torch.compile(lambda t: layer.scaled(t) - 1, backend="eager", fullgraph=True)(x)


def test_before_torch_2_13_a_method_gets_a_forwarder_and_compiles_with_the_right_values(
        monkeypatch):
    # dynamo 2.11 called the method's Dispatcher at its graph break without self (a TypeError
    # in the condition, seen on the H200): there the engine installs a Python forwarder
    # (as there: the twin cannot be registered; if another test registered it, the forwarder's
    # call is still a graph break: a method's Dispatcher is not traceable)
    monkeypatch.setattr(traced_dispatch, "register", lambda: False)
    g = group("method", replace(f"{__name__}.Layer.scaled", f"{__name__}.layer_doubled",
                                runtime_condition=f"{__name__}.layer_wide"))
    original = vars(Layer)["scaled"]
    layer, x4, x2 = Layer(), torch.ones(4), torch.ones(2)
    with tpa.applied(groups=[g], strict=True) as report:
        forwarder = vars(Layer)["scaled"]
        dispatcher = forwarder._turbo_physai_dispatcher
        assert isinstance(dispatcher, _core.Dispatcher)
        compiled = torch.compile(lambda t: layer.scaled(t) - 1, backend="eager")
        assert torch.equal(compiled(x4), x4 * 2 - 1) and torch.equal(compiled(x2), x2)
        assert torch.equal(layer.scaled(x4), x4 * 2)  # eager: counted
        assert report.group("method").to_dict()["dispatchers"][f"{__name__}.Layer.scaled"][
            "replacement"] >= 1
    assert vars(Layer)["scaled"] is original


@one_graph
def test_a_staticmethods_condition_is_traced_in_one_graph():
    g = group("static", replace(f"{__name__}.Layer.shifted", f"{__name__}.doubled",
                                runtime_condition=f"{__name__}.wide"))
    x4, x2 = torch.ones(4), torch.ones(2)
    with tpa.applied(groups=[g], strict=True):
        compiled = torch.compile(lambda t: Layer.shifted(t) - 1, backend="eager", fullgraph=True)
        assert torch.equal(compiled(x4), x4 * 2 - 1) and torch.equal(compiled(x2), x2)
