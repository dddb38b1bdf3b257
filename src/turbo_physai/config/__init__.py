"""OptimizationConfig: which groups to apply, with options and trusted source evidence."""

from .model import GroupSelection, OptimizationConfig, Trust, load_config

__all__ = ["GroupSelection", "OptimizationConfig", "Trust", "load_config"]
