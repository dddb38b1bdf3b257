"""A runtime_condition Dispatcher under ``torch.compile``: traced, not a graph break.

Dynamo cannot trace the native Dispatcher's ``__call__`` (a C slot): every call of a patched
function was a graph break, and ``fullgraph=True`` failed (RT-DETRv2's attention, issue 27).
:func:`register` gives dynamo a Python twin of that slot through torch's public
``torch.compiler.substitute_in_graph``: it runs the condition (dynamo guards on what it reads,
and recompiles when that changes) and calls the chosen function; eager calls stay native and
counted, compiled ones are not counted. Only Dispatchers the engine marks traceable take it,
those read unbound: functions reached as module attributes, staticmethods, and what a
``replace_stored`` descriptor hands out. A method's Dispatcher keeps the
graph break (values right), because dynamo reads ``obj.method`` without calling the
Dispatcher's ``__get__`` and the twin would never see ``self``. Dynamo before torch 2.13
ignores substitutes for a C slot: there every call stays a graph break, and a method's
Dispatcher is installed behind a Python forwarder (:func:`for_method`).

The engine never imports torch: :func:`register` acts only once model code has imported it.
"""

from __future__ import annotations

import sys
from typing import Any

_registered = False


def mark_traceable(dispatcher: Any) -> None:
    """Let ``torch.compile`` trace ``dispatcher`` (registering the twin if torch is here)."""
    dispatcher._traceable = True
    register()


def for_method(dispatcher: Any) -> Any:
    """What to install for ``dispatcher`` where it is read bound (a method or classmethod
    target): the Dispatcher itself, or where torch is imported without the twin (before 2.13) a
    Python function forwarding to it. Dynamo reads the class attribute without its ``__get__``
    and, at the graph break, calls the Dispatcher without ``self`` (a TypeError in the
    condition; the twin's graph break binds it right). The forwarder is a function, bound as
    usual, that passes ``self`` explicitly: one Python call more per eager call."""
    if register() or "torch" not in sys.modules:
        return dispatcher

    def forward_to_dispatcher(*args, **kwargs):
        return dispatcher(*args, **kwargs)

    forward_to_dispatcher._turbo_physai_dispatcher = dispatcher
    return forward_to_dispatcher


def register() -> bool:
    """Register the twin with dynamo, once; False where torch is not imported or is older than
    2.13: dynamo consults substitutes for a C ``__call__`` slot from 2.13 on (read in its
    source; 2.11 breaks the graph at the call, 2.12 not checked). There calls stay graph breaks
    with the native Dispatcher's values."""
    global _registered
    torch = sys.modules.get("torch")
    if _registered or torch is None or _before_2_13(torch):
        return _registered
    substitute = torch.compiler.substitute_in_graph
    from .. import _core

    try:
        substitute(_core.Dispatcher.__call__, skip_signature_check=True)(_traced_call)
    except (TypeError, ValueError):  # another torch's rules: calls stay graph breaks
        return False
    _registered = True
    return True


def _before_2_13(torch: Any) -> bool:
    return torch.torch_version.TorchVersion(torch.__version__) < "2.13"


def _traced_call(self, *args, **kwargs):
    """What the native ``Dispatcher.__call__`` does, in Python, for dynamo to inline."""
    import torch

    if not getattr(self, "_traceable", False):
        # A method's (its self never arrives here) or a group's gate: an exception dynamo
        # cannot see handled makes it break the graph at the call and run the native Dispatcher
        # there, as without the twin (torch._dynamo.graph_break() would resume in this frame).
        raise NotImplementedError("turbo_physai: this Dispatcher is not traced")
    verdict = self.condition(*args, **kwargs)
    if not isinstance(verdict, (bool, torch.SymBool)):  # SymBool: a condition on a dynamic shape
        name = getattr(self.condition, "__qualname__", repr(self.condition))
        raise TypeError(f"runtime_condition {name!r} returned {type(verdict).__name__}, "
                        "expected bool")
    return (self.replacement if verdict else self.original)(*args, **kwargs)
