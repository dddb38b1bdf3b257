"""tests/ops/test_frontends.py: mmcv-style and transformers-style front ends of ms_deform_attn."""

import importlib

import pytest

torch = pytest.importorskip("torch")

from turbo_physai.ops import frontends, ms_deform_attn  # noqa: E402
from turbo_physai.ops.frontends import (  # noqa: E402
    MultiScaleDeformableAttention,
    libreyolo_ms_deform_attn_v2,
    ms_deform_attn_backward,
    ms_deform_attn_forward,
    transformers_forward,
    transformers_function,
    transformers_function_v2,
)


def _inputs(n=3, lq=4, m=2, d=5, p=2, levels=((5, 4), (2, 3))):
    gen = torch.Generator().manual_seed(0)
    shapes = torch.tensor(levels)
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
    s = int(shapes.prod(1).sum())
    value = torch.randn(n, s, m, d, generator=gen, dtype=torch.float64)
    loc = torch.rand(n, lq, m, len(levels), p, 2, generator=gen, dtype=torch.float64)
    attn = torch.rand(n, lq, m, len(levels), p, generator=gen, dtype=torch.float64)
    return value, shapes, starts, loc, attn


def test_mmcv_forward_ignores_im2col_step():
    args = _inputs(n=3)  # batch 3 is not a multiple of im2col_step = 2: no divisibility rule
    assert torch.equal(ms_deform_attn_forward(*args, im2col_step=2), ms_deform_attn(*args))


def test_mmcv_backward_fills_the_given_tensors_in_place():
    value, shapes, starts, loc, attn = _inputs()
    leaves = [t.clone().requires_grad_() for t in (value, loc, attn)]
    out = ms_deform_attn(leaves[0], shapes, starts, leaves[1], leaves[2])
    grad_out = torch.randn_like(out)
    expected = torch.autograd.grad(out, leaves, grad_out)
    # As mmcv's autograd function does: zeros in, filled by the call.
    targets = [torch.zeros_like(t) for t in (value, loc, attn)]
    ids = [id(t) for t in targets]
    result = ms_deform_attn_backward(value, shapes, starts, loc, attn, grad_out, *targets,
                                     im2col_step=64)
    assert result is None and [id(t) for t in targets] == ids
    for got, want in zip(targets, expected, strict=True):
        assert torch.equal(got, want)


def test_mmcv_backward_rejects_a_wrong_gradient_buffer():
    value, shapes, starts, loc, attn = _inputs()
    grad_out = torch.zeros(3, 4, 10, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"grad_attn_weight: expected .*\(3, 4, 2, 2, 2\)"):
        ms_deform_attn_backward(value, shapes, starts, loc, attn, grad_out,
                                torch.zeros_like(value), torch.zeros_like(loc),
                                torch.zeros(3, 4, 2, 2, dtype=torch.float64), im2col_step=64)


def test_mmcv_backward_rejects_grad_output_with_other_channels():
    value, shapes, starts, loc, attn = _inputs()  # D = 5
    grad_out = torch.zeros(3, 4, 2, 4, dtype=torch.float64)  # D = 4
    expected = r"grad_output: expected shape \(3, 4, 10\) .* got \(3, 4, 2, 4\)"
    with pytest.raises(ValueError, match=expected):
        ms_deform_attn_backward(value, shapes, starts, loc, attn, grad_out,
                                torch.zeros_like(value), torch.zeros_like(loc),
                                torch.zeros_like(attn), im2col_step=64)


def test_module_with_transformers_signature():
    value, shapes, starts, loc, attn = _inputs()
    shapes_list = [tuple(s) for s in shapes.tolist()]
    out = MultiScaleDeformableAttention()(value, shapes, shapes_list, starts, loc, attn, 64)
    assert torch.equal(out, ms_deform_attn(value, shapes, starts, loc, attn))


# --- transformers' module-level functions: the (H, W) list becomes cached tensors ---------------

@pytest.fixture
def levels_cache(monkeypatch):
    cache = {}
    monkeypatch.setattr(frontends, "_LEVELS", cache)
    return cache


def test_transformers_function_with_a_list_reuses_its_tensors(levels_cache):
    value, shapes, starts, loc, attn = _inputs()
    as_list = [tuple(s) for s in shapes.tolist()]
    expected = ms_deform_attn(value, shapes, starts, loc, attn)
    assert torch.equal(transformers_function(value, as_list, loc, attn), expected)
    assert torch.equal(transformers_function(value, shapes, loc, attn), expected)
    (cached,) = levels_cache.values()
    assert torch.equal(cached[0], shapes) and torch.equal(cached[1], starts)
    assert torch.equal(transformers_function(value, [list(s) for s in as_list], loc, attn),
                       expected)
    assert len(levels_cache) == 1 and next(iter(levels_cache.values())) is cached
    n, lq, m, levels, p, _ = loc.shape
    v2 = transformers_function_v2(value, as_list, loc.flatten(3, 4), attn.flatten(3, 4),
                                  [p] * levels)
    assert torch.equal(v2, expected) and len(levels_cache) == 1


