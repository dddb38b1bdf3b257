"""Bad and odd inputs of ms_deform_attn, built from a case number, and the rule each must obey.

Used by tests/ops/test_msda_fuzz.py, which runs ``python msda_fuzz_cases.py FIRST LAST`` in
subprocesses: each case prints one JSON line ``{"case": i, "kind": ..., "outcome": ...}``, where
the outcome is "error" (a TypeError, ValueError or MemoryError whose message names an argument
or output), "result" (the reference's result: the same NaN and +-Inf elements, finite ones close,
forward and backward) or "FAIL: why". A case that kills its process or hangs shows up as a
missing line.

The rule: where the reference (``ms_deform_attn_reference``, grid_sample) computes a result, the
op gives the same one, or refuses it with an error naming the tensor (sizes beyond the op's
documented limits, or memory); where the reference fails inside torch (empty levels, huge
expanded sizes), the op either names the tensor or gives what its contract says (an empty output
of the right shape; zeros from empty levels).
"""

from __future__ import annotations

import json
import random
import sys

import torch

NAMES = (
    "value",
    "spatial_shapes",
    "level_start_index",
    "sampling_locations",
    "attention_weights",
    "grad_output",
    "output",
    "grad_value",
    "grad_sampling_locations",
    "grad_attention_weights",
)
FLOATS = (torch.float64, torch.float32)
ODD_DTYPES = (
    torch.int64,
    torch.int32,
    torch.bool,
    torch.complex64,
    torch.uint8,
    torch.float16,
    torch.bfloat16,
)
ARGS = ("value", "spatial_shapes", "level_start_index", "sampling_locations", "attention_weights")
HUGE = 2**40


def base(
    rng: random.Random, dtype=torch.float64, n=None, lq=None, m=None, d=None, p=None, levels=None
):
    """Well-formed inputs of random small sizes (values in [-0.2, 1.2]: some points outside)."""
    n = rng.randint(1, 2) if n is None else n
    lq = rng.randint(1, 4) if lq is None else lq
    m = rng.randint(1, 2) if m is None else m
    d = rng.choice((1, 2, 3, 8)) if d is None else d
    p = rng.randint(1, 3) if p is None else p
    if levels is None:
        levels = [(rng.randint(1, 4), rng.randint(1, 4)) for _ in range(rng.randint(1, 3))]
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    shapes = torch.tensor(levels, dtype=torch.int64).reshape(-1, 2)
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
    s = int(shapes.prod(1).sum())
    value = torch.randn(n, s, m, d, generator=gen, dtype=dtype)
    loc = torch.rand(n, lq, m, len(levels), p, 2, generator=gen, dtype=dtype) * 1.4 - 0.2
    attn = torch.rand(n, lq, m, len(levels), p, generator=gen, dtype=dtype)
    return {
        "value": value,
        "spatial_shapes": shapes,
        "level_start_index": starts,
        "sampling_locations": loc,
        "attention_weights": attn,
    }


def _neg_view(t):
    # Equal to t, stored negated with the negative bit set (issue 24's construction for floats).
    if t.is_floating_point():
        return torch.complex(torch.zeros_like(t), -t).conj().imag
    return torch._neg_view(-t)


def _poke(rng, t, value):
    t = t.clone()
    if t.numel():
        t.view(-1)[rng.randrange(t.numel())] = value
    return t


def _non_finite(rng):
    return rng.choice((float("nan"), float("inf"), -float("inf")))


# --- the generators: (rng) -> (kind, inputs dict, grad_output transform or None) ---------------


def gen_dtype(rng):
    a = base(rng)
    name = rng.choice(ARGS)
    dt = rng.choice(ODD_DTYPES + FLOATS)
    a[name] = a[name].to(dt)
    return f"dtype:{name}:{dt}", a, None


def gen_device(rng):
    a = base(rng)
    name = rng.choice(ARGS)
    a[name] = a[name].to("meta")
    return f"device:{name}:meta", a, None


def gen_layout(rng):
    a = base(rng, dtype=torch.float32)
    name = rng.choice(ARGS)
    layout = rng.choice(("sparse", "mkldnn", "csr"))
    t = a[name]
    if layout == "sparse":
        a[name] = t.to_sparse()
    elif layout == "mkldnn" and t.is_floating_point():
        a[name] = t.to_mkldnn()
    elif t.dim() == 2:
        a[name] = t.to_sparse_csr()
    else:
        a[name] = t.to_sparse()
    return f"layout:{name}:{layout}", a, None


