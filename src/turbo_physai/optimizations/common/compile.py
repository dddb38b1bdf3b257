"""Lazy ``torch.compile`` behind a stable wrapper, shared by the compile wrap factories.

Options (the group's ``options`` in the config; JSON values):

``mode``
    torch.compile mode, default ``"max-autotune-no-cudagraphs"`` (the seed document's choice:
    autotuned kernels, no CUDA graphs, which would pin input buffers of training steps).
``fullgraph``
    default ``False``: graph breaks fall back to eager instead of raising.
``dynamic``
    default ``None``: torch decides (static first, dynamic after a shape change).
``backend``
    default ``"inductor"``. ``"eager"`` or ``"aot_eager"`` run the graph capture without code
    generation: seconds instead of minutes, for debugging graph breaks and for tests.
    ``mode`` is an inductor setting and is passed only to inductor.

Unknown option names raise ``ValueError`` (so the group is blocked at check time, naming the
option) rather than being ignored.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

DEFAULTS: Mapping[str, Any] = {
    "mode": "max-autotune-no-cudagraphs",
    "fullgraph": False,
    "dynamic": None,
    "backend": "inductor",
}


def compile_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments for torch.compile: defaults overridden by ``options``."""
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown compile option(s) {unknown}; known: {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **options}
    if merged["backend"] != "inductor":
        del merged["mode"]
    return merged


def lazy_compile(fn: Callable[..., Any], options: Mapping[str, Any]) -> Callable[..., Any]:
    """A function that compiles ``fn`` on its first call and then calls the compiled one.

    Building it only validates the options: check() calls wrap factories, and must neither
    compile nor import torch._dynamo. Two threads racing on the first call may both compile;
    the second result is discarded, which is harmless.
    """
    kwargs = compile_options(options)
    compiled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def compiled_on_first_call(*args: Any, **kw: Any) -> Any:
        if not compiled:
            import torch

            compiled.append(torch.compile(fn, **kwargs))
        return compiled[0](*args, **kw)

    return compiled_on_first_call


def compile_wrapper(original: Callable[..., Any], options: Mapping[str, Any]) -> Callable[..., Any]:
    """Wrap factory ``(original, options)``: ``original`` compiled lazily; keeps its name, doc,
    signature and ``__wrapped__``. The compile groups of every catalog point here."""
    return lazy_compile(original, options)
