"""What kind of object a target is, and whether a replacement can stand in for it."""

from __future__ import annotations

import inspect
from typing import Any

FUNCTION = "function"
STATICMETHOD = "staticmethod"
CLASSMETHOD = "classmethod"
PROPERTY = "property"
CLASS = "class"
BUILTIN = "builtin"
CALLABLE = "callable"
OTHER = "other"

#: Kinds a runtime_condition dispatcher can stand in for (callables that are not classes).
DISPATCHABLE = frozenset({FUNCTION, STATICMETHOD, CLASSMETHOD, BUILTIN, CALLABLE})


def kind_of(raw: Any) -> str:
    """Classify a raw ``__dict__`` value (descriptors are kept as found)."""
    if isinstance(raw, staticmethod):
        return STATICMETHOD
    if isinstance(raw, classmethod):
        return CLASSMETHOD
    if isinstance(raw, property):
        return PROPERTY
    if isinstance(raw, type):
        return CLASS
    if inspect.isfunction(raw):
        return FUNCTION
    if inspect.isbuiltin(raw) or inspect.ismethoddescriptor(raw):
        return BUILTIN
    if callable(raw):
        return CALLABLE
    return OTHER


def kinds_match(target_kind: str, replacement: Any) -> bool:
    """Property needs property, class needs class, a callable needs a non-class callable."""
    if target_kind == PROPERTY:
        return isinstance(replacement, property)
    if target_kind == CLASS:
        return isinstance(replacement, type)
    if target_kind == OTHER:
        return not isinstance(replacement, (type, property))
    return callable(replacement) and not isinstance(replacement, (type, property))


def signature_of(obj: Any) -> inspect.Signature | None:
    function_forward = _autograd_forward(obj)
    if function_forward is not None:
        return function_forward
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):  # builtins without text signatures
        return None


def _autograd_forward(obj: Any) -> inspect.Signature | None:
    """``F.apply`` of a torch.autograd.Function reports ``(*args, **kwargs)``; callers pass what
    ``F.forward`` takes after ``ctx`` (mmcv exports ops as ``op = F.apply``). None otherwise.
    Recognised by name along the MRO, so the engine still never imports torch."""
    owner = getattr(obj, "__self__", None)
    # A Python bound classmethod up to torch 2.13, a builtin method of the metaclass from 2.14.
    bound = inspect.ismethod(obj) or inspect.isbuiltin(obj)
    if not (bound and getattr(obj, "__name__", None) == "apply" and isinstance(owner, type)):
        return None
    if not any(
        k.__module__ == "torch.autograd.function" and k.__name__ == "Function"
        for k in owner.__mro__
    ):
        return None
    raw = inspect.getattr_static(owner, "forward")
    forward = signature_of(getattr(raw, "__func__", raw))
    if forward is None:
        return None
    params = list(forward.parameters.values())
    # With a separate setup_context (torch >= 2.0 style) forward has no ctx parameter.
    own_setup = any(
        "setup_context" in vars(k) for k in owner.__mro__ if k.__module__.split(".")[0] != "torch"
    )
    return forward.replace(parameters=params if own_setup else params[1:])


def accepts(original: inspect.Signature, candidate: inspect.Signature) -> str | None:
    """None when every call the original accepts binds to the candidate, else why not.

    Probes two calls per original: only the required parameters, and every parameter, each
    passed the way the original allows (positionally where it can, by name otherwise).
    """
    P = inspect.Parameter
    positional, keywords, required_pos, required_kw = [], {}, [], {}
    for p in original.parameters.values():
        if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
            positional.append(p.name)
            if p.default is P.empty:
                required_pos.append(p.name)
        elif p.kind is P.KEYWORD_ONLY:
            keywords[p.name] = p.name
            if p.default is P.empty:
                required_kw[p.name] = p.name
    kinds = {p.kind for p in candidate.parameters.values()}
    has_var = {p.kind for p in original.parameters.values()} & {P.VAR_POSITIONAL, P.VAR_KEYWORD}
    for var in has_var:
        if var not in kinds:
            star = "*args" if var is P.VAR_POSITIONAL else "**kwargs"
            return f"original takes {star}, replacement does not"
    for args, kwargs in ((required_pos, required_kw), (positional, keywords)):
        try:
            candidate.bind(*args, **kwargs)
        except TypeError as err:
            return f"a call the original accepts fails on the replacement: {err}"
    # Keyword use of positional-or-keyword parameters must keep working too.
    by_name = {
        p.name: p.name for p in original.parameters.values() if p.kind is P.POSITIONAL_OR_KEYWORD
    }
    only_pos = [p.name for p in original.parameters.values() if p.kind is P.POSITIONAL_ONLY]
    try:
        candidate.bind(*only_pos, **by_name, **keywords)
    except TypeError as err:
        return f"a call the original accepts by keyword fails on the replacement: {err}"
    return None
