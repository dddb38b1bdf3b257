"""Torch state the registry's call path asks about; imported only once torch already is."""

from __future__ import annotations

from collections.abc import Callable

import torch

from turbo_physai import _core


def _portable_probe() -> Callable[[], bool]:
    # torch.onnx.is_in_onnx_export() costs about 1 us per call in torch 2.13 (it imports two
    # modules each time); reading the same two flags directly costs a tenth of that. Fall back
    # to the public functions where a torch release moved the flags.
    try:
        from torch.onnx._internal.exporter import _flags
        from torch.onnx._internal.torchscript_exporter._globals import GLOBALS
    except ImportError:
        return lambda: torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()
    is_tracing = torch._C._is_tracing

    def exporting() -> bool:
        return is_tracing() or GLOBALS.in_onnx_export or _flags._is_onnx_exporting

    return exporting


#: True under torch.jit.trace and ONNX export, where slots and call sites use portable math.
exporting = _portable_probe()


def install() -> None:
    """Under jit tracing and ONNX export slots run their reference; CUDA-graph capture is
    reported to implementations registered with ``requires={"graph_capture": False}``."""
    # Without CUDA no stream can be captured (and the CPU build's query raises).
    capturing = torch.cuda.is_current_stream_capturing if torch.cuda.is_available() else _never
    _core.kernel_set_probes(exporting, capturing)


def _never() -> bool:
    return False
