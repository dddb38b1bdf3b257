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
``freezing``
    default ``False``. Inductor only, inference only: parameters and buffers become constants of
    the compiled graph (convolution + batch norm folded, weights pre-laid-out), so later changes
    to them are not seen and its gradients are not computed. Folding changes the last bits.
``cudnn_benchmark``
    default ``False``. Runs the compiled function with ``torch.backends.cudnn.benchmark`` on
    (restored after each call): cuDNN times its convolution algorithms on the first call of each
    shape and keeps the fastest. Algorithms can differ in the last bits.

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
#: Options that are not torch.compile keywords (see the module doc), all off by default.
SWITCHES = ("freezing", "cudnn_benchmark")


def compile_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments for torch.compile: defaults overridden by ``options``, without the
    switches (:data:`SWITCHES`, read with :func:`switches`)."""
    unknown = sorted(set(options) - set(DEFAULTS) - set(SWITCHES))
    if unknown:
        raise ValueError(f"unknown compile option(s) {unknown}; known: "
                         f"{sorted((*DEFAULTS, *SWITCHES))}")
    merged = {**DEFAULTS, **{k: v for k, v in options.items() if k in DEFAULTS}}
    if merged["backend"] != "inductor":
        del merged["mode"]
    return merged


def switches(options: Mapping[str, Any]) -> dict[str, bool]:
    """The switches of ``options``, checked: booleans, ``freezing`` with inductor only."""
    on = {name: options.get(name, False) for name in SWITCHES}
    for name, value in on.items():
        if not isinstance(value, bool):
            raise ValueError(f"compile option {name!r} must be true or false, got {value!r}")
    if on["freezing"] and options.get("backend", DEFAULTS["backend"]) != "inductor":
        raise ValueError("compile option 'freezing' needs backend 'inductor'")
    return on


def _inductor_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    # torch.compile takes a mode or inductor options, not both: freezing goes with the options
    # the mode stands for.
    from torch._inductor import list_mode_options

    rest = {k: v for k, v in kwargs.items() if k != "mode"}
    return {**rest, "options": {**list_mode_options(kwargs["mode"]), "freezing": True}}


def lazy_compile(fn: Callable[..., Any], options: Mapping[str, Any]) -> Callable[..., Any]:
    """A function that compiles ``fn`` on its first call and then calls the compiled one.

    Building it only validates the options: check() calls wrap factories, and must neither
    compile nor import torch._dynamo. Two threads racing on the first call may both compile;
    the second result is discarded, which is harmless.
    """
    kwargs = compile_options(options)
    on = switches(options)
    compiled: list[Callable[..., Any]] = []

    def compiled_fn() -> Callable[..., Any]:
        if not compiled:
            import torch

            compiled.append(torch.compile(fn, **(_inductor_options(kwargs) if on["freezing"]
                                                   else kwargs)))
        return compiled[0]

    if not on["cudnn_benchmark"]:
        @functools.wraps(fn)
        def compiled_on_first_call(*args: Any, **kw: Any) -> Any:
            return compiled_fn()(*args, **kw)

        return compiled_on_first_call

    @functools.wraps(fn)
    def compiled_with_cudnn_benchmark(*args: Any, **kw: Any) -> Any:
        import torch

        cudnn = torch.backends.cudnn
        before = cudnn.benchmark
        cudnn.benchmark = True
        try:
            return compiled_fn()(*args, **kw)
        finally:
            cudnn.benchmark = before

    return compiled_with_cudnn_benchmark


def compile_wrapper(original: Callable[..., Any], options: Mapping[str, Any]) -> Callable[..., Any]:
    """Wrap factory ``(original, options)``: ``original`` compiled lazily; keeps its name, doc,
    signature and ``__wrapped__``. The compile groups of every catalog point here."""
    return lazy_compile(original, options)
