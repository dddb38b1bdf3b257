"""Kernel registry: per operation slot, the newest eligible implementation runs.

A slot (``"fake_quant_fp8"``, ``"ms_deform_attn"``...) holds implementations in registration
order. A call tries them newest first and falls back to the slot's reference (the implementation
named ``"reference"``), so a machine without CUDA or optional packages runs the same code and
gets the same numbers, only slower. See docs/kernels.md.

The table, the eligibility checks and the call path live in the C++ core; this module is the
public face. Importing it never imports torch: the references and providers are imported on the
first use of a slot, and with ``TURBO_PHYSAI_KERNELS=off`` the accelerated providers never are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from turbo_physai import _core
from turbo_physai.kernels import providers
from turbo_physai.kernels._signatures import check_arg_indices, predicate_takes_call_arguments

__all__ = [
    "REFERENCE",
    "REFERENCE_OPS",
    "active",
    "call",
    "clear_cache",
    "implementations",
    "iter_impls",
    "register",
    "resolve",
    "slot",
    "unregister",
]

#: Name under which a slot's portable reference is registered; it is always the last resort.
REFERENCE = "reference"

#: The built-in slots that have a reference (LibreYOLO's name for the same tuple).
REFERENCE_OPS: tuple[str, ...] = tuple(providers.REFERENCES)

Slot = _core.Slot
_slots: dict[str, Slot] = {}


def register(
    slot: str,
    impl: Callable[..., Any],
    *,
    name: str,
    predicate: Callable[..., bool] | None = None,
    requires: Mapping[str, Any] | None = None,
) -> None:
    """Add ``impl`` to ``slot`` under ``name``; the newest eligible registration wins.

    ``requires`` declares what the implementation accepts, checked natively from tensor
    metadata on every call: ``device`` and ``dtype`` (a name or list of names), ``contiguous``,
    ``rank`` (an int or ``(min, max)``), ``graph_capture=False`` (decline CUDA tensors while a
    CUDA graph is captured) and ``args`` (positional indices of the implementation to check;
    default: every tensor argument).

    ``predicate`` must return a bool. One that takes no positional argument
    (``def _eligible() -> bool``, LibreYOLO's form) describes the environment: it runs when the
    slot's candidates are built and its answer is kept until :func:`clear_cache` or the next
    registry change. Otherwise it is called with the call's arguments, after ``requires``.
    A predicate that raises or returns a non-bool warns once and counts as "no".

    An implementation may return None to decline an input: the next eligible one runs.
    Raises ValueError for a duplicate or empty ``name``, an empty ``slot``, or a ``requires``
    that names an argument the implementation cannot take; TypeError for a predicate that can
    be called neither way.
    """
    per_call = predicate is not None and predicate_takes_call_arguments(slot, name, predicate)
    if requires is not None and not isinstance(requires, Mapping):
        raise TypeError(
            f"requires of implementation {name!r} for slot {slot!r} must be a mapping, "
            f"got {type(requires).__name__}"
        )
    spec = None if requires is None else dict(requires)
    if spec and "args" in spec:
        check_arg_indices(slot, name, impl, spec["args"])
    _core.kernel_register(slot, impl, name, predicate, spec, predicate_per_call=per_call)


def unregister(slot: str, name: str) -> bool:
    """Remove an implementation. Removing one that is not registered does nothing (as in
    LibreYOLO), so cleanups may run twice; returns whether something was removed."""
    return _core.kernel_unregister(slot, name)


def clear_cache() -> None:
    """Forget the environment predicates' answers: each slot re-asks them on its next call.

    Call it after changing what an environment predicate reads (an implementation that
    switched itself off, say). Registrations, disables and the override variables invalidate
    the cache by themselves; per-call requirements and predicates are never cached.
    """
    _core.kernel_clear_cache()


def slot(name: str) -> Slot:
    """The callable of a slot: ``slot("fake_quant_fp8")(x, scale)``. Keep it for hot loops."""
    found = _slots.get(name)
    if found is None:
        found = _slots[name] = _core.kernel_slot(name)
    return found


def call(slot_name: str, *args: Any, **kwargs: Any) -> Any:
    """Run the first eligible implementation of ``slot_name`` on these arguments."""
    return slot(slot_name)(*args, **kwargs)


def resolve(slot_name: str, *args: Any, **kwargs: Any) -> Callable[..., Any] | None:
    """The implementation a call would run, or None (unknown slot, or nothing eligible).

    With arguments, requirements and predicates are evaluated for them; without, only the
    override variables, disabled providers and the export state count. Slots without a
    reference resolve to None under tracing/export: callers keep their own portable path.
    """
    providers.ensure_loaded()
    if slot_name not in _core.kernel_slots():
        return None
    return slot(slot_name).select(*args, **kwargs)


def iter_impls(
    slot_name: str, *args: Any, **kwargs: Any
) -> Iterator[tuple[str, Callable[..., Any]]]:
    """``(name, impl)`` of every implementation a call would try, in order (reference last).

    Environment predicates are asked afresh. With arguments, ``requires`` and per-call
    predicates are checked for them too; without, they are not (as :func:`resolve`).
    """
    providers.ensure_loaded()
    if slot_name not in _core.kernel_slots():
        return iter(())
    return iter(slot(slot_name).eligible(*args, **kwargs))


def active() -> dict[str, str]:
    """``{slot: name of the implementation a call tries first | "unavailable"}``."""
    providers.ensure_loaded()
    return {name: slot(name).active() for name in _core.kernel_slots()}


def implementations(slot_name: str) -> list[dict[str, Any]]:
    """Every implementation of a slot in registration order, with its requirements and state."""
    providers.ensure_loaded()
    return _core.kernel_implementations(slot_name)


def __getattr__(name: str) -> Slot:
    # kernels.fake_quant_fp8(x, scale): the built-in slots read as functions of this module.
    if name in providers.REFERENCES:
        return slot(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


providers.install_hooks()
