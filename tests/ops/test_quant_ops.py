"""The quantization fronts as LibreYOLO slots and as torch ops: signatures, the portable
formulation, opcheck, graphs, export, and the eager fast path against the op path."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

from tpa_quant_cases import assert_bitwise, mixed  # noqa: E402

from turbo_physai.ops import fake_quant_int8, quant, quant_reference  # noqa: E402

SLOTS = ("fake_quant_int8_per_channel", "fake_quant_int8_affine", "fake_quant_fp8",
         "fake_quant_int_grouped", "fake_quant_nvfp4_weight", "fake_quant_nvfp4_dynamic",
         "fake_quant_mxfp4_weight", "fake_quant_mxfp4_dynamic", "unpack_int_grouped",
         "unpack_nvfp4")


def _inputs(gen):
    """One call of each slot, as (slot, args); every slot's native path."""
    w = mixed((8, 40), gen, 1.0, special_every=30)
    payload = torch.randint(0, 256, (4, 64), generator=gen, dtype=torch.uint8)
    return [
        ("fake_quant_int8_per_channel", (w,)),
        ("fake_quant_int8_per_channel", (w, 1, torch.rand(40, generator=gen))),
        ("fake_quant_int8_affine", (w, torch.tensor([-0.5]), torch.tensor([1.5]))),
        ("fake_quant_fp8", (w * 100, torch.rand(8, 1, generator=gen))),
        ("fake_quant_int_grouped", (w, 4, 16)),
        ("fake_quant_int_grouped", (w, 2, 16, torch.rand(8, 3, generator=gen))),
        ("fake_quant_nvfp4_weight", (w, torch.tensor(2.0))),
        ("fake_quant_nvfp4_dynamic", (w,)),
        ("fake_quant_mxfp4_weight", (w,)),
        ("fake_quant_mxfp4_dynamic", (w.reshape(2, 4, 40),)),
        ("unpack_int_grouped", (payload, torch.rand(4, 4, generator=gen), 4, 32, 100)),
        ("unpack_nvfp4", (payload, torch.rand(4, 8, generator=gen) * 448, torch.tensor(3.0), 120)),
    ]


def test_signatures_are_libreyolos():
    kernels = pytest.importorskip("libreyolo.kernels")
    assert set(SLOTS) == set(kernels.REFERENCE_OPS) | set(kernels.UNPACK_OPS)
    for slot in SLOTS:
        reference = kernels._REGISTRY[slot][-1]["impl"]  # registered first: the reference
        ours = inspect.signature(getattr(quant, slot)).parameters
        theirs = inspect.signature(reference).parameters
        assert [(p.name, p.kind, p.default) for p in ours.values()] == \
            [(p.name, p.kind, p.default) for p in theirs.values()], slot


def test_portable_formulation_is_libreyolos():
    fake_quant = pytest.importorskip("libreyolo.quant.fake_quant")
    packing = pytest.importorskip("libreyolo.quant.packing")
    theirs = {"unpack_int_grouped": packing.unpack_int_grouped_weight,
              "unpack_nvfp4": packing.unpack_nvfp4_weight}
    gen = torch.Generator().manual_seed(0)
    for slot, args in _inputs(gen):
        reference = theirs.get(slot) or getattr(fake_quant, slot)
        assert_bitwise(getattr(quant_reference, slot)(*args), reference(*args))


def test_kernels_match_the_portable_formulation():
    gen = torch.Generator().manual_seed(1)
    for slot, args in _inputs(gen):
        assert_bitwise(getattr(quant, slot)(*args), getattr(quant_reference, slot)(*args))