def gen_strides(rng):
    """Views that are valid inputs: permuted strides, steps, expanded (stride 0) dimensions,
    storage offsets; the op must give the reference's result."""
    a = base(rng, dtype=rng.choice(FLOATS))
    name = rng.choice(
        ("value", "sampling_locations", "attention_weights", "spatial_shapes", "level_start_index")
    )
    t = a[name]
    how = rng.choice(("transposed", "step", "expand", "offset"))
    if how == "transposed" and t.dim() >= 2:
        a[name] = t.transpose(0, -1).contiguous().transpose(0, -1)
    elif how == "step":
        a[name] = torch.stack([t, torch.full_like(t, 7)], dim=-1)[..., 0]
    elif how == "expand" and t.dim() >= 2 and name != "spatial_shapes":
        dim = rng.randrange(t.dim())
        a[name] = t.narrow(dim, 0, 1).expand(t.shape)
    else:
        big = torch.cat([torch.zeros(3, dtype=t.dtype), t.reshape(-1)])
        a[name] = big[3:].view(t.shape)
    return f"strides:{name}:{how}", a, None


def gen_neg(rng):
    a = base(rng, d=rng.choice((1, 4)))
    name = rng.choice(ARGS + ("grad_output",))
    if name == "grad_output":
        return "neg:grad_output", a, _neg_view
    a[name] = _neg_view(a[name])
    return f"neg:{name}", a, None


def gen_conj(rng):
    a = base(rng)
    name = rng.choice(("value", "sampling_locations", "attention_weights"))
    a[name] = torch.complex(a[name], a[name]).conj()
    return f"conj:{name}", a, None


def gen_non_finite(rng):
    a = base(rng, dtype=rng.choice(FLOATS))
    name = rng.choice(("sampling_locations", "attention_weights", "value", "grad_output"))
    if name == "grad_output":  # the same element for the op and the reference
        seed, bad = rng.randrange(2**31), _non_finite(rng)
        return "nonfinite:grad_output", a, lambda g: _poke(random.Random(seed), g, bad)
    for _ in range(rng.randint(1, 3)):
        # NaN only in value: +-Inf there may come out +-Inf or NaN by the order of the terms.
        a[name] = _poke(rng, a[name], float("nan") if name == "value" else _non_finite(rng))
    return f"nonfinite:{name}", a, None


def gen_empty(rng):
    which = rng.choice(("n", "lq", "m", "d", "p"))
    a = base(rng, **{which: 0})
    return f"empty:{which}", a, None


def gen_empty_levels(rng):
    levels = [(0, rng.randint(1, 3)), (rng.randint(1, 3), rng.randint(1, 3))]
    rng.shuffle(levels)
    return "empty:level", base(rng, levels=levels), None


def gen_huge(rng):
    # float16 too: the CPU computes it in float32, converting expanded inputs at their data's size
    a = base(rng, dtype=rng.choice((*FLOATS, torch.float16)), n=1, m=1, p=1)
    how = rng.choice(("lq_d0", "p", "lq", "n"))
    loc, attn = a["sampling_locations"], a["attention_weights"]
    if how == "lq_d0":
        a["value"] = a["value"][..., :0]
        a["sampling_locations"] = loc[:, :1].expand(1, HUGE, *loc.shape[2:])
        a["attention_weights"] = attn[:, :1].expand(1, HUGE, *attn.shape[2:])
    elif how == "p":
        a["sampling_locations"] = loc[..., :1, :].expand(*loc.shape[:4], HUGE, 2)
        a["attention_weights"] = attn[..., :1].expand(*attn.shape[:4], HUGE)
    elif how == "lq":
        a["sampling_locations"] = loc[:, :1].expand(1, HUGE, *loc.shape[2:])
        a["attention_weights"] = attn[:, :1].expand(1, HUGE, *attn.shape[2:])
    else:
        a["value"] = a["value"].expand(HUGE, *a["value"].shape[1:])
        a["sampling_locations"] = loc.expand(HUGE, *loc.shape[1:])
        a["attention_weights"] = attn.expand(HUGE, *attn.shape[1:])
    return f"huge:{how}", a, None


