"""RuntimeConfig: process settings for ``turbo-physai run`` (TurboPhysAI's v1 runtime format).

``environment.set`` / ``environment.unset`` change the environment of the launched command (so
every process, launcher included, sees them); ``run --set NAME=VALUE`` goes on top. Variables
that make a process load code from a place the file chooses (:func:`loads_code`: PYTHONPATH,
LD_PRELOAD, compiled-code caches ...) are refused unless the caller trusts the config, like
catalogs a config names (``--trust-config``): a config is data.

``process`` places each rank (by ``LOCAL_RANK``, 0 when there is none), see
:mod:`turbo_physai.launch.placement`:

- ``rank_affinity``: local rank -> CPUs (a cpulist string such as ``"0-3,8"`` or a list);
- ``rank_numa``: local rank -> NUMA node: CPU affinity to the node's CPUs and memory bound to
  it (``numactl --cpunodebind=N --membind=N``);
- ``numa``: ``true``/``"auto"`` (TurboPhysAI's default when the key is absent) binds a rank
  without a ``rank_numa`` entry to the NUMA node of its GPU where the machine tells;
  ``false`` binds none (and drops ``rank_numa``, like TurboPhysAI).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from . import marks
from .model import ConfigError
from .schema import Located

RUNTIME_SCHEMA = "turbophysai/runtime-config/v1"
KIND = "RuntimeConfig"

#: Variables whose value makes Python, the dynamic loader or a compiler cache load code from
#: where it points (PYTHONWARNINGS and PYTHONBREAKPOINT import the modules they name).
CODE_VARIABLES = frozenset({
    "PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONPLATLIBDIR",
    "PYTHONPYCACHEPREFIX", "PYTHONBREAKPOINT", "PYTHONWARNINGS", "PYTHONEXECUTABLE",
    "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH",
})
#: Prefixes of the same: the dynamic loader's (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT ...).
CODE_PREFIXES = ("LD_", "DYLD_")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def loads_code(name: str) -> bool:
    """Whether setting ``name`` can make a process load code from where its value points."""
    return name in CODE_VARIABLES or name.startswith(CODE_PREFIXES)


@dataclass(frozen=True)
class RuntimeConfig:
    set: Mapping[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    rank_affinity: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    rank_numa: Mapping[int, int] = field(default_factory=dict)
    numa: bool = True
    path: str | None = None
    #: ``environment.set`` name -> line, for errors naming the file.
    lines: Mapping[str, int] = field(default_factory=dict)

    def environ(self, base: Mapping[str, str], overrides: Mapping[str, str] = {}) -> dict[str, str]:
        """``base`` without ``unset``, then ``set``, then ``overrides`` (``run --set``)."""
        env = {k: v for k, v in base.items() if k not in self.unset}
        env.update(self.set)
        env.update(overrides)
        return env

    def untrusted(self) -> list[str]:
        """``file:line: NAME`` of every variable this file sets that loads code."""
        return [f"{self.path}:{self.lines.get(n, 0)}: {n}" for n in self.set if loads_code(n)]

    def placement(self, numa: bool | None = None) -> dict[str, object]:
        """The ``process`` settings as the launcher passes them to every rank (JSON)."""
        enabled = self.numa if numa is None else numa
        return {
            "affinity": {str(r): list(c) for r, c in self.rank_affinity.items()},
            "numa": enabled,
            "rank_numa": {str(r): n for r, n in self.rank_numa.items()} if enabled else {},
        }


def is_runtime_config(path: str | os.PathLike[str]) -> bool:
    """Whether the file says ``kind: RuntimeConfig`` (cheap: no schema, any error is False)."""
    try:
        raw = marks.read(path)
    except ConfigError:
        return False
    return isinstance(raw, Mapping) and raw.get("kind") == KIND


def load_runtime_config(path: str | os.PathLike[str]) -> RuntimeConfig:
    where = str(path)
    raw = marks.read(path)
    f = Located(where)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}:1: expected a mapping at the top level")
    f.known(raw, "", {"schema_version", "kind", "environment", "process"})
    for key, expected in (("schema_version", RUNTIME_SCHEMA), ("kind", KIND)):
        if raw.get(key) != expected:
            raise f.error(raw, key, key, f"must be {expected!r}, got {raw.get(key)!r}")
    env, unset, lines = _environment(f, raw)
    affinity: dict[int, tuple[int, ...]] = {}
    rank_numa: dict[int, int] = {}
    numa: bool = True
    if "process" in raw and raw["process"] is not None:
        proc = f.mapping(raw, "process", "process", {"numa", "rank_affinity", "rank_numa"})
        if "numa" in proc:
            if proc["numa"] not in (True, False, "auto"):
                raise f.error(proc, "numa", "process.numa", "expected true, false or 'auto'")
            numa = proc["numa"] is not False
        for rank, cpus in _ranks(f, proc, "rank_affinity").items():
            try:
                affinity[_index(rank)] = cpu_list(cpus)
            except ValueError as err:
                raise f.error(proc["rank_affinity"], rank, f"process.rank_affinity.{rank}",
                              str(err)) from None
        for rank, node in _ranks(f, proc, "rank_numa").items():
            node = _index(node)
            if node is None:
                raise f.error(proc["rank_numa"], rank, f"process.rank_numa.{rank}",
                              "expected a NUMA node number (a non-negative integer)")
            rank_numa[_index(rank)] = node
    return RuntimeConfig(env, tuple(unset), affinity, rank_numa, numa, where, lines)


def _environment(f: Located, raw: Mapping) -> tuple[dict[str, str], list[str], dict[str, int]]:
    env: dict[str, str] = {}
    unset: list[str] = []
    lines: dict[str, int] = {}
    if "environment" not in raw or raw["environment"] is None:
        return env, unset, lines
    section = f.mapping(raw, "environment", "environment", {"set", "unset"})
    table = section.get("set") or {}
    if not isinstance(table, Mapping):
        raise f.error(section, "set", "environment.set", "expected a mapping NAME: value")
    for name, value in table.items():
        path = f"environment.set.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise f.error(table, name, path, "not an environment variable name")
        # TurboPhysAI turns scalars into strings (true -> "True"); null or a list is a mistake.
        if not isinstance(value, (str, int, float, bool)):
            raise f.error(table, name, path, "expected a string (or a number or boolean)")
        env[name] = str(value)
        lines[name] = marks.line_of(table, name)
    if section.get("unset") is not None:
        unset = f.strings(section, "unset", "environment.unset", one_allowed=False)
    return env, unset, lines


def _ranks(f: Located, proc: Mapping, key: str) -> dict[int, object]:
    table = proc.get(key) or {}
    if not isinstance(table, Mapping):
        raise f.error(proc, key, f"process.{key}", "expected a mapping of local rank -> value")
    for rank in table:
        if _index(rank) is None:
            raise f.error(table, rank, f"process.{key}.{rank}",
                          "ranks are non-negative integers")
    return dict(table)


def _index(value: object) -> int | None:
    """A non-negative integer, written as one or as its digits ('0': TurboPhysAI's keys)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 8:
        return int(value)
    return None


def cpu_list(value: object) -> tuple[int, ...]:
    """``[0, 1, 4]`` or ``"0-1,4"`` -> (0, 1, 4)."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 1 << 16 for c in value)
    ):
        return tuple(value)
    if isinstance(value, str) and value.strip():
        cpus: list[int] = []
        for part in value.split(","):
            lo, _, hi = part.strip().partition("-")
            if not _cpu(lo) or (hi and not _cpu(hi)) or (hi and int(hi) < int(lo)):
                raise ValueError(f"{value!r} is not a cpulist like '0-3,8'")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
        return tuple(cpus)
    raise ValueError(f"expected a list of CPU numbers or a cpulist string, got {value!r:.60}")


def _cpu(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5


def overrides(pairs: Iterable[str]) -> dict[str, str]:
    """``run --set NAME=VALUE`` arguments -> {NAME: VALUE} (the value may contain ``=``)."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _NAME.match(name):
            raise ConfigError(f"--set {pair!r}: expected NAME=VALUE with an environment name")
        out[name] = value
    return out
