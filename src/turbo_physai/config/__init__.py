"""OptimizationConfig: which groups to apply, with options and trusted source evidence."""

from .loader import load_config
from .model import SCHEMA, ConfigError, GroupSelection, OptimizationConfig, Trust

__all__ = ["SCHEMA", "ConfigError", "GroupSelection", "OptimizationConfig", "Trust", "load_config"]
