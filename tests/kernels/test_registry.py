"""The registry's call path: order, fallbacks, native requirements, predicates, overrides."""

from __future__ import annotations

import warnings

import pytest

from turbo_physai import _core, kernels

np = pytest.importorskip("numpy")


def tag(label):
    """An implementation that reports which one ran."""

    def impl(*args, **kwargs):
        return label

    impl.__name__ = f"impl_{label}"
    return impl


def test_newest_registration_wins_and_reference_is_last(slot_name):
    kernels.register(slot_name, tag("ref"), name="reference")
    kernels.register(slot_name, tag("a"), name="a")
    kernels.register(slot_name, tag("b"), name="b")
    assert kernels.call(slot_name) == "b"
    assert kernels.active()[slot_name] == "b"
    kernels.unregister(slot_name, "b")
    assert kernels.call(slot_name) == "a"
    assert [e["name"] for e in kernels.implementations(slot_name)] == ["reference", "a"]


def test_duplicate_names_are_errors_and_missing_ones_a_no_op(slot_name):
    kernels.register(slot_name, tag("a"), name="a")
    with pytest.raises(
        ValueError, match=f"slot '{slot_name}' already has an implementation named 'a'"
    ):
        kernels.register(slot_name, tag("a2"), name="a")
    # As in LibreYOLO: a cleanup may unregister what is not (or no longer) there.
    assert kernels.unregister(slot_name, "zz") is False
    assert kernels.unregister("no_such_slot_for_unregister", "a") is False
    assert "no_such_slot_for_unregister" not in kernels.active()
    assert kernels.unregister(slot_name, "a") is True
    assert kernels.unregister(slot_name, "a") is False
    with pytest.raises(TypeError, match="must be callable"):
        kernels.register(slot_name, 42, name="n")


def test_unknown_slot_resolves_to_none_and_calls_fail_clearly():
    assert kernels.resolve("no_such_slot_anywhere") is None
    assert "no_such_slot_anywhere" not in kernels.active()
    with pytest.raises(LookupError, match="slot 'never_registered' has no eligible implementation"):
        kernels.call("never_registered", 1)


def test_native_requirements_decline_and_fall_through(slot_name):
    kernels.register(slot_name, tag("ref"), name="reference")
    kernels.register(
        slot_name, tag("f32"), name="f32", requires={"dtype": "float32", "rank": (1, 2)}
    )
    kernels.register(
        slot_name, tag("contig"), name="contig", requires={"contiguous": True, "args": [0]}
    )
    a = np.ones((3, 4), dtype=np.float32)
    assert kernels.call(slot_name, a) == "contig"
    assert kernels.call(slot_name, a.T) == "f32"  # not C-contiguous
    assert kernels.call(slot_name, a.T.astype(np.float64)) == "ref"
    assert kernels.call(slot_name, np.ones((2, 2, 2), np.float32)[:, :, ::2]) == "ref"  # rank 3
    # args=[0] checks only the first positional argument; a missing one declines.
    assert kernels.call(slot_name, 1.0) == "f32"  # no tensors: f32's checks pass vacuously
    assert kernels.call(slot_name) == "f32"
    assert kernels.resolve(slot_name, a.T).__name__ == "impl_f32"


def test_requirements_read_torch_style_attributes(slot_name):
    class FakeCudaTensor:
        # Duck-typed like torch.Tensor: the registry reads these attributes, never __dlpack__.
        is_cpu, is_cuda, ndim, dtype = False, True, 2, "torch.float16"

        def is_contiguous(self):
            return True

    kernels.register(slot_name, tag("ref"), name="reference")
    kernels.register(
        slot_name, tag("cuda"), name="cuda", requires={"device": "cuda", "dtype": "float16"}
    )
    kernels.register(
        slot_name, tag("cap"), name="cap", requires={"device": "cuda", "graph_capture": False}
    )
    assert kernels.call(slot_name, FakeCudaTensor()) == "cap"
    _core.kernel_set_probes(lambda: False, lambda: True)  # pretend a CUDA graph is being captured
    try:
        assert kernels.call(slot_name, FakeCudaTensor()) == "cuda"
    finally:
        from turbo_physai.kernels import _torch

        _torch.install()


