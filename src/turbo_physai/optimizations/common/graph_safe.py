"""Host code that reads GPU results to decide a branch, rewritten to decide on the GPU with the
same results (issue 29: what stops a training step from being captured or compiled whole).

transformers' encoder layers guard float16 overflow in training with

    if not torch.isfinite(hidden_states).all():        # 4.x: torch.isinf(x).any() or
        clamp_value = torch.finfo(hidden_states.dtype).max - 1000   #      torch.isnan(x).any()
        hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)

The ``if`` copies the answer to the host: a stream synchronization per layer and step, which a
CUDA graph cannot capture and where ``torch.compile`` breaks the graph (6 breaks per Deformable
DETR forward). :func:`finite_clamp_wrapper` (a wrap factory) recompiles the layer's own
``forward`` from its source with exactly that statement replaced by ``hidden_states =
finite_clamp(hidden_states)``, which selects on the GPU: the values (and gradients) are the
stock ones bit for bit, finite or not; the clamp is computed either way (one more elementwise
pass). Nothing else of the release's code changes, so no fingerprint table is needed: the
statement must match the pattern exactly (names included), and a forward that does not contain it
once, has decorators or closure cells, is blocked by :func:`check` with the reason.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable, Mapping
from typing import Any

from ...engine.context import CompatibilityResult
from ...engine.paths import ResolutionError, resolve, unwrap_descriptor

_CLAMP = """
    clamp_value = torch.finfo({x}.dtype).max - 1000
    {x} = torch.clamp({x}, min=-clamp_value, max=clamp_value)"""
#: The guard as transformers writes it (5.x, then 4.x), ``{x}`` the tensor's name.
PATTERNS = (
    "if not torch.isfinite({x}).all():" + _CLAMP,
    "if torch.isinf({x}).any() or torch.isnan({x}).any():" + _CLAMP,
)
_CLAMP_HELPER = "_turbo_physai_finite_clamp"


class NotRewritable(ValueError):
    """The function does not hold the guard in a form this module rewrites (the reason)."""


def _guard_name(node: ast.AST) -> str | None:
    """``x`` where ``node`` is one of :data:`PATTERNS` for the tensor named ``x``."""
    if not isinstance(node, ast.If):
        return None
    names = [n.id for n in ast.walk(node.test) if isinstance(n, ast.Name) and n.id != "torch"]
    if not names:
        return None
    found = ast.dump(node)
    for pattern in PATTERNS:
        if found == ast.dump(ast.parse(pattern.format(x=names[0])).body[0]):
            return names[0]
    return None


class _Rewrite(ast.NodeTransformer):
    def __init__(self):
        self.count = 0

    def visit_If(self, node: ast.If) -> ast.AST:
        name = _guard_name(node)
        if name is None:
            return self.generic_visit(node)
        self.count += 1
        new = ast.parse(f"{name} = {_CLAMP_HELPER}({name})").body[0]
        return ast.copy_location(new, node)


def rewrite(function: Callable[..., Any], finite_clamp: Callable[[Any], Any], *,
            wrapped: bool = False) -> Callable[..., Any]:
    """``function`` recompiled with each guard replaced by ``x = finite_clamp(x)``, in its
    module's globals (the helper reaches it through a closure cell, not globals). A wrapper
    that closes over the function it wraps (``functools.wraps``; transformers 5.x wraps every
    layer's ``forward`` for gradient checkpointing) is rebuilt around the rewritten one, its own
    code unchanged; the decorators in the source of the function it wraps (``wrapped``) are what
    made that wrapper, and are not applied again. Raises :class:`NotRewritable` naming what
    stops it, also where nothing matched."""
    function = unwrap_descriptor(function)
    code = getattr(function, "__code__", None)
    if code is None:
        raise NotRewritable(f"{function!r} is not a Python function")
    inner = getattr(function, "__wrapped__", None)
    if code.co_freevars and inner is not None:
        return _rewrap(function, inner, rewrite(inner, finite_clamp, wrapped=True))
    if code.co_freevars:
        raise NotRewritable(f"{function.__qualname__} has closure cells {code.co_freevars}")
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError) as e:
        raise NotRewritable(f"{function.__qualname__}: no source ({e})") from None
    node = ast.parse(source).body[0]
    if not isinstance(node, ast.FunctionDef) or (node.decorator_list and not wrapped):
        raise NotRewritable(f"{function.__qualname__} is decorated or not a plain def")
    node.decorator_list = []
    transformer = _Rewrite()
    transformer.visit(node)
    if transformer.count == 0:
        raise NotRewritable(f"{function.__qualname__} has no finite check in a known form")
    # def make(helper): <the forward>; return it. Line numbers stay the original file's.
    maker = ast.parse(f"def _make({_CLAMP_HELPER}):\n    pass").body[0]
    maker.body = [node, ast.Return(ast.Name(node.name, ast.Load()))]
    module = ast.Module([maker], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, code.co_firstlineno - node.lineno)
    compiled = compile(module, code.co_filename, "exec")
    make_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    rewritten = types.FunctionType(make_code, function.__globals__)(finite_clamp)
    return _like(rewritten, function)


def _rewrap(wrapper, old, new):
    """A copy of ``wrapper`` whose closure holds ``new`` where it held ``old`` (and itself where
    it held itself)."""
    cells, own = [], []
    for cell in wrapper.__closure__:
        try:
            content = cell.cell_contents
        except ValueError:
            raise NotRewritable(f"{wrapper.__qualname__} has an empty closure cell") from None
        if content is old:
            cells.append(types.CellType(new))
        elif content is wrapper:
            own.append(types.CellType())
            cells.append(own[-1])
        else:
            cells.append(types.CellType(content))
    rebuilt = types.FunctionType(wrapper.__code__, wrapper.__globals__, wrapper.__name__,
                                 wrapper.__defaults__, tuple(cells))
    for cell in own:
        cell.cell_contents = rebuilt
    rebuilt = _like(rebuilt, wrapper)
    rebuilt.__wrapped__ = new
    return rebuilt


def _like(made, function):
    """``made`` with ``function``'s defaults, names and attributes, marked as ours."""
    made.__defaults__ = function.__defaults__
    made.__kwdefaults__ = function.__kwdefaults__
    made.__qualname__ = function.__qualname__
    made.__doc__ = function.__doc__
    made.__dict__.update(function.__dict__)
    made.__wrapped__ = function
    made._turbo_physai_rewritten = True  # check() leaves an installed one alone
    return made


def finite_clamp_wrapper(original: Callable[..., Any], options: Mapping[str, Any]):
    """Wrap factory: ``original`` (a layer's ``forward``) with its overflow guard decided on the
    device (:func:`rewrite`)."""
    if options:
        raise ValueError(f"the finite-check rewrite takes no options, got {sorted(options)}")
    import torch

    def finite_clamp(x):
        """``x`` if every element is finite, else clamped to +-(largest finite - 1000): the
        guard's result, selected on the device."""
        limit = torch.finfo(x.dtype).max - 1000
        return torch.where(torch.isfinite(x).all(), x, torch.clamp(x, min=-limit, max=limit))

    return rewrite(original, finite_clamp=finite_clamp)


def check(context) -> CompatibilityResult:
    """compatibility_check: every target holds the guard in a form :func:`rewrite` takes."""
    expected = "a forward with transformers' finite check, rewritable"
    for target in context.targets:
        try:
            found = resolve(target.path).found
        except ResolutionError:
            continue  # preparation reports it (target.unresolved)
        if getattr(unwrap_descriptor(found), "_turbo_physai_rewritten", False):
            continue  # ours, installed: judged when it was applied
        try:
            rewrite(found, finite_clamp=lambda x: x)
        except NotRewritable as e:
            return CompatibilityResult(False, expected, str(e), f"{target.path}: {e}")
    return CompatibilityResult(True, expected, "found", "the finite check is rewritable")

