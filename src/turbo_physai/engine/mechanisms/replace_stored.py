"""replace_stored: a function that instances store at construction, replaced for every instance.

A class that keeps a module function in each instance (``self.core = some_function`` in
``__init__``) cannot be reached by replacing the module function: instances built before apply()
keep the old one, and those built while applied keep ours after rollback(). So the class gets a
data descriptor (a ``property``, which torch.compile traces) at ``attribute``: a data descriptor on
the type wins over the instance ``__dict__``, so every read of an instance that holds
``original`` returns ours, whenever the instance was built; writes (``__init__`` included) still
go to the instance, and an instance given another function keeps it. No instance is written;
rollback deletes the descriptor and every instance reads its own value again.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from ... import _core
from .. import kinds, traced_dispatch
from ..declarations import ReplaceStored
from ..paths import MISSING, ResolutionError, installed_by_us, lookup_raw, resolve, resolve_object
from ..report import FAIL, PASS, UNKNOWN, Check
from .base import PrepareContext, Prepared, Transaction
from .object_patch import _compare, _condition, check_trust


class StoredPatch(Prepared):
    def __init__(self, decl: ReplaceStored, checks: list[Check]):
        super().__init__(decl, checks)
        self.owner: type | None = None
        self.value: Any = None
        self._entry = -1

    def snapshot(self, tx: Transaction) -> None:
        decl = self.declaration
        if self.value is not None:
            self._entry = tx.snapshot(self.owner, decl.attribute, decl.target)

    def install(self, tx: Transaction) -> None:
        if self.value is not None:
            tx.set(self._entry, self.value, self.declaration.target)


def prepare(decl: ReplaceStored, ctx: PrepareContext) -> Prepared:
    patch = StoredPatch(decl, [])
    checks = patch.checks
    try:
        owner = resolve_object(decl.owner)
        original = resolve_object(decl.original)
    except ResolutionError as err:
        checks.append(Check("target.resolve", FAIL, str(err), reason="target.unresolved"))
        return patch
    if not isinstance(owner, type):
        checks.append(_fail("target.resolve", f"{decl.owner} is not a class", "kind.mismatch"))
        return patch
    defined = lookup_raw(owner, decl.attribute)
    if defined is not MISSING:
        # A class attribute there would be shadowed for good by our descriptor, and instances
        # that never store one would read ours: not the contract this declaration checks.
        checks.append(
            _fail(
                "target.resolve",
                f"{decl.target} is defined on the class (or a base): "
                f"{type(defined).__name__}; replace_stored only serves instance attributes",
                "replace_stored.class_attribute",
            )
        )
        return patch
    checks.append(Check("target.resolve", PASS, actual="instance attribute"))
    if installed_by_us(original):
        # Another group replaced the module function first: instances store the function it
        # replaced, never this one, so the group would reach nothing. Say so instead.
        checks.append(
            _fail(
                "replace_stored.original",
                f"{decl.original} is a turbo_physai replacement installed by another group "
                "(instances store the function it replaced); apply one of the two groups",
                "replace_stored.original_replaced",
            )
        )
        return patch
    checks.append(_stores(owner, decl, original))
    _check_evidence(decl, ctx, checks)
    try:
        new = resolve_object(decl.replacement)
    except ResolutionError as err:
        checks.append(Check("replacement.resolve", FAIL, str(err), reason="replacement.unresolved"))
        return patch
    checks.append(_compare(original, new, ""))
    if decl.runtime_condition is not None:
        condition = _condition(decl, kinds.kind_of(original), original, checks)
        if condition is None:
            return patch
        new = _core.Dispatcher(original, new, condition, decl.runtime_condition)
        traced_dispatch.mark_traceable(new)  # read from an instance: unbound, dynamo traces it
        ctx.report.dispatchers[decl.target] = new
    if patch.ok:
        value = stored_property(decl.attribute, original, new)
        patch.owner, patch.value = owner, value
    return patch


def stored_property(attribute: str, original: Any, new: Any) -> property:
    """Reads of ``attribute`` give ``new`` where the instance stores ``original``, else what it
    stores; writes and deletes act on the instance ``__dict__`` as without the property."""

    def get(self):
        # Not self.__dict__.get: dynamo (torch 2.11) resolves that through this very property,
        # recursing until it crashes; dict.get it traces (2.13 on) or breaks the graph at (2.11).
        stored = dict.get(self.__dict__, attribute, MISSING)
        if stored is original:
            return new
        if stored is MISSING:  # torch.nn.Module.__getattr__ (submodules, buffers) goes next
            raise AttributeError(attribute)
        return stored

    def set_(self, value):
        self.__dict__[attribute] = value

    def delete(self):
        try:
            del self.__dict__[attribute]
        except KeyError:
            raise AttributeError(attribute) from None

    return property(get, set_, delete, doc=f"turbo_physai replace_stored: {attribute}")


def _check_evidence(decl: ReplaceStored, ctx: PrepareContext, checks: list[Check]) -> None:
    """The config's recorded hashes (``turbo-physai generate``) of the code relied on."""
    located = []
    for path in (*decl.replaces, *decl.reads):
        try:
            located.append((path, resolve(path).found))
        except ResolutionError as err:
            checks.append(Check("source.identity", FAIL, str(err), reason="target.unresolved"))
    check_trust(ctx, located, checks)


def _stores(owner: type, decl: ReplaceStored, original: Any) -> Check:
    """``owner.__init__`` assigns the function, by the global name it has in the owner's module,
    to ``self.<attribute>``."""
    init = owner.__dict__.get("__init__")
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    except (OSError, TypeError, SyntaxError):
        return Check("replace_stored.stores", UNKNOWN, f"{decl.owner}.__init__ has no source")
    name = getattr(original, "__name__", None)
    module_globals = getattr(init, "__globals__", {})
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Name):
            continue
        for target in node.targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr == decl.attribute
                and getattr(target.value, "id", None) == "self"
                and node.value.id == name
                and module_globals.get(name) is original
            ):
                return Check("replace_stored.stores", PASS, f"self.{decl.attribute} = {name}")
    return _fail(
        "replace_stored.stores",
        f"{decl.owner}.__init__ does not store {decl.original} at self.{decl.attribute}",
        "replace_stored.not_stored",
    )


def _fail(name: str, message: str, reason: str) -> Check:
    return Check(name, FAIL, message, reason=reason)
