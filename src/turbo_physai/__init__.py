"""turbo_physai: declared, checked, reversible runtime optimizations for PyTorch perception models.

The engine and registry need no torch; only the operators in ``turbo_physai.ops`` do. A core built
without CUDA never imports it; one built with CUDA imports torch first where it is installed.
"""

try:
    from ._build import WITH_CUDA as _WITH_CUDA
except ImportError:  # a source tree whose core was built before the marker existed
    _WITH_CUDA = False
if _WITH_CUDA:
    # The CUDA build links the CUDA runtime statically. Loaded before torch, it made torch's own
    # import crash (SIGSEGV inside `import torch`: torch 2.11+cu130 on an H200 host, any process
    # whose first import was ours); loaded after torch it works.
    try:
        import torch  # noqa: F401
    except ImportError:
        pass

from ._core import PlanError  # noqa: E402
from .config import ConfigError, GroupSelection, OptimizationConfig, Trust, load_config
from .engine.catalog import registry
from .engine.context import CompatibilityContext, CompatibilityResult
from .engine.declarations import (
    DeclarationError,
    Group,
    group,
    replace,
    replace_import,
    replace_stored,
    wrap,
)
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
    "replace_stored",
    "rollback",
    "wrap",
]
