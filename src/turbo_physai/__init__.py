"""turbo_physai: declared, checked, reversible runtime optimizations for PyTorch perception models.

Importing this package never imports torch; only the operators in ``turbo_physai.ops`` need it.
"""

from ._core import PlanError
from .config import ConfigError, GroupSelection, OptimizationConfig, Trust, load_config
from .engine.catalog import registry
from .engine.context import CompatibilityContext, CompatibilityResult
from .engine.declarations import DeclarationError, Group, group, replace, replace_import, wrap
from .engine.report import OptimizationReport
from .engine.session import (
    ApplyError,
    active_report,
    applied,
    apply,
    check,
    record_write,
    rollback,
)

# The C++ planner raises it (unknown or duplicate group IDs, dependency cycles, phase
# violations); a ValueError, public here like every exception users catch.
PlanError.__module__ = __name__

__version__ = "0.1.0"

__all__ = [
    "ApplyError",
    "CompatibilityContext",
    "CompatibilityResult",
    "ConfigError",
    "DeclarationError",
    "Group",
    "GroupSelection",
    "OptimizationConfig",
    "OptimizationReport",
    "PlanError",
    "Trust",
    "active_report",
    "applied",
    "apply",
    "check",
    "group",
    "load_config",
    "record_write",
    "registry",
    "replace",
    "replace_import",
    "rollback",
    "wrap",
]
