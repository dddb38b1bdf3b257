"""Wrap factories of ``openvla.adamw.fused`` and ``openvla.gc.freeze`` (no options).

``adamw_fused_wrapper``: ``torch.optim.AdamW`` becomes a subclass (same name and module) that
asks for the fused CUDA implementation when every parameter is a CUDA floating-point tensor and
the caller chose no implementation itself (``fused``/``foreach`` not passed): one kernel per
step instead of one per parameter group chunk. Anything else goes to AdamW as written.

``gc_freeze_wrapper``: before the training loop runs, collect once and move every object that
exists then (model, optimizer, datasets) to the permanent generation, so the cyclic collector
stops rescanning them on every collection during training (``gc.freeze``).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Mapping
from typing import Any


def _no_options(options: Mapping[str, Any], group: str) -> None:
    if options:
        raise ValueError(f"{group} takes no options, got {sorted(options)}")


def adamw_fused_wrapper(original: type, options: Mapping[str, Any]) -> type:
    _no_options(options, "openvla.adamw.fused")

    def __init__(self, params, *args, **kwargs):  # noqa: N807 (the class's own __init__)
        params = list(params)
        if "fused" not in kwargs and "foreach" not in kwargs and _all_cuda(params):
            kwargs["fused"] = True
        original.__init__(self, params, *args, **kwargs)

    functools.update_wrapper(__init__, original.__init__)
    return type(original.__name__, (original,), {
        "__init__": __init__, "__module__": original.__module__,
        "__qualname__": original.__qualname__, "__doc__": original.__doc__,
    })


def _all_cuda(params: list[Any]) -> bool:
    tensors = [p for item in params
               for p in (item["params"] if isinstance(item, dict) else [item])]
    return bool(tensors) and all(
        getattr(t, "is_cuda", False) and t.is_floating_point() for t in tensors
    )


def gc_freeze_wrapper(original: Callable[..., Any], options: Mapping[str, Any]):
    _no_options(options, "openvla.gc.freeze")

    @functools.wraps(original)
    def frozen_before_training(*args: Any, **kwargs: Any) -> Any:
        gc.collect()
        gc.freeze()
        return original(*args, **kwargs)

    return frozen_before_training
