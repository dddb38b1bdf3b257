"""ultralytics.rtdetr.cuda_graph and rfdetr.cuda_graph: the host models' inference replayed as
CUDA graphs; Ultralytics' training forward draws its denoising noise on the host, so its capture
fails and it runs eagerly, saying so; RF-DETR's forward never reads its targets and its training
step replays too.

On the CPU: the groups apply with their MSDA group and roll back, and the models run eagerly
with the results of the MSDA group alone. With a GPU: inference replays equal those bit for bit
(deterministic mode), and the training step still equals them."""

from __future__ import annotations

import warnings

import pytest

import turbo_physai as tpa
from turbo_physai.optimizations.common import cuda_graph

torch = pytest.importorskip("torch")

from turbo_physai import hosts_zoo  # noqa: E402
from turbo_physai.engine.paths import resolve  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
HOSTS = {
    # group: (host library, its MSDA group, the wrapped method, (builder, its arguments))
    "ultralytics.rtdetr.cuda_graph": (
        "ultralytics", "ultralytics.rtdetr.msda",
        "ultralytics.nn.tasks.RTDETRDetectionModel.predict",
        (hosts_zoo.ultralytics_rtdetr, dict(scale="l", side=64, batch=2))),
    "rfdetr.cuda_graph": (
        "rfdetr", "rfdetr.msda", "rfdetr.models.lwdetr.LWDETR.forward",
        (hosts_zoo.rfdetr, dict(variant="base", side=56, batch=2, num_queries=20, num_select=20,
                                group_detr=2))),
}
# why the training step runs eagerly (None: it replays; RF-DETR's forward never reads targets)
TRAINING_REASON = {"ultralytics.rtdetr.cuda_graph": "host data that changes from call to call",
                   "rfdetr.cuda_graph": None}


def _host(group_id, device="cpu"):
    library, _, _, (build, kwargs) = HOSTS[group_id]
    pytest.importorskip(library)
    return build(**kwargs, device=device)


def _runs(host, group_ids):
    """(inference outputs twice, the training loss) with ``group_ids`` applied."""
    state = {k: v.clone() for k, v in host.model.state_dict().items()}
    with tpa.applied(groups=group_ids, strict=True):
        found = [[t.clone() for t in host.infer()] for _ in range(2)]
        loss = host.train_step()
    host.model.load_state_dict(state)
    return found, loss


@pytest.mark.parametrize("group_id", sorted(HOSTS))
def test_applies_with_its_msda_group_and_rolls_back(group_id, no_network):
    library, msda, target, _ = HOSTS[group_id]
    pytest.importorskip(library)
    owner_path, name = target.rsplit(".", 1)
    owner = resolve(owner_path).found
    original = vars(owner)[name]
    with tpa.applied(groups=[group_id], strict=True) as report:
        assert {g.id for g in report.groups if g.decision == "apply"} == {group_id, msda}
        assert vars(owner)[name] is not original
    assert vars(owner)[name] is original


@pytest.mark.parametrize("group_id", sorted(HOSTS))
def test_on_the_cpu_both_passes_run_eagerly_with_the_msda_groups_results(group_id, no_network):
    host = _host(group_id)
    msda = HOSTS[group_id][1]
    want, want_loss = _runs(host, [msda])
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        got, loss = _runs(host, [group_id])
    for a, b in zip(sum(got, []), sum(want, []), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(loss, want_loss)


@cuda
@pytest.mark.parametrize("group_id", sorted(HOSTS))
def test_inference_replays_equal_the_msda_groups_results(group_id, no_network, deterministic):
    host = _host(group_id, "cuda")
    msda = HOSTS[group_id][1]
    want, want_loss = _runs(host, [msda])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, loss = _runs(host, [group_id])
    reasons = {str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
               and "turbo_physai cuda_graph" in str(w.message)}
    why = TRAINING_REASON[group_id]
    assert (reasons and all(why in r for r in reasons)) if why else not reasons, reasons
    for a, b in zip(sum(got, []), sum(want, []), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(loss, want_loss)


@cuda
@pytest.mark.parametrize("group_id", sorted(HOSTS))
def test_inference_is_captured_once_and_replayed(group_id, no_network):
    host = _host(group_id, "cuda")
    with tpa.applied(groups=[group_id], strict=True):
        for _ in range(3):
            host.infer()
        (stats,) = cuda_graph.stats(host.model).values()
    assert stats["failed"] == [] and [g["kind"] for g in stats["graphs"]] == ["forward"]
    assert stats["replays"] == 3
