"""Conformance gate for kernel implementations (SPEC section 5).

``check_conformance(slot, impl, shapes, dtypes)`` runs ``impl`` and the slot's reference on the
slot's test inputs. The forward must match exactly where the math allows (bit for bit, NaN
payloads included) or else within a stated per-dtype tolerance of a float64 reference. Gradients
must agree within 1e-6 with the reference's for exact contracts, and within the same per-dtype
tolerance of the float64 reference's gradients for the others. Slots declare their inputs and
rule in :data:`CONTRACTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from turbo_physai import kernels

GRAD_TOLERANCE = 1e-6
_BITS = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


@dataclass(frozen=True)
class Contract:
    """How to test a slot. ``cases(shape, dtype, generator)`` yields argument tuples; the
    arguments listed in ``grad_args`` get gradients compared. ``exact``: bitwise forward;
    otherwise ``tolerances[dtype] = (rtol, atol)`` against the reference run in float64."""

    cases: Callable[[tuple[int, ...], torch.dtype, torch.Generator], Iterable[tuple[Any, ...]]]
    exact: bool = True
    tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    grad_args: tuple[int, ...] = (0,)


def _fake_quant_fp8_cases(shape, dtype, gen):
    # Values spread across and beyond the fp8 range, plus the special values at fixed places.
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 300).to(dtype)
    flat = x.view(-1)
    specials = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, -464.0, 1e-7]
    flat[: min(len(specials), flat.numel())] = torch.tensor(specials[: flat.numel()], dtype=dtype)
    yield x, torch.tensor(1.5, dtype=torch.float32)
    yield x, torch.tensor(1e-13, dtype=torch.float32)  # below the 1e-12 floor
    if x.dim() >= 1 and x.shape[0] > 0:
        per_channel = torch.rand(x.shape[0], generator=gen) * 4 + 0.01
        per_channel[0] = 0.0
        yield x, per_channel


def _ms_deform_attn_cases(shape, dtype, gen):
    # shape = (N, Lq, M, D, levels, P): levels of decreasing size, locations past both borders.
    n, lq, m, d, levels, points = shape
    sizes = [(max(1, 7 - 2 * i), max(1, 5 - i)) for i in range(levels)]
    spatial = torch.tensor(sizes, dtype=torch.int64)
    starts = torch.cat([spatial.new_zeros(1), spatial.prod(1).cumsum(0)[:-1]])
    s = int(spatial.prod(1).sum())
    value = torch.randn(n, s, m, d, generator=gen, dtype=torch.float64).to(dtype)
    loc = torch.rand(n, lq, m, levels, points, 2, generator=gen, dtype=torch.float64) * 1.3 - 0.15
    weights = torch.rand(n, lq, m, levels, points, generator=gen, dtype=torch.float64)
    yield value, spatial, starts, loc.to(dtype), weights.to(dtype)


CONTRACTS: dict[str, Contract] = {
    "fake_quant_fp8": Contract(_fake_quant_fp8_cases),
    # Sums of bilinear taps: exact only up to rounding, so compared with a float64 reference.
    "ms_deform_attn": Contract(
        _ms_deform_attn_cases,
        exact=False,
        tolerances={torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-6)},
        grad_args=(0, 3, 4),
    ),
}


def define_contract(slot: str, contract: Contract) -> None:
    """Declare how ``slot`` is tested; one contract per slot."""
    if slot in CONTRACTS:
        raise ValueError(f"slot {slot!r} already has a conformance contract")
    CONTRACTS[slot] = contract


def _reference(slot: str) -> Callable[..., Any]:
    for entry in kernels.implementations(slot):
        if entry["name"] == kernels.REFERENCE:
            return entry["impl"]
    raise LookupError(f"slot {slot!r} has no reference implementation to conform to")


def _prepare(args: tuple[Any, ...], grad_args: Sequence[int]) -> tuple[Any, ...]:
    return tuple(
        a.detach().clone().requires_grad_(i in grad_args and a.is_floating_point())
        if isinstance(a, torch.Tensor)
        else a
        for i, a in enumerate(args)
    )


def _mismatch(what: str, got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor) -> str:
    index = tuple(int(i) for i in bad.nonzero()[0]) if bad.dim() else ()
    return (
        f"{what}: {int(bad.sum())} of {bad.numel()} elements differ; first at {index}: "
        f"got {got[index].item()!r}, expected {want[index].item()!r}"
    )


def _compare_forward(contract: Contract, ref, args, got: torch.Tensor) -> str | None:
    if contract.exact:
        want = ref(*args).detach()
        if got.dtype != want.dtype or got.shape != want.shape:
            return (
                f"forward: got {got.dtype} {tuple(got.shape)}, "
                f"want {want.dtype} {tuple(want.shape)}"
            )
        bits = _BITS[got.dtype]
        bad = got.contiguous().view(bits) != want.contiguous().view(bits)
        return _mismatch("forward (bitwise)", got, want, bad) if bad.any() else None
    rtol, atol = contract.tolerances[got.dtype]
    want = ref(*_widen(args)).detach()
    close = torch.isclose(got.double(), want, rtol=rtol, atol=atol, equal_nan=True)
    return (
        None if close.all() else _mismatch(f"forward (rtol={rtol}, atol={atol})", got, want, ~close)
    )


def _widen(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
    )


def _compare_grad(contract: Contract, mine: Any, ref: Any) -> str | None:
    """Exact contracts: within GRAD_TOLERANCE of the reference's gradient in the same dtype.
    Others: within the dtype's (rtol, atol) of the float64 reference's gradient, since both
    sides' rounding in lower precision would otherwise be measured against each other."""
    if (mine is None) != (ref is None):
        return "missing on one side"
    if mine is None or not mine.numel():
        return None
    if contract.exact:
        diff = (mine.double() - ref.double()).abs().max().item()
        return None if diff <= GRAD_TOLERANCE else f"differs by {diff} > {GRAD_TOLERANCE}"
    rtol, atol = contract.tolerances[mine.dtype]
    close = torch.isclose(mine.double(), ref, rtol=rtol, atol=atol)
    return None if close.all() else _mismatch(f"(rtol={rtol}, atol={atol})", mine, ref, ~close)


