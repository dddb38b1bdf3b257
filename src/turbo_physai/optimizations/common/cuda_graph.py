"""A model's forward, and in training its backward, replayed as CUDA graphs (issue 29).

An eager detection model on a fast GPU is host-bound: Python launches its kernels more slowly
than the GPU runs them. :func:`cuda_graph_wrapper` (a wrap factory for a model's ``forward``)
captures the forward once per input signature and replays it: one launch instead of thousands.
Where gradients are wanted it captures the backward too, as ``torch.cuda.make_graphed_callables``
does, behind an autograd function whose backward replays it; the parameters' gradients reach
them as usual. The optimizer stays the caller's, eager, and so does a loss computed outside
the wrapped forward (one computed inside, as transformers' DETR heads do, is in the graph).
The kernels replayed are the eager ones: outputs, losses and gradients are the eager model's
bit for bit where the same kernels run; warm-ups and capture leave the random number
generators as they found them, so a replay draws the eager call's dropout masks. An output
gradient reaches the backward graph copied into a dense buffer; eager PyTorch runs a
matmul's backward on the expanded gradient of a plain ``y.sum()`` with other rounding (one ulp
of a weight gradient, measured on the H200), so there the gradients agree to that ulp.

The signature of a call: the structure of its arguments (lists, tuples and dicts are looked
into: DETR labels are a list of dicts of tensors), each tensor's shape, strides, dtype, device
and ``requires_grad``; every other value (None, bool, int, float, str only); grad mode;
autocast state; the ``training`` flag of every submodule. A new signature is captured (at most
``max_graphs`` per module, default 4); the calls that cannot be served run the original forward
eagerly, with a ``RuntimeWarning`` naming why, once per reason and module:

- an argument that holds something else than tensors and plain values, or no CUDA tensor;
- a host (CPU) tensor argument whose values differ from the captured call's: the graph froze
  what that call read of them;
- forward hooks or backward hooks on the module or a submodule (a replay would not run them);
- more signatures than ``max_graphs``; a capture that failed (the reason is its error: a host
  synchronization inside the forward, a data-dependent shape, host data that changes); after
  ``max_graphs`` failed captures, new signatures no longer try (each try runs the forward
  ``warmup`` + 1 times);
- a forward while the previous captured forward's backward has not run (its saved activations
  live in the graph's memory, which a second replay would overwrite); backward through a
  captured forward after the graph ran again raises instead of returning wrong gradients.

Under ``torch.compile`` tracing, inside someone else's capture, or inside the capture (warm-up
included) of a captured module around it, the original runs unchanged. Checks that raise on
device data (:mod:`graph_checks`, the DETR losses' box checks) raise once the replay that found
the data bad has run: a forward-only replay waits for its flags before it returns; a forward
whose backward is captured too returns without waiting (the wait would leave the GPU idle
while the host launches the backward), and its error is raised by that backward, after queuing
the backward graph but before any gradient reaches a parameter, or else by the module's next
call.

Memory: each signature holds its own graph pool (activations of one step, inputs, outputs).
Outputs are copied out of it, so a result stays valid after the next call; so are the
gradients, one flat copy per dtype (:mod:`grad_pack`). The captured code
reads parameters in place: an optimizer's in-place update is seen; when a parameter or buffer is
replaced, moved or changes ``requires_grad``, every graph of the module is freed and calls
capture again. The autocast weight cache is off during capture (a cached cast
would freeze the weights into the graph).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any

DEFAULTS: Mapping[str, Any] = {"max_graphs": 4, "warmup": 3}
_capturing = threading.local()  # .active: a _Graph of this thread warms up or captures
_PLAIN = (type(None), bool, int, float, str)


def _options(options: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown cuda_graph option(s) {unknown}; known: {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **options}
    for name in DEFAULTS:
        value = merged[name]
        if type(value) is not int or value < 1:
            raise ValueError(f"cuda_graph option {name} must be a positive integer, got {value!r}")
    return merged


def capture_group(group_id: str, *targets: str, depends_on: tuple[str, ...],
                  targets_unread: bool = False):
    """The catalogs' group that wraps each of ``targets`` (a model's forward; forwards around
    it, whose capture then holds it) with :func:`cuda_graph_wrapper`
    (:func:`targets_unread_wrapper` with ``targets_unread``), after ``depends_on`` (the model's
    MSDA group, ...)."""
    from ...engine.declarations import group, wrap

    factory = "targets_unread_wrapper" if targets_unread else "cuda_graph_wrapper"
    return group(group_id, *(wrap(target=t, replacement=f"{__name__}.{factory}")
                             for t in targets), depends_on=depends_on)


def targets_unread_wrapper(original: Callable[..., Any], options: Mapping[str, Any]):
    """:func:`cuda_graph_wrapper` for a forward that takes ``targets`` and never reads them
    (RF-DETR's ``LWDETR.forward``: its loss reads them): a training call passing them replays
    too."""
    return cuda_graph_wrapper(original, options, unread=("targets",))


def cuda_graph_wrapper(original: Callable[..., Any], options: Mapping[str, Any], *,
                       unread: tuple[str, ...] = ()):
    """Wrap factory: ``original`` (a module's ``forward``) captured and replayed as CUDA graphs.

    Host data the forward sends to the device (spatial shapes, host index tensors) is served to
    the capture from device copies made while warming up, and so are its reads of values made
    from such data alone (:mod:`host_transfers`). ``unread``:
    parameters whose values the forward's code never reads (checked in its source, else
    ValueError): a call's values for them are dropped before its signature is taken."""
    opts = _options(options)
    forward = original
    states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    lock = threading.Lock()
    drop = _dropping(original, unread) if unread else None

    @functools.wraps(original)
    def captured_forward(self, *args, **kwargs):
        if drop is not None:
            args, kwargs = drop(self, args, kwargs)
        state = states.get(self)
        if state is None:
            with lock:
                state = states.setdefault(self, _ModuleGraphs(forward, self, opts))
        return state.call(args, kwargs)

    captured_forward._turbo_physai_graph_states = states
    return captured_forward


def _dropping(function, names: tuple[str, ...]):
    """``drop(self, args, kwargs)``: the call's arguments without ``names``, parameters of
    ``function`` that its code never reads (ValueError naming the one it reads, or the one it
    lacks)."""
    import ast
    import inspect

    from .host_code import tree

    where = getattr(function, "__qualname__", repr(function))
    signature = inspect.signature(function)
    for name in names:
        if name not in signature.parameters:
            raise ValueError(f"{where} has no parameter {name!r}")
    node = tree(function)
    if node is None:
        raise ValueError(f"the source of {where} cannot be read to check that it never reads "
                         f"{list(names)}")
    read = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in names
                   and isinstance(n.ctx, ast.Load)})
    if read:
        raise ValueError(f"{where} reads {read}: its calls cannot drop them")

    def drop(self, args, kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # a bad call: the original raises its own error
            return args, kwargs
        for name in names:
            bound.arguments.pop(name, None)
        return bound.args[1:], bound.kwargs

    return drop


def stats(model) -> dict[str, Any]:
    """What the captured methods (``forward``, Ultralytics' ``predict``) of ``model`` and its
    submodules did: per module path, the graphs captured (signature summary, kind, seconds, the
    host time of the last replay call of each), replays, and eager calls by reason. A part of a
    method captured on its own (the layers before Ultralytics' head in training) has the key
    ``"<path> [<part>]"``."""
    found = {}
    for name, module in model.named_modules():
        for method in _captured_methods(type(module)):
            tables = {"": method._turbo_physai_graph_states,
                      **{f" [{part}]": states for part, states
                         in getattr(method, "_turbo_physai_part_states", {}).items()}}
            for suffix, states in tables.items():
                if module in states:
                    found[(name or ".") + suffix] = states[module].stats()
    return found


def _captured_methods(cls) -> list:
    """The methods of ``cls`` (its bases' included) that :func:`cuda_graph_wrapper` made."""
    return [value for c in cls.__mro__ for value in vars(c).values()
            if hasattr(value, "_turbo_physai_graph_states")]


class _ModuleGraphs:
    """One module's captured graphs, keyed by call signature."""

    def __init__(self, forward, module, options):
        self.forward, self.options = forward, options
        self.module = weakref.ref(module)
        self.graphs: dict[tuple, _Graph | str] = {}  # a str: why that signature runs eagerly
        self.eager: dict[str, int] = {}
        self.replays = self.invalidated = 0
        self.state = None  # the parameters and buffers the graphs read (identity, storage)
        self.pending = None  # weakref to the autograd context of a forward awaiting backward
        self.unread = None  # the forward+backward graph whose replay's checks no one has read
        self.lock = threading.RLock()

    def call(self, args, kwargs):
        import torch

        module = self.module()
        if torch.compiler.is_compiling():
            return self.forward(module, *args, **kwargs)
        key, state, why = _signature(module, args, kwargs)
        if key is not None and (torch.cuda.is_current_stream_capturing()
                                or getattr(_capturing, "active", False)):
            return self.forward(module, *args, **kwargs)  # inside a capture: its own or ours
        with self.lock:
            if self.unread is not None:  # the last forward's backward never ran: raise here
                unread, self.unread = self.unread, None
                unread.checks.raise_failed()
            if why is None and state != self.state:
                # Parameters replaced or moved: every graph reads memory they no longer own.
                # Freed here (their pools with them) rather than kept until max_graphs.
                self.invalidated += bool(self.graphs)
                self.graphs.clear()
                self.state, self.pending = state, None
            graph = self.graphs.get(key) if why is None else why
            if graph is None:
                graph = self._capture(key, module, args, kwargs)
            if isinstance(graph, str):
                return self._eager(graph, module, args, kwargs)
            changed = graph.host_inputs and _host_inputs_changed(graph.host_inputs,
                                                                 _tensor_args(args, kwargs))
            if changed:
                return self._eager(changed, module, args, kwargs)
            if graph.backward_graph is not None and self.pending is not None \
                    and self.pending() is not None:
                return self._eager("a captured forward's backward has not run yet",
                                   module, args, kwargs)
            self.replays += 1
            return graph.run(self, args, kwargs)

    def _capture(self, key, module, args, kwargs):
        limit = self.options["max_graphs"]
        if sum(isinstance(g, _Graph) for g in self.graphs.values()) >= limit:
            return f"more than max_graphs={limit} call signatures"
        # Each attempt runs the forward warmup + 1 times: a forward that fails for every
        # signature (host-drawn noise, say) must not pay that on every new one.
        if sum(isinstance(g, str) for g in self.graphs.values()) >= limit:
            return f"more than max_graphs={limit} failed captures"
        try:
            graph = _Graph(self.forward, module, args, kwargs, self.options["warmup"])
        except Exception as e:  # noqa: BLE001 - any failure means: this signature runs eagerly
            graph = _failure(e)
        self.graphs[key] = graph
        return graph

    def _eager(self, why, module, args, kwargs):
        if why not in self.eager:
            warnings.warn(f"turbo_physai cuda_graph: {type(module).__qualname__}."
                          f"{self.forward.__name__} runs eagerly: {why}", RuntimeWarning,
                          stacklevel=4)
        self.eager[why] = self.eager.get(why, 0) + 1
        return self.forward(module, *args, **kwargs)

    def stats(self) -> dict[str, Any]:
        return {"graphs": [{**g.summary, "launch_ms": dict(g.launch_ms)}
                           for g in self.graphs.values() if isinstance(g, _Graph)],
                "failed": sorted({g for g in self.graphs.values() if isinstance(g, str)}),
                "replays": self.replays, "eager": dict(self.eager),
                "invalidated": self.invalidated}


def _signature(module, args, kwargs) -> tuple[tuple | None, tuple | None, str | None]:
    """(the call's key, the module's parameter state, None), or (None, None, why it cannot be
    captured)."""
    import torch
    import torch.utils._pytree as pytree

    parts, on_cuda = [], False
    arguments = _arguments(args, kwargs)
    leaves, spec = pytree.tree_flatten(arguments)  # paths only for the error: half the time
    for i, value in enumerate(leaves):
        if isinstance(value, torch.Tensor):
            parts.append((tuple(value.shape), value.stride(), value.dtype, value.device,
                          value.requires_grad))
            on_cuda = on_cuda or value.device.type == "cuda"
        elif isinstance(value, _PLAIN):
            parts.append((type(value), value))
        else:
            path = pytree.tree_flatten_with_path(arguments)[0][i][0]
            return None, None, (f"argument {_where(path)} is a {type(value).__name__}, not a "
                                "tensor or a plain value")
    parts.append(spec)
    if _global_hooks():
        return None, None, "global module hooks are registered (a replay would not run them)"
    walked = _module_state(module)
    if isinstance(walked, str):
        return None, None, walked
    training, state = walked
    if not on_cuda:
        return None, None, "no CUDA tensor among the arguments"
    autocast = torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda")
    return (tuple(parts), torch.is_grad_enabled(), autocast, training), state, None


def _module_state(module) -> tuple[tuple, tuple] | str:
    """(every submodule's ``training`` flag, each parameter's and buffer's identity, storage
    and ``requires_grad``), or why a replay cannot stand for a call (hooks). One walk, without
    ``modules()``/``parameters()``/``buffers()`` (each walks the tree again and names every
    module), flat appends, no tuple per tensor: a third to a quarter of the host time
    (benchmarks/experiments/signature_walk_probe.py). A shared submodule or tensor is simply
    seen twice, every call alike."""
    training, state, stack = [], [], [module]
    add = state.append
    while stack:
        m = stack.pop()
        if m is None:
            continue
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks \
                or m._backward_pre_hooks:
            return f"{type(m).__name__} has hooks (a replay would not run them)"
        training.append(m.training)
        for tensors in (m._parameters, m._buffers):
            for t in tensors.values():
                if t is not None:
                    add(id(t))
                    add(t.data_ptr())
                    add(t.requires_grad)
        stack.extend(m._modules.values())
    return tuple(training), tuple(state)


def _arguments(args, kwargs) -> tuple:
    """The call's arguments in a fixed order: positional, then keywords sorted by name."""
    return tuple(args), dict(sorted(kwargs.items()))


def _where(path) -> str:
    """An argument's place: ``labels[0]['boxes']``, ``positional 1``."""
    import torch.utils._pytree as pytree

    first, rest = path[1], path[2:]
    name = first.key if path[0].idx == 1 else f"positional {first.idx}"
    return name + "".join(pytree.keystr((k,)) for k in rest)


def _global_hooks() -> bool:
    from torch.nn.modules import module as m

    return bool(m._global_forward_hooks or m._global_forward_pre_hooks
                or m._global_backward_hooks or m._global_backward_pre_hooks)


class _Graph:
    """A forward (and, where gradients are wanted, its backward) captured for one signature."""

    def __init__(self, forward, module, args, kwargs, warmup: int):
        import torch
        import torch.utils._pytree as pytree

        from .host_transfers import HostTransfers

        start = time.perf_counter()
        given = _tensor_args(args, kwargs)
        device = next(t.device for t in given if t.device.type == "cuda")
        self.host_inputs = _host_inputs(args, kwargs)
        static_args, static_kwargs = pytree.tree_map(_static, (list(args), kwargs))
        self.inputs = _tensor_args(static_args, static_kwargs)
        params = [p for p in module.parameters() if p.requires_grad]
        wants_grad = torch.is_grad_enabled() and bool(
            params or any(t.requires_grad for t in self.inputs))

        def run():
            return forward(module, *static_args, **static_kwargs)

        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        self.transfers = HostTransfers(device)
        _capturing.active = True
        # Warm-ups and capture draw random numbers (dropout, DETR's denoising noise): the call
        # that follows, a replay or the eager fallback, draws from where it would have without
        # them (a replay's kernels then draw the eager call's numbers).
        try:
            with torch.random.fork_rng(devices=[device]):
                self._capture(run, module, stream, device, params, wants_grad, warmup)
        finally:
            _capturing.active = False
        self.generation = 0
        self.launch_ms: dict[str, float] = {}  # host time of the last replay call, per graph
        self.summary = {
            "kind": "forward+backward" if self.backward_graph is not None else "forward",
            "inputs": [tuple(t.shape) for t in self.inputs],
            "capture_s": round(time.perf_counter() - start, 3),
        }

    def _capture(self, run, module, stream, device, params, wants_grad, warmup):
        import torch

        from .grad_pack import GradPack
        from .graph_checks import collecting

        buffers = [b.detach().clone() for b in module.buffers()]
        try:
            with _uncached_autocast(), torch.cuda.stream(stream):
                for i in range(warmup):  # lazy initialization (cuDNN, cuBLAS) before capture
                    with self.transfers.recording() if i == warmup - 1 \
                            else contextlib.nullcontext():
                        outputs = _tensors(_flatten(run())[0])
                        if wants_grad:
                            _grad(outputs, [*self.inputs, *params])
                    del outputs
            torch.cuda.synchronize(device)
        finally:  # the warm-up ran the forward: undo what it did to the buffers, failed or not
            # (after the side stream's work: a failed warm-up's updates may still be queued)
            torch.cuda.current_stream(device).wait_stream(stream)
            with torch.no_grad():
                for b, saved in zip(module.buffers(), buffers, strict=True):
                    b.copy_(saved)
            del buffers
        self.pool = torch.cuda.graph_pool_handle()
        self.forward_graph = torch.cuda.CUDAGraph()
        self.backward_graph = None
        with self.transfers.serving(), _generator_reset_on_failure(device):
            with _uncached_autocast(), torch.cuda.graph(self.forward_graph, pool=self.pool,
                                                        stream=stream), \
                    collecting() as self.checks:
                out = run()
            self.leaves, self.spec = _flatten(out)
            self.outputs = _tensors(self.leaves)
            self.differentiable = [i for i, t in enumerate(self.outputs) if t.requires_grad]
            if wants_grad and self.differentiable:
                self.params = params
                self.grad_outputs = [torch.zeros_like(self.outputs[i])
                                     for i in self.differentiable]
                self.backward_graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.backward_graph, pool=self.pool, stream=stream):
                    grads = _grad([self.outputs[i] for i in self.differentiable],
                                  [*self.inputs, *params], self.grad_outputs)
                    self.grads = GradPack([g.detach() if g is not None else None
                                           for g in grads])
        # Tensors the module caches in plain attributes (Ultralytics' anchors) are read by the
        # graph where they were at capture: kept alive with it, should the module drop them.
        self.attributes = _attribute_tensors(module)
        # Keep the outputs, not the autograd graph of the capture behind them: its nodes were
        # made on the capture stream (replays' gradients would then cross streams).
        self.outputs = [t.detach() for t in self.outputs]
        detached = iter(self.outputs)
        self.leaves = [next(detached) if _is_tensor(x) else x for x in self.leaves]
        torch.cuda.synchronize(device)

    def load(self, tensors):
        """Copy the call's tensor arguments into the graph's inputs, replay the forward, start
        reading its checks back."""
        for static, value in zip(self.inputs, tensors, strict=True):
            if static.data_ptr() != value.data_ptr():
                static.copy_(value)
        self.replay("forward")
        self.generation += 1
        self.checks.fetch()

    def replay(self, which: str):
        """Replay the ``"forward"`` or ``"backward"`` graph, timing the host's launch call."""
        start = time.perf_counter()
        getattr(self, which + "_graph").replay()
        self.launch_ms[which] = (time.perf_counter() - start) * 1e3

    def run(self, state: _ModuleGraphs, args, kwargs):
        given = _tensor_args(args, kwargs)
        if self.backward_graph is None:
            self.load(given)
            outs = [t.clone() for t in self.outputs]
            self.checks.raise_failed()
        else:
            outs = _replay_function().apply(self, state, *given, *self.params)
        it = iter(outs)
        leaves = [next(it) if _is_tensor(leaf) else leaf for leaf in self.leaves]
        import torch.utils._pytree as pytree

        return pytree.tree_unflatten(leaves, self.spec)


