"""optimizations.common.cuda_graph on modules written here (the catalog's groups on the real
models: tests/catalogs/test_transformers_cuda_graph.py).

On the CPU: what is decided before any capture (options, the reasons a call runs eagerly). With
a GPU: replays equal the eager forward and backward bit for bit (the forward sends host data to
the device four ways: host_transfers.py serves them), the guards that keep a replay from
returning stale or wrong results, and capture failures naming the line that caused them."""

from __future__ import annotations

import re
import warnings

import pytest

import turbo_physai as tpa
from turbo_physai.optimizations.common import cuda_graph

from .conftest import host_module

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

HOST = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 5)
        self.norm = nn.BatchNorm1d(5)
        self.out = nn.Linear(5, 3)

    def forward(self, x, scale=1.0, extra=None):
        # host data to the device, four ways: capture needs them served (host_transfers.py)
        shapes = [(x.shape[0], x.shape[1])]
        sizes = torch.as_tensor(shapes, dtype=torch.long, device=x.device)
        sizes[0, 0] = x.shape[0] + 1
        sizes = sizes + torch._shape_as_tensor(x).to(x.device)
        h = torch.relu(self.norm(self.lin(x))) * scale
        h = h[torch.arange(x.shape[0] - 1, -1, -1)]  # rows reversed by a host index
        for e in (extra.values() if isinstance(extra, dict) else extra or ()):
            h = h + e
        return {"y": self.out(h), "sizes": sizes, "n": 2}


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1  # host data that changes from call to call: no replay can serve it
        return x + torch.as_tensor([self.calls], dtype=x.dtype, device=x.device)

    def predict(self, x):  # an entry point other than forward (Ultralytics' predict)
        return self(x)


class IgnoresTargets(nn.Module):
    def forward(self, x, targets=None, scale=1.0):  # RF-DETR's LWDETR.forward never reads them
        return x * scale


class ReadsTargets(nn.Module):
    def forward(self, x, targets=None):
        return x if targets is None else x * 2


class FailsOnItsSecondCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = self.norm(x)  # running statistics move before the failure
        if self.calls == 2:
            raise ValueError("the second call fails")
        return y


class Dropping(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.lin(x)) + torch.rand_like(x)  # random numbers, two ways


class HostNoise(nn.Module):
    def forward(self, x):  # noise drawn on the host (Ultralytics' denoising): no replay
        return x + torch.rand(x.shape).to(x.device)


class Checked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        from turbo_physai.optimizations.common.graph_checks import check_later

        check_later((x < 0).any(), "negative input")  # validates device data (DETR's boxes)
        return self.lin(x)


