"""Threads calling patched code while apply() and rollback() run see each group whole.

Eight threads read and call a two-patch group (a module function and a method it calls) while the
main thread applies and rolls back, with a 10 us switch interval so that threads interleave at
almost every bytecode boundary the interpreter allows, and a GIL release inside the function (as a
torch op makes) so that they also switch mid-call on a single core. A read is an atomic snapshot of
both attributes (one C-level call, no bytecode in between: the reader's own two reads cannot be
split); a call records which `first` ran and which `second` the `first` reached. Half-installed
means the two sides differ. docs/reliability.md, "Threads", states the guarantee this checks.
"""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest

import turbo_physai as tpa
from turbo_physai import _core, group, replace
from turbo_physai.engine import switching

LIB, OPT = "tpa_threads_lib", "tpa_threads_opt"
# Up to 200 apply/rollback cycles, at most 8 s (about 5 s for 200, on one core or two); main,
# writing patch by patch, showed 11-295 half reads and 224-467 half calls in 200 cycles.
CYCLES, BUDGET_S, MIN_CYCLES = 200, 8.0, 20
THREADS = 8


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


@pytest.fixture
def modules(monkeypatch):
    lib = _module(
        LIB,
        "class Model:\n"
        "    def second(self):\n"
        "        return 'old'\n"
        "import time\n"
        "def first(model):\n"
        "    time.sleep(0)  # releases the GIL, as a torch op does: threads switch inside calls\n"
        "    for _ in range(8):\n"
        "        pass\n"
        "    return 'old', model.second()\n",
    )
    monkeypatch.setitem(sys.modules, LIB, lib)
    opt = _module(
        OPT,
        "def second(self):\n"
        "    return 'new'\n"
        "import time\n"
        "def first(model):\n"
        "    time.sleep(0)\n"
        "    for _ in range(8):\n"
        "        pass\n"
        "    return 'new', model.second()\n",
    )
    monkeypatch.setitem(sys.modules, OPT, opt)
    return lib, opt


def _side(obj, old, new) -> str:
    if obj is old:
        return "old"
    if obj is new:
        return "new"
    # In transition a location holds a gate between the two: neither side, and never alone.
    if isinstance(obj, _core.Dispatcher) and obj.original is old and obj.replacement is new:
        return "gate"
    return f"unknown {obj!r}"


def _hammer(lib, opt, stop, tally, errors):
    owners, names = (lib, lib.Model), ("first", "second")
    old = (lib.first, lib.Model.second)
    new = (opt.first, opt.second)
    model = lib.Model()
    reads = calls = half_reads = half_calls = gate_reads = 0
    try:
        while not stop.is_set():
            snapshot = list(map(getattr, owners, names))  # one C call: an atomic read
            sides = {_side(o, a, b) for o, a, b in zip(snapshot, old, new, strict=True)}
            half_reads += len(sides) > 1
            gate_reads += sides == {"gate"}
            first_side, second_side = lib.first(model)
            half_calls += first_side != second_side
            reads += 1
            calls += 1
    except BaseException as err:  # reported by the main thread
        errors.append(err)
    tally.append((reads, calls, half_reads, half_calls, gate_reads))


def test_groups_switch_whole_under_threads(modules):
    lib, _ = modules
    g = _two_patch_group()
    stop, tally, errors = threading.Event(), [], []
    workers = [
        threading.Thread(target=_hammer, args=(*modules, stop, tally, errors))
        for _ in range(THREADS)
    ]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for w in workers:
            w.start()
        deadline, cycles = time.monotonic() + BUDGET_S, 0
        # the budget ends the run only after MIN_CYCLES: a loaded machine takes longer rather
        # than failing for want of cycles
        while cycles < CYCLES and (cycles < MIN_CYCLES or time.monotonic() < deadline):
            assert tpa.apply(groups=[g]).group("threads.two").status == "applied"
            outcome = tpa.rollback()
            assert not outcome["drifted"] and not outcome["failed"], outcome
            cycles += 1
    finally:
        stop.set()
        for w in workers:
            w.join()
        sys.setswitchinterval(interval)
    assert not errors, errors
    reads, calls, half_reads, half_calls, gate_reads = map(sum, zip(*tally, strict=True))
    print(
        f"{cycles} cycles: {half_reads} of {reads} reads, {half_calls} of {calls} calls half; "
        f"{gate_reads} reads saw both gates"
    )
    assert reads > cycles  # the workers really ran during the cycles
    assert (half_reads, half_calls) == (0, 0), (
        f"{cycles} cycles: {half_reads} of {reads} reads, {half_calls} of {calls} calls"
    )
    assert lib.first(lib.Model()) == ("old", "old")


def _two_patch_group():
    return group(
        "threads.two",
        replace(f"{LIB}.first", f"{OPT}.first"),
        replace(f"{LIB}.Model.second", f"{OPT}.second"),
    )


def _held_call(lib, entered, release, results):
    """Call lib.first on a thread, pausing inside it (before it looks up second) until released."""

    def pause(model):
        entered.set()
        assert release.wait(10)
        return type(model).second(model)

    model = lib.Model()
    model.second = types.MethodType(lambda self: pause(self), model)  # instance attr: not patched
    thread = threading.Thread(target=lambda: results.append(lib.first(model)))
    thread.start()
    assert entered.wait(10)
    return thread


