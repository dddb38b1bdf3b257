"""Random apply/check/rollback sequences over groups of which some fault, many more than the
CI test runs: tests/engine/test_fault_harness.py's property with 20,000 examples.

Each example is a list of up to 4 operations on the groups of tests/fixtures/tpa_fault_lib.py,
about half of them with one hook armed (one of 11 points where the engine calls user code, one
of 4 exception kinds). A violation is any state difference after check, a refused or
interrupted apply, or rollback (identity and descriptor kind of every touched attribute,
module __dict__ membership, sys.modules, the registry), or a group that did not apply and
does not say why. Prints a table and writes JSON.

    PYTHONPATH=src:tests/fixtures python benchmarks/engine_fault_sequences.py \
        --examples 20000 --json benchmarks/results/engine_fault_sequences.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "fixtures")]

import tpa_fault_lib as F  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402


def run(examples: int, random_seed: int) -> dict:
    counts: dict[str, int] = {}
    tally = {"examples": 0, "operations": 0, "violations": []}

    @seed(random_seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(ops=F.sequences())
    def example(ops):
        tally["examples"] += 1
        tally["operations"] += len(ops)
        found = F.run_sequence(ops, counts)
        tally["violations"].extend(found[:3])
        assert not found, found  # hypothesis shrinks it and re-raises: reported below

    start = time.perf_counter()
    failure = None
    try:
        example()
    except AssertionError as err:
        failure = str(err)[:2000]
    return {
        "examples": tally["examples"],
        "operations": tally["operations"],
        "apply_or_check_by_fault": dict(sorted(counts.items())),
        "points": sorted(F.POINTS),
        "kinds": [k.__name__ for k in F.KINDS],
        "violations": len(tally["violations"]),
        "first_violations": tally["violations"][:10],
        "failure": failure,
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    result = {
        "benchmark": "engine_fault_sequences",
        "machine": platform.platform(),
        "python": platform.python_version(),
        "seed": args.seed,
        **run(args.examples, args.seed),
    }
    rows = [
        ("examples (sequences)", result["examples"]),
        ("operations", result["operations"]),
        *((f"  apply/check, fault {k}", v) for k, v in result["apply_or_check_by_fault"].items()),
        ("violations", result["violations"]),
        ("seconds", result["seconds"]),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    sys.exit(1 if result["violations"] or result["failure"] else 0)


if __name__ == "__main__":
    main()
