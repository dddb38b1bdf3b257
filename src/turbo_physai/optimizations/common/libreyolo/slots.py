"""``libreyolo.kernels``: our implementations registered into LibreYOLO's own slots.

LibreYOLO's registry (1.6) is two module globals: ``_REGISTRY`` (slot -> list of entries
``{"name", "impl", "predicate"}``, newest first) and ``_RESOLVED`` (the cache of ``resolve``).
Every reader (``register``, ``iter_impls``, ``resolve``, ``active``, the slot proxies) looks them
up by name at call time, so the group installs new ones through the journal instead of calling
``register``/``unregister``, which mutate the live list in place where no journal sees it:

- ``_REGISTRY``: a copy whose slots we serve are new lists, our entry (name ``turbo_physai``,
  no predicate: our functions decide per call) first and LibreYOLO's entries after it, the same
  objects. Other slots keep their list objects, so providers registered into them while applied
  survive rollback; rollback puts the original dict back, unchanged.
- ``_RESOLVED``: a new empty cache, after emptying the original, so that rollback leaves the
  original empty too (nothing resolved through us survives it).

LibreYOLO loads its in-tree providers (Triton, Hub) lazily on the first resolution; the factory
triggers that before copying, so they land in the original lists and not in ours.
``LIBREYOLO_KERNELS`` keeps its meaning: ``off``/``reference`` skip our entry, ``turbo_physai``
selects it alone.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from ....engine.context import CompatibilityResult

NAME = "turbo_physai"
#: libreyolo releases the groups were validated against (slot signatures, registry layout, call
#: sites, numerics: tests/catalogs/test_libreyolo.py). Extend only after running those tests.
VALIDATED = ">=1.6,<1.7"

_QUANT = "turbo_physai.ops.quant"
#: slot -> (our implementation, LibreYOLO's reference or provider whose signature the slot has).
SLOTS: Mapping[str, tuple[str, str]] = {
    "ms_deform_attn": (
        "turbo_physai.ops.frontends.libreyolo_ms_deform_attn",
        "libreyolo.kernels.attention.ms_deform_attn.hub_ms_deform_attn",
    ),
    **{
        op: (f"{_QUANT}.{op}", f"libreyolo.quant.fake_quant.{op}")
        for op in (
            "fake_quant_int8_per_channel",
            "fake_quant_int8_affine",
            "fake_quant_fp8",
            "fake_quant_int_grouped",
            "fake_quant_nvfp4_weight",
            "fake_quant_nvfp4_dynamic",
            "fake_quant_mxfp4_weight",
            "fake_quant_mxfp4_dynamic",
        )
    },
    "unpack_int_grouped": (
        f"{_QUANT}.unpack_int_grouped",
        "libreyolo.quant.packing.unpack_int_grouped_weight",
    ),
    "unpack_nvfp4": (f"{_QUANT}.unpack_nvfp4", "libreyolo.quant.packing.unpack_nvfp4_weight"),
}
_ENTRY_KEYS = frozenset({"name", "impl", "predicate"})


def selected(options: Mapping[str, Any]) -> tuple[str, ...]:
    """The slots the group serves: option ``slots`` (a list of slot names), default all."""
    unknown = sorted(set(options) - {"slots"})
    if unknown:
        raise ValueError(f"libreyolo.kernels takes only the option 'slots', got {unknown}")
    slots = options.get("slots", list(SLOTS))
    if not isinstance(slots, list) or not slots or not all(isinstance(s, str) for s in slots):
        raise ValueError(f"option 'slots' must be a non-empty list of slot names, got {slots!r}")
    bad = sorted(set(slots) - set(SLOTS))
    if bad:
        raise ValueError(f"option 'slots': no such slot {bad}; the slots are {sorted(SLOTS)}")
    return tuple(dict.fromkeys(slots))


def _object(path: str) -> Any:
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def registry_with_ours(
    original: dict[str, list[dict]], options: Mapping[str, Any]
) -> dict[str, list[dict]]:
    """Wrap factory for ``libreyolo.kernels._REGISTRY`` (see the module doc)."""
    slots = selected(options)
    registry = importlib.import_module("libreyolo.kernels")
    next(registry.iter_impls(slots[0]), None)  # loads the lazy in-tree providers, once
    ours = dict(original)
    for slot in slots:
        entry = {"name": NAME, "impl": _object(SLOTS[slot][0]), "predicate": None}
        ours[slot] = [entry, *original.get(slot, ())]
    return ours


def empty_cache(original: dict[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """Wrap factory for ``libreyolo.kernels._RESOLVED``: empties LibreYOLO's cache (it is one: a
    later ``resolve`` refills it) and installs a new one, so rollback restores an empty cache."""
    selected(options)
    original.clear()
    return {}


def _version(context) -> CompatibilityResult | None:
    """None when the installed libreyolo is a validated release, else the blocking result."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    installed = context.package_version("libreyolo")
    if installed is None:  # the unresolvable targets say more (target.unresolved)
        return None
    try:
        ok = Version(installed) in SpecifierSet(VALIDATED)
    except InvalidVersion as err:
        return CompatibilityResult(False, VALIDATED, installed, f"unreadable version: {err}")
    if not ok:
        return CompatibilityResult(
            False, VALIDATED, installed, f"libreyolo {installed} is not a validated release"
        )
    return None


