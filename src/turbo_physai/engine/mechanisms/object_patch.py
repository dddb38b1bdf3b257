"""replace and wrap: install a new object at a target path and at its declared aliases.

The descriptor kind is kept: a staticmethod/classmethod target receives the new function wrapped
the same way, so callers see no difference. With a runtime_condition the installed object is the
C++ Dispatcher choosing between the replacement and the original on every call (traced by
torch.compile where it is read unbound: :mod:`..traced_dispatch`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ... import _core
from .. import evidence, kinds, traced_dispatch
from ..declarations import Replace, Wrap
from ..paths import Location, ResolutionError, resolve, resolve_object, unwrap_descriptor
from ..report import FAIL, NOT_APPLICABLE, PASS, UNKNOWN, Check
from .base import PrepareContext, Prepared, Transaction


class ObjectPatch(Prepared):
    def __init__(self, decl: Replace, checks: list[Check]):
        super().__init__(decl, checks)
        self.locations: list[Location] = []
        self.value: Any = None
        self._entries: list[int] = []

    def snapshot(self, tx: Transaction) -> None:
        self._entries = [tx.snapshot(loc.owner, loc.name, loc.path) for loc in self.locations]

    def install(self, tx: Transaction) -> None:
        for entry, loc in zip(self._entries, self.locations, strict=True):
            tx.set(entry, _as_descriptor(loc.found, self.value), loc.path)


def _as_descriptor(found: Any, value: Any) -> Any:
    if isinstance(found, staticmethod):
        return staticmethod(value)
    if isinstance(found, classmethod):
        return classmethod(value)
    return value


def prepare(decl: Replace, ctx: PrepareContext) -> Prepared:
    patch = ObjectPatch(decl, [])
    checks = patch.checks
    try:
        target = resolve(decl.target)
    except ResolutionError as err:
        if decl.optional:  # nothing of it in this release: nothing to patch
            checks.append(Check("target.resolve", NOT_APPLICABLE, f"optional target: {err}"))
        else:
            checks.append(Check("target.resolve", FAIL, str(err), reason="target.unresolved"))
        return patch
    kind = kinds.kind_of(target.found)
    original = unwrap_descriptor(target.found)
    checks.append(Check("target.resolve", PASS, actual=kind))
    patch.locations.append(target)
    _check_aliases(decl, original, patch)
    check_trust(ctx, [(decl.target, target.found)], checks)

    try:
        new = resolve_object(decl.replacement)
    except ResolutionError as err:
        checks.append(Check("replacement.resolve", FAIL, str(err), reason="replacement.unresolved"))
        return patch
    if isinstance(decl, Wrap):
        if not callable(new):
            checks.append(
                Check(
                    "wrap.factory",
                    FAIL,
                    f"{decl.replacement!r} is not callable",
                    reason="factory.error",
                )
            )
            return patch
        try:
            new = new(original, dict(ctx.options))
        except Exception as err:
            checks.append(
                Check("wrap.factory", FAIL, f"{type(err).__name__}: {err}", reason="factory.error")
            )
            return patch
        checks.append(Check("wrap.factory", PASS))

    if not kinds.kinds_match(kind, new):
        checks.append(
            Check(
                "target.kind",
                FAIL,
                "replacement is not the kind of the target",
                expected=kind,
                actual=kinds.kind_of(new),
                reason="kind.mismatch",
            )
        )
        return patch
    checks.append(Check("target.kind", PASS, expected=kind, actual=kinds.kind_of(new)))
    checks.append(_signature_check(target.found, new))

    value = new
    if decl.runtime_condition is not None:
        condition = _condition(decl, kind, original, checks)
        if condition is None:
            return patch
        value = _core.Dispatcher(original, new, condition, decl.runtime_condition)
        ctx.report.dispatchers[decl.target] = value
        if kind == kinds.STATICMETHOD or all(isinstance(loc.owner, ModuleType)
                                             for loc in patch.locations):
            traced_dispatch.mark_traceable(value)  # read unbound: torch.compile can trace it
        else:
            value = traced_dispatch.for_method(value)
    patch.value = value
    return patch


def _check_aliases(decl: Replace, original: Any, patch: ObjectPatch) -> None:
    for alias in decl.aliases:
        try:
            loc = resolve(alias)
        except ResolutionError as err:
            patch.checks.append(Check("alias.resolve", FAIL, str(err), reason="alias.unresolved"))
            continue
        found = unwrap_descriptor(loc.found)
        if any(loc.owner is done.owner and loc.name == done.name for done in patch.locations):
            # Another path to a place already written (a re-export of the same module): one
            # journal entry, or rollback would find its own write and call it drift.
            patch.checks.append(Check("alias.identity", NOT_APPLICABLE, f"{alias}: same place"))
            continue
        if found is not original:
            patch.checks.append(
                Check(
                    "alias.identity",
                    FAIL,
                    f"{alias!r} is not the same object as the target",
                    expected=repr(original),
                    actual=repr(found),
                    reason="alias.identity_mismatch",
                )
            )
            continue
        patch.checks.append(Check("alias.identity", PASS, alias))
        patch.locations.append(loc)


def check_trust(ctx: PrepareContext, located: list[tuple[str, Any]], checks: list[Check]):
    """``source.identity`` of each (path, object) against the config's recorded hashes."""
    if ctx.trust.empty:
        checks.append(Check("source.identity", NOT_APPLICABLE, "no evidence recorded"))
        return
    # Evidence is recorded per path (TurboPhysAI's v1 layout); formats in evidence.py.
    for path, found in located:
        accepted = evidence.recorded(
            ctx.trust.source_hashes.get(path, ()), ctx.trust.ast_hashes.get(path, ())
        )
        checks.append(evidence.verify(path, found, accepted))


