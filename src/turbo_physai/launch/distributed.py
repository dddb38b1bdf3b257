"""Compare what every rank applied, right after ``torch.distributed.init_process_group``.

torch is never imported for this: a one-shot import hook waits for ``torch.distributed`` to be
imported by the user's code, then wraps ``init_process_group``. When the process group exists,
every rank exchanges its applied-group digest over a separate gloo group (so NCCL's device
rules do not matter and no GPU memory is touched). Different digests are an activation failure
on every rank, before the first training step. Rank 0 writes ``ranks-<run>.json`` listing every
rank of the job, on whichever node it runs.
"""

from __future__ import annotations

import datetime
import functools
import importlib.abc
import importlib.util
import json
import socket
import sys
from pathlib import Path
from typing import Any

#: A rank without the bootstrap would leave the others waiting; give up after this long.
TIMEOUT = datetime.timedelta(seconds=120)


def install(record: Any) -> None:
    if "torch.distributed" in sys.modules:
        _patch(sys.modules["torch.distributed"], record)
    else:
        sys.meta_path.insert(0, _Hook(record))


class _Hook(importlib.abc.MetaPathFinder):
    def __init__(self, record: Any):
        self.record = record

    def find_spec(self, name, path, target=None):  # noqa: ANN001 (importlib's signature)
        if name != "torch.distributed":
            return None
        sys.meta_path.remove(self)  # one shot; also keeps find_spec below from recursing
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_patch(module):  # noqa: ANN001
            exec_module(module)
            _patch(module, self.record)

        spec.loader.exec_module = exec_then_patch
        return spec


def _patch(dist: Any, record: Any) -> None:
    if not (hasattr(dist, "is_available") and dist.is_available()):
        return
    original = dist.init_process_group
    c10d = sys.modules.get("torch.distributed.distributed_c10d")

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        compare(dist, record)
        return result

    dist.init_process_group = init_process_group
    if c10d is not None and getattr(c10d, "init_process_group", None) is original:
        c10d.init_process_group = init_process_group


def compare(dist: Any, record: Any) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    record.data["process"]["rank"] = rank
    mine = {"rank": rank, "host": socket.gethostname(), "pid": record.data["process"]["pid"],
            "digest": record.data["digest"],
            "applied": [g["id"] for g in (record.data["report"] or {}).get("groups", [])
                        if g["status"] == "applied"]}
    group = dist.new_group(backend="gloo", timeout=TIMEOUT)
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine, group=group)
    dist.destroy_process_group(group)
    digests = sorted({r["digest"] or "none" for r in everyone})
    record.data["ranks"] = everyone
    if rank == 0:
        from ..engine.report import write_atomic

        write_atomic(Path(record.path).with_name(f"ranks-{record.data['run']}.json"),
                     json.dumps({"ranks": everyone, "mismatch": len(digests) > 1}, indent=2))
    if len(digests) > 1:
        from .process import abort

        detail = "; ".join(f"rank {r['rank']}: {', '.join(r['applied']) or 'nothing'}"
                           for r in everyone)
        abort(record, f"ranks applied different optimizations ({detail})")
    record.write()
