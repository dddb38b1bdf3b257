"""``ultralytics.rtdetr.denoising_graph_safe``: RT-DETR's denoising queries built without host
work that depends on the step's random numbers, so that a CUDA graph can replay the whole
training ``predict`` (issue 27), with stock's numbers.

``get_cdn_group`` relabels a random subset of the denoising queries:

    mask = torch.rand(dn_cls.shape) < (cls_noise_ratio * 0.5)       # on the host
    idx = torch.nonzero(mask).squeeze(-1)                            # n: changes every step
    new_label = torch.randint_like(idx, 0, num_classes, dtype=dn_cls.dtype, device=dn_cls.device)
    dn_cls[idx] = new_label

A graph cannot replay the host draw, nor a device draw whose size changes. Here the training
``predict`` (``ultralytics.rtdetr.cuda_graph``'s wrapper, :func:`predraw`) draws that mask's
numbers itself, with the same ``torch.rand`` of the same shape on the host generator, and hands
them to the replay as a device tensor; the rewritten function (:func:`rewritten`, the four
statements replaced, nothing else) draws a label for every query and keeps those at the
relabelled positions, in order: ``randint_like`` of N elements whose first n are the n that
stock draws. That holds where torch's CUDA random kernel gives element i the i-th Philox
subsequence and advances the generator by the same amount for both sizes; :func:`prefix_holds`
checks it on the device, for the sizes a call needs, before the rewrite is used (else the
training ``predict`` captures only the layers before its head, as without this group). A step
that relabels nothing draws no label, as stock draws none (the host knows: the mask is its own).

Outside that ``predict`` (no numbers handed over) the wrapper calls the original. The shape of
the mask follows ``get_cdn_group``'s own arithmetic from the box counts (:func:`noise_size`), so
the group applies only where that function and ``RTDETRDecoder.forward``, which passes its
arguments, are validated code (``validated.json``); the rewritten statement checks the shape too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ....engine.context import CompatibilityResult
from .. import host_code
from ..graph_safe import Template, _no_options, check_targets, rewrite_each_once
from . import msda

FUNCTION = "ultralytics.models.utils.ops.get_cdn_group"
#: Code relied on as it is: the head passes get_cdn_group the settings :func:`noise_size` reads.
RELIES_ON = ("ultralytics.nn.modules.head.RTDETRDecoder.forward",)
#: The MSDA group's table, with the head's forward required too (``msda record`` records it).
EVIDENCE = dataclasses.replace(msda.EVIDENCE, relies_on=RELIES_ON)

_NOISE, _LABELS = "_turbo_physai_noise", "_turbo_physai_labels"
RULES = (
    Template(("mask = torch.rand(dn_cls.shape) < (cls_noise_ratio * 0.5)",),
             f"mask = {_NOISE}(dn_cls) < (cls_noise_ratio * 0.5)"),
    Template(("idx = torch.nonzero(mask).squeeze(-1)",), "idx = mask.cumsum(0) - 1"),
    Template(("new_label = torch.randint_like(idx, 0, num_classes, dtype=dn_cls.dtype, "
              "device=dn_cls.device)",),
             f"new_label = {_LABELS}(idx, num_classes, dn_cls)"),
    Template(("dn_cls[idx] = new_label",),
             "dn_cls = torch.where(mask, new_label[idx.clamp(min=0)], dn_cls)"),
)

_given = threading.local()  # .noise: (device tensor, relabels) for the get_cdn_group call


@contextlib.contextmanager
def given(noise, relabels: bool):
    """While active, get_cdn_group takes its mask's numbers from ``noise``."""
    saved = getattr(_given, "noise", None)
    _given.noise = (noise, relabels)
    try:
        yield
    finally:
        _given.noise = saved


def _noise(dn_cls):
    noise = _given.noise[0]
    if noise is None or noise.shape != dn_cls.shape or noise.device != dn_cls.device:
        raise RuntimeError(
            "turbo_physai ultralytics.rtdetr.denoising_graph_safe: the class noise drawn for "
            f"this step has shape {None if noise is None else tuple(noise.shape)}, the denoising "
            f"queries {tuple(dn_cls.shape)} on {dn_cls.device}: get_cdn_group's arithmetic is "
            "not the validated one")
    return noise


def _labels(idx, num_classes, dn_cls):
    import torch

    if not _given.noise[1]:  # stock draws an empty tensor: no numbers, the generator unmoved
        return torch.zeros_like(idx, dtype=dn_cls.dtype)
    return torch.randint_like(idx, 0, num_classes, dtype=dn_cls.dtype, device=dn_cls.device)


