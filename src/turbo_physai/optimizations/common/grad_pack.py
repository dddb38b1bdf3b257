"""The gradients a captured backward graph hands out, copied out with one copy per dtype.

A replay overwrites the graph's gradient buffers, so each backward hands out copies. One copy
per tensor was 333 launches in Deformable DETR's training step, each a host call of several
microseconds on the step's critical path. Instead, while the backward is captured,
:class:`GradPack` concatenates the contiguous gradients of each dtype into one flat buffer (in
the graph: a replay fills it); a backward then clones each flat buffer once and hands out views
of the clone, shaped as the gradients. A gradient that is not contiguous (a channels-last
weight's) is cloned on its own, keeping its strides.
"""

from __future__ import annotations

from typing import Any


class GradPack:
    """Built inside the backward graph's capture from its gradients (None where a tensor gets
    none); :meth:`take` after each replay."""

    def __init__(self, grads: list[Any]):
        import torch

        members: dict[Any, list[Any]] = {}
        self.slots: list[Any] = []  # per gradient: None, (key, index, shape) or a tensor
        for g in grads:
            if g is None or not g.is_contiguous():
                self.slots.append(g)
                continue
            key = (g.dtype, g.device)
            group = members.setdefault(key, [])
            self.slots.append((key, len(group), g.shape))
            group.append(g)
        self.sizes = {key: [g.numel() for g in group] for key, group in members.items()}
        self.flat = {key: torch.cat([g.reshape(-1) for g in group])
                     for key, group in members.items()}

    def take(self) -> list[Any]:
        """Copies of the gradients of the last replay, owned by the caller."""
        import torch

        parts = {key: torch.split(flat.clone(), self.sizes[key])
                 for key, flat in self.flat.items()}
        return [slot.clone() if isinstance(slot, torch.Tensor)
                else None if slot is None
                else parts[slot[0]][slot[1]].view(slot[2])
                for slot in self.slots]
