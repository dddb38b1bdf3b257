"""ultralytics.rtdetr.loss_graph_safe: RT-DETR's training loss without the host synchronizations
that have an exact rewrite (per-image box counts, the matcher's cost matrix to scipy), with
stock's losses, gradients and matches bit for bit."""

from __future__ import annotations

import inspect
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ultralytics")

import turbo_physai as tpa  # noqa: E402
from turbo_physai import hosts_zoo  # noqa: E402
from turbo_physai.optimizations.common.host_syncs import find_host_syncs  # noqa: E402

GROUP = "ultralytics.rtdetr.loss_graph_safe"
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def _matcher_module():
    from ultralytics.models.utils import ops

    return ops


def _batch(model, device, counts=(3, 0, 2), side=64):
    """A training batch as Ultralytics' trainer hands it to the loss (on the device), with the
    given number of boxes per image (0: an image without any)."""
    gen = torch.Generator().manual_seed(4)
    n = sum(counts)
    wh = torch.rand(n, 2, generator=gen) * 0.3 + 0.05
    centre = wh / 2 + torch.rand(n, 2, generator=gen) * (1 - wh)
    return {"img": torch.randn(len(counts), 3, side, side, generator=gen).to(device),
            "cls": torch.randint(0, model.nc, (n, 1), generator=gen).float().to(device),
            "bboxes": torch.cat([centre, wh], 1).to(device),
            "batch_idx": torch.cat([torch.full((c,), float(i)) for i, c in enumerate(counts)])
            .to(device)}


def _model(device="cpu"):
    return hosts_zoo.ultralytics_rtdetr("l", side=64, batch=1, device=device).model


def _step(model, batch):
    """The loss, its three items, and every parameter's gradient of one training step."""
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)  # the denoising queries' noise
    loss, items = model.loss(batch)
    loss.backward()
    return [loss.detach(), *items.values(),
            *(torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters())]


def _assert_identical(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)


def _assert_the_step_is_stocks(device, *base):
    """One training step with the group equals one without, bit for bit; ``base``: groups
    applied on both sides."""
    model = _model(device)
    batch = _batch(model, device)
    with tpa.applied(groups=list(base), strict=True):
        want = _step(model, batch)
        _assert_identical(_step(model, batch), want)  # reproducible
    with tpa.applied(groups=[*base, GROUP], strict=True):
        got = _step(model, batch)
    _assert_identical(got, want)


def test_training_step_keeps_stocks_loss_and_gradients_bit_for_bit(deterministic):
    # Deterministic mode: the denoising class embedding's backward adds rows in parallel, so two
    # stock steps differ in its last bits otherwise.
    _assert_the_step_is_stocks("cpu")


@pytest.mark.parametrize("counts", [(3, 0, 2), (0, 0), (1,), (7, 7)], ids=str)
def test_the_matcher_returns_stocks_indices(counts):
    ops = _matcher_module()
    matcher = ops.HungarianMatcher(use_fl=True)
    gen = torch.Generator().manual_seed(sum(counts))
    bs, nq, nc = len(counts), 30, 5
    scores = torch.randn(bs, nq, nc, generator=gen)
    scores[0, :3] = float("nan")  # non-finite costs are zeroed, stock and ours
    boxes = torch.rand(bs, nq, 4, generator=gen)
    gt_boxes = torch.rand(sum(counts), 4, generator=gen)
    gt_cls = torch.randint(0, nc, (sum(counts),), generator=gen)
    want = matcher(boxes, scores, gt_boxes, gt_cls, list(counts))
    with tpa.applied(groups=[GROUP], strict=True):
        got = matcher(boxes, scores, gt_boxes, gt_cls, list(counts))
    _assert_identical([t for pair in got for t in pair], [t for pair in want for t in pair])


def _lines(function) -> set[str]:
    source, first = inspect.getsourcelines(function)
    path = os.path.realpath(inspect.getsourcefile(function))
    return {f"{path}:{n}" for n in range(first, first + len(source))}


def test_the_loss_and_matcher_no_longer_wait_for_the_device():
    from ultralytics.nn.tasks import RTDETRDetectionModel

    model = _model()
    batch = _batch(model, "cpu")
    owned = _lines(RTDETRDetectionModel.loss) | _lines(_matcher_module().HungarianMatcher.forward)

    def sites(found):
        return {s.operation for s in found if os.path.realpath(s.where.rsplit(":", 1)[0])
                + ":" + s.where.rsplit(":", 1)[1] in owned}

    _, stock = find_host_syncs(lambda: model.loss(batch))
    assert {"a scalar read", "Tensor.cpu"} <= sites(stock), stock
    with tpa.applied(groups=[GROUP], strict=True):
        _, ours = find_host_syncs(lambda: model.loss(batch))
    assert sites(ours) == {"Tensor.tolist"}, ours  # the one read of all box counts
    assert len(ours) < len(stock)


def test_a_release_without_the_statements_is_blocked_naming_them(monkeypatch):
    ops = _matcher_module()

    def forward(self, pred_bboxes, pred_scores, gt_bboxes, gt_cls, gt_groups):
        C = pred_scores.sum(-1)
        C = C.cpu()  # one of the four: the group needs all of them
        return C

    monkeypatch.setattr(ops.HungarianMatcher, "forward", forward)
    found = tpa.check(groups=[GROUP]).group(GROUP)
    assert found.reasons == ["compatibility.incompatible"]
    assert "holds `C[C.isnan() | C.isinf()] = 0.0` 0 times, not once" in str(found.to_dict())


def test_rollback_restores_both_functions():
    from ultralytics.nn.tasks import RTDETRDetectionModel

    ops = _matcher_module()
    originals = RTDETRDetectionModel.loss, ops.HungarianMatcher.forward
    with tpa.applied(groups=[GROUP], strict=True):
        assert RTDETRDetectionModel.loss is not originals[0]
        assert ops.HungarianMatcher.forward is not originals[1]
    assert (RTDETRDetectionModel.loss, ops.HungarianMatcher.forward) == originals


@cuda
def test_on_cuda_the_step_is_stocks_and_the_matches_stay_on_the_device(deterministic):
    # With our MSDA op on both sides: grid_sample's CUDA backward adds with float atomics, so two
    # stock steps differ in the last bits even in deterministic mode (H200, torch 2.11).
    _assert_the_step_is_stocks("cuda", "ultralytics.rtdetr.msda")
    matcher = _matcher_module().HungarianMatcher(use_fl=True)
    scores, boxes = torch.randn(2, 30, 5, device="cuda"), torch.rand(2, 30, 4, device="cuda")
    gt_boxes, gt_cls = torch.rand(3, 4, device="cuda"), torch.tensor([1, 0, 4], device="cuda")
    want = matcher(boxes, scores, gt_boxes, gt_cls, [2, 1])
    with tpa.applied(groups=[GROUP], strict=True):
        got = matcher(boxes, scores, gt_boxes, gt_cls, [2, 1])
    assert all(t.device.type == "cuda" for pair in got for t in pair)
    assert [[t.tolist() for t in pair] for pair in got] == \
        [[t.tolist() for t in pair] for pair in want]
