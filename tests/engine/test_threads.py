"""Threads calling patched code while apply() and rollback() run see each group whole.

Eight threads read and call a two-patch group (a module function and a method it calls) while
the main thread applies and rolls back, with a 10 us switch interval so that threads interleave
at almost every bytecode boundary the interpreter allows. A read is an atomic snapshot of both
attributes (one C-level call, no bytecode in between: the reader's own two reads cannot be split);
a call records which `first` ran and which `second` the `first` reached. Half-installed means the
two sides differ. docs/reliability.md, "Threads", states the guarantee this checks.
"""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest

import turbo_physai as tpa
from turbo_physai import _core, group, replace

LIB, OPT = "tpa_threads_lib", "tpa_threads_opt"
CYCLES = 200  # about 5 s on one core; main (patch by patch) shows thousands of halves here
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
        "def first(model):\n"
        "    for _ in range(8):  # a call that takes a while: threads may switch inside it\n"
        "        pass\n"
        "    return 'old', model.second()\n",
    )
    monkeypatch.setitem(sys.modules, LIB, lib)
    opt = _module(
        OPT,
        "def second(self):\n"
        "    return 'new'\n"
        "def first(model):\n"
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
    reads = calls = half_reads = half_calls = 0
    try:
        while not stop.is_set():
            snapshot = list(map(getattr, owners, names))  # one C call: an atomic read
            sides = {_side(o, a, b) for o, a, b in zip(snapshot, old, new, strict=True)}
            half_reads += len(sides) > 1
            first_side, second_side = lib.first(model)
            half_calls += first_side != second_side
            reads += 1
            calls += 1
    except BaseException as err:  # reported by the main thread
        errors.append(err)
    tally.append((reads, calls, half_reads, half_calls))


def test_groups_switch_whole_under_threads(modules):
    lib, _ = modules
    g = group(
        "threads.two",
        replace(f"{LIB}.first", f"{OPT}.first"),
        replace(f"{LIB}.Model.second", f"{OPT}.second"),
    )
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
        for _ in range(CYCLES):
            assert tpa.apply(groups=[g]).group("threads.two").status == "applied"
            outcome = tpa.rollback()
            assert not outcome["drifted"] and not outcome["failed"], outcome
    finally:
        stop.set()
        for w in workers:
            w.join()
        sys.setswitchinterval(interval)
    assert not errors, errors
    reads, calls, half_reads, half_calls = map(sum, zip(*tally, strict=True))
    assert reads > CYCLES and calls > CYCLES  # the workers really ran during the cycles
    assert (half_reads, half_calls) == (0, 0), f"{half_reads} of {reads} reads, {half_calls} of {calls} calls"
    assert lib.first(lib.Model()) == ("old", "old")
