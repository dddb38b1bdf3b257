"""Example without torch: declare, check, apply, report and roll back groups on a small library.

Run: python examples/patch_fixture_library.py  (no torch, no network, no GPU needed)
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import demo_opt  # noqa: E402
from demo_lib import head, heatmap  # noqa: E402

import turbo_physai as tpa  # noqa: E402


def timed(fn, *args, repeat=200):
    start = time.perf_counter()
    for _ in range(repeat):
        result = fn(*args)
    return result, (time.perf_counter() - start) / repeat * 1e6


def main() -> int:
    groups = [demo_opt.GAUSSIAN, demo_opt.PEAK, demo_opt.BROKEN]
    print("== check (installs nothing)")
    print(tpa.check(groups=groups))

    stock, stock_us = timed(head.draw, (48, 48), 4.0)
    print("\n== apply")
    report = tpa.apply(groups=groups)
    fast, fast_us = timed(head.draw, (48, 48), 4.0)
    head.draw((4, 4), 1.0)  # small map: the condition routes to the original
    pairs = zip(sum(stock, []), sum(fast, []), strict=True)
    worst = max(abs(a - b) for a, b in pairs)
    print(report)
    print(
        f"\nhead.draw 48x48: stock {stock_us:.0f} us, optimized {fast_us:.0f} us "
        f"({stock_us / fast_us:.1f}x), max abs difference {worst:.2e}"
    )
    print(f"Heatmap.peak now: {heatmap.Heatmap(fast).peak:.6f}")

    print("\n== rollback")
    outcome = tpa.rollback()
    print(
        f"restored {len(outcome['restored'])} objects, drifted {outcome['drifted']}, "
        f"failed {outcome['failed']}"
    )
    restored = (
        head.draw((48, 48), 4.0) == stock and heatmap.gaussian_2d.__module__ == "demo_lib.heatmap"
    )
    print("outputs back to stock:", restored)
    return 0 if restored and worst < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
