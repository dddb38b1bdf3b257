"""The registry's contract as LibreYOLO-style providers use it, and its failure rules.

Environment (zero-argument) and per-call predicates, None as "declined", iter_impls,
clear_cache, REFERENCE_OPS, disables that belong to a registration; issue 24's registry items:
which failures fall back for one call and which disable (17), strict bool predicates (18),
registrations rejected up front (19).
"""

from __future__ import annotations

import functools
import math
import warnings

import pytest

from turbo_physai import kernels

np = pytest.importorskip("numpy")


class Counter:
    """A callable that counts its calls and answers `answer` (an environment predicate)."""

    def __init__(self, answer=True):
        self.answer, self.calls = answer, 0

    def __call__(self):
        self.calls += 1
        return self.answer


def _implementation(outcome, log, label):
    def impl(*args, **kwargs):
        if log is not None:
            log.append(label)
        return outcome()

    return impl


def returns(value, log=None, label=None):
    return _implementation(lambda: value, log, label)


def raises(exc, log=None, label=None):
    def throw():
        raise exc

    return _implementation(throw, log, label)


def entry(slot_name, name):
    return next(e for e in kernels.implementations(slot_name) if e["name"] == name)


@pytest.fixture
def quiet():
    """Fail the test on any warning: the paths under test must not warn (again)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# ---- predicates: environment vs per call -------------------------------------------------


def test_environment_predicate_is_asked_once_and_cached_until_clear_cache(slot_name):
    eligible = Counter(True)
    kernels.register(slot_name, returns("ref"), name="reference")
    kernels.register(slot_name, returns("fast"), name="fast", predicate=eligible)
    assert entry(slot_name, "fast")["predicate_kind"] == "environment"
    assert [kernels.call(slot_name, i) for i in range(1000)] == ["fast"] * 1000
    assert eligible.calls == 1  # not a Python call per call: the answer lives in the candidates
    eligible.answer = False
    assert kernels.call(slot_name, 1) == "fast"  # as LibreYOLO's resolve(): cached ...
    kernels.clear_cache()  # ... until the provider says its state changed
    assert kernels.call(slot_name, 1) == "ref"
    assert kernels.resolve(slot_name).__name__ == "impl"  # the reference
    assert kernels.active()[slot_name] == "reference"
    assert eligible.calls == 2


def test_registry_changes_and_override_variables_re_ask_environment_predicates(
    slot_name, monkeypatch
):
    eligible = Counter(True)
    kernels.register(slot_name, returns("ref"), name="reference")
    kernels.register(slot_name, returns("fast"), name="fast", predicate=eligible)
    kernels.call(slot_name)
    kernels.register(slot_name, returns("other"), name="other", predicate=lambda: False)
    assert kernels.call(slot_name) == "fast"
    assert eligible.calls == 2
    monkeypatch.setenv("TURBO_PHYSAI_KERNELS", "fast")
    assert kernels.call(slot_name) == "fast"
    assert eligible.calls == 3


@pytest.mark.parametrize(
    "make, kind",
    [
        (lambda: (lambda: True), "environment"),
        (lambda: Counter(True), "environment"),  # __call__(self): a bound method, no argument
        (lambda: functools.partial(lambda flag: flag, True), "environment"),
        (lambda: (lambda *args, **kwargs: True), "call"),
        (lambda: (lambda x, scale=None: True), "call"),
        (lambda: functools.partial(lambda flag, x: flag, True), "call"),
    ],
)
def test_predicate_kind_is_decided_once_at_registration(slot_name, make, kind):
    kernels.register(slot_name, returns("ref"), name="reference")
    kernels.register(slot_name, returns("fast"), name="fast", predicate=make())
    assert entry(slot_name, "fast")["predicate_kind"] == kind
    assert kernels.call(slot_name, 1) == "fast"


def test_per_call_predicate_sees_each_call(slot_name):
    seen = []

    def big(n, *, scale=1):
        seen.append((n, scale))
        return n * scale > 10

    kernels.register(slot_name, returns("ref"), name="reference")
    kernels.register(slot_name, returns("big"), name="big", predicate=big)
    assert [kernels.call(slot_name, 11), kernels.call(slot_name, 3, scale=4)] == ["big", "big"]
    assert kernels.call(slot_name, 3) == "ref"
    assert seen == [(11, 1), (3, 4), (3, 1)]


def test_predicates_that_can_be_called_neither_way_are_rejected(slot_name):
    with pytest.raises(TypeError, match="requires keyword-only argument.*device"):
        kernels.register(slot_name, returns(1), name="a", predicate=lambda *, device: True)
    with pytest.raises(TypeError, match="signature cannot be read.*wrap it in a def or lambda"):
        kernels.register(slot_name, returns(1), name="a", predicate=iter)
    assert kernels.implementations(slot_name) == []


# ---- None declines -----------------------------------------------------------------------


def test_none_declines_and_the_next_eligible_implementation_runs(slot_name, quiet):
    log = []
    kernels.register(slot_name, returns("ref", log, "ref"), name="reference")
    kernels.register(slot_name, returns("second", log, "second"), name="second")
    kernels.register(slot_name, returns(None, log, "first"), name="first")
    assert kernels.call(slot_name, 1) == "second"
    assert log == ["first", "second"]
    states = [(e["disabled"], e["fallbacks"]) for e in kernels.implementations(slot_name)]
    assert states == [(False, 0)] * 3


def test_a_slot_whose_implementations_all_decline_returns_none(slot_name, quiet):
    # LibreYOLO's attention and GEMM slots: no reference, the caller keeps its portable path.
    log = []
    kernels.register(slot_name, returns(None, log, "a"), name="a")
    kernels.register(slot_name, returns(None, log, "b"), name="b")
    assert kernels.call(slot_name, 1) is None
    assert log == ["b", "a"]
    assert kernels.resolve(slot_name) is not None  # declining is per input, not a disable


# ---- iter_impls, clear_cache, REFERENCE_OPS, unregister ------------------------------------


def test_iter_impls_lists_what_a_call_would_try_asking_environment_predicates_afresh(slot_name):
    on, off = Counter(True), Counter(False)
    ref = returns("ref")
    kernels.register(slot_name, ref, name="reference")
    kernels.register(slot_name, returns("f32"), name="f32", requires={"dtype": "float32"})
    kernels.register(slot_name, returns("off"), name="off_now", predicate=off)
    kernels.register(slot_name, returns("on"), name="on", predicate=on)
    assert [n for n, _ in kernels.iter_impls(slot_name)] == ["on", "f32", "reference"]
    assert [n for n, _ in kernels.iter_impls(slot_name)] == ["on", "f32", "reference"]
    assert (on.calls, off.calls) == (2, 2)  # LibreYOLO's iter_impls does not cache either
    f64 = np.ones(2, np.float64)
    assert [n for n, _ in kernels.iter_impls(slot_name, f64)] == ["on", "reference"]
    assert dict(kernels.iter_impls(slot_name))["reference"] is ref
    assert list(kernels.iter_impls("no_such_slot_for_iter_impls")) == []


def test_iter_impls_honours_the_override_variable(slot_name, monkeypatch):
    kernels.register(slot_name, returns("ref"), name="reference")
    kernels.register(slot_name, returns("a"), name="a")
    monkeypatch.setenv("TURBO_PHYSAI_KERNELS", "off")
    assert [n for n, _ in kernels.iter_impls(slot_name)] == ["reference"]


def test_reference_ops_are_the_built_in_slots_with_a_reference():
    from turbo_physai.kernels import providers

    assert kernels.REFERENCE_OPS == tuple(providers.REFERENCES)
    assert {"fake_quant_fp8", "ms_deform_attn"} <= set(kernels.REFERENCE_OPS)
    for op in kernels.REFERENCE_OPS:
        assert kernels.resolve(op) is not None, op
        assert entry(op, kernels.REFERENCE)["predicate"] is None


def test_clear_cache_keeps_registrations_and_disables(slot_name):
    kernels.register(slot_name, returns(2), name="reference")
    kernels.register(slot_name, raises(ImportError("libfoo.so")), name="broken")
    with pytest.warns(RuntimeWarning, match="disabled"):
        kernels.call(slot_name)
    kernels.clear_cache()
    assert [e["name"] for e in kernels.implementations(slot_name)] == ["reference", "broken"]
    assert entry(slot_name, "broken")["disabled"]
    assert kernels.active()[slot_name] == "reference"


def test_a_disable_belongs_to_the_registration_not_the_name(slot_name, quiet):
    kernels.register(slot_name, returns("ref"), name="reference")
    kernels.register(slot_name, raises(RuntimeError("no kernel image")), name="fast")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert kernels.call(slot_name) == "ref"
    assert entry(slot_name, "fast")["disabled"]
    assert entry(slot_name, "fast")["failure"] == "RuntimeError: no kernel image"
    kernels.unregister(slot_name, "fast")
    kernels.register(slot_name, returns("fixed"), name="fast")
    assert kernels.call(slot_name) == "fixed"
    assert not entry(slot_name, "fast")["disabled"] and entry(slot_name, "fast")["failure"] is None


# ---- issue 24 item 17: which failures disable -------------------------------------------


def _torch_oom():
    torch = pytest.importorskip("torch")
    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


INPUT_SPECIFIC = {
    "MemoryError": lambda: MemoryError(),
    "torch.OutOfMemoryError": _torch_oom,
    "cpu allocator": lambda: RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory"
    ),
    "ValueError": lambda: ValueError("value: expected a 4-d tensor"),
    "TypeError": lambda: TypeError("x must be a floating tensor"),
    "IndexError": lambda: IndexError("index 7 is out of bounds"),
    "OverflowError": lambda: OverflowError("Python int too large to convert to C long"),
}

BROKEN = {
    "ImportError": lambda: ImportError("undefined symbol: _ZN3c10"),
    "AttributeError": lambda: AttributeError("module has no attribute 'forward'"),
    "NotImplementedError": lambda: NotImplementedError("sm_90 only"),
    "RuntimeError": lambda: RuntimeError("CUDA error: an illegal memory access was encountered"),
    "OSError": lambda: OSError("libcudart.so.13: cannot open shared object file"),
    "KeyError": lambda: KeyError("BLOCK_SIZE"),
}


@pytest.mark.parametrize("kind", list(INPUT_SPECIFIC))
def test_input_specific_failures_fall_back_for_that_call_only(slot_name, kind):
    make = INPUT_SPECIFIC[kind]
    calls = []

    def fast(n):
        calls.append(n)
        if n > 100:  # "a huge input"
            raise make()
        return f"fast {n}"

    kernels.register(slot_name, lambda n: f"ref {n}", name="reference")
    kernels.register(slot_name, fast, name="fast")
    with pytest.warns(RuntimeWarning, match=r"'fast' of slot .* failed on these inputs.*stays "):
        assert kernels.call(slot_name, 1000) == "ref 1000"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per implementation
        assert kernels.call(slot_name, 2000) == "ref 2000"
        assert kernels.call(slot_name, 3) == "fast 3"  # still enabled
    assert calls == [1000, 2000, 3]
    fast_entry = entry(slot_name, "fast")
    assert not fast_entry["disabled"] and fast_entry["fallbacks"] == 2
    assert kernels.active()[slot_name] == "fast"


@pytest.mark.parametrize("kind", list(BROKEN))
def test_broken_implementations_are_disabled_once_another_one_succeeds(slot_name, kind):
    make = BROKEN[kind]
    calls = []
    kernels.register(slot_name, lambda n: f"ref {n}", name="reference")
    kernels.register(slot_name, raises(make(), calls, "broken"), name="broken")
    with pytest.warns(RuntimeWarning, match=rf"'broken' of slot .*\({kind}: .*disabled"):
        assert kernels.call(slot_name, 1) == "ref 1"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels.call(slot_name, 2) == "ref 2"
    assert calls == ["broken"]
    assert entry(slot_name, "broken")["failure"].startswith(f"{kind}: ")


def test_failures_the_reference_shares_disable_nothing(slot_name, quiet):
    kernels.register(slot_name, raises(RuntimeError("size mismatch (3 vs 4)")), name="reference")
    kernels.register(slot_name, raises(RuntimeError("shape [3] is invalid")), name="fast")
    with pytest.raises(RuntimeError, match="size mismatch"):  # the reference's verdict
        kernels.call(slot_name, 1)
    assert not entry(slot_name, "fast")["disabled"]


def test_a_failure_before_every_other_one_declines_warns_and_returns_none(slot_name):
    kernels.register(slot_name, returns(None), name="portable_only")
    kernels.register(slot_name, raises(RuntimeError("launch failed")), name="fast")
    with pytest.warns(RuntimeWarning, match="'fast' .*launch failed.*every other one declined"):
        assert kernels.call(slot_name) is None
    assert not entry(slot_name, "fast")["disabled"]  # nothing showed the inputs were fine


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_interrupts_propagate_at_once_and_disable_nothing(slot_name, exc):
    log = []
    kernels.register(slot_name, returns("ref", log, "ref"), name="reference")
    kernels.register(slot_name, raises(exc(), log, "fast"), name="fast")
    with pytest.raises(exc):
        kernels.call(slot_name)
    assert log == ["fast"] and not entry(slot_name, "fast")["disabled"]


# ---- issue 24 item 18: predicates return bools -------------------------------------------


def _not_bools():
    out = {"1": 1, "yes": "yes", "[0]": [0], "nan": math.nan, "None": None}
    torch = pytest.importorskip("torch")
    out["tensor(True)"] = torch.tensor(True)
    return out


@pytest.mark.parametrize("label", ["1", "yes", "[0]", "nan", "None", "tensor(True)"])
@pytest.mark.parametrize("kind", ["call", "environment"])
def test_a_predicate_returning_a_non_bool_is_a_predicate_error(slot_name, label, kind):
    value = _not_bools()[label]
    predicate = (lambda *args: value) if kind == "call" else (lambda: value)
    kernels.register(slot_name, returns("ref"), name="reference")
    kernels.register(slot_name, returns("p"), name="p", predicate=predicate)
    with pytest.warns(RuntimeWarning, match=r"predicate of implementation 'p' .*not a bool"):
        assert kernels.call(slot_name, 1) == "ref"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels.call(slot_name, 2) == "ref"


@pytest.mark.parametrize("answer, expected", [(True, "p"), (False, "ref"),
                                              (np.bool_(True), "p"), (np.bool_(False), "ref")])
def test_bools_and_numpy_bools_are_answers(slot_name, answer, expected, quiet):
    kernels.register(slot_name, returns("ref"), name="reference")
    kernels.register(slot_name, returns("p"), name="p", predicate=lambda x: answer)
    assert kernels.call(slot_name, 1) == expected


def test_a_raising_environment_predicate_warns_once_and_counts_as_no(slot_name):
    def broken():
        raise RuntimeError("broken meta path finder")

    kernels.register(slot_name, returns("ref"), name="reference")
    kernels.register(slot_name, returns("p"), name="p", predicate=broken)
    with pytest.warns(RuntimeWarning, match="predicate of implementation 'p' .*meta path finder"):
        assert kernels.call(slot_name) == "ref"
    kernels.clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels.call(slot_name) == "ref"


def test_an_environment_predicate_may_use_the_registry(slot_name, quiet):
    # It runs without the registry's lock held: registering or clearing from it cannot deadlock.
    def eligible():
        kernels.clear_cache()
        kernels.unregister(slot_name + "_side", "side")  # asked again by later tests' calls
        kernels.register(slot_name + "_side", returns(0), name="side")
        return True

    kernels.register(slot_name, returns("p"), name="p", predicate=eligible)
    assert kernels.call(slot_name) == "p"
    assert [e["name"] for e in kernels.implementations(slot_name + "_side")] == ["side"]


# ---- issue 24 item 19: rejected at register time -----------------------------------------


@pytest.mark.parametrize(
    "slot, name, kwargs, error, message",
    [
        (None, "a", {"requires": {"args": [100]}}, ValueError,
         r"requires\['args'\] .*index 100 is out of range: .* takes 2 positional"),
        (None, "a", {"requires": {"args": []}}, ValueError, "at least one index"),
        (None, "a", {"requires": {"args": [0, 0]}}, ValueError, "names index 0 twice"),
        (None, "a", {"requires": {"args": 0}}, TypeError, "must be a list of indices"),
        (None, "a", {"requires": {"args": [-1]}}, ValueError, ">= 0"),
        (None, "a", {"requires": {"args": [10**30]}}, ValueError, "integer out of range"),
        (None, "a", {"requires": [("args", [0])]}, TypeError, "must be a mapping"),
        (None, "", {}, ValueError, "implementation name must not be empty"),
        (None, " a", {}, ValueError, "must not start or end with whitespace"),
        (None, "Off", {}, ValueError, "'Off' is reserved"),
        ("", "a", {}, ValueError, "slot name must not be empty"),
        (None, "reference", {"predicate": lambda: True}, ValueError, "takes no predicate"),
        (None, "reference", {"requires": {"device": "cpu"}}, ValueError, "takes no predicate"),
    ],
)
def test_bad_registrations_are_rejected_and_leave_nothing(
    slot_name, slot, name, kwargs, error, message
):
    slot = slot_name if slot is None else slot

    def impl(x, scale):
        return x

    with pytest.raises(error, match=message):
        kernels.register(slot, impl, name=name, **kwargs)
    assert kernels.implementations(slot) == []


def test_an_empty_slot_name_is_no_slot():
    with pytest.raises(ValueError, match="slot name must not be empty"):
        kernels.slot("")
    with pytest.raises(ValueError, match="slot name must not be empty"):
        kernels.call("", 1)
    assert "" not in kernels.active()


def test_args_indices_are_free_for_implementations_taking_star_args(slot_name):
    kernels.register(slot_name, returns(1), name="a", requires={"args": [7]})
    assert entry(slot_name, "a")["requires"] == {"args": [7]}


# ---- threads -------------------------------------------------------------------------------


def test_calls_from_threads_while_the_slot_changes(slot_name, quiet):
    import sys
    import threading

    kernels.register(slot_name, returns("ref"), name="reference")
    call = kernels.slot(slot_name)
    stop, seen, errors = threading.Event(), set(), []

    def worker():
        try:
            while not stop.is_set():
                seen.add(call(1))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for i in range(300):
            kernels.register(slot_name, returns(f"v{i}"), name="v", predicate=lambda: True)
            kernels.clear_cache()
            kernels.unregister(slot_name, "v")
    finally:
        stop.set()
        for t in threads:
            t.join()
        sys.setswitchinterval(interval)
    assert errors == []
    assert "ref" in seen and seen <= {"ref"} | {f"v{i}" for i in range(300)}
