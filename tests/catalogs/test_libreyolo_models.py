"""End to end on LibreYOLO's own models, built from its constructors with random weights and
nothing downloaded (network blocked, caches empty after): stock against
``turbo_physai.libreyolo``, float32, inference and a training step, through our op."""

import socket
import warnings

import pytest

import turbo_physai as tpa

torch = pytest.importorskip("torch")
pytest.importorskip("libreyolo")

from tpa_hosts import assert_grads_close  # noqa: E402

OUT_ATOL = 1e-5  # float32 outputs: the op and grid_sample differ in summation order only


def _rtdetr():
    from libreyolo.models.rtdetr.nn import RTDETRModel

    # RT-DETR-R18's layout, narrowed; no denoising queries (they need targets)
    model = RTDETRModel(
        num_classes=4,
        backbone_depth=18,
        hidden_dim=64,
        dim_feedforward=128,
        num_queries=20,
        num_decoder_layers=2,
        num_denoising=0,
    )
    return model, 96


def _lwdetr():
    from libreyolo.models.lwdetr.nn import LibreLWDETRModel

    # its smallest size; 192 px gives the 144 tokens its 100 two-stage proposals need
    model = LibreLWDETRModel("t", nc=4)
    # A 12x12 position grid (class token first), as a model trained at 192 px would store: the
    # stored 14x14 is resized bicubically at each call, and that resize's CUDA backward adds
    # with atomics (the replay test's gradients differed from eager's in their last bits).
    encoder = model.backbone[0].encoder
    encoder.pos_embed = torch.nn.Parameter(encoder.pos_embed[:, :145].detach().clone())
    return model, 192


def _ec_pose():
    from libreyolo.models.ec.nn import LibreECPoseModel

    # EC's pose decoder: its own MSDA core (per-level value tuples), 4 points on every level
    return LibreECPoseModel("s", eval_spatial_size=None), 160


def _dfine():
    from libreyolo.models.dfine.nn import LibreDFINEModel

    # size s: 3, 6 and 3 points on its three levels (padded to 6 for our op); 256 px gives the
    # 300 two-stage proposals enough tokens
    return LibreDFINEModel("s", nb_classes=4, eval_spatial_size=None), 256


def _deformable_detr():
    from libreyolo.models.deformable_detr.nn import LibreDeformableDETRModel

    # ResNet-50, four levels (its encoder reads the level shapes back from the device). Not
    # the two-stage variant: its proposals sit on pixel centres, where a location gradient
    # changes with the last bit of the coordinate (two decoder layers' offset gradients 2.5e-3
    # off stock's, normwise, in float32; outputs 1e-6)
    return LibreDeformableDETRModel("r50", nc=4), 128


MODELS = {"rtdetr": _rtdetr, "lwdetr": _lwdetr, "ec_pose": _ec_pose, "dfine": _dfine,
          "deformable_detr": _deformable_detr}
#: the models whose family has a cuda_graph group
GRAPH_MODELS = ["rtdetr", "lwdetr", "dfine", "deformable_detr"]
OUTPUTS = ("pred_logits", "pred_boxes", "pred_keypoints")


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No connection can be opened, and the weight caches start (and must stay) empty."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a network connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    caches = {name: tmp_path / name for name in ("TORCH_HOME", "HF_HOME", "XDG_CACHE_HOME")}
    for name, path in caches.items():
        path.mkdir()
        monkeypatch.setenv(name, str(path))
    yield
    assert not [p for path in caches.values() for p in path.rglob("*")], "something downloaded"


def _build(name):
    torch.manual_seed(0)
    model, size = MODELS[name]()
    # LibreYOLO zero-initialises the offset and attention-weight projections: noise on every
    # weight makes the sampling locations and weights depend on the input.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model, torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))


