"""Resolving import paths to the place an object lives, without binding descriptors.

A target ``pkg.mod.Class.attr`` resolves to a :class:`Location`: the owner whose ``__dict__`` is
written (``Class``), the attribute name, the raw value in that ``__dict__`` (a ``staticmethod``
object, a ``property``...) or ``MISSING`` when the attribute is inherited, and the object the
attribute currently means. Reading goes through ``vars()`` along the MRO, never ``getattr``,
which would hand back bound methods and unwrapped static/class methods (wrapt's rule).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import types
from dataclasses import dataclass
from typing import Any


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class ResolutionError(LookupError):
    """An import path does not lead to an object; the message says where it stopped and why."""


@dataclass(frozen=True)
class Location:
    path: str
    owner: Any
    name: str
    raw: Any  # owner.__dict__[name], or MISSING when inherited
    found: Any  # the raw descriptor where the MRO finds it (== raw unless inherited)

    @property
    def inherited(self) -> bool:
        return self.raw is MISSING


def lookup_raw(owner: Any, name: str) -> Any:
    """The raw attribute as the MRO finds it (for classes) or from ``__dict__``; MISSING if none."""
    chain = inspect.getmro(owner) if isinstance(owner, type) else (owner,)
    for klass in chain:
        namespace = getattr(klass, "__dict__", None)
        if namespace is not None and name in namespace:
            return namespace[name]
    return MISSING


def import_module(name: str) -> types.ModuleType:
    """importlib.import_module, with the failure turned into a ResolutionError naming the cause."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ResolutionError(f"cannot import module {name!r}: {err}") from err
    except Exception as err:  # a module that raises while importing is unresolvable, not fatal
        raise ResolutionError(f"importing {name!r} raised {type(err).__name__}: {err}") from err


def resolve_owner(path: str) -> tuple[Any, str]:
    """Split ``path`` into (owner object, final attribute name), importing modules on the way.

    The longest importable module prefix is imported first, then attributes are walked
    (TurboPhysAI's rule): a package whose ``__init__`` re-exports a name that shadows its
    submodule (``from .ops import ops``) still resolves ``pkg.ops.helper`` in the submodule.
    """
    parts = path.split(".")
    if len(parts) < 2:
        raise ResolutionError(f"{path!r} names no attribute: expected 'module.name'")
    depth = next((n for n in range(len(parts) - 1, 1, -1) if _importable(".".join(parts[:n]))), 1)
    walked = ".".join(parts[:depth])
    obj: Any = import_module(walked)
    for part in parts[depth:-1]:
        walked = f"{walked}.{part}"
        value = lookup_raw(obj, part)
        if value is MISSING and isinstance(obj, types.ModuleType):
            value = _import_submodule(walked)
        if value is MISSING:
            raise ResolutionError(f"cannot resolve {path!r}: {walked!r} does not exist")
        obj = value
    last = parts[-1]
    if isinstance(obj, types.ModuleType) and lookup_raw(obj, last) is MISSING:
        _import_submodule(f"{walked}.{last}")  # a submodule becomes an attribute once imported
    return obj, last


def _importable(name: str) -> bool:
    """Whether ``name`` is a module that exists (imported or findable). Finding it imports its
    parent packages; one that fails to import makes the name unimportable here, and the walk
    from a shorter prefix reports why."""
    if name in sys.modules:
        return isinstance(sys.modules[name], types.ModuleType)
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent is no package or has no __spec__
        return False
    except Exception as err:  # a parent that raises while importing, a broken finder
        raise ResolutionError(
            f"looking for module {name!r} raised {type(err).__name__}: {err}"
        ) from err


def _import_submodule(name: str) -> Any:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # parent is no package, or a module without __spec__
        return MISSING
    except Exception as err:  # a broken finder on sys.meta_path
        raise ResolutionError(
            f"looking for module {name!r} raised {type(err).__name__}: {err}"
        ) from err
    return MISSING if spec is None else import_module(name)


def resolve(path: str) -> Location:
    """Resolve a target path to its Location; raises ResolutionError when it does not exist."""
    owner, name = resolve_owner(path)
    namespace = getattr(owner, "__dict__", {})
    raw = namespace[name] if name in namespace else MISSING
    found = raw if raw is not MISSING else lookup_raw(owner, name)
    if found is MISSING:
        raise ResolutionError(
            f"cannot resolve {path!r}: {name!r} does not exist on {_describe(owner)}"
        )
    return Location(path, owner, name, raw, found)


def resolve_object(path: str) -> Any:
    """The object a path means for a caller (a replacement, a condition): descriptors unwrapped."""
    location = resolve(path)
    return unwrap_descriptor(location.found)


def unwrap_descriptor(raw: Any) -> Any:
    """The function inside a staticmethod/classmethod; anything else unchanged."""
    if isinstance(raw, (staticmethod, classmethod)):
        return raw.__func__
    return raw


def installed_by_us(obj: Any) -> bool:
    """A turbo_physai replacement or its runtime-condition dispatcher (``_core.Dispatcher``)."""
    obj = unwrap_descriptor(obj)
    return any(
        (getattr(x, "__module__", None) or "").startswith("turbo_physai.") for x in (obj, type(obj))
    )


def resolve_module(path: str) -> types.ModuleType:
    module = import_module(path)
    if not isinstance(module, types.ModuleType):
        raise ResolutionError(f"{path!r} is not a module")
    return module


def parent_module(path: str) -> types.ModuleType | None:
    """The already-imported parent package of a module path, importing it if it can be."""
    parent, _, _ = path.rpartition(".")
    if not parent:
        return None
    if parent in sys.modules:
        return sys.modules[parent]
    try:
        return importlib.import_module(parent)
    except Exception:  # the parent itself may be the thing that cannot be imported
        return None


def _describe(owner: Any) -> str:
    if isinstance(owner, types.ModuleType):
        return f"module {owner.__name__!r}"
    if isinstance(owner, type):
        return f"class {owner.__module__}.{owner.__qualname__}"
    return f"{type(owner).__name__} object"
