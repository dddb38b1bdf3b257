"""RuntimeConfig: process settings for ``turbo-physai run`` (TurboPhysAI's v1 runtime format).

``environment.set`` / ``environment.unset`` change the environment of the launched command (so
every process, launcher included, sees them). ``process.rank_affinity`` pins each local rank to
CPUs (a list of CPU numbers or a cpulist string such as ``"0-3,8"``); the rank applies it to
itself at activation. NUMA binding (``process.numa`` / ``rank_numa``) is not supported: those
keys are accepted only when they ask for nothing, so TurboPhysAI files load as they are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import marks
from .model import ConfigError
from .schema import Located

RUNTIME_SCHEMA = "turbophysai/runtime-config/v1"


@dataclass(frozen=True)
class RuntimeConfig:
    set: Mapping[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    rank_affinity: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if k not in self.unset}
        env.update(self.set)
        return env


def load_runtime_config(path: str | os.PathLike[str]) -> RuntimeConfig:
    where = str(path)
    raw = marks.read(path)
    f = Located(where)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}:1: expected a mapping at the top level")
    f.known(raw, "", {"schema_version", "kind", "environment", "process"})
    for key, expected in (("schema_version", RUNTIME_SCHEMA), ("kind", "RuntimeConfig")):
        if raw.get(key) != expected:
            raise f.error(raw, key, key, f"must be {expected!r}, got {raw.get(key)!r}")
    env: dict[str, str] = {}
    unset: list[str] = []
    if "environment" in raw:
        section = f.mapping(raw, "environment", "environment", {"set", "unset"})
        table = section.get("set") or {}
        if not isinstance(table, Mapping):
            raise f.error(section, "set", "environment.set", "expected a mapping NAME: value")
        for name, value in table.items():
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise f.error(
                    table,
                    name,
                    f"environment.set.{name}",
                    "expected a string (quote numbers and booleans)",
                )
            env[str(name)] = str(value)
        if "unset" in section:
            unset = f.strings(section, "unset", "environment.unset", one_allowed=False)
    affinity: dict[int, tuple[int, ...]] = {}
    if "process" in raw:
        proc = f.mapping(raw, "process", "process", {"numa", "rank_affinity", "rank_numa"})
        if proc.get("numa") not in (None, False) or proc.get("rank_numa") not in (None, {}):
            key = "numa" if proc.get("numa") not in (None, False) else "rank_numa"
            raise f.error(proc, key, f"process.{key}", "NUMA binding is not supported")
        table = proc.get("rank_affinity") or {}
        if not isinstance(table, Mapping):
            raise f.error(
                proc,
                "rank_affinity",
                "process.rank_affinity",
                "expected a mapping of local rank -> CPUs",
            )
        for rank, cpus in table.items():
            path = f"process.rank_affinity.{rank}"
            if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
                raise f.error(table, rank, path, "ranks are non-negative integers")
            try:
                affinity[rank] = cpu_list(cpus)
            except ValueError as err:
                raise f.error(table, rank, path, str(err)) from None
    return RuntimeConfig(env, tuple(unset), affinity)


def cpu_list(value: object) -> tuple[int, ...]:
    """``[0, 1, 4]`` or ``"0-1,4"`` -> (0, 1, 4)."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value)
    ):
        return tuple(value)
    if isinstance(value, str) and value.strip():
        cpus: list[int] = []
        for part in value.split(","):
            lo, _, hi = part.strip().partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
                raise ValueError(f"{value!r} is not a cpulist like '0-3,8'")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
        return tuple(cpus)
    raise ValueError(f"expected a list of CPU numbers or a cpulist string, got {value!r}")
