"""ultralytics.rtdetr.denoising_graph_safe: RT-DETR's denoising queries from class noise drawn
before the training predict, so that ultralytics.rtdetr.cuda_graph captures the whole training
predict; stock's queries, losses and gradients.

On the CPU: the rewrite holds each statement once; with numbers handed over, get_cdn_group's
outputs are stock's (where no host draw follows the relabel: on the CPU the labels come from the
host generator too, so a larger draw moves it further; on CUDA :func:`prefix_holds` is the
condition); the noise size is get_cdn_group's own for every box-count pattern tried; without
numbers handed over, the wrapper is the original; unvalidated code is blocked. With a GPU: the
prefix property, and the training step replayed whole (with ultralytics.rtdetr.loss_cuda_graph,
its loss too) equal to the MSDA group's, bit for bit."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ultralytics")

import turbo_physai as tpa  # noqa: E402
from turbo_physai import hosts_zoo  # noqa: E402
from turbo_physai.optimizations.common import cuda_graph  # noqa: E402
from turbo_physai.optimizations.common.graph_safe import NotRewritable  # noqa: E402
from turbo_physai.optimizations.common.ultralytics import denoising  # noqa: E402

GROUP = "ultralytics.rtdetr.denoising_graph_safe"
LOSS_GRAPH = "ultralytics.rtdetr.loss_cuda_graph"
MSDA = "ultralytics.rtdetr.msda"
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
# box counts per image: empty images, one box, equal counts, more than num_denoising (100)
COUNTS = [(3, 0, 2), (1,), (7, 7), (0, 0), (40, 1, 12, 5), (130, 2)]


def _ops():
    from ultralytics.models.utils import ops

    return ops


class _Head:
    """The settings of RTDETRDecoder that noise_size reads (its defaults)."""

    training, num_denoising, label_noise_ratio, nc = True, 100, 0.5, 80


def _batch(counts, device="cpu"):
    gen = torch.Generator().manual_seed(sum(counts) + len(counts))
    n = sum(counts)
    return {"cls": torch.randint(0, 80, (n,), generator=gen).to(device),
            "bboxes": (torch.rand(n, 4, generator=gen) * 0.5 + 0.2).to(device),
            "batch_idx": torch.cat([torch.full((c,), i) for i, c in enumerate(counts)])
            .long().to(device),
            "gt_groups": list(counts)}


def _cdn(function, batch, box_noise_scale=1.0, label_noise_ratio=0.5):
    torch.manual_seed(1)
    embed = torch.arange(80 * 8, dtype=torch.float32).reshape(80, 8)
    return function(batch, 80, 300, embed, 100, label_noise_ratio, box_noise_scale, True)


def _flat(out):
    import torch.utils._pytree as pytree

    return pytree.tree_leaves(out)


def _assert_same(got, want):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b)
        else:
            assert a == b


def test_the_check_passes_and_each_statement_is_rewritten_once():
    found = tpa.check(groups=[GROUP]).group(GROUP)
    assert found.decision == "apply", found.to_dict()
    denoising.rewritten(_ops().get_cdn_group)  # raises NotRewritable otherwise


@pytest.mark.parametrize("counts", [c for c in COUNTS if max(c) <= 100], ids=str)
@pytest.mark.parametrize("ratio", [0.5, 1e-9], ids=["relabels", "relabels nothing"])
def test_with_numbers_handed_over_the_queries_are_stocks(counts, ratio):
    # No box noise: on the CPU the box noise is drawn from the host generator after the labels
    # (see the module docstring); the relabelled classes are the point here.
    stock = _ops().get_cdn_group
    batch = _batch(counts)
    want = _cdn(stock, batch, box_noise_scale=0.0, label_noise_ratio=ratio)
    head = _Head()
    head.label_noise_ratio = ratio
    size = denoising.noise_size(head, batch["gt_groups"])
    torch.manual_seed(1)
    noise = torch.rand(size) if size else None  # the draw predraw makes, from the same state
    relabels = noise is not None and bool((noise < ratio * 0.5).any())
    assert relabels == (ratio == 0.5) or size is None
    rewritten = denoising.rewritten(stock)
    with denoising.given(noise, relabels):
        embed = torch.arange(80 * 8, dtype=torch.float32).reshape(80, 8)
        got = (rewritten if noise is not None else stock)(batch, 80, 300, embed, 100, ratio,
                                                           0.0, True)
    _assert_same(got, want)


@pytest.mark.parametrize("counts", COUNTS, ids=str)
def test_the_noise_size_is_the_number_of_queries_get_cdn_group_relabels(counts):
    size = denoising.noise_size(_Head(), list(counts))
    rewritten = denoising.rewritten(_ops().get_cdn_group)
    if size is None:
        assert max(counts) == 0
        return
    with denoising.given(torch.rand(size), True):
        _cdn(rewritten, _batch(counts))  # its statement checks the shape
    with denoising.given(torch.rand(size + 1), True), \
            pytest.raises(RuntimeError, match=rf"shape \({size + 1},\).*\({size},\)"):
        _cdn(rewritten, _batch(counts))


def test_noise_size_is_none_where_no_class_noise_is_drawn():
    head = _Head()
    assert denoising.noise_size(head, []) is None
    head.label_noise_ratio = 0.0
    assert denoising.noise_size(head, [3]) is None
    head.label_noise_ratio, head.training = 0.5, False
    assert denoising.noise_size(head, [3]) is None


def test_without_numbers_handed_over_the_wrapper_is_the_original():
    ops = _ops()
    stock = ops.get_cdn_group
    batch = _batch((3, 0, 2))
    want = _cdn(stock, batch)
    with tpa.applied(groups=[GROUP], strict=True):
        assert ops.get_cdn_group is not stock and denoising.installed()
        got = _cdn(ops.get_cdn_group, batch)
    assert ops.get_cdn_group is stock and not denoising.installed()
    _assert_same(got, want)


def test_predraw_declines_off_cuda_and_for_batches_it_does_not_know():
    cpu = torch.device("cpu")
    assert denoising.predraw(_Head(), _batch((3, 1)), cpu) is None
    meta = torch.device("cuda", 0)  # declined before anything touches the device
    assert denoising.predraw(_Head(), {"gt_groups": (3, 1)}, meta) is None
    assert denoising.predraw(_Head(), [1, 2], meta) is None
    assert denoising.predraw(_Head(), {"gt_groups": [3], "cls": None}, meta) is None


def test_a_release_without_the_statements_is_blocked_and_nothing_is_installed(monkeypatch):
    ops = _ops()

    def get_cdn_group(batch, num_classes, num_queries, class_embed, num_dn=100,
                      cls_noise_ratio=0.5, box_noise_scale=1.0, training=False):
        dn_cls = batch["cls"]
        mask = torch.rand(dn_cls.shape) < (cls_noise_ratio * 0.5)  # one of the four
        return mask, None, None, None

    monkeypatch.setattr(ops, "get_cdn_group", get_cdn_group)
    found = tpa.check(groups=[GROUP]).group(GROUP)
    assert found.reasons == ["compatibility.incompatible"]
    # another fingerprint; and, while that release is being validated, the rewrite's reason
    assert "get_cdn_group" in str(found.to_dict()["checks"])
    with pytest.raises(NotRewritable, match="holds `idx = torch.nonzero.* 0 times, not once"):
        denoising.rewritten(get_cdn_group)
    assert ops.get_cdn_group is get_cdn_group


def _host(device):
    return hosts_zoo.ultralytics_rtdetr("l", side=64, batch=2, device=device)


def _steps(host, groups, steps):
    """Per training step its loss and every parameter's gradient, with ``groups`` applied."""
    state = {k: v.clone() for k, v in host.model.state_dict().items()}
    with tpa.applied(groups=groups, strict=True):
        found = [[host.train_step(), *(p.grad.clone() for p in host.model.parameters()
                                        if p.grad is not None)] for _ in range(steps)]
        stats = cuda_graph.stats(host.model)
    host.model.load_state_dict(state)
    return found, stats