def gen_shapes(rng):
    a = base(rng)
    name = rng.choice(ARGS)
    t = a[name]
    how = rng.choice(("rank+", "rank-", "size", "values"))
    if how == "rank+":
        a[name] = t.unsqueeze(0)
    elif how == "rank-":
        a[name] = t.reshape(-1) if t.dim() > 1 else t.reshape(())[()] if t.numel() == 1 else t[0]
    elif how == "size":
        a[name] = torch.cat([t, t.narrow(-1, 0, 1)], dim=-1) if t.dim() else t
    elif name == "spatial_shapes":
        a[name] = _poke(rng, t, rng.choice((-1, 0, 2**40, 2**62)))
    elif name == "level_start_index":
        a[name] = _poke(rng, t, rng.choice((-5, 1, 2**40)))
    else:
        a[name] = t.narrow(1, 0, max(t.shape[1] - 1, 0))
    return f"shape:{name}:{how}", a, None


def gen_not_tensor(rng):
    a = base(rng)
    name = rng.choice(ARGS)
    a[name] = rng.choice((None, 3, a[name].tolist(), a[name].numpy()))
    return f"type:{name}:{type(a[name]).__name__}", a, None


def gen_grad_output(rng):
    """grad_output variants autograd may hand over: expanded (stride 0), strided, wrong dtype."""
    a = base(rng, dtype=rng.choice(FLOATS), n=rng.choice((0, 1, 2)), lq=rng.choice((0, 2)))
    how = rng.choice(("expand", "step", "dtype"))
    if how == "expand":
        return "grad_output:expand", a, lambda g: g.new_ones(()).expand(g.shape)
    if how == "step":
        return "grad_output:step", a, lambda g: torch.stack([g, g], -1)[..., 1]
    return "grad_output:dtype", a, lambda g: g.to(torch.float16)


GENERATORS = (
    gen_dtype,
    gen_device,
    gen_layout,
    gen_strides,
    gen_neg,
    gen_conj,
    gen_non_finite,
    gen_non_finite,
    gen_empty,
    gen_empty_levels,
    gen_huge,
    gen_shapes,
    gen_shapes,
    gen_not_tensor,
    gen_grad_output,
)


def case(i: int):
    rng = random.Random(i)
    return GENERATORS[i % len(GENERATORS)](rng)


# --- running one case and judging it ----------------------------------------------------------


def names_argument(e: BaseException) -> bool:
    return isinstance(e, (TypeError, ValueError, MemoryError)) and any(
        str(e).startswith(n) or f" {n}" in str(e) or f"{n}[" in str(e) for n in NAMES
    )


def _leaves(a):
    out = {}
    for k, t in a.items():
        if (
            isinstance(t, torch.Tensor)
            and t.layout is torch.strided
            and t.is_floating_point()
            and t.device.type == "cpu"
            and k in ("value", "sampling_locations", "attention_weights")
        ):
            t = t.detach().requires_grad_()
        out[k] = t
    return out


def run(fn, a, grad_transform):
    """fn's output and the gradients of its floating inputs (None where not differentiable)."""
    a = _leaves(a)
    out = fn(*(a[k] for k in ARGS))
    leaves = [
        a[k]
        for k in ("value", "sampling_locations", "attention_weights")
        if isinstance(a[k], torch.Tensor) and a[k].requires_grad
    ]
    if not leaves or out.numel() > 10**6 or any(t.numel() > 10**7 for t in leaves):
        # (the gradients of huge expanded inputs are not: they would be allocated in full)
        return out.detach(), None, None
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype)
    if grad_transform is not None:
        g = grad_transform(g)
    return out.detach(), torch.autograd.grad(out, leaves, g, allow_unused=True), g


def same(mine, ref, kinds=(torch.isnan, torch.isposinf, torch.isneginf)) -> str | None:
    if mine.shape != ref.shape or mine.dtype != ref.dtype:
        return f"shape/dtype {tuple(mine.shape)} {mine.dtype} vs {tuple(ref.shape)} {ref.dtype}"
    for kind in kinds:
        if not torch.equal(kind(mine), kind(ref)):
            return f"{kind.__name__} pattern differs"
    fin = torch.isfinite(ref)
    tol = 1e-9 if ref.dtype == torch.float64 else 1e-3
    if not torch.allclose(mine[fin], ref[fin], rtol=tol, atol=tol):
        return f"values differ by {(mine[fin] - ref[fin]).abs().max().item()}"
    return None


