"""LibreYOLO's provider modules on turbo_physai.kernels, changed in their registry import lines
only, and LibreYOLO's slot tests (tests/unit/kernels/ in its repository) rewritten against them.

Run as a script in a fresh interpreter by test_libreyolo_slots.py; prints one JSON object,
``{check name: "ok" or the failure}``. A fresh interpreter because there the ``ms_deform_attn``
slot must be LibreYOLO's alone: our own slot of that name takes ``level_start_index`` as well
(five arguments, the classic op's), LibreYOLO's takes four. The registry contract is what is
under test, not slot signatures.

LibreYOLO's tests of its providers' internals (Hub pin and build-variant names, the install
hint, Triton parity on CUDA) test LibreYOLO, not the registry, and are not rewritten here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
import traceback
import types
import warnings
from pathlib import Path

from turbo_physai.kernels import providers

# Before the first use of any slot: leave ms_deform_attn to LibreYOLO's providers.
providers.REFERENCES.pop("ms_deform_attn")
providers.BUILTIN = tuple(m for m in providers.BUILTIN if not m.endswith(".ms_deform_attn"))

import libreyolo  # noqa: E402
import torch  # noqa: E402

from turbo_physai import kernels  # noqa: E402

LIBREYOLO = Path(libreyolo.__file__).parent
SLOT = "ms_deform_attn"
BATCH, LEN_Q, HEADS, CHANNELS = 2, 3, 2, 4
SHAPES = [(4, 6), (2, 3)]
LEVELS, POINTS = len(SHAPES), 2

# LibreYOLO's three spellings of "the registry": `from .. import names` inside
# libreyolo/kernels/<group>/, `from libreyolo.kernels import names` and
# `from libreyolo import kernels`.
REGISTRY_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from (?:\.\.|libreyolo\.kernels) import (?P<names>[\w, ]+)$"
    r"|^(?P<indent2>[ \t]*)from libreyolo import kernels$",
    re.M,
)


def ported_import(match: re.Match) -> str:
    if match["names"] is not None:
        return f"{match['indent']}from turbo_physai.kernels import {match['names']}"
    return f"{match['indent2']}from turbo_physai import kernels"


def port(relative: str) -> types.ModuleType:
    """Execute libreyolo/<relative> as a new module whose registry is turbo_physai.kernels."""
    path = LIBREYOLO / relative
    source = path.read_text()
    ported, count = REGISTRY_IMPORT.subn(ported_import, source)
    changed = [
        (a, b) for a, b in zip(source.splitlines(), ported.splitlines(), strict=True) if a != b
    ]
    assert count and len(changed) == count, (relative, count, changed)
    module = types.ModuleType(f"ported_{path.stem}")
    module.__file__ = str(path)
    module.ported_lines = changed
    sys.modules[module.__name__] = module
    exec(compile(ported, str(path), "exec"), module.__dict__)
    return module


def classic_inputs():
    generator = torch.Generator().manual_seed(0)
    len_in = sum(h * w for h, w in SHAPES)
    value = torch.randn(BATCH, len_in, HEADS, CHANNELS, generator=generator)
    locations = torch.rand(BATCH, LEN_Q, HEADS, LEVELS, POINTS, 2, generator=generator)
    weights = torch.rand(BATCH, LEN_Q, HEADS, LEVELS, POINTS, generator=generator)
    return value, torch.tensor(SHAPES), locations, weights / weights.sum((-2, -1), keepdim=True)


def sevens(value, _shapes, locations, _weights):
    return torch.full((value.shape[0], locations.shape[1], value.shape[2] * value.shape[3]), 7.0)


@contextlib.contextmanager
def environment(**values):
    """Set (str) or unset (None) variables, then clear_cache() as LibreYOLO's fixtures do."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        kernels.clear_cache()
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        kernels.clear_cache()


@contextlib.contextmanager
def patched(owner, name, value):
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


PROVIDERS_OFF = {"LIBREYOLO_HUB_KERNELS": "0", "LIBREYOLO_TRITON_MSDA": "0"}

