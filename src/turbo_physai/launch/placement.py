"""Where a rank runs: CPU affinity and NUMA binding from a RuntimeConfig's ``process`` section.

Each process of ``turbo-physai run`` places itself at activation, before the user's code runs
and while it is still single-threaded (a memory policy is per thread; threads created later
inherit it). For its local rank:

- the NUMA node: ``rank_numa[rank]``, else, with ``numa`` on, the node of the rank's GPU: the
  rank-th entry of ``CUDA_VISIBLE_DEVICES`` (all GPUs when unset) among the NVIDIA PCI display
  devices in bus order (``nvidia-smi``'s order; CUDA agrees on identical GPUs, and always with
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), whose ``numa_node`` sysfs file names it;
- binding to it: CPU affinity to the node's CPUs (those this process may use), and the memory
  policy ``MPOL_BIND`` to the node (``set_mempolicy``, what ``numactl --membind`` sets);
- ``rank_affinity[rank]``, when given, sets the CPUs instead (and keeps the memory binding).

Where the machine does not allow it, the rank runs unbound and its report says why: one NUMA
node, no GPU to read a node from, GPU IDs sysfs cannot map (UUIDs, MIG), a container that
refuses memory policies. Only a request that cannot mean anything here fails activation: a
``rank_numa`` node the machine does not have, or CPUs this process may not use.
Everything reads ``root`` (``/`` on a real machine), so tests give a fake topology.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.runtime import cpu_list

NVIDIA = "0x10de"
#: set_mempolicy(2) by machine; MPOL_BIND = 2.
_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "s390x": 270}
_MPOL_BIND = 2


class PlacementError(RuntimeError):
    """The RuntimeConfig asks for a placement this machine cannot give (activation fails)."""


@dataclass
class Placement:
    """What one rank asked for and got; ``to_dict`` goes into its process report."""

    local_rank: int
    node: int | None = None
    cpus: tuple[int, ...] = ()
    memory: str = "not bound"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"local_rank": self.local_rank, "numa_node": self.node, "cpus": list(self.cpus),
                "memory": self.memory, "notes": self.notes}


def place(settings: Mapping[str, Any], environ: Mapping[str, str] = os.environ,
          root: Path = Path("/")) -> Placement:
    """Pin this process as ``settings`` (``RuntimeConfig.placement()``) ask; see above."""
    local = int(environ.get("LOCAL_RANK", "0") or 0)
    out = Placement(local)
    affinity = settings.get("affinity", {}).get(str(local))
    node = _node(settings, local, environ, root, out)
    if node is not None:
        cpus = nodes(root).get(node)
        if cpus is None:
            raise PlacementError(f"local rank {local}: NUMA node {node} does not exist here "
                                 f"(nodes: {sorted(nodes(root)) or 'none'})")
        usable = tuple(c for c in cpus if c in os.sched_getaffinity(0))
        if not usable and affinity is None:
            raise PlacementError(f"local rank {local}: this process may use none of NUMA node "
                                 f"{node}'s CPUs {list(cpus)}")
        out.node, out.cpus = node, usable
        out.memory = _bind_memory(node)
    if affinity is not None:
        out.cpus = tuple(affinity)
    if out.cpus:
        try:
            os.sched_setaffinity(0, out.cpus)
        except OSError as err:
            raise PlacementError(f"local rank {local}: CPUs {list(out.cpus)}: {err}") from None
    return out


def _node(settings: Mapping[str, Any], local: int, environ: Mapping[str, str], root: Path,
          out: Placement) -> int | None:
    explicit = settings.get("rank_numa", {}).get(str(local))
    if explicit is not None:
        return int(explicit)
    if not settings.get("numa"):
        return None
    found = nodes(root)
    if len(found) < 2:
        out.notes.append(f"numa: not bound, this machine has {len(found) or 'no'} NUMA node(s)")
        return None
    node, why = gpu_node(local, environ, root)
    if node is None:
        out.notes.append(f"numa: not bound, {why}")
    return node


def nodes(root: Path = Path("/")) -> dict[int, tuple[int, ...]]:
    """NUMA node -> its CPUs, from ``sys/devices/system/node/node*/cpulist``."""
    out: dict[int, tuple[int, ...]] = {}
    base = root / "sys/devices/system/node"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for name in entries:
        number = name[4:]
        if not (name.startswith("node") and number.isdigit()):
            continue
        try:
            text = (base / name / "cpulist").read_text().strip()
            out[int(number)] = cpu_list(text) if text else ()
        except (OSError, ValueError):
            continue
    return out


def gpu_node(local: int, environ: Mapping[str, str], root: Path) -> tuple[int | None, str]:
    """(NUMA node of local rank's GPU, why not when None), from PCI sysfs."""
    base = root / "sys/bus/pci/devices"
    try:
        addresses = sorted(os.listdir(base))
    except OSError:
        return None, f"no PCI devices under {base}"
    gpus = [a for a in addresses if _read(base / a / "vendor") == NVIDIA
            and (_read(base / a / "class") or "").startswith("0x03")]
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v.strip() for v in visible.split(",") if v.strip()]
        if not all(v.isdigit() for v in entries):
            return None, f"CUDA_VISIBLE_DEVICES={visible!r} names GPUs sysfs cannot map"
        gpus = [gpus[int(v)] for v in entries if int(v) < len(gpus)]
    if local >= len(gpus):
        return None, f"no GPU for local rank {local} ({len(gpus)} visible)"
    node = _read(base / gpus[local] / "numa_node")
    if node is None or not node.lstrip("-").isdigit() or int(node) < 0:
        return None, f"GPU {gpus[local]} reports no NUMA node"
    return int(node), ""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _bind_memory(node: int) -> str:
    """set_mempolicy(MPOL_BIND, {node}) for this thread; what happened, in words."""
    number = _SET_MEMPOLICY.get(platform.machine())
    if number is None:
        return f"not bound: set_mempolicy is not known on {platform.machine()}"
    mask_words = node // 64 + 1
    mask = (ctypes.c_ulong * mask_words)()
    mask[node // 64] = 1 << (node % 64)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, _MPOL_BIND, mask, ctypes.c_ulong(mask_words * 64 + 1)) != 0:
        return f"not bound: set_mempolicy refused ({os.strerror(ctypes.get_errno())})"
    return f"bound to node {node}"