def _per_level_sum(value, shapes, loc, attn, points):
    """The uneven sum as one op call per level, each with only its own points."""
    out, start, first = 0, 0, 0
    for (h, w), p in zip(shapes.tolist(), points, strict=True):
        one = torch.tensor([[h, w]])
        out = out + ms_deform_attn(value[:, start:start + h * w], one, one.new_zeros(1),
                                   loc[:, :, :, None, first:first + p],
                                   attn[:, :, :, None, first:first + p])
        start, first = start + h * w, first + p
    return out


@pytest.mark.parametrize("points", [[1, 3], [3, 1], [2, 2]])
def test_v2_with_uneven_points_per_level_is_the_uneven_sum(points):
    value, shapes, _, loc, attn = _inputs(p=2)
    loc, attn = loc.flatten(3, 4), attn.flatten(3, 4)  # 4 points in all, split as `points`
    want = _per_level_sum(value, shapes, loc, attn, points)
    as_list = [tuple(s) for s in shapes.tolist()]
    got = transformers_function_v2(value, as_list, loc, attn, points)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(libreyolo_ms_deform_attn_v2(value, as_list, loc, attn, points),
                               want, rtol=1e-12, atol=1e-12)


def test_padded_points_read_nothing_of_the_map():
    """The padding samples outside every map: a NaN where no real point reaches stays out."""
    value, shapes, _, loc, attn = _inputs(p=2)
    loc, attn = loc.flatten(3, 4) * 0.2, attn.flatten(3, 4)  # real points near the top left
    ends = shapes.prod(1).cumsum(0) - 1
    value[:, ends] = float("nan")  # the bottom right pixel of each level
    got = transformers_function_v2(value, shapes, loc, attn, [1, 3])
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, _per_level_sum(value, shapes, loc, attn, [1, 3]))


def test_v2_point_counts_that_do_not_add_up():
    value, shapes, _, loc, attn = _inputs(p=2)
    loc, attn = loc.flatten(3, 4), attn.flatten(3, 4)
    with pytest.raises(ValueError, match=r"attention_weights: 4 points in all, num_points_list "
                                         r"\[1, 2\] sums to 3"):
        transformers_function_v2(value, shapes, loc, attn, [1, 2])
    as_list = [tuple(s) for s in shapes.tolist()]
    assert libreyolo_ms_deform_attn_v2(value, as_list, loc, attn, [1, 2]) is None  # its path
    assert libreyolo_ms_deform_attn_v2(value, as_list, loc, attn, [0, 4]) is None


@pytest.mark.parametrize("decline", ["integer value", "6-dim locations", "weights on meta"])
def test_v2_declines_what_the_op_cannot_take_before_padding(decline, monkeypatch):
    """LibreYOLO runs its own path on None: no padding work is spent on such inputs."""
    value, shapes, _, loc, attn = _inputs(p=2)
    loc, attn = loc.flatten(3, 4), attn.flatten(3, 4)
    if decline == "integer value":
        value = value.long()
    elif decline == "6-dim locations":
        loc = loc.unflatten(3, (2, 2))
    else:
        attn = attn.to("meta")
    monkeypatch.setattr(frontends, "_even_points", lambda *a: pytest.fail("padded"))
    as_list = [tuple(s) for s in shapes.tolist()]
    assert libreyolo_ms_deform_attn_v2(value, as_list, loc, attn, [1, 3]) is None


def test_levels_cache_is_bounded_and_evicts_the_oldest(levels_cache):
    device = torch.device("cpu")
    for h in range(1, frontends._LEVELS_MAX + 5):
        shapes, starts = frontends._levels([(h, 2), (1, 1)], device)
        assert shapes.tolist() == [[h, 2], [1, 1]] and starts.tolist() == [0, 2 * h]
    assert len(levels_cache) == frontends._LEVELS_MAX
    assert next(iter(levels_cache))[0] == ((5, 2), (1, 1))


def test_levels_cache_keeps_only_python_int_keys(levels_cache):
    shapes, starts = frontends._levels([(torch.tensor(3), torch.tensor(2))], torch.device("cpu"))
    assert shapes.tolist() == [[3, 2]] and starts.tolist() == [0]
    assert not levels_cache


def test_levels_cached_under_inference_mode_serve_autograd_later(levels_cache):
    value, shapes, _, loc, attn = _inputs()
    as_list = [tuple(s) for s in shapes.tolist()]
    with torch.inference_mode():
        transformers_function(value, as_list, loc, attn)
    leaf = value.clone().requires_grad_()
    transformers_function(leaf, as_list, loc, attn).sum().backward()
    assert leaf.grad is not None


def test_no_levels_are_cached_while_compiling(levels_cache):
    value, shapes, _, loc, attn = _inputs()
    as_list = [tuple(s) for s in shapes.tolist()]

    def f(value, loc, attn):
        return transformers_function(value, as_list, loc, attn)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    out = compiled(value, loc, attn)
    assert not levels_cache
    assert torch.equal(out, f(value, loc, attn))