def test_on_the_cpu_the_training_step_is_the_msda_groups(no_network, deterministic):
    from ultralytics.models.utils.loss import RTDETRDetectionLoss

    host = _host("cpu")
    criterion = vars(RTDETRDetectionLoss)["forward"]
    want, _ = _steps(host, [MSDA], 1)
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        got, stats = _steps(host, [GROUP, LOSS_GRAPH], 1)
    assert all(torch.equal(a, b) for a, b in zip(got[0], want[0], strict=True))
    assert ". [training_predict]" not in stats  # the numbers are drawn on CUDA only
    assert stats["criterion"]["eager"] == {"no CUDA tensor among the arguments": 1}
    assert vars(RTDETRDetectionLoss)["forward"] is criterion  # rolled back


@cuda
@pytest.mark.parametrize("size", [1, 200, 1600, 5000])
def test_on_this_gpu_a_small_draw_is_a_larger_ones_prefix(size):
    device = torch.device("cuda", torch.cuda.current_device())
    state = torch.cuda.get_rng_state()
    assert denoising.prefix_holds(device, size, 80, torch.int64)
    assert torch.equal(torch.cuda.get_rng_state(), state)


@cuda
def test_the_training_step_replays_whole_and_equals_the_msda_groups(no_network, deterministic):
    host = _host("cuda")
    want, _ = _steps(host, [MSDA], 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, stats = _steps(host, [GROUP], 3)
    assert not [str(w.message) for w in caught if "turbo_physai cuda_graph" in str(w.message)]
    training = stats[". [training_predict]"]
    assert [g["kind"] for g in training["graphs"]] == ["forward+backward"]
    assert training["failed"] == [] and training["eager"] == {} and training["replays"] == 3
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), f"training step {step}"