def without_empty_levels(a):
    """The inputs without their empty levels (they sample zeros): grid_sample refuses them."""
    keep = (a["spatial_shapes"].prod(1) > 0).nonzero().flatten()
    shapes = a["spatial_shapes"][keep]
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])[: len(keep)]
    return {
        "value": a["value"],
        "spatial_shapes": shapes,
        "level_start_index": starts,
        "sampling_locations": a["sampling_locations"][:, :, :, keep],
        "attention_weights": a["attention_weights"][:, :, :, keep],
    }


def judge(i: int) -> dict:
    import sys as _sys

    import turbo_physai.ops.ms_deform_attn  # noqa: F401

    op = _sys.modules["turbo_physai.ops.ms_deform_attn"]
    try:
        kind, a, grad_transform = case(i)
    except Exception as e:  # the case's own construction (torch refused the view)
        return {"case": i, "kind": "unbuildable", "outcome": f"skip: {type(e).__name__}"}
    try:
        mine = run(op.ms_deform_attn, a, grad_transform)
    except BaseException as e:
        if not names_argument(e):
            return {"case": i, "kind": kind, "outcome": f"FAIL: {type(e).__name__}: {e}"[:300]}
        if isinstance(e, MemoryError) or kind.startswith("huge"):
            return {"case": i, "kind": kind, "outcome": "error"}
        try:  # a refusal is right only where the reference cannot compute it either
            run(op.ms_deform_attn_reference, a, grad_transform)
        except Exception:
            return {"case": i, "kind": kind, "outcome": "error"}
        return {"case": i, "kind": kind, "outcome": f"FAIL: refused ({e})"[:300]}
    if kind.startswith("huge"):
        # Not the reference: grid_sample walks every expanded point even where there is nothing
        # to compute (torch 2.11 with no channels ran 2^40 points for hours; 2.14 refuses).
        ref = None
    else:
        try:
            ref = run(op.ms_deform_attn_reference, a, grad_transform)
        except (TypeError, ValueError) as e:
            return {"case": i, "kind": kind, "outcome": f"FAIL: reference refused ({e})"[:300]}
        except RuntimeError:
            ref = None
    if ref is None and kind == "empty:level":
        reduced = without_empty_levels(a)
        ref = run(op.ms_deform_attn_reference, reduced, grad_transform)
        if ref[1] is not None:  # the dropped levels' gradients are 0
            grads = list(ref[1])
            for j, name in ((1, "sampling_locations"), (2, "attention_weights")):
                full = torch.zeros_like(a[name])
                keep = (a["spatial_shapes"].prod(1) > 0).nonzero().flatten()
                full[:, :, :, keep] = grads[j]
                grads[j] = full
            ref = (ref[0], grads, ref[2])
    if ref is None:
        n, _, m, d = a["value"].shape
        expected = (n, a["sampling_locations"].shape[1], m * d)
        if mine[0].numel() == 0 and tuple(mine[0].shape) == expected:
            return {"case": i, "kind": kind, "outcome": "result"}
        return {"case": i, "kind": kind, "outcome": "FAIL: result where the reference fails"}
    why = same(mine[0], ref[0])
    if why is None and (mine[1] is None) != (ref[1] is None):
        why = "gradients on one side only"
    if why is None and mine[1] is not None:
        # A non-finite grad_output element: the op sums the location and weight gradients of
        # that query's points as dot products per corner, grid_sample channel by channel, so
        # they may differ in NaN against +-Inf (docs/reliability.md); they are compared on the
        # other queries only. The value gradient is IEEE-exact either way.
        rows = torch.isfinite(mine[2]).all(-1)  # (N, Lq)
        for name, x, y in zip(
            ("grad_value", "grad_loc", "grad_attn"), mine[1], ref[1], strict=True
        ):
            if name != "grad_value":
                x, y = x[rows], y[rows]
            why = same(x, y) and f"{name}: {same(x, y)}"
            if why:
                break
    return {"case": i, "kind": kind, "outcome": "result" if why is None else f"FAIL: {why}"}


if __name__ == "__main__":
    first, last = int(sys.argv[1]), int(sys.argv[2])
    for index in range(first, last):
        print(json.dumps(judge(index)), flush=True)