def check_conformance(
    slot: str,
    impl: Callable[..., Any],
    shapes: Iterable[tuple[int, ...]],
    dtypes: Iterable[torch.dtype],
    *,
    seed: int = 0,
    device: str = "cpu",
) -> int:
    """Raise AssertionError naming slot, shape, dtype and the first mismatch; return the number
    of cases checked. Inputs are generated on the CPU, then moved to ``device``."""
    contract = CONTRACTS[slot]
    ref = _reference(slot)
    checked = 0
    for dtype in dtypes:
        for shape in shapes:
            gen = torch.Generator().manual_seed(seed)
            for case, args in enumerate(contract.cases(tuple(shape), dtype, gen)):
                args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
                where = (
                    f"{slot}: implementation {impl!r}, shape {tuple(shape)}, {dtype}, case {case}"
                )
                mine, theirs = (
                    _prepare(args, contract.grad_args),
                    _prepare(args, contract.grad_args),
                )
                got = impl(*mine)
                problem = _compare_forward(contract, ref, theirs, got.detach())
                if problem:
                    raise AssertionError(f"{where}: {problem}")
                grad_out = torch.randn(got.shape, generator=gen, dtype=torch.float64)
                grad_out = grad_out.to(device=device, dtype=got.dtype)
                got.backward(grad_out)
                if not contract.exact:  # gradients against the float64 reference too
                    theirs = _prepare(_widen(theirs), contract.grad_args)
                ref(*theirs).backward(grad_out.to(theirs[contract.grad_args[0]].dtype))
                for i in contract.grad_args:
                    problem = _compare_grad(contract, mine[i].grad, theirs[i].grad)
                    if problem:
                        raise AssertionError(f"{where}: gradient of argument {i}: {problem}")
                checked += 1
    return checked
