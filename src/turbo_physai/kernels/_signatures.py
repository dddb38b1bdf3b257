"""Registration-time reading of signatures: how a predicate is called, which arguments exist.

Done once in :func:`turbo_physai.kernels.register`, so the per-call path in C++ never inspects
anything: it calls an environment predicate never (its answer is cached with the slot's
candidates) and a per-call predicate with the call's own arguments.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without text signatures, odd callables
        return None


def predicate_takes_call_arguments(slot: str, name: str, predicate: Callable[..., Any]) -> bool:
    """True for ``predicate(*args, **kwargs)``, False for an environment predicate ``()``.

    The rule: a predicate that accepts a positional argument (a positional parameter or
    ``*args``) is called with the call's arguments; one that accepts none is called with none.
    Raises TypeError when the signature cannot be read or a required keyword-only parameter
    makes both calls fail.
    """
    where = f"predicate of implementation {name!r} for slot {slot!r}"
    sig = _signature(predicate)
    if sig is None:
        raise TypeError(
            f"{where}: its signature cannot be read, so whether it takes the call's arguments "
            "is unknown; wrap it in a def or lambda"
        )
    required = [
        p.name for p in sig.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    ]
    if required:
        raise TypeError(
            f"{where} requires keyword-only argument(s) {', '.join(required)}; a predicate is "
            "called with no arguments or with the call's arguments"
        )
    return any(
        p.kind in _POSITIONAL or p.kind is inspect.Parameter.VAR_POSITIONAL
        for p in sig.parameters.values()
    )


def check_arg_indices(slot: str, name: str, impl: Callable[..., Any], indices: Any) -> None:
    """Reject ``requires['args']`` indices the implementation has no positional parameter for.

    Only what can be read is checked: an implementation taking ``*args`` or without a readable
    signature accepts any index. Malformed values are left to the C++ parser, which names them.
    """
    if not isinstance(indices, (list, tuple)):
        return
    sig = _signature(impl)
    if sig is None:
        return
    params = list(sig.parameters.values())
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return
    count = sum(p.kind in _POSITIONAL for p in params)
    for index in indices:
        if isinstance(index, int) and not isinstance(index, bool) and index >= count:
            raise ValueError(
                f"requires['args'] of implementation {name!r} for slot {slot!r}: index {index} "
                f"is out of range: the implementation takes {count} positional argument(s)"
            )
