"""Ultralytics RT-DETR and Roboflow RF-DETR models as their users build them, with random init
and nothing downloaded: the end-to-end tests' and benchmarks' models for the ultralytics and
rfdetr catalogs.

- Ultralytics: ``RTDETR("rtdetr-l.yaml").model`` (the yaml ships in the package). Importing
  ``ultralytics`` resolves two DNS names to decide whether it is online unless ``YOLO_OFFLINE``
  is set (``ultralytics.utils.is_online``): :func:`ultralytics_rtdetr` sets it before the import.
  Building from the yaml and running the model fetch nothing (no weights, fonts or AMP check
  model: those belong to the trainer and the predictor, which are not used).
- RF-DETR: ``rfdetr.models.build_model_from_config(RFDETR<Variant>Config(...))``, the builder its
  trainer uses, not ``RFDETR<Variant>()``, which loads the variant's pretrained checkpoint. The
  DINOv2 backbone would be fetched from the hub when ``pretrain_weights`` is None and the patch
  size and positional encodings match DINOv2's (``rfdetr/models/backbone/dinov2.py``); the
  variant configs' default ``pretrain_weights`` (a file name, never opened by this builder)
  keeps that off.

:class:`HostModel` holds the model, its images and two closures: ``infer()`` (eval, no autograd:
the raw decoder outputs) and ``train_step()`` (train mode: the library's own loss on fixed
targets, then backward; random draws seeded, so two runs see the same denoising queries).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

#: RF-DETR variants -> their config class in ``rfdetr.config``.
RFDETR_VARIANTS = {
    "nano": "RFDETRNanoConfig",
    "small": "RFDETRSmallConfig",
    "base": "RFDETRBaseConfig",
    "medium": "RFDETRMediumConfig",
    "large": "RFDETRLargeConfig",
}


@dataclass
class HostModel:
    name: str
    config_id: str  #: the shipped config that optimizes it
    model: torch.nn.Module
    images: torch.Tensor
    infer: Callable[[], tuple[torch.Tensor, ...]]
    train_step: Callable[[], torch.Tensor]
    compiled_attr: str  #: the model method that infer and train_step reach, for compile()

    def compile(self, **options) -> None:
        """``torch.compile`` the model's ``compiled_attr`` method (an instance attribute, which
        the library's own calls then find); :meth:`uncompile` removes it."""
        method = getattr(self.model, self.compiled_attr)
        setattr(self.model, self.compiled_attr, torch.compile(method, **options))

    def uncompile(self) -> None:
        vars(self.model).pop(self.compiled_attr, None)


def _boxes(batch: int, gen: torch.Generator, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per image: 1-3 class ids and (cx, cy, w, h) boxes inside the image, normalized."""
    out = []
    for _ in range(batch):
        n = int(torch.randint(1, 4, (), generator=gen))
        wh = torch.rand(n, 2, generator=gen) * 0.3 + 0.05
        centre = wh / 2 + torch.rand(n, 2, generator=gen) * (1 - wh)
        labels = torch.randint(0, 10, (n,), generator=gen)
        out.append((labels.to(device), torch.cat([centre, wh], 1).to(device)))
    return out


def _images(batch: int, side: int, gen: torch.Generator, device) -> torch.Tensor:
    return torch.randn(batch, 3, side, side, generator=gen).to(device)


def ultralytics_rtdetr(
    scale: str = "l",
    *,
    side: int = 640,
    batch: int = 8,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> HostModel:
    """``RTDETR(f"rtdetr-{scale}.yaml").model`` in float32 on ``device``."""
    os.environ.setdefault("YOLO_OFFLINE", "1")  # else the import resolves DNS names
    from ultralytics import RTDETR

    torch.manual_seed(seed)
    model = RTDETR(f"rtdetr-{scale}.yaml").model.to(device)
    model.nc = model.yaml["nc"]  # the trainer sets it from the data set; the loss reads it
    gen = torch.Generator().manual_seed(seed)
    images = _images(batch, side, gen, device)
    targets = _boxes(batch, gen, device)
    batch_dict = {
        "img": images,
        "cls": torch.cat([labels for labels, _ in targets]).float()[:, None],
        "bboxes": torch.cat([boxes for _, boxes in targets]),
        "batch_idx": torch.cat(
            [
                torch.full((len(labels),), float(i), device=device)
                for i, (labels, _) in enumerate(targets)
            ]
        ),
    }

    def infer():
        model.eval()
        with torch.no_grad():
            _, raw = model.predict(images)
        return tuple(raw[:4])  # dec_bboxes, dec_scores, enc_bboxes, enc_scores

    def train_step():
        model.train()
        model.zero_grad(set_to_none=True)
        torch.manual_seed(seed)  # the denoising queries' noise
        loss, _ = model.loss(batch_dict)  # it calls self.predict: the compiled one if set
        loss.backward()
        return loss.detach()

    return HostModel(
        f"rtdetr-{scale}", "turbo_physai.ultralytics", model, images, infer, train_step, "predict"
    )


def rfdetr(
    variant: str = "medium",
    *,
    side: int | None = None,
    batch: int = 8,
    device: str | torch.device = "cpu",
    seed: int = 0,
    **overrides,
) -> HostModel:
    """An RF-DETR variant (:data:`RFDETR_VARIANTS`) at ``side`` (default: the variant's
    resolution; it must be a multiple of patch size x windows) in float32 on ``device``.
    ``overrides`` go to the config class (``num_queries=..., group_detr=...``)."""
    import rfdetr.config as configs
    from rfdetr.models import build_criterion_from_config, build_model_from_config

    if variant not in RFDETR_VARIANTS:
        known = ", ".join(RFDETR_VARIANTS)
        raise ValueError(f"unknown RF-DETR variant {variant!r}; known: {known}")
    config_class = getattr(configs, RFDETR_VARIANTS[variant])
    if side is not None:
        overrides["resolution"] = side
    model_config = config_class(device=str(torch.device(device).type), **overrides)
    train_config = configs.TrainConfig(dataset_dir=".", output_dir=".")
    torch.manual_seed(seed)
    model = build_model_from_config(model_config, train_config).to(device)
    criterion, _ = build_criterion_from_config(model_config, train_config)
    gen = torch.Generator().manual_seed(seed)
    images = _images(batch, model_config.resolution, gen, device)
    targets = [{"labels": labels, "boxes": boxes} for labels, boxes in _boxes(batch, gen, device)]

    def infer():
        model.eval()
        with torch.no_grad():
            out = model(images)
        return out["pred_logits"], out["pred_boxes"]

    def train_step():
        model.train()
        model.zero_grad(set_to_none=True)
        torch.manual_seed(seed)
        out = model(images, targets)
        losses = criterion(out, targets)
        weights = criterion.weight_dict
        loss = sum(losses[k] * weights[k] for k in losses if k in weights)
        loss.backward()
        return loss.detach()

    return HostModel(
        f"rfdetr-{variant}", "turbo_physai.rfdetr", model, images, infer, train_step, "forward"
    )
