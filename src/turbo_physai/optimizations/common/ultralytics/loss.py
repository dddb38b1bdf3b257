"""Ultralytics RT-DETR's training loss with fewer host synchronizations, results unchanged
(``ultralytics.rtdetr.loss_graph_safe``; issue 27).

An eager RT-DETR training step on a fast GPU waits for the GPU batch + 2 x (decoder layers + 1)
+ 1 times (23 for rtdetr-l at batch 8): ``RTDETRDetectionModel.loss`` reads each image's box
count with its own ``.item()``, and ``HungarianMatcher.forward``, called per decoder layer,
zeroes non-finite costs by boolean indexing (a ``nonzero``) and copies the cost matrix to the
host for scipy. Each wait drains the GPU's queue, so host and GPU stop overlapping. The two
functions are recompiled from their own source (:func:`..graph_safe.rewrite`) with exactly these
statements replaced:

- the per-image counts: one comparison against ``arange(bs)`` and one ``tolist()`` (the same
  integers: each element compared with each image index, as the loop does);
- non-finite costs: ``masked_fill`` (the same matrix, no read-back);
- ``C.cpu()`` dropped and scipy replaced by :func:`turbo_physai.ops.linear_sum_assignment`
  (scipy's algorithm and pairs) on the matrix where it is, told the entries are finite (they
  are, after the line above), so nothing is read back; the indices it returns are already the
  int64 tensors the matcher built from scipy's arrays, on the cost's device.

What remains: the denoising queries draw their label noise on the host and read their ground
truth order back (``get_cdn_group``), one synchronization per step. A release whose code lacks
one of these statements is blocked by :func:`check`, naming the function and the statement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ....engine.context import CompatibilityResult
from ....engine.paths import unwrap_descriptor
from ..graph_safe import NotRewritable, Template, _no_options, check_targets, rewrite_each_once

_LSAP = "linear_sum_assignment"

#: RTDETRDetectionModel.loss: one read of all the per-image box counts.
BOX_COUNTS = Template(
    ("gt_groups = [(batch_idx == i).sum().item() for i in range(bs)]",),
    "gt_groups = (batch_idx.reshape(-1, 1) == torch.arange(bs, device=batch_idx.device))"
    ".sum(0).tolist()")
#: HungarianMatcher.forward, all four or none.
MATCHER = (
    Template(("C[C.isnan() | C.isinf()] = 0.0",),
             "C = C.masked_fill(C.isnan() | C.isinf(), 0.0)"),
    Template(("C = C.cpu()",), "pass"),
    Template(("indices = [linear_sum_assignment(c[:, :n]) for c, n in zip(C, gt_groups)]",),
             f"indices = [{_LSAP}(c[:, :n], assume_finite=True) for c, n in zip(C, gt_groups)]"),
    Template(("return [(torch.tensor(i, dtype=torch.long), torch.tensor(j, dtype=torch.long) "
              "+ gt_groups[k]) for k, (i, j) in enumerate(indices)]",),
             "return [(i, j + gt_groups[k]) for k, (i, j) in enumerate(indices)]"),
)
#: The rules each wrapped function must hold, each exactly once, by the function's name.
RULES = {"loss": (BOX_COUNTS,), "forward": MATCHER}


def rewritten(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (``RTDETRDetectionModel.loss`` or ``HungarianMatcher.forward``) with its
    rules applied; :class:`NotRewritable` unless each rule matched exactly once."""
    name = unwrap_descriptor(function).__name__
    if name not in RULES:
        raise NotRewritable(f"{function!r}: not a function this group rewrites")
    from ....ops import linear_sum_assignment

    return rewrite_each_once(function, RULES[name], {_LSAP: linear_sum_assignment},
                             unwrap_descriptor(function).__qualname__)


def loss_wrapper(original: Callable[..., Any], options: Mapping[str, Any]):
    """Wrap factory: :func:`rewritten`."""
    _no_options(options)
    return rewritten(original)


def check(context) -> CompatibilityResult:
    """compatibility_check: each target holds its statements, each once, rewritable."""
    return check_targets(context, rewritten, "RT-DETR's loss and matcher with the host "
                         "synchronizations ultralytics.rtdetr.loss_graph_safe rewrites")
