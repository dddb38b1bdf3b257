"""What switching a group whole costs: apply+rollback time, and a gate's call while one is up.

- apply+rollback of a two-function group (a module function and a method), no other threads:
  the switch adds gates, a drain check and a second native write pass to each transition.
- A gate (Dispatcher whose condition is a group's Switch) reads the calling thread's frames;
  overhead per call beyond calling the chosen function inline, from a stack `depth` frames deep.
  Gates exist only while a transition drains; nothing of them stays on the call path after.

    PYTHONPATH=src python benchmarks/transition.py [--cycles N] [--calls N] [--json PATH]

On a version without engine/switching.py (before the switch) it times apply+rollback only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
import types
from pathlib import Path

import turbo_physai as tpa
from turbo_physai import _core, group, replace

LIB, OPT = "tpa_bench_transition_lib", "tpa_bench_transition_opt"
# This thread's CPU time: no other thread runs here, and on a shared box wall time would count
# the time other processes hold the core.
CLOCK = time.thread_time_ns


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    sys.modules[name] = module
    return module


lib = _module(
    LIB,
    "class Model:\n    def second(self, x):\n        return x\ndef first(x):\n    return x\n",
)
opt = _module(OPT, "def second(self, x):\n    return x\ndef first(x):\n    return x\n")


def _median(samples_fn, repeat):
    return statistics.median(samples_fn() for _ in range(repeat))


def apply_rollback_us(cycles: int, repeat: int) -> float:
    g = group(
        "bench.transition",
        replace(f"{LIB}.first", f"{OPT}.first"),
        replace(f"{LIB}.Model.second", f"{OPT}.second"),
    )

    def sample():
        start = CLOCK()
        for _ in range(cycles):
            tpa.apply(groups=[g])
            tpa.rollback()
        return (CLOCK() - start) / cycles / 1e3

    return _median(sample, repeat)


def _at_depth(depth: int, fn):
    """Run fn() from a stack `depth` Python frames deeper than the caller's."""
    if depth <= 0:
        return fn()
    return _at_depth(depth - 1, fn)


def gate_overhead_ns(depth: int, calls: int, repeat: int) -> dict[str, float]:
    switch = _core.Switch([lib.first.__code__], [opt.first.__code__], True, "bench (apply)")
    gate = _core.Dispatcher(lib.first, opt.first, switch)
    chosen = opt.first

    def loop(fn):
        def run():
            start = CLOCK()
            for _ in range(calls):
                fn(1)
            return (CLOCK() - start) / calls

        return run

    inlined = _median(lambda: _at_depth(depth, loop(chosen)), repeat)
    gated = _median(lambda: _at_depth(depth, loop(gate)), repeat)
    return {"depth": depth, "inlined_ns": inlined, "gate_ns": gated, "overhead_ns": gated - inlined}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--json", default=str(Path(__file__).parent / "results" / "transition.json")
    )
    args = parser.parse_args()

    out = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
        "apply_rollback_us": apply_rollback_us(args.cycles, args.repeat),
        "gates": [],
    }
    print(f"apply+rollback, two-function group: {out['apply_rollback_us']:.1f} us per cycle")
    if importlib.util.find_spec("turbo_physai.engine.switching"):
        print(f"{'stack depth':>12}{'inlined':>10}{'gate':>10}{'overhead':>10}   (ns per call)")
        for depth in (0, 30, 100):
            row = gate_overhead_ns(depth, args.calls, args.repeat)
            out["gates"].append(row)
            print(
                f"{depth:>12}{row['inlined_ns']:>10.1f}{row['gate_ns']:>10.1f}"
                f"{row['overhead_ns']:>10.1f}"
            )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
