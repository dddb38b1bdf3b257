"""OptimizationConfig: which groups to apply, with options and trusted source evidence."""

import os

from .model import SCHEMA, ConfigError, GroupSelection, OptimizationConfig, Trust


def load_config(path: str | os.PathLike[str]) -> OptimizationConfig:
    """Load a v1 YAML config; errors are ConfigError naming file:line and the key.

    The loader (PyYAML and the schema) is imported on first use, so code that only imports
    turbo_physai (for ops, catalogs or the engine with Group objects) does not pay for it."""
    from .loader import load_config as load

    return load(path)


def shipped_configs() -> dict[str, os.PathLike[str]]:
    """The configs shipped with the built-in catalogs, by ``metadata.id`` -> file: name one in a
    config's ``extends``, or pass its file to check/apply."""
    from .loader import shipped

    return shipped()


__all__ = [
    "SCHEMA",
    "ConfigError",
    "GroupSelection",
    "OptimizationConfig",
    "Trust",
    "load_config",
    "shipped_configs",
]