@pytest.mark.parametrize("direction", ["apply", "rollback"])
def test_a_call_in_flight_finishes_on_the_side_it_started(modules, direction):
    lib, _ = modules
    if direction == "rollback":
        tpa.apply(groups=[_two_patch_group()])
    entered, release, results = threading.Event(), threading.Event(), []
    thread = _held_call(lib, entered, release, results)
    releaser = threading.Timer(0.2, release.set)
    releaser.start()
    started = time.monotonic()
    if direction == "apply":
        tpa.apply(groups=[_two_patch_group()])
    else:
        tpa.rollback()
    waited = time.monotonic() - started
    thread.join()
    releaser.join()
    # The switch waited for the call (released after 0.2 s), and the call saw one side only.
    assert waited >= 0.15
    side = "old" if direction == "apply" else "new"
    assert results == [(side, side)]
    other = "new" if direction == "apply" else "old"
    assert lib.first(lib.Model()) == (other, other)


@pytest.mark.parametrize(
    ("direction", "started", "after"), [("apply", "old", "new"), ("rollback", "new", "old")]
)
def test_a_call_longer_than_the_drain_timeout_is_warned_about(
    modules, monkeypatch, direction, started, after
):
    lib, _ = modules
    if direction == "rollback":
        tpa.apply(groups=[_two_patch_group()])
    monkeypatch.setattr(switching, "DRAIN_TIMEOUT_S", 0.05)
    entered, release, results = threading.Event(), threading.Event(), []
    thread = _held_call(lib, entered, release, results)
    with pytest.warns(RuntimeWarning, match=rf"threads\.two \({direction}\).*{after} side"):
        if direction == "apply":
            tpa.apply(groups=[_two_patch_group()])
        else:
            tpa.rollback()
    release.set()
    thread.join()
    # The documented limit: past the timeout, the rest of that call sees the other side.
    assert results == [(started, after)]


def test_gates_route_by_the_calling_frames(modules):
    lib, opt = modules
    switch = _core.Switch([lib.first.__code__], [opt.first.__code__], True, "g (apply)")
    assert switch.target_new and switch.name == "g (apply)" and switch.holding_back() == 0
    assert switch.routes_new()  # no group frame on this stack: the target
    gate = _core.Dispatcher(lib.Model.second, opt.second, switch)
    model = lib.Model()
    lib.Model.second = gate
    try:
        assert lib.first(model) == ("old", "old")  # inside the old first: stays old
        assert opt.first(model) == ("new", "new")
        assert model.second() == "new"  # a fresh call: the target
        assert gate.counts == {"replacement": 2, "original": 1}

        # A new wrapper calling the original it wraps: the outermost group frame (the wrapper)
        # decides, so the original's lookups inside it are new-side ones.
        def wrapper(model):
            return lib.first(model)

        wrapping = _core.Switch([lib.first.__code__], [wrapper.__code__], False, "w (rollback)")
        lib.Model.second = _core.Dispatcher(gate.original, opt.second, wrapping)
        assert wrapper(model) == ("old", "new")
        assert lib.first(model) == ("old", "old")
    finally:
        lib.Model.second = gate.original


def test_static_and_class_methods_get_gates_of_their_kind(modules):
    lib, opt = modules
    switch = _core.Switch([], [], False, "g (rollback)")
    for kind in (staticmethod, classmethod):
        gate = switching._gate(kind(lib.first), kind(opt.first), switch)
        assert isinstance(gate, kind) and gate.__func__.original is lib.first
    assert switching._gate(property(lib.first), property(opt.first), switch) is None
    assert switching._gate(lib.Model, lib.Model, switch) is None
    assert switching._gate(None, opt.first, switch) is None  # the name did not exist


def test_switch_takes_only_code_objects():
    with pytest.raises(TypeError, match="Switch new codes must be code objects, got str"):
        _core.Switch([], ["first"], True, "g")


def test_a_write_refused_at_settle_restores_the_group(modules):
    lib, opt = modules

    class Picky(type):
        def __setattr__(cls, name, value):
            if value is opt.second:
                raise PermissionError("no direct objects here")
            super().__setattr__(name, value)

    lib.Strict = Picky("Strict", (), {"second": lib.Model.second})
    original = vars(lib.Strict)["second"]
    g = group(
        "threads.picky",
        replace(f"{LIB}.first", f"{OPT}.first"),
        replace(f"{LIB}.Strict.second", f"{OPT}.second"),
    )
    gr = tpa.apply(groups=[g]).group("threads.picky")
    assert gr.status == "rolled_back" and "no direct objects here" in gr.error
    assert vars(lib.Strict)["second"] is original
    assert vars(lib)["first"] is not opt.first and lib.first(lib.Model()) == ("old", "old")


def test_a_location_written_twice_gets_one_gate_and_rolls_back_exactly(modules):
    lib, opt = modules
    original = lib.first
    tpa.apply(groups=[_two_patch_group()])
    assert tpa.record_write("threads.two", lib, "first", opt.first)  # same object, same place
    outcome = tpa.rollback()
    assert not outcome["drifted"] and not outcome["failed"], outcome
    assert vars(lib)["first"] is original