# Registered in LibreYOLO's order: Triton first (older), the Hub provider on top.
triton_msda = port("kernels/attention/ms_deform_attn_triton.py")
msda = port("kernels/attention/ms_deform_attn.py")
scaled_mm = port("kernels/quant/execute/scaled_mm_fp8.py")
triton_fp8 = port("kernels/quant/simulate/fp8.py") if importlib.util.find_spec("triton") else None
CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


@check
def only_registry_import_lines_changed():
    for module in (triton_msda, msda, scaled_mm) + ((triton_fp8,) if triton_fp8 else ()):
        for old, new in module.ported_lines:
            assert "import" in old and new.strip().startswith("from turbo_physai"), (old, new)
    names = [e["name"] for e in kernels.implementations(SLOT)]
    assert names == ["triton", "hub"], names
    assert {e["predicate_kind"] for e in kernels.implementations(SLOT)} == {"environment"}


@check
def slot_resolves_to_none_when_its_providers_are_off():
    # test_slot_resolves_to_none_when_disabled, test_active_lists_attention_slot
    with environment(**PROVIDERS_OFF):
        assert kernels.resolve(SLOT) is None
        assert kernels.active()[SLOT] == "unavailable"
        assert msda.maybe_ms_deform_attn(*classic_inputs()) is None
        assert list(kernels.iter_impls(SLOT)) == []


@check
def call_site_routes_through_a_registered_implementation():
    # test_classic_call_site_routes_through_slot, with TURBO_PHYSAI_KERNELS for LIBREYOLO_KERNELS
    recorded = []

    def mock(value, shapes, locations, weights):
        recorded.append(tuple(tuple(t.shape) for t in (value, shapes, locations, weights)))
        return sevens(value, shapes, locations, weights)

    kernels.register(SLOT, mock, name="mock")
    try:
        with environment(TURBO_PHYSAI_KERNELS="mock", **PROVIDERS_OFF):
            out = msda.maybe_ms_deform_attn(*classic_inputs())
            assert kernels.active()[SLOT] == "mock"
    finally:
        kernels.unregister(SLOT, "mock")
    assert torch.equal(out, torch.full((BATCH, LEN_Q, HEADS * CHANNELS), 7.0))
    value, shapes, locations, weights = classic_inputs()
    assert recorded == [(value.shape, shapes.shape, locations.shape, weights.shape)]


@check
def fixture_teardown_may_unregister_what_is_absent():
    # LibreYOLO's fixture runs kernels.unregister("ms_deform_attn", "mock") after every test.
    kernels.unregister(SLOT, "mock")
    kernels.unregister(SLOT, "mock")
    kernels.unregister("never_a_slot", "mock")


@check
def a_provider_returning_none_does_not_hide_the_next_one():
    # test_maybe_walks_next_provider_when_first_returns_none: through LibreYOLO's own walk
    # (iter_impls) and through a plain slot call (our walk does the same).
    recorded = []

    def first(*args):
        recorded.append("first")

    def second(*args):
        recorded.append("second")
        return sevens(*args)

    kernels.register(SLOT, second, name="second")
    kernels.register(SLOT, first, name="first")
    try:
        with environment(**PROVIDERS_OFF):
            via_walk = msda.maybe_ms_deform_attn(*classic_inputs())
            via_slot = kernels.call(SLOT, *classic_inputs())
    finally:
        kernels.unregister(SLOT, "first")
        kernels.unregister(SLOT, "second")
    assert recorded == ["first", "second"] * 2
    assert torch.equal(via_walk, via_slot) and via_walk[0, 0, 0] == 7.0


