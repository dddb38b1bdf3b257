"""Per-call overhead of the runtime-condition dispatcher.

Compares, in one run: the unavoidable work (the call site inlined by hand: call the condition,
then the chosen function, in the timing loop itself), the C++ Dispatcher, and the pure-Python
functools.wraps closure TurboPhysAI installs. Overhead = time per dispatched call minus the
unavoidable work. Prints a table, writes JSON.

    python benchmarks/dispatch.py [--calls N] [--repeat R] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import time
from pathlib import Path

from turbo_physai import _core


def original(x, y=1):
    return x


def replacement(x, y=1):
    return y


def condition(x, y=1):
    return x > 0


def closure_dispatcher(original, replacement, condition):
    @functools.wraps(original)
    def dispatch(*args, **kwargs):
        verdict = condition(*args, **kwargs)
        if not isinstance(verdict, bool):
            raise TypeError("runtime_condition must return bool")
        if verdict:
            return replacement(*args, **kwargs)
        return original(*args, **kwargs)

    return dispatch


class Model:
    def forward(self, x, y=1):
        return x


# The loops below are written out per case so that every variant makes plain fixed-arity calls:
# star-args calls would inflate the baseline and hide the dispatcher's real cost.
def _median_ns(loop, calls, repeat, clock=time.perf_counter_ns):
    samples = []
    for _ in range(repeat):
        start = clock()
        loop(calls)
        samples.append((clock() - start) / calls)
    return statistics.median(samples)


def call_loop(fn, x):
    def loop(calls):
        for _ in range(calls):
            fn(x)

    return loop


def inlined_function_loop(cond, repl, orig, x):
    def loop(calls):
        for _ in range(calls):
            repl(x) if cond(x) else orig(x)

    return loop


def inlined_method_loop(cond, repl, orig, obj, x):
    def loop(calls):
        for _ in range(calls):
            repl(obj, x) if cond(obj, x) else orig(obj, x)

    return loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--json", default=str(Path(__file__).parent / "results" / "dispatch.json"))
    # On a shared box, wall time counts the time other processes hold the core: "cpu" counts
    # only this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), to compare builds run by turns.
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()

    model = Model()
    stock_forward = Model.forward

    def m_cond(self, x, y=1):
        return x > 0

    def m_repl(self, x, y=1):
        return y

    def bound(factory):
        Model.forward = factory(stock_forward, m_repl, m_cond)
        try:
            return model.forward  # bound through the descriptor, as a model calls it
        finally:
            Model.forward = stock_forward

    clock = time.perf_counter_ns if args.clock == "wall" else time.thread_time_ns

    def run(loop):
        return _median_ns(loop, args.calls, args.repeat, clock)

    cases = (
        (
            "function call",
            inlined_function_loop(condition, replacement, original, 1),
            _core.Dispatcher(original, replacement, condition, "bench.condition"),
            closure_dispatcher(original, replacement, condition),
        ),
        (
            "method call",
            inlined_method_loop(m_cond, m_repl, stock_forward, model, 1),
            bound(_core.Dispatcher),
            bound(closure_dispatcher),
        ),
    )
    rows = []
    for label, inlined, cpp_fn, py_fn in cases:
        base, t_cpp, t_py = run(inlined), run(call_loop(cpp_fn, 1)), run(call_loop(py_fn, 1))
        rows.append(
            {
                "case": label,
                "inlined_ns": base,
                "cpp_ns": t_cpp,
                "closure_ns": t_py,
                "cpp_overhead_ns": t_cpp - base,
                "closure_overhead_ns": t_py - base,
                "overhead_ratio": (t_cpp - base) / (t_py - base),
            }
        )

    print(
        f"{'case':<14}{'inlined':>10}{'C++':>10}{'closure':>10}{'C++ ovh':>10}"
        f"{'clos ovh':>10}{'ratio':>8}   (ns per call, median of {args.repeat})"
    )
    for r in rows:
        print(
            f"{r['case']:<14}{r['inlined_ns']:>10.1f}{r['cpp_ns']:>10.1f}{r['closure_ns']:>10.1f}"
            f"{r['cpp_overhead_ns']:>10.1f}{r['closure_overhead_ns']:>10.1f}"
            f"{r['overhead_ratio']:>8.2f}"
        )
    out = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "calls": args.calls,
        "repeat": args.repeat,
        "clock": args.clock,
        "rows": rows,
        "date": time.strftime("%Y-%m-%d"),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