@cuda
def test_the_training_step_with_its_loss_replays_whole_and_equals_the_msda_groups(
        no_network, deterministic):
    host = _host("cuda")
    want, _ = _steps(host, [MSDA], 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, stats = _steps(host, [GROUP, LOSS_GRAPH], 3)
    assert not [str(w.message) for w in caught if "turbo_physai cuda_graph" in str(w.message)]
    for part in (". [training_predict]", "criterion"):
        assert [g["kind"] for g in stats[part]["graphs"]] == ["forward+backward"], part
        assert stats[part]["failed"] == [] and stats[part]["eager"] == {}, part
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), f"training step {step}"


@cuda
def test_box_counts_past_max_graphs_run_eagerly_with_stocks_results(no_network, deterministic):
    host = _host("cuda")
    batches = []
    for counts in ((1, 2), (2, 1), (3, 3), (1, 1), (4, 2), (2, 5)):  # 6 signatures, 4 graphs
        n = sum(counts)
        batches.append({"img": host.images, "cls": torch.zeros(n, 1, device="cuda"),
                        "bboxes": torch.full((n, 4), 0.3, device="cuda"),
                        "batch_idx": torch.cat([torch.full((c,), float(i)) for i, c
                                                in enumerate(counts)]).cuda()})

    def losses(groups):
        state = {k: v.clone() for k, v in host.model.state_dict().items()}
        with tpa.applied(groups=groups, strict=True):
            out = []
            for batch in batches:
                host.model.train()
                host.model.zero_grad(set_to_none=True)
                torch.manual_seed(0)
                loss = host.model.loss(batch)[0]
                loss.backward()
                out.append(loss.detach())
            stats = cuda_graph.stats(host.model)
        host.model.load_state_dict(state)
        return out, stats

    want, _ = losses([MSDA])
    with pytest.warns(RuntimeWarning, match="max_graphs"):
        got, stats = losses([GROUP, LOSS_GRAPH])
    assert [torch.equal(a, b) for a, b in zip(got, want, strict=True)] == [True] * len(want)
    assert len(stats[". [training_predict]"]["graphs"]) == 4
