"""Where one call's GPU time goes, from the profiler: its summed kernel time ("GPU busy"), the
kernels behind it and where the GPU idles. Shared by the end-to-end benchmarks: a step's wall
time over its busy time says how far the host holds it above its GPU work."""

from __future__ import annotations

import torch


def gpu_kernels(step, device="cuda", top=10):
    """Summed device time of one call of `step` (after one unprofiled call), from the profiler
    (``busy_ms``), with the kernels behind it: their count and the ``top`` that take longest
    (name, calls, total ms), and where the GPU idles (:func:`idle_gaps`). Device activity only
    (with CPU activity too, each kernel's time also counts as the self device time of the op
    that launched it, and the sum doubles). A one-element fill launched on the idle GPU just
    before the call marks when the call began (``prologue_ms``: until its first kernel); it is
    left out of the other figures."""
    if device != "cuda":
        return {"busy_ms": None}
    step()
    marker = torch.empty(1, device=device)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        marker.fill_(0.0)
        step()
        torch.cuda.synchronize()
    activity = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                      if e.device_type.name == "CUDA")
    (mark_start, mark_end, mark), activity = activity[0], activity[1:]
    events = sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)
    busy = sum(e.self_device_time_total for e in events) - (mark_end - mark_start)
    idle = idle_gaps(activity)
    if idle:
        idle["prologue_ms"] = (activity[0][0] - mark_end) / 1e3
    return {"busy_ms": busy / 1e3, "kernels": sum(e.count for e in events) - 1,
            "top": [(e.key[:90], e.count - (e.key == mark),
                     round(e.self_device_time_total / 1e3, 3)) for e in events[:top]],
            "idle": idle}


def idle_gaps(activity, host_us=20.0, largest=6):
    """Where the GPU idles within one profiled step, from its device activity ``(start_us,
    end_us, name)``: the span from the first start to the last end, and the idle time inside
    it, split into gaps up to ``host_us`` (kernel to kernel: launch and dependency latency, in a
    graph too) and longer ones (the GPU waiting for the host), with the ``largest`` of those
    (ms, the activity before and after)."""
    if not activity:
        return None
    activity = sorted(activity)
    short = long_ = 0.0
    gaps = []
    end, before = activity[0][1], activity[0][2]
    for start, stop, name in activity[1:]:
        gap = start - end
        if gap > host_us:
            long_ += gap
            gaps.append((round(gap / 1e3, 3), before[:60], name[:60]))
        elif gap > 0:
            short += gap
        if stop > end:
            end, before = stop, name
    return {"span_ms": (end - activity[0][0]) / 1e3, "idle_short_ms": short / 1e3,
            "idle_long_ms": long_ / 1e3, "long_gaps": len(gaps),
            "largest": sorted(gaps, reverse=True)[:largest]}


