"""Wrap factories of the ``bevfusion.compile*`` groups (options: ``common/compile.py``).

``compile_class_wrapper`` compiles a whole ``nn.Module`` class: it returns a subclass, with the
original's name, module and docstring, whose ``forward`` is the original's compiled on first
call. It reaches code that builds the module from the attribute it replaces (``from ...
import SparseEncoder``); mmcv registries that recorded the class at import keep the original.
``dynamo_disable_wrapper`` keeps a method out of compiled graphs (``torch.compiler.disable``):
TurboPhysAI applies it where the compiled TransFusion head calls code dynamo cannot trace.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from ...common.compile import compile_options, compile_wrapper, lazy_compile

compile_transfusion_forward_single_wrapper = compile_wrapper


def compile_class_wrapper(original: type, options: Mapping[str, Any]) -> type:
    forward = lazy_compile(original.forward, options)
    return type(
        original.__name__,
        (original,),
        {
            "forward": forward,
            "__module__": original.__module__,
            "__qualname__": original.__qualname__,
            "__doc__": original.__doc__,
        },
    )


def dynamo_disable_wrapper(
    original: Callable[..., Any], options: Mapping[str, Any]
) -> Callable[..., Any]:
    compile_options(options)  # the group's options are the compile options: reject typos
    disabled: list[Callable[..., Any]] = []

    @functools.wraps(original)
    def outside_compiled_graphs(*args: Any, **kwargs: Any) -> Any:
        if not disabled:  # torch is imported on the first call, not when checking
            import torch

            disabled.append(torch.compiler.disable(original))
        return disabled[0](*args, **kwargs)

    return outside_compiled_graphs
