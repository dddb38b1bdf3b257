"""Issue 27: is a small CUDA random draw of n elements the first n of a draw of N > n at the same
generator state, with the same offset consumed?

Ultralytics' denoising (``get_cdn_group``) relabels a host-chosen, data-dependent number n of
queries with ``torch.randint_like(idx, 0, num_classes)`` on the device, which a CUDA graph
cannot replay (its size changes every step). Torch's elementwise random kernels give element i
the i-th Philox subsequence while the grid covers every element in one pass (one value per
thread), and then advance the offset by a fixed 4: if so, drawing N = all queries and keeping
those at the relabelled positions is the same numbers, and graph-safe. This script checks that on
the machine it runs on, for the draws the denoising makes, at sizes up to ``--max``, and reports
the first size where it stops holding.

    python benchmarks/experiments/cuda_draw_prefix_probe.py [--max 65536]
"""

from __future__ import annotations

import argparse

import torch

DRAWS = {
    "randint int64 [0, 80)": lambda n: torch.randint(0, 80, (n,), device="cuda"),
    "randint float32 [0, 2)": lambda n: torch.randint(0, 2, (n, 4), device="cuda",
                                                       dtype=torch.float32).flatten(),
    "rand float32": lambda n: torch.rand(n, 4, device="cuda").flatten(),
}


def offset() -> int:
    return torch.cuda.default_generators[0].get_offset()


def holds(draw, n: int, big: int) -> tuple[bool, bool]:
    """(values equal, offsets consumed equal) for n against big elements."""
    state = torch.cuda.get_rng_state()
    start = offset()
    small = draw(n)
    small_used = offset() - start
    torch.cuda.set_rng_state(state)
    start = offset()
    large = draw(big)
    large_used = offset() - start
    torch.cuda.set_rng_state(state)
    return bool(torch.equal(small, large[:small.numel()])), small_used == large_used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", type=int, default=65536)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(torch.__version__, torch.cuda.get_device_name(),
          torch.cuda.get_device_properties(0).multi_processor_count, "SMs")
    sizes = sorted({1, 2, 3, 7, 100, 255, 256, 257, 1000, 1600, 4096,
                    *range(8192, args.max + 1, 8192)})
    for name, draw in DRAWS.items():
        first_failure = None
        for n in sizes:
            for big in (n + 1, 2 * n + 5, min(4 * n, args.max)):
                if big <= n:
                    continue
                values, offsets = holds(draw, n, big)
                if not (values and offsets) and first_failure is None:
                    first_failure = (n, big, values, offsets)
        if first_failure is None:
            print(f"{name:24s} holds for every size tried")
        else:
            n, big, values, offsets = first_failure
            print(f"{name:24s} first failure n={n} N={big} (values equal {values}, "
                  f"offsets equal {offsets})")


if __name__ == "__main__":
    main()