def _signature_check(found: Any, new: Any) -> Check:
    if isinstance(found, property):
        for name in ("fget", "fset", "fdel"):
            mine, theirs = getattr(found, name), getattr(new, name)
            if (mine is None) != (theirs is None):
                # A setter or deleter added would turn reads-only into writes (or an
                # AttributeError into a silent write): the shape is part of the contract.
                has = "has no" if theirs is None else "adds an"
                return Check(
                    "target.signature",
                    FAIL,
                    f"replacement property {has} {name} (the original "
                    f"{'has' if mine is not None else 'has none'})",
                    expected=[n for n in ("fget", "fset", "fdel") if getattr(found, n)],
                    actual=[n for n in ("fget", "fset", "fdel") if getattr(new, n)],
                    reason="signature.mismatch",
                )
            if mine is not None:
                check = _compare(mine, theirs, name)
                if check.status != PASS:
                    return check
        return Check("target.signature", PASS)
    return _compare(unwrap_descriptor(found), new, "")


def _compare(original: Any, new: Any, what: str) -> Check:
    sig_o, sig_n = kinds.signature_of(original), kinds.signature_of(new)
    prefix = f"{what}: " if what else ""
    if sig_o is None or sig_n is None:
        return Check(
            "target.signature",
            UNKNOWN,
            f"{prefix}signature not available",
            expected=str(sig_o),
            actual=str(sig_n),
        )
    problem = kinds.accepts(sig_o, sig_n)
    if problem:
        return Check(
            "target.signature",
            FAIL,
            prefix + problem,
            expected=str(sig_o),
            actual=str(sig_n),
            reason="signature.mismatch",
        )
    return Check("target.signature", PASS, expected=str(sig_o), actual=str(sig_n))


def _condition(decl: Replace, kind: str, original: Any, checks: list[Check]) -> Any:
    if kind not in kinds.DISPATCHABLE:
        checks.append(
            Check(
                "runtime_condition.kind",
                FAIL,
                f"runtime_condition is not supported on a {kind}",
                expected=sorted(kinds.DISPATCHABLE),
                actual=kind,
                reason="runtime_condition.unsupported_kind",
            )
        )
        return None
    try:
        condition = resolve_object(decl.runtime_condition)
    except ResolutionError as err:
        checks.append(
            Check(
                "runtime_condition.resolve", FAIL, str(err), reason="runtime_condition.unresolved"
            )
        )
        return None
    if not callable(condition):
        checks.append(
            Check(
                "runtime_condition.resolve",
                FAIL,
                "condition is not callable",
                reason="runtime_condition.unresolved",
            )
        )
        return None
    check = _compare(original, condition, "runtime_condition")
    check.code = "runtime_condition.signature"
    checks.append(check)
    return None if check.status == FAIL else condition
