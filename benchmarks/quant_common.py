"""Shared by benchmarks/quant_cpu.py and benchmarks/quant_cuda.py: the cases (LibreYOLO's
slots at the sizes its QAT and finalized models call them with) and the bit-exactness check."""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch


@dataclass(frozen=True)
class Case:
    label: str
    slot: str
    make: object  # (generator, device) -> args
    grad: bool  # a training step (forward + backward of the first argument) is measured too


def _weight(gen, device, *shape, spread=0.05):
    return (torch.randn(shape, generator=gen) * spread).to(device)


def _activation(gen, device, *shape):
    return torch.randn(shape, generator=gen).to(device)


def _packed(gen, device, rows, cols, bits):
    payload = torch.randint(0, 256, (rows, cols * bits // 8), generator=gen, dtype=torch.uint8)
    return payload.to(device)


CASES = [
    Case("fp8 conv weight 256x256x3x3, per-channel scale", "fake_quant_fp8",
         lambda g, d: (_weight(g, d, 256, 256, 3, 3),
                       (torch.rand(256, 1, 1, 1, generator=g) * 1e-3 + 1e-4).to(d)), True),
    Case("fp8 activation 8x64x80x80, per-tensor scale", "fake_quant_fp8",
         lambda g, d: (_activation(g, d, 8, 64, 80, 80), torch.tensor([0.02], device=d)), True),
    Case("int8 conv weight 256x256x3x3, amax scale", "fake_quant_int8_per_channel",
         lambda g, d: (_weight(g, d, 256, 256, 3, 3),), True),
    Case("int8 conv weight 256x256x3x3, given scale", "fake_quant_int8_per_channel",
         lambda g, d: (_weight(g, d, 256, 256, 3, 3), 0,
                       (torch.rand(256, generator=g) * 1e-3 + 1e-4).to(d)), True),
    Case("int8 affine activation 8x64x80x80", "fake_quant_int8_affine",
         lambda g, d: (_activation(g, d, 8, 64, 80, 80), torch.tensor([-2.5], device=d),
                       torch.tensor([3.0], device=d)), True),
    Case("int4 grouped weight 1024x1024, group 128", "fake_quant_int_grouped",
         lambda g, d: (_weight(g, d, 1024, 1024), 4, 128), True),
    Case("int2 grouped weight 1024x1000, group 64", "fake_quant_int_grouped",
         lambda g, d: (_weight(g, d, 1024, 1000), 2, 64), True),
    Case("nvfp4 weight 1024x1024", "fake_quant_nvfp4_weight",
         lambda g, d: (_weight(g, d, 1024, 1024), torch.tensor(0.25, device=d)), True),
    Case("nvfp4 activation 8x400x256", "fake_quant_nvfp4_dynamic",
         lambda g, d: (_activation(g, d, 8, 400, 256),), True),
    Case("mxfp4 weight 1024x1024", "fake_quant_mxfp4_weight",
         lambda g, d: (_weight(g, d, 1024, 1024),), True),
    Case("mxfp4 activation 8x400x256", "fake_quant_mxfp4_dynamic",
         lambda g, d: (_activation(g, d, 8, 400, 256),), True),
    Case("unpack int4 1024x1024, group 128", "unpack_int_grouped",
         lambda g, d: (_packed(g, d, 1024, 1024, 4), (torch.rand(1024, 8, generator=g) * 1e-2)
                       .to(d), 4, 128, 1024), False),
    Case("unpack nvfp4 1024x1024", "unpack_nvfp4",
         lambda g, d: (_packed(g, d, 1024, 1024, 4), (torch.rand(1024, 64, generator=g) * 448)
                       .to(torch.float8_e4m3fn).to(d), torch.tensor(0.25, device=d), 1024), False),
]


def references():
    """LibreYOLO's reference of each slot (its registry's fallback)."""
    from libreyolo.quant import fake_quant, packing

    refs = {c.slot: getattr(fake_quant, c.slot, None) for c in CASES}
    refs["unpack_int_grouped"] = packing.unpack_int_grouped_weight
    refs["unpack_nvfp4"] = packing.unpack_nvfp4_weight
    return refs


def mismatches(got: torch.Tensor, want: torch.Tensor) -> int:
    """Elements whose bits differ (a NaN meeting a NaN counts as equal); -1 for another shape."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return -1
    bad = got.view(torch.int32) != want.view(torch.int32)
    return int((bad & ~(got.isnan() & want.isnan())).sum())


def step(fn, args, grad: torch.Tensor | None):
    """One call without autograd, or a forward + backward of the first argument with `grad`."""
    if grad is None:
        with torch.no_grad():
            return fn(*args)
    leaf = args[0].detach().requires_grad_()
    return torch.autograd.grad(fn(leaf, *args[1:]), leaf, grad)[0]


def save(name: str, rows: list, command: str, environment_: dict) -> None:
    """Writes benchmarks/results/<name>.json: where and how it ran, and the rows."""
    out = Path(__file__).parent / "results" / f"{name}.json"
    results = {"environment": environment_, "command": command, "rows": rows}
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


def environment(device: str) -> dict:
    import libreyolo

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    info = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "machine": platform.machine(), "processor": _cpu_model(),
            "torch": torch.__version__, "libreyolo": libreyolo.__version__,
            "threads": torch.get_num_threads()}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
