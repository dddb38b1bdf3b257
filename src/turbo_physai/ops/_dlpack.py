"""Handing tensors to the compiled core: DLPack capsules, and the CUDA stream to run on."""

from __future__ import annotations

import torch
from torch.utils.dlpack import to_dlpack


def exported(t: torch.Tensor) -> object:
    """The DLPack capsule of `t`, with its sign. A tensor with the negative bit set (a lazy
    negation, such as ``torch.complex(z, -t).conj().imag``) stores its data un-negated, and
    DLPack has no field for that bit: such a tensor is materialized first, else the kernels would
    read it without its sign (issue 24). A real tensor cannot carry the conjugate bit, and the
    kernels refuse complex dtypes."""
    return to_dlpack(t.resolve_neg() if t.is_neg() else t)


def capsules(*tensors: torch.Tensor | None) -> tuple[object, ...]:
    """DLPack capsules for nanobind's ndarray arguments (None passes through), see ``exported``.

    Given a tensor, nanobind calls ``Tensor.__dlpack__()``, a Python method: a six-tensor call of
    the CPU kernel's binding took 11.5 us that way and 1.6 us with capsules (2-core dev box,
    torch 2.13). The capsule carries no stream: the kernels take the caller's stream explicitly.
    """
    return tuple(None if t is None else exported(t) for t in tensors)


def current_stream(t: torch.Tensor) -> int:
    """The raw handle of the current stream on ``t``'s CUDA device, without building a
    ``torch.cuda.Stream`` object (the call inductor's generated code makes): host time is most
    of a small call's cost."""
    return torch._C._cuda_getCurrentRawStream(t.get_device())
