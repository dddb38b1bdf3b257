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

The DETR losses hold the rest of a training step's synchronizations (:func:`loss_wrapper`,
:func:`check_loss`): ``generalized_box_iou`` checks its boxes with ``if not (...).all(): raise``
(:class:`RaiseCheck`: the same error, raised after the replay under a graph); the Hungarian
matchers copy the cost matrix to the host for scipy (:data:`COST_ON_DEVICE`, with our
``linear_sum_assignment``, scipy's algorithm and answer, on the device); ``ImageLoss`` reads its
box count back with ``.item()`` (:data:`HOST_COUNT`; RT-DETR's loss too, and its denoising
queries take the positives of a host-made mask with ``nonzero``: :data:`DENOISING_POSITIVES`).
With them the whole forward with labels, loss included, can be captured
(``transformers.deformable_detr.cuda_graph``).
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


class NotRewritable(ValueError):
    """The function does not hold the code in a form this module rewrites (the reason)."""


class Template:
    """A statement rewrite: a statement equal (as a syntax tree) to one of ``patterns``, with
    ``{x}`` one of the names it reads, becomes ``replacement`` for that name."""

    def __init__(self, patterns: tuple[str, ...], replacement: str):
        self.patterns, self.replacement = patterns, replacement

    def replace(self, node: ast.stmt) -> list[ast.stmt] | None:
        found = ast.dump(node)
        names = dict.fromkeys(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
        for pattern in self.patterns:
            for name in names if "{x}" in pattern else ("",):
                tree = ast.parse(textwrap.dedent(pattern.format(x=name))).body[0]
                if found == ast.dump(tree):
                    return ast.parse(self.replacement.format(x=name)).body
        return None


class RaiseCheck:
    """``if not (E).all(): raise Error(message)`` and ``if (E).any(): raise ...``, E a device
    tensor, become :func:`graph_checks.check_later` of the same condition: the same error eagerly,
    after the replay under a CUDA graph (``_turbo_physai_check_later``)."""

    def replace(self, node: ast.stmt) -> list[ast.stmt] | None:
        if not (isinstance(node, ast.If) and not node.orelse and len(node.body) == 1
                and isinstance(node.body[0], ast.Raise) and node.body[0].cause is None):
            return None
        test, error = node.test, node.body[0].exc
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        call = test.operand if negated else test
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == ("all" if negated else "any") and not call.args
                and not call.keywords):
            return None
        if not (isinstance(error, ast.Call) and len(error.args) == 1 and not error.keywords):
            return None
        flag = ast.unparse(call)
        message = ast.unparse(error.args[0])
        deferred = _without_values(error.args[0])
        return ast.parse(
            f"{_CHECK_LATER}({flag}, lambda: {message}, {ast.unparse(error.func)}, "
            f"deferred={deferred!r}, raise_if={not negated})").body


def _without_values(message: ast.expr) -> str:
    """The message's text with each formatted value shown as its source in braces."""
    if isinstance(message, ast.Constant):
        return str(message.value)
    if isinstance(message, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant)
                       else "{" + ast.unparse(v.value) + "}" for v in message.values)
    return ast.unparse(message)


_FINITE_CLAMP = "_turbo_physai_finite_clamp"
_CHECK_LATER = "_turbo_physai_check_later"
_HOST_ITEM = "_turbo_physai_host_item"
#: transformers' overflow guard (5.x, then 4.x), ``{x}`` the tensor's name, decided on the device.
FINITE_GUARD = Template((
    "if not torch.isfinite({x}).all():" + _CLAMP,
    "if torch.isinf({x}).any() or torch.isnan({x}).any():" + _CLAMP,
), f"{{x}} = {_FINITE_CLAMP}({{x}})")
#: The DETR matchers move the cost matrix to the host for scipy; our linear_sum_assignment (bound
#: to that name in the rewritten function) takes it where it is, with scipy's answer.
COST_ON_DEVICE = Template(
    ("cost_matrix = cost_matrix.view(batch_size, num_queries, -1).cpu()",),
    "cost_matrix = cost_matrix.view(batch_size, num_queries, -1)")
