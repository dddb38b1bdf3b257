"""What each Python process of ``turbo-physai run`` does at startup (from sitecustomize).

Launcher processes (torchrun, ``python -m torch.distributed.run``, accelerate, turbo-physai
itself) skip activation: they start the ranks and never run model code. Every other process
places itself (CPU affinity and NUMA binding from the RuntimeConfig, see placement.py),
applies the config strictly, and writes its report to
``<report_dir>/process-<run>-<rank>-<pid>.json`` (again at exit, with dispatcher counts). A
process whose activation fails writes its report, explains on stderr and exits with
EXIT_ACTIVATION before any user code runs: no rank trains unoptimized by surprise.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import ENV_SETTINGS, EXIT_ACTIVATION

_LAUNCHER_MODULES = {"torch.distributed.run", "torch.distributed.launch", "turbo_physai.cli",
                     "accelerate.commands.launch", "accelerate.commands.accelerate_cli"}
_LAUNCHER_SCRIPTS = {"torchrun", "accelerate", "turbo-physai"}
_OPTIONS_WITH_VALUE = {"-W", "-X", "-Q"}


def is_launcher(argv: list[str]) -> bool:
    """Whether the command line (``sys.orig_argv``) starts a launcher rather than user code."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "") in _LAUNCHER_MODULES
        if arg == "-c" or arg == "-":
            return False
        if arg in _OPTIONS_WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            return Path(arg).name in _LAUNCHER_SCRIPTS
    return False


class Record:
    """This process's report file."""

    def __init__(self, settings: dict[str, Any]):
        self.rank = os.environ.get("RANK")
        self.data: dict[str, Any] = {
            "run": settings["run_id"],
            "process": {"pid": os.getpid(), "rank": _int(self.rank),
                        "local_rank": _int(os.environ.get("LOCAL_RANK")),
                        "world_size": _int(os.environ.get("WORLD_SIZE")),
                        "argv": list(getattr(sys, "orig_argv", sys.argv))},
            "activation": {"ok": True, "error": None},
            "digest": None,
            "report": None,
        }
        name = f"process-{settings['run_id']}-{self.rank or 'x'}-{os.getpid()}.json"
        self.path = Path(settings["report_dir"]) / name
        self.report: Any = None

    def fail(self, message: str) -> None:
        self.data["activation"] = {"ok": False, "error": message}

    def write(self) -> None:
        from ..engine.report import write_atomic

        if self.report is not None:
            self.data["report"] = self.report.to_dict()  # live dispatcher counts at this time
        write_atomic(self.path, json.dumps(self.data, indent=2) + "\n")


def digest(report: Any) -> str:
    """What this process applied, in a form that must be equal on every rank."""
    applied = sorted([g.id, sorted(g.targets)] for g in report.groups if g.status == "applied")
    return "sha256:" + hashlib.sha256(json.dumps(applied).encode()).hexdigest()


def activate() -> None:
    if is_launcher(list(getattr(sys, "orig_argv", sys.argv))):
        return
    settings = json.loads(os.environ[ENV_SETTINGS])
    record = Record(settings)
    try:
        if settings.get("placement"):
            from .placement import place

            record.data["placement"] = place(settings["placement"]).to_dict()
        record.report = _apply(settings)
    except Exception as err:  # any failure to activate stops this process before user code
        from ..engine.session import ApplyError

        record.report = err.report if isinstance(err, ApplyError) else None
        abort(record, f"{type(err).__name__}: {err}")
    record.data["digest"] = digest(record.report) if record.report else None
    record.write()
    atexit.register(record.write)
    from . import distributed

    distributed.install(record)


def abort(record: Record, message: str) -> None:
    """Write the report, explain, and leave with EXIT_ACTIVATION (os._exit: from sitecustomize
    a SystemExit would not end the interpreter cleanly)."""
    record.fail(message)
    record.write()
    rank = f" rank {record.rank}" if record.rank is not None else ""
    sys.stderr.write(f"turbo-physai:{rank} activation failed, not running the command: "
                     f"{message}\n  report: {record.path}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(EXIT_ACTIVATION)


def _apply(settings: dict[str, Any]) -> Any:
    if not settings.get("config"):
        return None
    from ..engine.session import apply

    return apply(settings["config"], force_groups=settings.get("force", ()),
                 disable_groups=settings.get("disable", ()), trust=settings.get("trust", False),
                 strict=True)


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None