def _step(model, x, train):
    model.train(train)
    model.zero_grad()
    torch.manual_seed(2)  # the same dropout masks in both runs
    with torch.set_grad_enabled(train):
        out = model(x)
        outputs = [out[k] for k in OUTPUTS if k in out]
        if not train:
            return [o.detach() for o in outputs], []
        (outputs[0].square().mean() + sum(o.sum() for o in outputs[1:])).backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]
    return [o.detach() for o in outputs], grads


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training_step"])
@pytest.mark.parametrize("name", list(MODELS))
def test_stock_and_turbo_physai_libreyolo_agree(name, train, offline, op_calls):
    model, x = _build(name)
    stock = _step(model, x, train)
    assert not op_calls
    with tpa.applied("turbo_physai.libreyolo", strict=True):
        ours = _step(model, x, train)
    assert op_calls, "the model never reached our op"
    for a, b in zip(ours[0], stock[0], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=OUT_ATOL)
    if train:
        # Gradients in float64. In float32 the decoders' location gradients move with the last
        # bits of the sampling coordinates: EC pose's offset-weight gradients came out 5x a
        # normwise 1e-4 off stock's on a Zen 3 CPU, within it on an AVX-512 one, while float64
        # agrees to 1e-14 (the kernels' own float32 gradients are tested at the op: tests/ops).
        model, x = model.double(), x.double()
        stock = _step(model, x, train)
        with tpa.applied("turbo_physai.libreyolo", strict=True):
            ours = _step(model, x, train)
        assert_grads_close(ours[1], stock[1], rtol=1e-9)
    if not train:  # rolled back: the stock path again, bit for bit
        calls = len(op_calls)
        again = _step(model, x, train)
        assert len(op_calls) == calls
        assert all(torch.equal(a, b) for a, b in zip(again[0], stock[0], strict=True))


# --- libreyolo.<family>.cuda_graph: the model forward (and backward) replayed as CUDA graphs ---

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def _without_dropout(model):
    """Dropout off (a replay draws other random numbers than the eager run it is compared with:
    docs/catalogs/transformers.md); LW-DETR's stochastic depth too."""
    from turbo_physai import zoo

    for m in zoo.without_dropout(model).modules():
        if isinstance(getattr(m, "drop_prob", None), float):
            m.drop_prob = 0.0
    return model


def _runs(model, x, group_id, train, steps):
    with tpa.applied(groups=[group_id], strict=True):
        return [_step(model, x, train) for _ in range(steps)]


def _differing(a, b):
    """Which outputs and gradients of two `_step` results differ, with the largest difference."""
    pairs = [(f"output {i}", p, q) for i, (p, q) in enumerate(zip(a[0], b[0], strict=True))]
    pairs += [(f"grad {i}", p, q) for i, (p, q) in enumerate(zip(a[1], b[1], strict=True))]
    return [f"{name}: {(p - q).abs().max().item():.3g}" for name, p, q in pairs
            if not torch.equal(p, q)]


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training_step"])
@pytest.mark.parametrize("name", GRAPH_MODELS)
def test_cuda_graph_group_on_the_cpu_runs_eagerly_with_the_msda_groups_results(name, train,
                                                                              op_calls):
    model, x = _build(name)
    (want,) = _runs(model, x, f"libreyolo.{name}.msda", train, 1)
    with pytest.warns(RuntimeWarning, match="forward runs eagerly: no CUDA tensor"):
        (got,) = _runs(model, x, f"libreyolo.{name}.cuda_graph", train, 1)
    assert not _differing(got, want)


@cuda
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training_step"])
@pytest.mark.parametrize("name", GRAPH_MODELS)
def test_cuda_graph_replays_equal_the_msda_groups_results(name, train, deterministic):
    from turbo_physai.optimizations.common import cuda_graph

    model, x = _build(name)
    model, x = _without_dropout(model).cuda(), x.cuda()
    (want,) = _runs(model, x, f"libreyolo.{name}.msda", train, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no call runs eagerly
        with tpa.applied(groups=[f"libreyolo.{name}.cuda_graph"], strict=True):
            got = [_step(model, x, train) for _ in range(3)]
            (stats,) = cuda_graph.stats(model).values()
    assert [g["kind"] for g in stats["graphs"]] == ["forward+backward" if train else "forward"]
    assert stats["replays"] == 3 and stats["failed"] == []
    assert [_differing(g, want) for g in got] == [[]] * 3