class ReadsShapesBack(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        # LibreYOLO's Deformable DETR reads back, level by level, the shapes it sent to the device
        shapes = torch.as_tensor([tuple(x.shape), (2, 2)], dtype=torch.long, device=x.device)
        out = self.lin(x)
        for h, w in shapes:
            grid = torch.linspace(0.5, h - 0.5, h, device=x.device)
            out = out + grid[: int(w)].sum() * torch.arange(w, device=x.device).sum()
        return out


class SyncsThenDrops(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = self.lin(x)
        if h.sum().item() > 1e30:  # a read of model data: capture fails here
            return h
        return self.drop(h)


class HostRows(nn.Module):
    def forward(self, x, rows):  # rows: a host index tensor, its values the caller's
        return x[rows] * 2


class Syncing(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if self.lin(x).sum().item() > 1e30:  # a host sync: capture cannot take it
            return x
        return self.lin(x)
"""
TARGET = "tpa_cuda_graph_host.{}"
WRAPPER = "turbo_physai.optimizations.common.cuda_graph.cuda_graph_wrapper"
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@pytest.fixture
def host(tmp_path, monkeypatch):
    yield from host_module(tmp_path, monkeypatch, "tpa_cuda_graph_host", HOST)


def _selection(target="Net.forward", **options):
    """(config, groups) selecting the host's cuda_graph group on ``target`` with ``options``."""
    group = tpa.group("host.cuda_graph", tpa.wrap(TARGET.format(target), WRAPPER))
    config = tpa.OptimizationConfig.for_groups(group.id, **{group.id: options})
    return {"config": config, "groups": [group]}


def _applied(target="Net.forward", **options):
    selection = _selection(target, **options)
    return tpa.applied(selection.pop("config"), strict=True, **selection)


def _eager_reasons(module):
    return next(iter(cuda_graph.stats(module).values()))["eager"]


@pytest.mark.parametrize("options, message", [
    ({"graphs": 2}, "unknown cuda_graph option(s) ['graphs']; known: ['max_graphs', 'warmup']"),
    ({"max_graphs": 0}, "cuda_graph option max_graphs must be a positive integer, got 0"),
    ({"warmup": 1.5}, "cuda_graph option warmup must be a positive integer, got 1.5"),
])
def test_bad_options_block_the_group_naming_them(host, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        cuda_graph.cuda_graph_wrapper(vars(host.Net)["forward"], options)
    report = tpa.check(**_selection(**options))
    assert report.group("host.cuda_graph").decision == "block"
    assert message in str(report.group("host.cuda_graph").to_dict())


def test_the_wrapper_keeps_the_original_forward(host):
    original = vars(host.Net)["forward"]
    wrapped = cuda_graph.cuda_graph_wrapper(original, {})
    assert wrapped.__wrapped__ is original and wrapped.__name__ == "forward"


@pytest.mark.parametrize("call, reason", [
    (lambda net, x: net(x), "no CUDA tensor among the arguments"),
    (lambda net, x: net(x, extra=[torch.ones(5), np.float32(1)]),
     "argument extra[1] is a float32, not a tensor or a plain value"),
    (lambda net, x: net(x, 1.0, {"a": np.float32(1)}),
     "argument positional 2['a'] is a float32, not a tensor or a plain value"),
])
def test_calls_it_cannot_capture_run_eagerly_with_one_warning_each(host, call, reason):
    net, x = host.Net().train(), torch.randn(4, 6)
    torch.manual_seed(0)
    want = call(net, x)["y"]
    with _applied():
        with pytest.warns(RuntimeWarning, match=re.escape(f"Net.forward runs eagerly: {reason}")):
            got = call(net, x)["y"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per reason
            call(net, x)
        assert _eager_reasons(net) == {reason: 2}
    assert torch.equal(got, want)


def test_stats_and_warnings_name_a_wrapped_method_other_than_forward(host):
    net = host.Counting()
    with _applied("Counting.predict"):
        with pytest.warns(RuntimeWarning, match="Counting.predict runs eagerly: no CUDA tensor"):
            net.predict(torch.zeros(2))
        assert cuda_graph.stats(net) == {".": {
            "graphs": [], "failed": [], "replays": 0, "invalidated": 0,
            "eager": {"no CUDA tensor among the arguments": 1}}}


def test_a_capture_failure_names_the_first_error_and_the_models_line(host):
    def capture():  # as torch.cuda.graph does: leaving a failed capture raises again
        try:
            host.Net()(torch.randn(2, 6), extra=[torch.ones(4)])  # (2, 5) + (4,): a shape error
        finally:
            raise RuntimeError("operation failed due to a previous error during capture")

    with pytest.raises(RuntimeError) as caught:
        capture()
    reason = cuda_graph._failure(caught.value)
    assert reason.startswith("capture failed: RuntimeError: The size of tensor a (5) must match")
    line = HOST.splitlines().index("            h = h + e") + 1
    assert reason.endswith(f"(at {host.__file__}:{line})"), reason


def test_targets_the_forward_never_reads_are_left_out_of_the_signature(host):
    original = vars(host.IgnoresTargets)["forward"]
    wrapped = cuda_graph.targets_unread_wrapper(original, {})
    net, x, targets = host.IgnoresTargets(), torch.ones(2), [{"boxes": torch.zeros(1, 4)}]
    with pytest.warns(RuntimeWarning, match="no CUDA tensor among the arguments"):
        assert torch.equal(wrapped(net, x, targets, 2.0), x * 2)  # not "argument 1 is a list"
    assert torch.equal(wrapped(net, x, scale=3.0, targets=targets), x * 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'scales'"):
        wrapped(net, x, scales=3.0)  # the forward's own error, not the wrapper's
    with pytest.raises(ValueError, match=r"ReadsTargets.forward reads \['targets'\]: its calls "
                                         "cannot drop them"):
        cuda_graph.targets_unread_wrapper(vars(host.ReadsTargets)["forward"], {})
    with pytest.raises(ValueError, match="Net.forward has no parameter 'targets'"):
        cuda_graph.targets_unread_wrapper(vars(host.Net)["forward"], {})


def test_hooks_keep_the_call_eager(host):
    net = host.Net()
    net.norm.register_forward_hook(lambda *a: None)
    with _applied():
        with pytest.warns(RuntimeWarning, match="BatchNorm1d has hooks"):
            net(torch.randn(4, 6))


def test_rollback_restores_the_original_forward(host):
    original = vars(host.Net)["forward"]
    with _applied():
        assert vars(host.Net)["forward"] is not original
    assert vars(host.Net)["forward"] is original


# --- on a GPU ------------------------------------------------------------------------------------

def _train(net, x, steps=3, seed=0):
    """Per step: outputs, then every parameter's gradient; AdamW steps in between."""
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    found = []
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        out = net(x[i % len(x)], 0.5)
        (out["y"] ** 2).sum().backward()
        found.append([out["y"].detach().clone(), out["sizes"].clone(),
                      *(p.grad.clone() for p in net.parameters())])
        opt.step()
    return found


def _twins(host):
    torch.manual_seed(0)
    a = host.Net().cuda()
    b = host.Net().cuda()
    b.load_state_dict(a.state_dict())
    return a, b


@cuda
def test_training_replays_equal_eager_bit_for_bit(host):
    eager_net, graph_net = _twins(host)
    xs = [torch.randn(8, 6, device="cuda") for _ in range(2)]
    want = _train(eager_net, xs)
    with _applied():
        got = _train(graph_net, xs)
        stats = cuda_graph.stats(graph_net)["."]
    assert [g["kind"] for g in stats["graphs"]] == ["forward+backward"]
    assert stats["replays"] == 3 and stats["eager"] == {}
    launches = stats["graphs"][0]["launch_ms"]  # the host's time in each graph's last replay
    assert set(launches) == {"forward", "backward"} and min(launches.values()) > 0
    for step_got, step_want in zip(got, want, strict=True):
        for a, b in zip(step_got, step_want, strict=True):
            assert torch.equal(a, b)
    # BatchNorm's running statistics: the warm-up's updates undone, each replay's kept
    assert torch.equal(graph_net.norm.running_mean, eager_net.norm.running_mean)
    assert graph_net.norm.num_batches_tracked.item() == 3


@cuda
def test_inference_replays_equal_eager_and_outputs_stay_valid(host):
    net = host.Net().cuda().eval()
    xs = [torch.randn(8, 6, device="cuda") for _ in range(3)]
    with torch.no_grad():
        want = [net(x)["y"] for x in xs]
        with _applied():
            got = [net(x) for x in xs]
            assert cuda_graph.stats(net)["."]["graphs"][0]["kind"] == "forward"
    for out, w in zip(got, want, strict=True):  # each result its own copy
        assert torch.equal(out["y"], w) and out["n"] == 2


@cuda
def test_a_new_shape_is_captured_again_up_to_max_graphs(host):
    net = host.Net().cuda().eval()
    original = vars(host.Net)["forward"]
    with torch.no_grad(), _applied(max_graphs=2):
        for rows in (8, 16, 8, 32):
            x = torch.randn(rows, 6, device="cuda")
            if rows == 32:
                with pytest.warns(RuntimeWarning, match="more than max_graphs=2"):
                    got = net(x)
            else:
                got = net(x)
            assert torch.equal(got["y"], original(net, x)["y"])
        stats = cuda_graph.stats(net)["."]
    assert [g["inputs"] for g in stats["graphs"]] == [[(8, 6)], [(16, 6)]]
    assert stats["eager"] == {"more than max_graphs=2 call signatures": 1}


@cuda
def test_replaced_parameters_free_the_graphs_and_capture_again(host):
    net = host.Net().cuda().eval()
    original = vars(host.Net)["forward"]
    x = torch.randn(8, 6, device="cuda")
    with torch.no_grad(), _applied():
        net(x)
        net.lin.weight.data = torch.randn_like(net.lin.weight)  # new storage
        got = net(x)["y"]
        stats = cuda_graph.stats(net)["."]
    assert torch.equal(got, original(net, x)["y"])
    assert stats["invalidated"] == 1 and len(stats["graphs"]) == 1


@cuda
def test_a_second_forward_before_backward_runs_eagerly_and_both_gradients_are_right(host):
    eager_net, graph_net = _twins(host)
    x1, x2 = (torch.randn(8, 6, device="cuda") for _ in range(2))
    (eager_net(x1)["y"].sum() + 2 * eager_net(x2)["y"].sum()).backward()
    with _applied():
        graph_net(x1)["y"].sum().backward()  # captured
        graph_net.zero_grad(set_to_none=True)
        first = graph_net(x1)["y"]
        with pytest.warns(RuntimeWarning, match="backward has not run yet"):
            second = graph_net(x2)["y"]
        (first.sum() + 2 * second.sum()).backward()
    for a, b in zip(graph_net.parameters(), eager_net.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-7)  # BN: another batch


@cuda
def test_gradients_accumulate_over_two_backwards_as_eager(host):
    eager_net, graph_net = _twins(host)
    x1, x2 = (torch.randn(8, 6, device="cuda") for _ in range(2))
    # (y ** 2).sum(), not y.sum(): eager PyTorch rounds a matmul's backward on the expanded
    # gradient of a plain sum differently (one ulp) from a dense one, which a replay receives
    for x in (x1, x2):
        (eager_net(x)["y"] ** 2).sum().backward()
    with _applied():
        for x in (x1, x2):  # no zero_grad between: the second adds to the first
            (graph_net(x)["y"] ** 2).sum().backward()
    for a, b in zip(graph_net.parameters(), eager_net.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


@cuda
def test_a_backward_after_the_graph_ran_again_raises(host):
    net = host.Net().cuda()
    x = torch.randn(8, 6, device="cuda")
    with _applied():
        net(x)["y"].sum().backward()
        kept = net(x)["y"].sum()
        kept.backward(retain_graph=True)
        net(x)["y"].sum().backward()
        with pytest.raises(RuntimeError, match="ran again before this backward"):
            kept.backward()


@cuda
def test_device_checks_raise_at_the_call_or_at_its_backward_after_a_replay(host):
    net = host.Checked().cuda()

    def _loss(y):  # squared: see test_gradients_accumulate_over_two_backwards_as_eager
        return (y ** 2).sum()

    good, bad = torch.rand(8, 4, device="cuda"), -torch.rand(8, 4, device="cuda")
    _loss(net(good)).backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    found = "negative input \\(found after a CUDA graph replay\\)"
    with _applied("Checked.forward"):
        with torch.no_grad():
            net(good)  # captured: a forward-only replay reads its checks before returning
            with pytest.raises(ValueError, match=found):
                net(bad)
        _loss(net(good)).backward()  # captured with its backward
        net.zero_grad(set_to_none=True)
        out = _loss(net(bad))  # returns: the backward reads the checks, before any gradient
        with pytest.raises(ValueError, match=found):
            out.backward()
        assert all(p.grad is None for p in net.parameters())
        del out
        net(bad)  # its backward never runs: the next call raises before doing anything
        with pytest.raises(ValueError, match=found):
            net(good)
        _loss(net(good)).backward()
        stats = next(iter(cuda_graph.stats(net).values()))
    assert [g["kind"] for g in stats["graphs"]] == ["forward", "forward+backward"]
    assert stats["eager"] == {} and stats["replays"] == 6
    for p, w in zip(net.parameters(), want, strict=True):
        assert torch.equal(p.grad, w)


@cuda
def test_a_forward_capture_cannot_take_runs_eagerly_naming_the_error(host):
    net = host.Syncing().cuda()
    x = torch.randn(3, 4, device="cuda")
    want = net(x)
    with _applied("Syncing.forward"):
        with pytest.warns(RuntimeWarning, match="Syncing.forward runs eagerly: capture failed: "):
            got = net(x)
        failed = cuda_graph.stats(net)["."]["failed"]
    assert torch.equal(got, want) and len(failed) == 1
    assert "tpa_cuda_graph_host.py:" in failed[0]  # the model's line that synchronized
    assert torch.equal(net(x), want)  # the device is usable after the failed capture


@cuda
def test_shapes_read_back_from_the_device_are_served_to_the_capture(host):
    torch.manual_seed(0)
    net = host.ReadsShapesBack().cuda()
    x = torch.randn(3, 4, device="cuda", requires_grad=True)
    want = [net(x).detach() for _ in range(2)]
    (want_grad,) = torch.autograd.grad(net(x).square().sum(), x)
    with _applied("ReadsShapesBack.forward"):
        got = [net(x).detach() for _ in range(2)]
        (grad,) = torch.autograd.grad(net(x).square().sum(), x)
        stats = cuda_graph.stats(net)["."]
    assert stats["eager"] == {} and stats["failed"] == [] and stats["replays"] == 3
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert torch.equal(grad, want_grad)


@cuda
def test_after_a_failed_capture_the_eager_call_draws_random_numbers_as_stock(host):
    # A failed capture used to leave the CUDA generator in capture mode (torch 2.11-2.13): every
    # draw after it, the eager fallback's dropout included, raised "Offset increment outside
    # graph capture encountered unexpectedly" (LibreYOLO's Deformable DETR on an H100).
    net = host.SyncsThenDrops().cuda()
    x = torch.randn(8, 4, device="cuda")
    torch.manual_seed(5)
    want = [net.eval()(x), net.train()(x), net(x)]
    with _applied("SyncsThenDrops.forward"):
        torch.manual_seed(5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            got = [net.eval()(x), net.train()(x), net(x)]
        failed = cuda_graph.stats(net)["."]["failed"]
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert len(failed) == 1 and "tpa_cuda_graph_host.py:" in failed[0]
    assert not torch.equal(got[1], got[2])  # dropout drew fresh numbers: it ran
    torch.rand(3, device="cuda")  # the generator serves draws after the group is gone too


def test_host_tensor_arguments_are_kept_and_compared_by_value():
    rows, x = torch.tensor([2, 0]), torch.zeros(3)
    recorded = cuda_graph._host_inputs((x,), {"rows": rows, "scale": 2.0})
    assert [(i, where) for i, where, _ in recorded] == [(0, "positional 0"), (1, "rows")]
    rows[0] = 1  # the caller's tensor changes; the record does not
    assert cuda_graph._host_inputs_changed(recorded, [x, torch.tensor([2, 0])]) is None
    assert cuda_graph._host_inputs_changed(recorded, [x, rows]) == (
        "host tensor argument rows holds other values than in the captured call (a replay "
        "would use those)")
    nan = cuda_graph._host_inputs((torch.tensor([float("nan")]),), {})
    assert cuda_graph._host_inputs_changed(nan, [torch.tensor([float("nan")])])  # not "equal"


@cuda
def test_a_host_tensor_argument_with_other_values_runs_eagerly(host):
    net = host.HostRows().cuda()
    x = torch.randn(4, 3, device="cuda")
    with _applied("HostRows.forward"):
        assert torch.equal(net(x, torch.tensor([3, 1])), x[[3, 1]] * 2)  # captured
        assert torch.equal(net(x, torch.tensor([3, 1])), x[[3, 1]] * 2)  # replayed
        with pytest.warns(RuntimeWarning, match="host tensor argument rows holds other values"):
            got = net(x, torch.tensor([0, 2]))
        stats = cuda_graph.stats(net)["."]
    assert torch.equal(got, x[[0, 2]] * 2)
    assert stats["replays"] == 2 and len(stats["eager"]) == 1  # the capturing call runs too


@cuda
def test_host_data_that_changes_between_calls_keeps_the_call_eager(host):
    net = host.Counting().cuda()
    x = torch.zeros(2, device="cuda")
    with _applied("Counting.forward"):
        with pytest.warns(RuntimeWarning, match="capture failed: TransferMismatch: "):
            got = net(x)
        assert torch.equal(net(x), x + net.calls)  # eager again: the signature is marked
        failed = cuda_graph.stats(net)["."]["failed"]
    assert torch.equal(got, x + net.calls - 1)
    assert "with other values than while warming up" in failed[0]
    assert "tpa_cuda_graph_host.py:" in failed[0]


@cuda
def test_a_warm_up_that_fails_leaves_the_buffers_as_one_eager_call_does(host):
    net, twin = host.FailsOnItsSecondCall().cuda(), host.FailsOnItsSecondCall().cuda()
    x = torch.randn(8, 4, device="cuda")
    want = twin(x)  # one eager call: one update of the running statistics
    with _applied("FailsOnItsSecondCall.forward"):
        with pytest.warns(RuntimeWarning, match="capture failed: ValueError: the second call"):
            got = net(x)  # warm-up 1 runs, warm-up 2 fails, then the eager call
    assert net.calls == 3 and torch.equal(got, want)
    assert torch.equal(net.norm.running_mean, twin.norm.running_mean)
    assert net.norm.num_batches_tracked.item() == 1


@cuda
def test_replays_draw_the_random_numbers_the_eager_calls_draw(host):
    # Warm-ups and capture leave the generator where they found it, and a replay's kernels
    # take their offsets from it: the same dropout masks and noise as eager calls, fresh ones
    # on each call.
    torch.manual_seed(0)
    net = host.Dropping().cuda()
    x = torch.randn(64, 16, device="cuda", requires_grad=True)

    def calls():
        torch.manual_seed(7)
        found = []
        for _ in range(3):
            y = net(x)
            (gx,) = torch.autograd.grad(y.square().sum(), x)
            found += [y.detach().clone(), gx]
        return found, torch.cuda.get_rng_state()

    want, want_state = calls()
    with _applied("Dropping.forward"):
        got, state = calls()
        stats = cuda_graph.stats(net)["."]
    assert stats["replays"] == 3 and stats["eager"] == {}
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert not torch.equal(got[0], got[2])  # fresh numbers per call
    assert torch.equal(state, want_state)


@cuda
def test_a_failed_capture_leaves_the_random_numbers_to_the_eager_call(host):
    net = host.HostNoise().cuda()
    x = torch.zeros(4, device="cuda")
    torch.manual_seed(3)
    want = net(x)
    with _applied("HostNoise.forward"):
        torch.manual_seed(3)
        with pytest.warns(RuntimeWarning, match="capture failed: TransferMismatch"):
            got = net(x)
    assert torch.equal(got, want)


@cuda
def test_after_max_graphs_failed_captures_new_signatures_run_eagerly_at_once(host):
    net = host.Counting().cuda()
    with _applied("Counting.forward", max_graphs=2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for n in (1, 2, 3, 4):
                net(torch.zeros(n, device="cuda"))
        stats = cuda_graph.stats(net)["."]
    failed = [why for why in stats["eager"] if why.startswith("capture failed")]
    assert len(failed) == 1 and stats["eager"][failed[0]] == 2  # two tries, the same reason
    assert stats["eager"]["more than max_graphs=2 failed captures"] == 2
    assert stats["graphs"] == []
    assert net.calls == 2 * (3 + 1 + 1) + 2  # per try: 3 warm-ups, the capture, the eager call
