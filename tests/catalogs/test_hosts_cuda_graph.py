"""ultralytics.rtdetr.cuda_graph and rfdetr.cuda_graph: the host models' inference replayed as
CUDA graphs, and their training steps: Ultralytics' decoder draws its denoising noise on the
host, so in training the layers before it are replayed and it runs eagerly; RF-DETR's forward
never reads its targets and replays whole.

On the CPU: the groups apply with their MSDA group and roll back, and the models run eagerly
with the results of the MSDA group alone. With a GPU: inference replays and the training step
(loss and gradients) equal those bit for bit (deterministic mode)."""

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
# what a training step captures (cuda_graph.stats keys: the wrapped method, or a part of it)
TRAINING_GRAPH = {"ultralytics.rtdetr.cuda_graph": ". [layers_before_head]",
                  "rfdetr.cuda_graph": "."}


def _host(group_id, device="cpu"):
    library, _, _, (build, kwargs) = HOSTS[group_id]
    pytest.importorskip(library)
    return build(**kwargs, device=device)


def _runs(host, group_ids, steps=1):
    """(inference outputs twice, then per training step its loss and the parameters' gradients)
    with ``group_ids`` applied."""
    state = {k: v.clone() for k, v in host.model.state_dict().items()}
    with tpa.applied(groups=group_ids, strict=True):
        found = [[t.clone() for t in host.infer()] for _ in range(2)]
        trained = [[host.train_step(), *(p.grad.clone() for p in host.model.parameters()
                                          if p.grad is not None)] for _ in range(steps)]
        stats = cuda_graph.stats(host.model)
    host.model.load_state_dict(state)
    return found, trained, stats


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
def test_on_the_cpu_both_passes_run_eagerly_with_the_msda_groups_results(group_id, no_network,
                                                                          deterministic):
    # deterministic: the embedding backward of Ultralytics' denoising classes accumulates in
    # another order from run to run otherwise
    host = _host(group_id)
    msda = HOSTS[group_id][1]
    want, want_trained, _ = _runs(host, [msda])
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        got, trained, stats = _runs(host, [group_id])
    for a, b in zip(sum(got + trained, []), sum(want + want_trained, []), strict=True):
        assert torch.equal(a, b)
    # each call went where a GPU would capture it (Ultralytics' training step: the layers
    # before the head), and ran eagerly there
    calls = {".": 2}  # the two inference calls
    calls[TRAINING_GRAPH[group_id]] = calls.get(TRAINING_GRAPH[group_id], 0) + 1
    assert {path: s["eager"] for path, s in stats.items()} == {
        path: {"no CUDA tensor among the arguments": n} for path, n in calls.items()}


@cuda
@pytest.mark.parametrize("group_id", sorted(HOSTS))
def test_replays_equal_the_msda_groups_results(group_id, no_network, deterministic):
    host = _host(group_id, "cuda")
    msda = HOSTS[group_id][1]
    want, want_trained, _ = _runs(host, [msda], steps=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, trained, stats = _runs(host, [group_id], steps=3)
    eager = [str(w.message) for w in caught if "turbo_physai cuda_graph" in str(w.message)]
    assert not eager  # no call ran eagerly
    training = stats[TRAINING_GRAPH[group_id]]
    assert [g["kind"] for g in training["graphs"]][-1] == "forward+backward"
    assert training["failed"] == [] and training["eager"] == {}
    for a, b in zip(sum(got, []), sum(want, []), strict=True):
        assert torch.equal(a, b)
    for step, (a, b) in enumerate(zip(trained, want_trained, strict=True)):
        assert len(a) == len(b)
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), f"training step {step}"


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