@check
def providers_that_flip_their_state_are_seen_after_clear_cache():
    # test_load_hub_kernel_disables_when_both_paths_fail, test_triton_disables_after_launch_
    # failure: the providers flip a module flag that their zero-argument predicate reads and
    # call clear_cache(). CUDA is faked so that the predicates can say yes on a CPU machine.
    with patched(torch.cuda, "is_available", lambda: True), patched(
        importlib.util, "find_spec", lambda name, *a: object()
    ), environment(LIBREYOLO_HUB_KERNELS=None, LIBREYOLO_TRITON_MSDA=None):
        assert kernels.active()[SLOT] == "hub"
        # CPU inputs: both providers decline (return None), so the slot call returns None.
        assert kernels.call(SLOT, *classic_inputs()) is None
        with patched(msda, "_hub_failed", True):
            assert kernels.active()[SLOT] == "hub"  # cached, exactly like LibreYOLO's resolve
            kernels.clear_cache()
            assert kernels.active()[SLOT] == "triton"
            with patched(triton_msda, "_triton_failed", False):
                triton_msda._disable(RuntimeError("compile failed"))  # calls clear_cache()
                assert kernels.active()[SLOT] == "unavailable"
                assert kernels.resolve(SLOT) is None


@check
def a_raising_predicate_counts_as_no_with_one_warning_each():
    # test_missing_provider_hint_does_not_propagate_importer_errors: a broken meta path finder
    # makes both zero-argument predicates raise.
    def broken_finder(name, *args):
        raise RuntimeError("broken meta path finder")

    with warnings.catch_warnings(record=True) as caught, patched(
        importlib.util, "find_spec", broken_finder
    ), environment(LIBREYOLO_HUB_KERNELS=None, LIBREYOLO_TRITON_MSDA=None):
        warnings.simplefilter("always")
        assert kernels.resolve(SLOT) is None
        assert kernels.resolve(SLOT) is None
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and all("broken meta path finder" in m for m in messages), messages


@check
def reference_slots_resolve_on_cpu():
    # test_reference_ops_resolve_on_cpu (ms_deform_attn is LibreYOLO's here: no reference)
    for op in providers.REFERENCES:
        assert kernels.resolve(op) is not None, op


@check
def the_override_variable_forces_the_reference():
    # test_env_force_reference
    reference = next(
        e["impl"] for e in kernels.implementations("fake_quant_fp8") if e["name"] == "reference"
    )
    for value in ("off", "reference"):
        with environment(TURBO_PHYSAI_KERNELS=value):
            assert kernels.resolve("fake_quant_fp8") is reference


@check
def a_gemm_slot_without_reference_resolves_to_its_hardware_only():
    # LibreYOLO's fp8_gemm contract: callers check resolve() and keep their simulated path.
    fp8_tensor_cores = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
    for op, fn in [("fp8_gemm", scaled_mm.fp8_linear_scaled_mm),
                   ("fp8_gemm_tensorwise", scaled_mm.fp8_linear_tensorwise_scaled_mm)]:
        assert kernels.resolve(op) is (fn if fp8_tensor_cores else None), op
        assert kernels.active()[op] == ("scaled_mm" if fp8_tensor_cores else "unavailable")


@check
def libreyolo_triton_fake_quant_joins_our_slot_for_cuda_inputs():
    if triton_fp8 is None:
        return
    names = [e["name"] for e in kernels.implementations("fake_quant_fp8")]
    assert names[-1] == "triton", names  # the newest registration
    x, scale = torch.randn(8, 33) * 100, torch.tensor(0.25)
    chosen = kernels.resolve("fake_quant_fp8", x, scale)
    if torch.cuda.is_available():
        # Its zero-argument predicate says yes and it declares no requirements: it takes every
        # call (and runs LibreYOLO's reference itself for inputs its kernel does not take).
        assert kernels.active()["fake_quant_fp8"] == "triton"
        assert chosen is triton_fp8.fake_quant_fp8
        x, scale = x.cuda(), scale.cuda()
        assert torch.equal(kernels.fake_quant_fp8(x, scale), triton_fp8.fake_quant_fp8(x, scale))
    else:
        assert kernels.active()["fake_quant_fp8"] != "triton"
        assert chosen is not triton_fp8.fake_quant_fp8


def main(names: list[str]) -> None:
    """Run the named checks (all without names) and print {name: "ok" or traceback} as JSON."""
    results = {}
    for name, fn in ((n, CHECKS[n]) for n in names or CHECKS):
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
