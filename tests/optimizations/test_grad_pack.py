"""grad_pack.GradPack: the gradients a backward graph hands out, one copy per dtype (its use in
a capture is covered on the GPU by test_cuda_graph's training tests)."""

import pytest

from turbo_physai.optimizations.common.grad_pack import GradPack

torch = pytest.importorskip("torch")


def _grads():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(4, 3, 2, 2, generator=g).to(memory_format=torch.channels_last)
    return [torch.randn(5, 3, generator=g), None, torch.randn(7, generator=g).double(),
            weight, torch.randn(0, 3, generator=g), torch.randn(2, 2, 2, generator=g),
            torch.randn(3, generator=g).double()]


def test_take_hands_out_equal_gradients_with_their_shapes_and_strides():
    grads = _grads()
    taken = GradPack(grads).take()
    assert [t is None for t in taken] == [g is None for g in grads]
    for t, g in zip(taken, grads, strict=True):
        if g is not None:
            assert t.dtype == g.dtype and t.shape == g.shape and t.stride() == g.stride()
            assert torch.equal(t, g)


def test_one_flat_buffer_per_dtype_and_a_copy_for_what_is_not_contiguous():
    grads = _grads()
    pack = GradPack(grads)
    assert {key[0]: flat.numel() for key, flat in pack.flat.items()} == {
        torch.float32: 15 + 0 + 8, torch.float64: 10}
    taken = pack.take()
    f32 = [taken[i] for i in (0, 4, 5)]
    assert len({t.untyped_storage().data_ptr() for t in f32}) == 1  # views of one clone
    assert taken[3].untyped_storage().data_ptr() != grads[3].untyped_storage().data_ptr()


def test_what_take_hands_out_survives_the_next_replays_writes():
    grads = _grads()
    pack = GradPack(grads)
    first = pack.take()
    for flat in pack.flat.values():  # a replay refills the flat buffers
        flat.fill_(7)
    grads[3].fill_(7)
    for t, g in zip(first, _grads(), strict=True):
        assert (t is None and g is None) or torch.equal(t, g)
    second = pack.take()
    assert torch.equal(second[0], torch.full((5, 3), 7.0))
    second[0].add_(1)  # owned by the caller: the pack's buffer is untouched
    assert torch.equal(pack.flat[(torch.float32, torch.device("cpu"))][:15], torch.full((15,), 7.0))


def test_no_gradients_at_all():
    assert GradPack([None, None]).take() == [None, None]
    assert GradPack([]).take() == []
