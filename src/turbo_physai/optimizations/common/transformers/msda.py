"""The transformers catalog's MSDA groups: their compatibility check and the kernelize guard.

Why a guard at all: transformers marks its ``MultiScaleDeformableAttention`` classes with
``use_kernel_forward_from_hub``, and ``kernelize`` (``model.kernelize()``,
``from_pretrained(..., use_kernels=True)``) then gives every *instance* its own forward
(``module.forward = MethodType(layer.forward, module)``): the hub kernel's, or the class's forward
as it is at that moment. An instance attribute shadows the class attribute, so

- instances kernelized before apply() never reach our class-level replacement, and
- instances kernelized after apply() keep a hub kernel (our op never runs), or keep *our*
  forward after rollback() (rollback cannot reach them).

:func:`check` blocks a group when live instances already carry their own forward;
:func:`kernelize_guard` (the common group every MSDA group depends on) reports, as a warning and
as a failing ``kernelize.bypass`` check in the active report, every instance kernelize binds over
one of our class-level replacements. Neither undoes what kernelize did: the user asked for it.
"""

from __future__ import annotations

import contextvars
import functools
import gc
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ....engine.context import CompatibilityResult
from ....engine.paths import ResolutionError, resolve
from .. import host_code
from . import evidence

#: Set while a guarded kernelize runs: a release whose PreTrainedModel.kernelize calls the
#: module-level kernelize reports once, from the outer call.
_guarding = contextvars.ContextVar("turbo_physai_kernelize_guard", default=False)


def check(context) -> CompatibilityResult:
    """compatibility_check of every MSDA model group: code at each target that the catalog tests
    passed on (:mod:`.evidence`), and no live instance of a target class with its own
    ``forward`` (kernelized)."""
    result = host_code.check(context, evidence.EVIDENCE)
    if not result.compatible or result.actual is None:
        return result
    for target in context.targets:
        owner = _owner_class(target.path)
        bound = bound_instances(owner) if owner is not None else 0
        if bound:
            return CompatibilityResult(
                False,
                "no instance with its own forward",
                f"{bound} instance(s)",
                f"{bound} live {owner.__qualname__} instance(s) have their own forward "
                "(kernels' kernelize, model.kernelize() or use_kernels=True): a class-level "
                "replacement would not reach them. Apply before building the model.",
            )
    return result


def _owner_class(path: str) -> type | None:
    if not path.endswith(".forward"):
        return None  # a module-level function: nothing binds it per instance
    try:
        owner = resolve(path).owner
    except ResolutionError:
        return None  # preparation reports the unresolvable target
    return owner if isinstance(owner, type) else None


def bound_instances(cls: type) -> int:
    """How many live instances of exactly ``cls`` carry a ``forward`` of their own.

    gc.get_referrers finds instances through their type (heap-type instances visit it), in C,
    without walking every object in Python. A kernelized instance references itself (its
    forward is a method bound to it), so a dropped model lingers until the cycle collector
    runs: collect before blaming it."""

    def count() -> int:
        return sum(1 for o in gc.get_referrers(cls) if type(o) is cls and "forward" in vars(o))

    return count() and (gc.collect(), count())[1]


def bypassing(model: Any) -> list[str]:
    """Submodules of ``model`` whose class forward is a turbo_physai replacement (installed now)
    but that carry their own forward, which runs instead."""
    out = []
    for name, module in model.named_modules():
        ours = getattr(vars(type(module)).get("forward"), "__module__", "") or ""
        if ours.startswith("turbo_physai.") and "forward" in vars(module):
            out.append(name or type(module).__qualname__)
    return out


def kernelize_guard(original: Callable[..., Any], options: Mapping[str, Any]) -> Callable[..., Any]:
    """Wrap factory for transformers' ``kernelize(model, mode=None)`` (a module function, or
    the method ``PreTrainedModel.kernelize(self, mode=None)`` of 4.57 to 5.10): runs it, then
    reports every submodule it bound over one of our class-level replacements."""
    if options:
        raise ValueError(f"transformers.msda.common takes no options, got {sorted(options)}")

    @functools.wraps(original)
    def kernelize(model, *args, **kwargs):
        if _guarding.get():
            return original(model, *args, **kwargs)
        token = _guarding.set(True)
        try:
            result = original(model, *args, **kwargs)
        finally:
            _guarding.reset(token)
        names = bypassing(model)
        if names:
            _report(model, names)
        return result

    return kernelize


def _report(model: Any, names: list[str]) -> None:
    from ....engine.report import FAIL, Check
    from ....engine.session import active_report

    message = (
        f"kernelize bound a forward to {len(names)} module(s) ({', '.join(names[:4])}"
        f"{', ...' if len(names) > 4 else ''}) over a turbo_physai replacement: those modules do "
        "not run it, and rollback() cannot reach them"
    )
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    report = active_report()
    modules = dict(model.named_modules())
    paths = {
        f"{type(modules[n]).__module__}.{type(modules[n]).__qualname__}.forward"
        for n in names
        if n in modules
    }
    for group in report.groups if report else ():
        if paths & set(group.targets):
            group.checks.append(Check("kernelize", FAIL, message, reason="kernelize.bypass"))
