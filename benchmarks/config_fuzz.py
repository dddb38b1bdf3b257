"""How long ``turbo-physai check`` takes on hostile configs: the mutated configs of the config
fuzz test (tests/fixtures/turbophysai_mutations.py), and the huge inputs of issue 24 (a 66 MB
config with 4.5M group entries, a 4 GB extends target, deep nesting, a 5000-digit integer).

Each case runs in-process through ``turbo_physai.cli.main.main(["check", FILE, "--json"])``
in a copy of the TurboPhysAI corpus layout, after every unmutated seed was checked once (so
first imports, torch's above all, are not charged to a case); prints a table and writes JSON.

    PYTHONPATH=src:tests/fixtures python benchmarks/config_fuzz.py --cases 1000 \
        --json benchmarks/results/config_fuzz.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "fixtures")]

from turbophysai_mutations import CORPUS, cases  # noqa: E402

from turbo_physai.cli.main import main  # noqa: E402

HEAD = ("schema_version: turbophysai/optimization-config/v1\nkind: OptimizationConfig\n"
        "metadata: {id: huge, version: '1'}\n")


def check(path: Path) -> tuple[int, float]:
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["check", str(path), "--json"])
    elapsed = time.perf_counter() - start
    if status not in (0, 1, 2) or "Traceback" in err.getvalue():
        raise SystemExit(f"{path}: status {status}: {err.getvalue()[:500]}")
    return status, elapsed


def huge_inputs(work: Path) -> dict[str, tuple[int, float]]:
    files = {}
    groups = work / "groups.yaml"
    with open(groups, "w") as f:  # ~66 MB, 4.5M group entries
        f.write(HEAD + "optimization_groups:\n")
        f.write("- {id: g}\n" * 4_500_000)
    files["66 MB, 4.5M groups"] = groups
    sparse = work / "sparse.yaml"
    with open(sparse, "wb") as f:
        f.truncate(4 << 30)  # 4 GB, sparse: costs no disk
    parent = work / "extends_4gb.yaml"
    parent.write_text(HEAD + "extends: [sparse.yaml]\n")
    files["extends a 4 GB file"] = parent
    deep = work / "deep.yaml"
    deep.write_text(HEAD + "x: " + "[" * 100_000 + "]" * 100_000 + "\n")
    files["nesting 100,000 deep"] = deep
    digits = work / "digits.yaml"
    digits.write_text(HEAD + "optimization_groups:\n- id: g\n  options: {n: " + "9" * 5000 + "}\n")
    files["5000-digit integer"] = digits
    return {name: check(path) for name, path in files.items()}


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "corpus"
        shutil.copytree(CORPUS, tree, ignore=shutil.ignore_patterns("targets", "*.py"))
        own = tree / "turbo_physai/optimizations/models/fuzz/configs"
        own.mkdir(parents=True)
        for path in sorted(tree.rglob("*.yaml")):  # warm-up: imports the targets can import
            check(path)
        times, statuses = [], {0: 0, 1: 0, 2: 0}
        for name, text in cases(args.cases):
            seed = name.split("-", 1)[1]
            path = own / f"{seed}.yaml" if seed.startswith("own-") else tree / seed
            before = path.read_bytes() if path.exists() else None
            path.write_bytes(text.encode("utf-8", "surrogatepass"))
            try:
                status, elapsed = check(path)
            finally:
                path.unlink() if before is None else path.write_bytes(before)
            statuses[status] += 1
            times.append((elapsed, name))
        huge = huge_inputs(Path(tmp))
    times.sort()
    slowest = [name for _, name in times[-3:]]
    times = [t for t, _ in times]
    result = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "cases": args.cases,
        "statuses": statuses,
        "seconds": {"median": statistics.median(times), "p99": times[int(0.99 * len(times))],
                    "max": times[-1], "slowest": slowest},
        "huge_inputs": {k: {"status": s, "seconds": t} for k, (s, t) in huge.items()},
    }
    print(f"{args.cases} mutated configs: exit 0/1/2 = {statuses[0]}/{statuses[1]}/{statuses[2]}")
    print("| per case | median | p99 | max |\n|---|---|---|---|")
    print("| seconds | " + " | ".join(f"{result['seconds'][k]:.3f}"
                                      for k in ("median", "p99", "max")) + " |")
    print("\n| huge input | exit | seconds |\n|---|---|---|")
    for name, (status, seconds) in huge.items():
        print(f"| {name} | {status} | {seconds:.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main_()