class _Spy(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the ops that reach the dispatcher; under it the fronts take the op path."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_fast_path_and_op_path_give_the_same_bits():
    gen = torch.Generator().manual_seed(2)
    for slot, args in _inputs(gen):
        fast = getattr(quant, slot)(*args)
        with _Spy() as spy:
            via_op = getattr(quant, slot)(*args)
        assert any(op.startswith("turbo_physai.") for op in spy.ops), (slot, spy.ops)
        assert_bitwise(via_op, fast)


def test_gradients_through_the_op_path():
    gen = torch.Generator().manual_seed(3)
    for slot, args in _inputs(gen):
        if slot.startswith("unpack"):
            continue
        grads = []
        for spy in (False, True):
            x = args[0].clone().requires_grad_()
            if spy:
                with _Spy():
                    out = getattr(quant, slot)(x, *args[1:])
            else:
                out = getattr(quant, slot)(x, *args[1:])
            out.backward(torch.ones_like(out) * 3.0)
            grads.append(x.grad)
        assert_bitwise(grads[1], grads[0])


OPS = {
    "fp8": (torch.ops.turbo_physai.fake_quant_fp8.default,
            lambda g: (torch.randn(4, 6, generator=g) * 300, torch.rand(4, 1, generator=g), True)),
    "int8_per_channel": (torch.ops.turbo_physai.fake_quant_int8_per_channel.default,
                         lambda g: (torch.randn(4, 6, generator=g), 0, torch.rand(4, generator=g))),
    "int8_dynamic": (torch.ops.turbo_physai.fake_quant_int8_per_channel_dynamic.default,
                     lambda g: (torch.randn(4, 6, generator=g), 1)),
    "int8_affine": (torch.ops.turbo_physai.fake_quant_int8_affine.default,
                    lambda g: (torch.randn(4, 6, generator=g), torch.tensor([-1.0]),
                               torch.tensor([2.0]))),
    "int_grouped": (torch.ops.turbo_physai.fake_quant_int_grouped.default,
                    lambda g: (torch.randn(4, 40, generator=g), 4, 16, None)),
    "fp4_mx": (torch.ops.turbo_physai.fake_quant_fp4.default,
               lambda g: (torch.randn(3, 40, generator=g), "mx", None)),
    "fp4_nv": (torch.ops.turbo_physai.fake_quant_fp4.default,
               lambda g: (torch.randn(3, 40, generator=g), "nv", torch.tensor([2.0]))),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_opcheck(name):
    op, make = OPS[name]
    args = make(torch.Generator().manual_seed(4))
    torch.library.opcheck(op, args)
    torch.library.opcheck(op, (args[0].clone().requires_grad_(), *args[1:]))


def test_opcheck_unpack_ops():
    gen = torch.Generator().manual_seed(5)
    payload = torch.randint(0, 256, (4, 64), generator=gen, dtype=torch.uint8)
    torch.library.opcheck(torch.ops.turbo_physai.unpack_int_grouped.default,
                          (payload, torch.rand(4, 4, generator=gen), 4, 32, 100))
    torch.library.opcheck(torch.ops.turbo_physai.unpack_nvfp4.default,
                          (payload, torch.rand(4, 8, generator=gen), torch.tensor([3.0]), 120))


class _QuantBlock(torch.nn.Module):
    """A LibreYOLO-style quantized linear: every simulate slot on the path."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(16, 40))

    def forward(self, x):
        w = quant.fake_quant_int8_per_channel(self.weight)
        w = w + quant.fake_quant_int_grouped(self.weight, 4, 16)
        w = w + quant.fake_quant_mxfp4_weight(self.weight)
        w = w + quant.fake_quant_nvfp4_weight(self.weight, torch.tensor(3.0))
        x = quant.fake_quant_int8_affine(x, torch.tensor([-2.0]), torch.tensor([2.0]))
        x = quant.fake_quant_fp8(x, torch.tensor([0.01]))
        x = quant.fake_quant_nvfp4_dynamic(x) + quant.fake_quant_mxfp4_dynamic(x)
        return torch.nn.functional.linear(x, w)


def test_compile_and_export_keep_the_ops_and_the_bits():
    block, x = _QuantBlock(), torch.randn(5, 40)
    want = block(x)
    compiled = torch.compile(block, backend="eager", fullgraph=True)
    assert_bitwise(compiled(x), want)
    exported = torch.export.export(block, (x,))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert {"turbo_physai.fake_quant_int8_per_channel_dynamic.default",
            "turbo_physai.fake_quant_int_grouped.default", "turbo_physai.fake_quant_fp4.default",
            "turbo_physai.fake_quant_int8_affine.default",
            "turbo_physai.fake_quant_fp8.default"} <= targets, targets
    assert_bitwise(exported.module()(x), want)


def test_jit_trace_records_torch_fake_quantize_for_onnx():
    # ONNX export turns torch.fake_quantize_* into QuantizeLinear/DequantizeLinear, LibreYOLO's
    # reason for using them: under tracing the fronts run the portable formulation.
    class Int8(torch.nn.Module):
        def forward(self, x):
            return quant.fake_quant_int8_per_channel(x) + quant.fake_quant_int8_affine(
                x, torch.tensor([-1.0]), torch.tensor([1.0]), True)

    with pytest.warns(Warning):
        traced = torch.jit.trace(Int8(), (torch.randn(4, 6),))
    kinds = {node.kind() for node in traced.graph.nodes()}
    assert {"aten::fake_quantize_per_channel_affine", "aten::fake_quantize_per_tensor_affine"} \
        <= kinds, kinds
    assert not any("turbo_physai" in k for k in kinds)


def test_eager_fast_path_skips_the_dispatcher_for_the_kernel():
    # The fast path calls the kernel functions; the op is not dispatched (a TorchDispatchMode
    # itself forces the op path, so spy on the kernel functions instead).
    calls = []
    original = fake_quant_int8.per_channel_dynamic

    def spy(*args):
        calls.append("kernel")
        return original(*args)

    fake_quant_int8.per_channel_dynamic = spy
    try:
        quant.fake_quant_int8_per_channel(torch.randn(4, 4))
    finally:
        fake_quant_int8.per_channel_dynamic = original
    assert calls == ["kernel"]
