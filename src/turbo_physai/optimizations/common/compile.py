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
    ``"cudagraphs"`` replays the ATen graph with CUDA graphs, also without code generation: the
    eager ops' numerics without their launch overhead (for Deformable DETR on an H200 it gained
    far less than inductor's ``reduce-overhead``; BENCHMARKS.md). ``mode`` is an inductor
    setting and is passed only to inductor.
``matmul_precision``
    default ``None``: float32 matrix products as the process has them
    (``torch.get_float32_matmul_precision()``, "highest" unless changed). ``"high"`` (TF32
    tensor cores) or ``"medium"`` (bfloat16) hold for the compiled calls only, set before each
    call and put back after it, so code outside keeps its precision: a deliberate trade of
    float32 accuracy for speed (convolutions already use TF32 by PyTorch's default,
    ``torch.backends.cudnn.allow_tf32``), hence opt-in.

Unknown option names raise ``ValueError`` (so the group is blocked at check time, naming the
option) rather than being ignored.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

DEFAULTS: Mapping[str, Any] = {
    "mode": "max-autotune-no-cudagraphs",
    "fullgraph": False,
    "dynamic": None,
    "backend": "inductor",
    "matmul_precision": None,
}
PRECISIONS = ("highest", "high", "medium")


def compile_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments for torch.compile: defaults overridden by ``options``."""
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown compile option(s) {unknown}; known: {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **options}
    if merged["backend"] != "inductor":
        del merged["mode"]
    del merged["matmul_precision"]  # not torch.compile's: the wrapper applies it per call
    return merged


def matmul_precision(options: Mapping[str, Any]) -> str | None:
    """The ``matmul_precision`` option, checked."""
    precision = options.get("matmul_precision")
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(
            f"compile option matmul_precision must be one of {list(PRECISIONS)} or null, "
            f"got {precision!r}"
        )
    return precision


class _MatmulPrecision(AbstractContextManager):
    """float32 matmul precision set for a block and put back after it, also on errors."""

    def __init__(self, precision: str):
        self.precision = precision

    def __enter__(self):
        import torch

        self.previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(self.precision)

    def __exit__(self, *exc):
        import torch

        torch.set_float32_matmul_precision(self.previous)


def lazy_compile(fn: Callable[..., Any], options: Mapping[str, Any]) -> Callable[..., Any]:
    """A function that compiles ``fn`` on its first call and then calls the compiled one.

    Building it only validates the options: check() calls wrap factories, and must neither
    compile nor import torch._dynamo. Two threads racing on the first call may both compile;
    the second result is discarded, which is harmless.
    """
    kwargs = compile_options(options)
    precision = matmul_precision(options)
    compiled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def compiled_on_first_call(*args: Any, **kw: Any) -> Any:
        if not compiled:
            import torch

            compiled.append(torch.compile(fn, **kwargs))
        if precision is None:
            return compiled[0](*args, **kw)
        with _MatmulPrecision(precision):
            return compiled[0](*args, **kw)

    return compiled_on_first_call


def compile_wrapper(original: Callable[..., Any], options: Mapping[str, Any]) -> Callable[..., Any]:
    """Wrap factory ``(original, options)``: ``original`` compiled lazily; keeps its name, doc,
    signature and ``__wrapped__``. The compile groups of every catalog point here."""
    return lazy_compile(original, options)
