"""Where implementations come from: references, built-in kernels, entry points, the hub.

Nothing here runs at import. The C++ call path invokes :func:`_load` the first time any slot is
used: references always, and as soon as ``TURBO_PHYSAI_KERNELS`` is not ``off``/``reference``
the accelerated providers too (so with ``off`` they are never imported). A provider that fails to
load warns once and is skipped; the references keep every slot working.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from turbo_physai import _core

#: Built-in slots and their references, ``module:function``; the reference runs everywhere.
REFERENCES: dict[str, str] = {
    "fake_quant_fp8": "turbo_physai.kernels.reference:fake_quant_fp8",
    "ms_deform_attn": "turbo_physai.kernels.reference:ms_deform_attn",
}

#: Built-in accelerated providers: modules with ``register_kernels(register)``.
BUILTIN: tuple[str, ...] = ("turbo_physai.ops.fake_quant_fp8", "turbo_physai.ops.ms_deform_attn")

#: Out-of-tree packages register through this entry-point group: an entry point names a module
#: that registers on import, or a zero-argument function that registers when called.
ENTRY_POINT_GROUP = "turbo_physai.kernels"

_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HubKernel:
    """A compiled kernel on the Hugging Face Hub, pinned to one audited commit.

    Loaded through the optional ``kernels`` package (``pip install turbo_physai[hub]``) on the
    first call that selects it, never at import. The pin must be a full commit SHA: a branch or
    tag could move and swap the binary that runs in-process. Bumping it needs a conformance run
    on the target GPU.
    """

    slot: str
    repo_id: str
    revision: str
    function: str
    name: str = "hub"
    requires: Mapping[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if not _SHA.fullmatch(self.revision):
            raise ValueError(
                f"hub kernel {self.repo_id!r} for slot {self.slot!r}: revision must be a full "
                f"40-hex commit SHA, got {self.revision!r}"
            )


#: Hub kernels registered by default. None yet: each entry needs a slot whose reference it can be
#: checked against and a GPU conformance run of the pinned revision.
HUB_KERNELS: tuple[HubKernel, ...] = ()


class _HubImpl:
    """Fetches its kernel on first call. A load failure of any kind is raised as ImportError,
    which the registry reads as "broken": it falls back and disables this implementation for
    the process with one warning (a ValueError from the resolver would otherwise read as a
    rejected input and retry the download on every call)."""

    def __init__(self, spec: HubKernel) -> None:
        self.spec = spec
        self._fn: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._fn is None:
            self._fn = self._load()
        return self._fn(*args, **kwargs)

    def _load(self) -> Callable[..., Any]:
        try:
            import kernels  # the optional package: present, or this was never registered

            # The pinned commit is the trust decision, so no publisher allow-list is consulted.
            module = kernels.get_kernel(
                self.spec.repo_id,
                revision=self.spec.revision,
                trust_remote_code=[self.spec.repo_id],
            )
            return getattr(module, self.spec.function)
        except ImportError:
            raise
        except Exception as exc:
            raise ImportError(f"{self!r} could not be loaded: {type(exc).__name__}: {exc}") from exc

    def __repr__(self) -> str:
        return f"<hub kernel {self.spec.repo_id}@{self.spec.revision[:12]}:{self.spec.function}>"


def hub_enabled() -> bool:
    """True when the ``kernels`` package is installed and TURBO_PHYSAI_HUB_KERNELS is not 0."""
    return _core.kernel_selection()["hub"] and importlib.util.find_spec("kernels") is not None


def register_hub_kernel(spec: HubKernel) -> bool:
    """Register a hub kernel on its slot; False (and nothing imported) when the hub is off."""
    if not hub_enabled():
        return False
    requires = None if spec.requires is None else dict(spec.requires)
    _core.kernel_register(spec.slot, _HubImpl(spec), spec.name, None, requires, hub=True)
    return True


def ensure_loaded() -> None:
    """Import references (and providers, unless disabled) now rather than on first call."""
    _core.kernel_load()


def install_hooks() -> None:
    _core.kernel_set_hooks(_load, _install_torch_probes)


def _install_torch_probes() -> None:
    from turbo_physai.kernels import _torch

    _torch.install()


def _warn(what: str, exc: BaseException) -> None:
    warnings.warn(
        f"turbo_physai.kernels: {what} failed to load and is skipped for this process "
        f"({type(exc).__name__}: {exc})",
        RuntimeWarning,
        stacklevel=3,
    )


def _load(part: str) -> None:
    if part == "providers":
        _load_providers()
    else:
        _load_references()


def _load_references() -> None:
    from turbo_physai.kernels import REFERENCE, register

    for slot_name, path in REFERENCES.items():
        module_name, _, attr = path.partition(":")
        try:
            register(slot_name, getattr(importlib.import_module(module_name), attr), name=REFERENCE)
        except Exception as exc:  # a broken reference must not take the other slots down
            _warn(f"reference {path} of slot {slot_name!r}", exc)


def _load_providers() -> None:
    from turbo_physai.kernels import register

    for module_name in BUILTIN:
        try:
            importlib.import_module(module_name).register_kernels(register)
        except Exception as exc:
            _warn(f"built-in provider {module_name}", exc)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = ep.load()
            if callable(loaded):
                loaded()
        except Exception as exc:
            _warn(f"entry point {ep.name!r} ({ep.value})", exc)
    for spec in HUB_KERNELS:
        try:
            register_hub_kernel(spec)
        except Exception as exc:
            _warn(f"hub kernel {spec.repo_id}", exc)