def test_requires_is_validated_with_named_errors(slot_name):
    with pytest.raises(ValueError, match=r"implementation 'x' for slot '.*': unknown key 'devcie'"):
        kernels.register(slot_name, tag("x"), name="x", requires={"devcie": "cpu"})
    with pytest.raises(ValueError, match=r"requires\['dtype'\].*unknown dtype 'float33'"):
        kernels.register(slot_name, tag("x"), name="x", requires={"dtype": ["float32", "float33"]})
    with pytest.raises(TypeError, match=r"requires\['contiguous'\] .* must be True or False"):
        kernels.register(slot_name, tag("x"), name="x", requires={"contiguous": 1})
    with pytest.raises(ValueError, match=r"requires\['rank'\] .* empty range"):
        kernels.register(slot_name, tag("x"), name="x", requires={"rank": (3, 1)})
    kernels.register(slot_name, tag("x"), name="x", requires={"device": ["cpu", "cuda"], "rank": 2})
    (entry,) = kernels.implementations(slot_name)
    assert entry["requires"] == {"device": ["cpu", "cuda"], "rank": (2, 2)}


def test_predicate_sees_the_arguments(slot_name):
    kernels.register(slot_name, tag("ref"), name="reference")
    kernels.register(slot_name, tag("big"), name="big", predicate=lambda n, **kw: n > 10)
    assert kernels.call(slot_name, 11) == "big"
    assert kernels.call(slot_name, 3) == "ref"


def test_raising_predicate_warns_once_and_counts_as_no(slot_name):
    def broken(*args):
        raise ZeroDivisionError("boom")

    kernels.register(slot_name, tag("ref"), name="reference")
    kernels.register(slot_name, tag("p"), name="p", predicate=broken)
    with pytest.warns(
        RuntimeWarning, match="predicate of implementation 'p' .* ZeroDivisionError: boom"
    ):
        assert kernels.call(slot_name, 1) == "ref"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels.call(slot_name, 2) == "ref"  # no second warning


def test_failing_implementation_is_disabled_once_and_the_call_still_succeeds(slot_name):
    calls = []

    def flaky(x):
        calls.append(x)
        raise RuntimeError("kernel image not found")

    kernels.register(slot_name, lambda x: x * 2, name="reference")
    kernels.register(slot_name, flaky, name="flaky")
    with pytest.warns(
        RuntimeWarning, match="'flaky' of slot .*RuntimeError: kernel image not found.*disabled"
    ):
        assert kernels.call(slot_name, 21) == 42
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels.call(slot_name, 5) == 10
    assert calls == [21]
    assert kernels.active()[slot_name] == "reference"
    assert [e["disabled"] for e in kernels.implementations(slot_name)] == [False, True]


def test_bad_inputs_do_not_disable_anything(slot_name):
    def strict(x):
        raise ValueError(f"{slot_name}: x must be positive")

    def accel(x):
        raise TypeError("accelerated path rejects it too")

    kernels.register(slot_name, strict, name="reference")
    kernels.register(slot_name, accel, name="accel")
    with pytest.raises(ValueError, match="x must be positive"):
        kernels.call(slot_name, -1)
    assert not any(e["disabled"] for e in kernels.implementations(slot_name))


def test_override_variable_is_read_on_every_call(slot_name, monkeypatch):
    kernels.register(slot_name, tag("ref"), name="reference")
    kernels.register(slot_name, tag("a"), name="a")
    kernels.register(slot_name, tag("b"), name="b")
    monkeypatch.setenv("TURBO_PHYSAI_KERNELS", "a")
    assert kernels.call(slot_name) == "a"
    monkeypatch.setenv("TURBO_PHYSAI_KERNELS", "reference")
    assert kernels.call(slot_name) == "ref"
    monkeypatch.setenv("TURBO_PHYSAI_KERNELS", "nobody")
    assert kernels.call(slot_name) == "ref"
    monkeypatch.delenv("TURBO_PHYSAI_KERNELS")
    assert kernels.call(slot_name) == "b"


def test_keyword_tensors_are_checked_too(slot_name):
    kernels.register(slot_name, tag("ref"), name="reference")
    kernels.register(slot_name, tag("f32"), name="f32", requires={"dtype": "float32"})
    assert kernels.call(slot_name, x=np.ones(2, np.float32)) == "f32"
    assert kernels.call(slot_name, x=np.ones(2, np.float64)) == "ref"


def test_slot_without_reference_resolves_to_none_under_tracing(slot_name):
    torch = pytest.importorskip("torch")
    kernels.register(slot_name, lambda x: x + 1, name="accel")
    seen = []

    def fn(x):
        seen.append(kernels.resolve(slot_name))
        return x * 2

    assert kernels.resolve(slot_name) is not None
    torch.jit.trace(fn, (torch.ones(2),), check_trace=False)
    assert seen == [None]