def check_release(context) -> CompatibilityResult:
    """compatibility_check of the family groups: a validated libreyolo release (the engine
    checks that our replacements accept every call the replaced functions accept)."""
    return _version(context) or CompatibilityResult(True, VALIDATED, None, "validated release")


def check(context) -> CompatibilityResult:
    """compatibility_check of ``libreyolo.kernels``: a validated release, the registry layout
    described in the module doc, and each selected slot's signature equal to ours."""
    blocked = _version(context)
    if blocked is not None:
        return blocked
    if context.package_version("libreyolo") is None:
        return CompatibilityResult(True, VALIDATED, None, "libreyolo is not installed")
    try:
        slots = selected(context.options)
    except ValueError as err:
        return CompatibilityResult(
            False, "valid options", dict(context.options), str(err), code="options.invalid"
        )
    problem = _registry_problem(importlib.import_module("libreyolo.kernels"))
    if problem:
        return CompatibilityResult(False, "LibreYOLO 1.6's registry layout", problem, problem)
    for slot in slots:
        ours, theirs = (inspect.signature(_object(p)) for p in SLOTS[slot])
        if _parameters(ours) != _parameters(theirs):
            return CompatibilityResult(
                False,
                str(theirs),
                str(ours),
                f"slot {slot!r}: LibreYOLO calls {theirs}, ours takes {ours}",
            )
    return CompatibilityResult(True, VALIDATED, list(slots), "slot signatures match")


def _registry_problem(registry) -> str | None:
    for name in ("register", "unregister", "clear_cache", "iter_impls", "resolve"):
        if not callable(getattr(registry, name, None)):
            return f"libreyolo.kernels.{name} is missing"
    table, cache = getattr(registry, "_REGISTRY", None), getattr(registry, "_RESOLVED", None)
    if not isinstance(table, dict) or not isinstance(cache, dict):
        return "libreyolo.kernels._REGISTRY/_RESOLVED are not dicts"
    for slot, entries in table.items():
        if not isinstance(entries, list) or any(
            not isinstance(e, dict) or set(e) != _ENTRY_KEYS for e in entries
        ):
            return f"slot {slot!r}: entries are not {{name, impl, predicate}} dicts"
        if any(e["name"] == NAME for e in entries):
            return f"slot {slot!r} already has an implementation named {NAME!r}"
    return None


def _parameters(signature: inspect.Signature) -> list[tuple[str, Any, Any]]:
    # Names, kinds and defaults: annotations differ in spelling (Tensor vs torch.Tensor).
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]