def rewritten(function: Callable[..., Any]) -> Callable[..., Any]:
    """``get_cdn_group`` with :data:`RULES` applied, each exactly once (else NotRewritable)."""
    return rewrite_each_once(function, RULES, {_NOISE: _noise, _LABELS: _labels}, "get_cdn_group")


def cdn_wrapper(original: Callable[..., Any], options: Mapping[str, Any]):
    """Wrap factory for ``get_cdn_group``: the rewritten function where numbers were handed over
    (:func:`given`), the original elsewhere."""
    _no_options(options)
    graph_safe = rewritten(original)

    @functools.wraps(original)
    def get_cdn_group(*args, **kwargs):
        handed = getattr(_given, "noise", None)
        if handed is None or handed[0] is None:
            return original(*args, **kwargs)
        return graph_safe(*args, **kwargs)

    get_cdn_group._turbo_physai_denoising = True
    get_cdn_group._turbo_physai_rewritten = True  # check() leaves it alone while installed
    return get_cdn_group


def installed() -> bool:
    """Whether this group's wrapper is the ``get_cdn_group`` RT-DETR's head calls now."""
    import sys

    ops = sys.modules.get("ultralytics.models.utils.ops")
    return ops is not None and getattr(ops.get_cdn_group, "_turbo_physai_denoising", False)


def noise_size(head, gt_groups) -> int | None:
    """The number of denoising queries ``get_cdn_group`` relabels from for these box counts
    (its ``dn_cls``), or None where it draws no class noise (no denoising, no boxes, no label
    noise)."""
    num_dn = head.num_denoising
    if not head.training or num_dn <= 0 or head.label_noise_ratio <= 0 or not gt_groups:
        return None
    max_nums = min(max(gt_groups), num_dn)
    if max_nums <= 0:
        return None
    num_group = num_dn // max_nums
    return sum(min(n, max_nums) for n in gt_groups) * 2 * num_group


def predraw(head, batch, device) -> tuple[Any, bool] | None:
    """The class noise of this step's denoising queries, drawn as ``get_cdn_group`` would draw
    it, on ``device``, and whether it relabels any query; ``(None, False)`` where it draws
    none; None where the rewrite cannot stand for it (not on CUDA, the draws' prefix property
    not holding there, a batch that is not the loss's targets)."""
    import torch

    gt_groups = batch.get("gt_groups") if isinstance(batch, dict) else None
    cls = batch.get("cls") if isinstance(batch, dict) else None
    if device.type != "cuda" or not isinstance(gt_groups, list) \
            or not isinstance(cls, torch.Tensor) or not all(type(n) is int for n in gt_groups):
        return None
    size = noise_size(head, gt_groups)
    if size is None:
        return None, False
    if not prefix_holds(device, size, head.nc, cls.dtype):
        return None
    noise = torch.rand(size)  # the draw get_cdn_group makes: same generator, same shape
    relabels = bool((noise < head.label_noise_ratio * 0.5).any())
    # pinned, without waiting: the step's GPU work keeps going while the host goes on
    return noise.pin_memory().to(device, non_blocking=True), relabels


@functools.lru_cache(maxsize=1024)
def prefix_holds(device, size: int, num_classes: int, dtype) -> bool:
    """Whether, on ``device``, ``randint_like`` of n elements (n < size) draws the first n of a
    draw of ``size`` at the same generator state and leaves the generator where that draw does
    (the next draw equal). Tried for n = 1, size // 2 and size - 1; the state is restored."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    state = torch.cuda.get_rng_state(index)
    try:
        def draw(n):
            torch.cuda.set_rng_state(state, index)
            like = torch.empty(n, dtype=torch.int64, device=device)
            labels = torch.randint_like(like, 0, num_classes, dtype=dtype, device=device)
            return labels, torch.rand(4, device=device)

        full, after = draw(size)
        for n in sorted({1, size // 2, size - 1} - {0, size}):
            part, part_after = draw(n)
            if not (torch.equal(part, full[:n]) and torch.equal(part_after, after)):
                return False
        return True
    finally:
        torch.cuda.set_rng_state(state, index)


def check(context) -> CompatibilityResult:
    """compatibility_check: get_cdn_group and the head's forward are validated code, and
    get_cdn_group holds the four statements, each once."""
    validated = host_code.check(context, EVIDENCE)
    if not validated.compatible:
        return validated
    return check_targets(context, rewritten, "RT-DETR's get_cdn_group with its host-drawn "
                         "class noise")
