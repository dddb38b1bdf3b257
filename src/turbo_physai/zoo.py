"""Small random-init transformers models, built from configs (no download, no pretrained
weights): the demo's model, the end-to-end benchmark's and the transformers catalog tests'.

``build(name, size)`` returns a :class:`Built`: the model, its inputs and the groups that
optimize it. ``size="tiny"`` is for tests (seconds in float64), ``"small"`` for the demo and
the benchmark (big enough that attention, not Python overhead, dominates on a CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

MODELS = ("deformable_detr", "rt_detr", "rt_detr_v2", "d_fine", "deimv2", "mask2former")

# (channel width, image side, queries, encoder/decoder layers) per size.
_SIZES = {"tiny": (32, 64, 10, 2), "small": (128, 320, 100, 2)}


@dataclass
class Built:
    name: str
    model: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    groups: tuple[str, ...]
    outputs: Callable[[Any], tuple[torch.Tensor, ...]]  # the tensors to compare and backprop


def build(name: str, size: str = "small", *, dtype: torch.dtype = torch.float32,
          device: str | torch.device = "cpu", batch: int = 2, seed: int = 0) -> Built:
    """A model in eval mode (no dropout: runs are comparable), on ``device`` in ``dtype``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    if size not in _SIZES:
        raise ValueError(f"unknown size {size!r}; known: {', '.join(_SIZES)}")
    width, side, queries, layers = _SIZES[size]
    torch.manual_seed(seed)
    model, outputs = _BUILDERS[name](width, queries, layers)
    model = model.to(device=device, dtype=dtype).eval()
    gen = torch.Generator().manual_seed(seed)
    pixels = torch.randn(batch, 3, side, side, generator=gen, dtype=dtype).to(device)
    # The model's MSDA group for the installed release's structure (catalogs/transformers.py).
    from .catalogs.transformers import msda_group

    return Built(name, model, {"pixel_values": pixels}, (msda_group(name),), outputs)


def without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every dropout probability zero (``nn.Dropout`` modules and the float
    ``*dropout*`` attributes transformers' layers read), so training-mode runs are comparable."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for name, value in vars(m).items():
            if "dropout" in name and isinstance(value, float):
                setattr(m, name, 0.0)
    return model


def _detection(out: Any) -> tuple[torch.Tensor, ...]:
    return out.logits, out.pred_boxes


def _segmentation(out: Any) -> tuple[torch.Tensor, ...]:
    return out.class_queries_logits, out.masks_queries_logits


def _resnet(config_class: type, width: int) -> Any:
    w = max(width // 8, 8)
    return config_class(embedding_size=w, hidden_sizes=[w, 2 * w, 4 * w, 8 * w], depths=[1] * 4,
                        layer_type="basic", out_features=["stage2", "stage3", "stage4"])


def _no_named_backbone(config_class: type) -> dict[str, Any]:
    """``backbone=None`` where the config takes one: 4.x defaults it to "resnet50" and refuses
    it beside a ``backbone_config``."""
    import inspect

    return {"backbone": None} if "backbone" in inspect.signature(config_class).parameters else {}


def _deformable_detr(width: int, queries: int, layers: int):
    from transformers import DeformableDetrConfig, DeformableDetrForObjectDetection, ResNetConfig

    config = DeformableDetrConfig(
        **_no_named_backbone(DeformableDetrConfig), use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=_resnet(ResNetConfig, width), d_model=width,
        encoder_layers=layers, decoder_layers=layers, encoder_ffn_dim=2 * width,
        decoder_ffn_dim=2 * width, num_queries=queries, num_labels=10)
    return DeformableDetrForObjectDetection(config), _detection


def _rt_detr(width: int, queries: int, layers: int, family: str = "RTDetr", **extra: Any):
    """RT-DETR and its descendants (same config fields), on a small ResNet backbone."""
    import transformers

    config_class = getattr(transformers, f"{family}Config")
    model_class = getattr(transformers, f"{family}ForObjectDetection")
    backbone = _resnet(transformers.RTDetrResNetConfig, width)
    config = config_class(
        backbone_config=backbone, use_pretrained_backbone=False, d_model=width,
        encoder_hidden_dim=width, encoder_in_channels=backbone.hidden_sizes[1:],
        decoder_in_channels=[width] * 3, encoder_ffn_dim=2 * width, decoder_ffn_dim=2 * width,
        num_queries=queries, decoder_layers=layers, num_labels=10, num_denoising=0, **extra)
    return model_class(config), _detection


def _mask2former(width: int, queries: int, layers: int):
    from transformers import Mask2FormerConfig, Mask2FormerForUniversalSegmentation, SwinConfig

    w = max(width // 4, 8)
    backbone = SwinConfig(embed_dim=w, depths=[1] * 4, num_heads=[1, 1, 2, 2], window_size=4,
                          out_features=["stage1", "stage2", "stage3", "stage4"])
    config = Mask2FormerConfig(
        backbone_config=backbone, use_pretrained_backbone=False, feature_size=width,
        mask_feature_size=width, hidden_dim=width, encoder_feedforward_dim=2 * width,
        dim_feedforward=2 * width, encoder_layers=layers, decoder_layers=layers + 1,
        num_queries=queries, num_attention_heads=4, num_labels=10)
    return Mask2FormerForUniversalSegmentation(config), _segmentation


_BUILDERS: dict[str, Callable[[int, int, int], tuple[torch.nn.Module, Callable]]] = {
    "deformable_detr": _deformable_detr,
    "rt_detr": _rt_detr,
    "rt_detr_v2": lambda w, q, n: _rt_detr(w, q, n, "RTDetrV2"),
    # D-FINE's and DEIM's own sizes sample 3, 6 and 3 points on their three levels
    "d_fine": lambda w, q, n: _rt_detr(w, q, n, "DFine", decoder_n_points=[3, 6, 3]),
    "deimv2": lambda w, q, n: _rt_detr(w, q, n, "Deimv2", decoder_n_points=[3, 6, 3]),
    "mask2former": _mask2former,
}


def run(built: Built, *, train: bool = False) -> tuple[torch.Tensor, ...]:
    """One inference (no autograd) or one training step: forward and backward of the sum of
    the outputs (no optimizer step, so the weights stay those of the comparison)."""
    if not train:
        with torch.no_grad():
            return built.outputs(built.model(**built.inputs))
    built.model.zero_grad(set_to_none=True)
    outputs = built.outputs(built.model(**built.inputs))
    sum(o.float().sum() for o in outputs).backward()
    return outputs


def time_ms(built: Built, *, train: bool, reps: int, warmup: int = 1) -> list[float]:
    """Wall-clock milliseconds of ``reps`` runs after ``warmup`` untimed ones (CUDA synced)."""
    import time

    sync = torch.cuda.synchronize if built.inputs["pixel_values"].is_cuda else (lambda: None)
    for _ in range(warmup):
        run(built, train=train)
    times = []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        run(built, train=train)
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return times