#: The DETR losses' box count, a tensor made from host data and read back: from the host record
#: while a CUDA graph is captured, where no other process's count entered it (world_size 1).
HOST_COUNT = Template((
    "num_boxes = torch.clamp(num_boxes / world_size, min=1).item()",
), f"num_boxes = {_HOST_ITEM}(torch.clamp(num_boxes / world_size, min=1), world_size == 1)")
#: RT-DETR's loss: the same count, never reduced over processes.
LOCAL_HOST_COUNT = Template(("num_boxes = torch.clamp(num_boxes, min=1).item()",),
                            f"num_boxes = {_HOST_ITEM}(torch.clamp(num_boxes, min=1), True)")
#: RT-DETR's denoising queries: the positives of a mask built from the host's box counts, as
#: many as the counts say (num_gt per image and group), found without reading the count back.
DENOISING_POSITIVES = Template(
    ("denoise_positive_idx = torch.nonzero(positive_gt_mask)[:, 1]",),
    "denoise_positive_idx = torch.nonzero_static(positive_gt_mask, size=sum(num_ground_truths)"
    " * num_groups_denoising_queries)[:, 1]")
#: What :func:`loss_wrapper` rewrites.
LOSS_RULES = (RaiseCheck(), COST_ON_DEVICE, HOST_COUNT, LOCAL_HOST_COUNT, DENOISING_POSITIVES)


class _Rewrite(ast.NodeTransformer):
    def __init__(self, rules):
        self.rules, self.count = rules, 0

    def visit(self, node: ast.AST):
        if isinstance(node, ast.stmt) and not isinstance(node, ast.FunctionDef | ast.ClassDef):
            for rule in self.rules:
                new = rule.replace(node)
                if new is not None:
                    self.count += 1
                    for statement in new:
                        ast.copy_location(statement, node)
                    return new
        return self.generic_visit(node)


def rewrite(function: Callable[..., Any], rules, helpers: Mapping[str, Any], *,
            wrapped: bool = False) -> Callable[..., Any]:
    """``function`` recompiled with the statements ``rules`` match rewritten, in its module's
    globals; ``helpers`` (name: object) reach it through closure cells, so that a helper can
    take the place of a global of the same name (``linear_sum_assignment``) without touching the
    module. A wrapper that closes over the function it wraps (``functools.wraps``: transformers
    5.x wraps every layer's ``forward`` for gradient checkpointing, ``torch.no_grad()`` the
    matchers') is rebuilt around the rewritten one, its own code unchanged; the decorators in the
    source of the function it wraps (``wrapped``) are what made that wrapper, and are not applied
    again. Raises :class:`NotRewritable` naming what stops it, also where nothing matched."""
    function = unwrap_descriptor(function)
    code = getattr(function, "__code__", None)
    if code is None:
        raise NotRewritable(f"{function!r} is not a Python function")
    inner = getattr(function, "__wrapped__", None)
    if code.co_freevars and inner is not None:
        return _rewrap(function, inner, rewrite(inner, rules, helpers, wrapped=True))
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
    transformer = _Rewrite(rules)
    node.body = [s for statement in node.body for s in _listed(transformer.visit(statement))]
    if transformer.count == 0:
        raise NotRewritable(f"{function.__qualname__} has no {_what(rules)} in a known form")
    # def make(*helpers): <the function>; return it. Line numbers stay the original file's.
    maker = ast.parse(f"def _make({', '.join(helpers)}):\n    pass").body[0]
    maker.body = [node, ast.Return(ast.Name(node.name, ast.Load()))]
    module = ast.Module([maker], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, code.co_firstlineno - node.lineno)
    compiled = compile(module, code.co_filename, "exec")
    make_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    rewritten = types.FunctionType(make_code, function.__globals__)(*helpers.values())
    return _like(rewritten, function)