@functools.cache
def _replay_function():
    """The autograd function behind a captured forward+backward (built on first use: importing
    this module needs no torch)."""
    import torch

    class Replay(torch.autograd.Function):
        """Forward: load the inputs, replay the forward graph, copy the outputs out. Backward:
        load the output gradients, replay the backward graph, hand out the input and parameter
        gradients."""

        @staticmethod
        def forward(ctx, graph: _Graph, state: _ModuleGraphs, *tensors):
            graph.load(tensors[:len(graph.inputs)])
            state.unread = graph
            ctx.graph, ctx.state, ctx.generation = graph, state, graph.generation
            state.pending = weakref.ref(ctx)
            outs = [t.clone() for t in graph.outputs]
            wanted = set(graph.differentiable)
            ctx.mark_non_differentiable(*(t for i, t in enumerate(outs) if i not in wanted))
            return tuple(outs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            graph, state = ctx.graph, ctx.state
            with state.lock:
                if graph.generation != ctx.generation:
                    raise RuntimeError(
                        "turbo_physai cuda_graph: the captured forward ran again before this "
                        "backward, and the activations it saved are gone; call backward before "
                        "the next forward of the same module")
                for static, i in zip(graph.grad_outputs, graph.differentiable, strict=True):
                    static.copy_(grads[i])
                graph.replay("backward")
                state.pending = None
                # Copies: the graph's buffers are overwritten by the next replay, and autograd
                # may keep what it is handed as a parameter's .grad (then accumulate into it).
                grads = graph.grads.take()
                if state.unread is graph:
                    state.unread = None
                graph.checks.raise_failed()  # the forward's: the backward graph is queued
            n = len(graph.inputs)
            inputs = [g if t.requires_grad else None
                      for g, t in zip(grads[:n], graph.inputs, strict=True)]
            return (None, None, *inputs, *grads[n:])

    return Replay


def _attribute_tensors(module) -> list:
    """The tensors held in plain attributes of ``module`` and its submodules."""
    import torch
    import torch.utils._pytree as pytree

    return [t for m in module.modules() for name, value in vars(m).items()
            if name not in ("_parameters", "_buffers", "_modules")
            for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _failure(error: BaseException) -> str:
    """Why a capture failed: the first error of the chain that arose in the model's code (a
    failed capture raises again on leaving it, "operation failed due to a previous error"), its
    first line, and that line of the model."""
    import traceback

    import torch

    skip = (os.path.dirname(torch.__file__), os.path.dirname(__file__))
    chain = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    for error in reversed(chain):  # the first raised comes last
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if not f.filename.startswith(skip)]
        if frames:
            name = frames[-1].filename.split("site-packages" + os.sep)[-1]
            where = f" (at {name}:{frames[-1].lineno})"
            break
    else:
        error, where = chain[0], ""
    return f"capture failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}{where}"


def _tensor_args(args, kwargs) -> list:
    """The tensors among the arguments, in :func:`_arguments`' order."""
    import torch.utils._pytree as pytree

    return [v for v in pytree.tree_leaves(_arguments(args, kwargs)) if _is_tensor(v)]


def _host_inputs(args, kwargs) -> list:
    """(index among the tensor arguments, where, a copy) of each tensor argument not on CUDA:
    the graph froze what the captured call read of its values (a copy to the device is served
    from the warm-up, host arithmetic on it ran once), so a replay stands only for the same."""
    import torch.utils._pytree as pytree

    found, index = [], 0
    for path, value in pytree.tree_flatten_with_path(_arguments(args, kwargs))[0]:
        if _is_tensor(value):
            if value.device.type != "cuda":
                found.append((index, _where(path), value.detach().clone()))
            index += 1
    return found


def _host_inputs_changed(recorded, given) -> str | None:
    """Why a call with tensor arguments ``given`` cannot replay a graph whose host tensor
    arguments were ``recorded`` (:func:`_host_inputs`), or None (same values; a NaN differs)."""
    import torch

    for index, where, value in recorded:
        if not torch.equal(given[index], value):
            return (f"host tensor argument {where} holds other values than in the captured call "
                    "(a replay would use those)")
    return None


def _static(value):
    """A graph-owned copy of a tensor argument (same strides, same ``requires_grad``)."""
    if not _is_tensor(value):
        return value
    import torch

    copy = value.detach().clone(memory_format=torch.preserve_format)
    return copy.requires_grad_(value.requires_grad)


def _is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _flatten(out):
    import torch.utils._pytree as pytree

    return pytree.tree_flatten(out)


def _tensors(leaves) -> list:
    return [t for t in leaves if _is_tensor(t)]


def _grad(outputs, surface, grad_outputs=None):
    """Gradients of ``outputs`` (those requiring grad) w.r.t. ``surface``, None where a surface
    tensor needs none or is unused; ``grad_outputs`` default zeros."""
    import torch

    wanted = [t for t in outputs if t.requires_grad]
    grads = [None] * len(surface)
    needs = [i for i, t in enumerate(surface) if t.requires_grad]
    if not wanted or not needs:
        return grads
    if grad_outputs is None:
        grad_outputs = [torch.zeros_like(t) for t in wanted]
    found = torch.autograd.grad(wanted, [surface[i] for i in needs], grad_outputs=grad_outputs,
                                allow_unused=True)
    for i, g in zip(needs, found, strict=True):
        grads[i] = g
    return grads


def _uncached_autocast():
    import torch

    if not torch.is_autocast_enabled("cuda"):
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)


@contextlib.contextmanager
def _generator_reset_on_failure(device):
    """Ends the capture mode a failed capture leaves the device's default CUDA generator in.
    A capture puts it in that mode, and only a completed capture ends it (torch 2.11-2.13: a
    failed capture's end raises before it gets there); left so, every random draw after it
    raises "Offset increment outside graph capture encountered unexpectedly", the eager
    fallback's dropout included (LibreYOLO's Deformable DETR, H100). A one-kernel capture
    completed after the failure ends it on the same generator state, which the graphs captured
    before keep sharing with eager draws (a fresh state would split their random streams)."""
    import torch

    try:
        yield
    except BaseException:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(torch.cuda.Stream(device)):
            graph.capture_begin()
            try:
                torch.empty(1, device=device).zero_()
            finally:
                graph.capture_end()
        graph.reset()
        raise