def test_capture_builds_levels_with_fill_kernels():
    # What runs under CUDA-graph capture (no host copy, no cache), checked here on the CPU.
    device = torch.device("cpu")
    for shapes in ([(5, 4), (2, 3), (1, 1)], [(7, 1)], []):
        filled = frontends._fill_levels(shapes, device)
        built = frontends._build_levels(shapes, device) if shapes else (
            torch.empty(0, 2, dtype=torch.int64), torch.empty(0, dtype=torch.int64))
        for got, want in zip(filled, built, strict=True):
            assert got.dtype == torch.int64 and torch.equal(got, want)


# --- transformers models, tiny random-init configs, float64 ------------------------------------

def _deformable_detr(transformers):
    backbone = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 16, 16], depths=[1, 1, 1, 1],
        out_features=["stage2", "stage3", "stage4"])
    config = transformers.DeformableDetrConfig(
        use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
        d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=10,
        num_feature_levels=3, encoder_n_points=2, decoder_n_points=2, num_labels=3)
    return transformers.DeformableDetrForObjectDetection(config)


def _rt_detr(transformers):
    backbone = transformers.RTDetrResNetConfig(
        embedding_size=8, hidden_sizes=[16, 16, 16, 16], depths=[1, 1, 1, 1],
        out_features=["stage2", "stage3", "stage4"])
    config = transformers.RTDetrConfig(
        backbone_config=backbone, use_pretrained_backbone=False, encoder_hidden_dim=16,
        encoder_in_channels=[16, 16, 16], decoder_in_channels=[16, 16, 16], encoder_ffn_dim=32,
        d_model=16, decoder_layers=2, decoder_ffn_dim=32, encoder_attention_heads=2,
        decoder_attention_heads=2, num_queries=10, decoder_n_points=2, num_labels=3,
        num_denoising=0)
    return transformers.RTDetrForObjectDetection(config)


MODELS = {"deformable_detr": _deformable_detr, "rt_detr": _rt_detr}


@pytest.mark.parametrize("family", MODELS)
def test_transformers_model_same_outputs_and_gradients(family, monkeypatch):
    """Our forward swapped into the model's MultiScaleDeformableAttention class gives the same
    logits, boxes and parameter gradients as transformers' own grid_sample path (float64,
    tolerance 1e-9 absolute and relative)."""
    transformers = pytest.importorskip("transformers")
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    torch.manual_seed(0)
    model = MODELS[family](transformers).double().eval()  # eval: no dropout between the runs
    pixels = torch.randn(2, 3, 64, 64, dtype=torch.float64,
                         generator=torch.Generator().manual_seed(1))

    def run():
        model.zero_grad()
        out = model(pixel_values=pixels)
        (out.logits.square().sum() + out.pred_boxes.sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return out.logits.detach(), out.pred_boxes.detach(), grads

    reference = run()
    calls = []

    def counted(self, *args, **kwargs):
        calls.append(1)
        return transformers_forward(self, *args, **kwargs)

    monkeypatch.setattr(modeling.MultiScaleDeformableAttention, "forward", counted)
    ours = run()
    assert calls, "the model never reached MultiScaleDeformableAttention.forward"
    for got, want in zip(ours[:2], reference[:2], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    assert ours[2].keys() == reference[2].keys()
    offsets = [n for n in ours[2] if "sampling_offsets.weight" in n]
    assert offsets and all(ours[2][n].abs().sum() > 0 for n in offsets)
    for name in ours[2]:
        torch.testing.assert_close(ours[2][name], reference[2][name], rtol=1e-9, atol=1e-9,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("family", MODELS)
def test_transformers_model_under_cuda_autocast(family, monkeypatch):
    """Mixed precision training: under torch.autocast the model hands the op a bfloat16 value (and
    locations and weights of its own dtypes, float32 where they come from float32 reference
    points or a softmax); the op promotes mixed dtypes as autocast does grid_sample, so the model
    trains as with transformers' own path, up to bfloat16 rounding downstream of the op."""
    transformers = pytest.importorskip("transformers")
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    torch.manual_seed(0)
    model = MODELS[family](transformers).cuda().eval()
    pixels = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1)).cuda()

    def run():
        model.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(pixel_values=pixels)
            loss = out.logits.float().square().sum() + out.pred_boxes.float().sum()
        loss.backward()
        grads = [p.grad.flatten().float() for p in model.parameters() if p.grad is not None]
        return out.logits.detach().float(), torch.cat(grads)

    reference = run()
    dtypes = set()

    def recorded(self, value, *args):
        dtypes.add((value.dtype, args[3].dtype))  # value, sampling_locations
        return transformers_forward(self, value, *args)

    monkeypatch.setattr(modeling.MultiScaleDeformableAttention, "forward", recorded)
    logits, grads = run()
    assert any(value is torch.bfloat16 for value, _ in dtypes), dtypes
    torch.testing.assert_close(logits, reference[0], rtol=2e-2, atol=2e-2)
    # Per element, bfloat16 rounding flips dominate small gradients (a bias before a norm has a
    # gradient of pure rounding noise); the whole gradient vector agrees.
    assert torch.isfinite(grads).all()
    assert (grads - reference[1]).norm() <= 2e-2 * reference[1].norm()
