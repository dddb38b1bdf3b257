"""Host ints onto a CUDA device while a stream is being captured into a CUDA graph."""

from __future__ import annotations

import torch


def device_ints(values, device: torch.device) -> torch.Tensor:
    """``torch.as_tensor(values, dtype=torch.long, device=device)`` that a CUDA graph can capture.

    Under capture a host-to-device copy is not allowed (it synchronizes), and a tensor cached
    outside the graph would be read by every replay after its owner may have freed it. One fill
    kernel per value carries the value as a kernel argument into memory of the graph's own pool.
    """
    host = torch.as_tensor(values, dtype=torch.long)  # host only: no device work
    out = torch.empty(host.shape, dtype=torch.long, device=device)
    flat = out.view(-1)
    for i, v in enumerate(host.view(-1).tolist()):
        flat[i].fill_(v)
    return out