class _Once:
    """A rule that counts its matches."""

    def __init__(self, rule):
        self.rule, self.count = rule, 0

    def replace(self, node):
        new = self.rule.replace(node)
        self.count += new is not None
        return new


def rewrite_each_once(function: Callable[..., Any], rules, helpers: Mapping[str, Any],
                      where: str) -> Callable[..., Any]:
    """:func:`rewrite` with :class:`Template` ``rules`` that must each match exactly once in
    ``function`` (``where`` names it), else :class:`NotRewritable` naming the first that does
    not."""
    counted = [_Once(rule) for rule in rules]
    made = rewrite(function, counted, helpers)
    for rule in counted:
        if rule.count != 1:
            raise NotRewritable(f"{where} holds `{rule.rule.patterns[0]}` {rule.count} times, "
                                "not once")
    return made


def _listed(node) -> list:
    return node if isinstance(node, list) else [node]


def _what(rules) -> str:
    return "finite check" if rules == (FINITE_GUARD,) else "host synchronization"


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
    _no_options(options)
    import torch

    def finite_clamp(x):
        """``x`` if every element is finite, else clamped to +-(largest finite - 1000): the
        guard's result, selected on the device."""
        limit = torch.finfo(x.dtype).max - 1000
        return torch.where(torch.isfinite(x).all(), x, torch.clamp(x, min=-limit, max=limit))

    return rewrite(original, (FINITE_GUARD,), {_FINITE_CLAMP: finite_clamp})


def loss_wrapper(original: Callable[..., Any], options: Mapping[str, Any]):
    """Wrap factory: ``original`` (a DETR matcher's or loss's function) with its host
    synchronizations taken out (:data:`LOSS_RULES`): validity checks raise through
    :func:`graph_checks.check_later`, the assignment runs on the cost matrix's device with
    scipy's answer (:func:`turbo_physai.ops.linear_sum_assignment`), the box count comes from
    the host record while a CUDA graph is captured. Values and errors are stock's."""
    _no_options(options)
    return rewrite(original, LOSS_RULES, _loss_helpers())


def _loss_helpers() -> dict[str, Any]:
    from ...ops import linear_sum_assignment
    from .graph_checks import check_later
    from .host_transfers import host_item

    return {_CHECK_LATER: check_later, _HOST_ITEM: host_item,
            "linear_sum_assignment": linear_sum_assignment}


def _no_options(options: Mapping[str, Any]) -> None:
    if options:
        raise ValueError(f"the graph-safe rewrites take no options, got {sorted(options)}")


def check(context) -> CompatibilityResult:
    """compatibility_check: every target holds transformers' finite check, rewritable."""
    return check_targets(context, lambda f: rewrite(f, (FINITE_GUARD,), _HELPERS),
                         "a forward with transformers' finite check")


def check_loss(context) -> CompatibilityResult:
    """compatibility_check: every target holds a host synchronization :func:`loss_wrapper`
    rewrites."""
    return check_targets(context, lambda f: rewrite(f, LOSS_RULES, _HELPERS),
                         "a DETR loss function with host synchronizations")


_HELPERS = dict.fromkeys((_FINITE_CLAMP, _CHECK_LATER, _HOST_ITEM, "linear_sum_assignment"))


def check_targets(context, attempt: Callable[[Any], Any], expected: str) -> CompatibilityResult:
    """A compatibility result: whether ``attempt`` (a rewrite) succeeds on every target that
    resolves and is not ours already; else the first :class:`NotRewritable` reason."""
    expected += ", rewritable"
    for target in context.targets:
        try:
            found = resolve(target.path).found
        except ResolutionError:
            continue  # preparation reports it (target.unresolved)
        if getattr(unwrap_descriptor(found), "_turbo_physai_rewritten", False):
            continue  # ours, installed: judged when it was applied
        try:
            attempt(found)
        except NotRewritable as e:
            return CompatibilityResult(False, expected, str(e), f"{target.path}: {e}")
    return CompatibilityResult(True, expected, "found", "the host code is rewritable")
