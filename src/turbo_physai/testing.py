"""Conformance gate for kernel implementations (SPEC section 5).

``check_conformance(slot, impl, shapes, dtypes)`` runs ``impl`` and the slot's reference on the
slot's test inputs. The forward must match exactly where the math allows (bit for bit, NaN
payloads included) or else within a stated per-dtype tolerance of a float64 reference, and the
gradients must agree within 1e-6. Slots declare their inputs and rule in :data:`CONTRACTS`.
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


CONTRACTS: dict[str, Contract] = {"fake_quant_fp8": Contract(_fake_quant_fp8_cases)}


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
    wide = [
        a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
    ]
    want = ref(*wide).detach()
    close = torch.isclose(got.double(), want, rtol=rtol, atol=atol, equal_nan=True)
    return (
        None if close.all() else _mismatch(f"forward (rtol={rtol}, atol={atol})", got, want, ~close)
    )


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
                ref(*theirs).backward(grad_out)
                for i in contract.grad_args:
                    g_mine, g_ref = mine[i].grad, theirs[i].grad
                    if (g_mine is None) != (g_ref is None):
                        raise AssertionError(
                            f"{where}: gradient of argument {i} missing on one side"
                        )
                    if g_mine is not None and g_mine.numel():
                        diff = (g_mine.double() - g_ref.double()).abs().max().item()
                        if not diff <= GRAD_TOLERANCE:
                            raise AssertionError(
                                f"{where}: gradient of argument {i} differs by {diff} "
                                f"> {GRAD_TOLERANCE}"
                            )
                checked += 1
    return checked
