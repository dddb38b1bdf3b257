"""runtime_condition: the C++ Dispatcher routes per call, as function and as every method kind."""

import inspect
import threading

import pytest
import tpa_fixture_opt as opt
from tpa_fixture_lib import shapes

import turbo_physai as tpa
from turbo_physai import _core, group, replace

LIB, OPT = "tpa_fixture_lib", "tpa_fixture_opt"


def orig(a, b=2, *, c=3):
    """Original doc."""
    return ("orig", a, b, c)


def repl(a, b=2, *, c=3):
    return ("repl", a, b, c)


def cond(a, b=2, *, c=3):
    return a > 0


def test_routes_by_condition_and_counts():
    d = _core.Dispatcher(orig, repl, cond, "m.cond")
    assert d(1, c=5) == ("repl", 1, 2, 5)
    assert d(-1, 4) == ("orig", -1, 4, 3)
    assert d(2) == ("repl", 2, 2, 3)
    assert d.counts == {"replacement": 2, "original": 1}
    d.reset_counts()
    assert d.counts == {"replacement": 0, "original": 0}


def test_looks_like_the_original():
    d = _core.Dispatcher(orig, repl, cond)
    assert d.__wrapped__ is orig and d.original is orig and d.replacement is repl
    assert (d.__name__, d.__qualname__, d.__doc__, d.__module__) == (
        "orig",
        "orig",
        "Original doc.",
        __name__,
    )
    assert inspect.signature(d) == inspect.signature(orig)


@pytest.mark.parametrize("verdict", [1, 0, None, "yes", [True]])
def test_non_bool_result_is_a_type_error_naming_the_condition(verdict):
    d = _core.Dispatcher(orig, repl, lambda *a, **k: verdict, "pkg.mod.cond")
    with pytest.raises(
        TypeError, match=r"runtime_condition 'pkg.mod.cond' returned .*expected bool"
    ):
        d(1)
    assert d.counts == {"replacement": 0, "original": 0}


def test_exceptions_propagate_from_condition_and_branches():
    def boom(*a, **k):
        raise KeyError("from condition")

    with pytest.raises(KeyError, match="from condition"):
        _core.Dispatcher(orig, repl, boom)(1)

    def failing(*a, **k):
        raise ValueError("from replacement")

    with pytest.raises(ValueError, match="from replacement"):
        _core.Dispatcher(orig, failing, cond)(1)


def test_rejects_non_callables():
    with pytest.raises(TypeError, match="Dispatcher condition must be callable"):
        _core.Dispatcher(orig, repl, 3)


def test_method_kinds_through_the_engine():
    g = group(
        "kinds",
        replace(
            f"{LIB}.shapes.Base.forward", f"{OPT}.forward", runtime_condition=f"{OPT}.positive"
        ),
        replace(
            f"{LIB}.shapes.SparseTensor.make",
            f"{OPT}.make",
            runtime_condition=f"{OPT}.positive_static",
        ),
        replace(
            f"{LIB}.shapes.SparseTensor.build",
            f"{OPT}.build",
            runtime_condition=f"{OPT}.positive_cls",
        ),
        replace(
            f"{LIB}.shapes.gaussian_2d",
            f"{OPT}.gaussian_2d",
            runtime_condition=f"{OPT}.positive_fn",
        ),
    )
    report = tpa.apply(groups=[g])
    raw = vars(shapes.SparseTensor)
    assert isinstance(raw["make"], staticmethod) and isinstance(raw["build"], classmethod)
    b = shapes.Base()
    assert b.forward(2) == ("fast", 2) and b.forward(-2) == ("stock", -2)
    assert shapes.Base.forward(b, 3) == ("fast", 3)  # through the class: self passed explicitly
    t = shapes.SparseTensor(1, 2)
    assert (
        t.make(1, 2) == ("fast-make", 1, 2) and shapes.SparseTensor.make(-1, 2)[0] == "stock-make"
    )
    assert shapes.SparseTensor.build(1)[0] == "fast-build" and t.build(-1)[0] == "stock-build"
    assert shapes.gaussian_2d((1,), sigma=2)[0] == "fast"
    assert shapes.gaussian_2d((1,), sigma=-1)[0] == "stock"
    counts = report.to_dict()["groups"][0]["dispatchers"]
    assert counts[f"{LIB}.shapes.Base.forward"] == {"replacement": 2, "original": 1}
    assert counts[f"{LIB}.shapes.SparseTensor.make"] == {"replacement": 1, "original": 1}
    assert counts[f"{LIB}.shapes.SparseTensor.build"] == {"replacement": 1, "original": 1}
    assert counts[f"{LIB}.shapes.gaussian_2d"] == {"replacement": 1, "original": 1}
    assert "replacement=2 original=1" in str(report)
    assert str(inspect.signature(b.forward)) == "(x, scale=1)"
    tpa.rollback()
    assert b.forward(2) == ("stock", 2)


def test_non_bool_condition_through_engine_raises_at_call():
    g = group(
        "nb",
        replace(
            f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d", runtime_condition=f"{OPT}.not_a_bool"
        ),
    )
    tpa.apply(groups=[g])
    with pytest.raises(TypeError, match="tpa_fixture_opt.not_a_bool"):
        shapes.gaussian_2d((1,))
    tpa.rollback()


def test_condition_not_allowed_on_class_or_property():
    for target, repl_path in (
        (f"{LIB}.shapes.Layer", f"{OPT}.Layer"),
        (f"{LIB}.shapes.SparseTensor.sparity", f"{OPT}.sparity"),
    ):
        g = group("bad", replace(target, repl_path, runtime_condition=f"{OPT}.positive_fn"))
        report = tpa.check(groups=[g])
        assert report.group("bad").reasons == ["runtime_condition.unsupported_kind"]


def test_condition_with_incompatible_signature_blocks():
    g = group(
        "sig",
        replace(
            f"{LIB}.shapes.gaussian_2d", f"{OPT}.gaussian_2d", runtime_condition=f"{OPT}.positive"
        ),
    )
    report = tpa.check(groups=[g])
    assert report.group("sig").reasons == ["signature.mismatch"]


def test_threads_see_original_or_replacement_while_applying_and_rolling_back():
    g = group(
        "gauss",
        replace(
            f"{LIB}.shapes.gaussian_2d",
            f"{OPT}.gaussian_2d",
            runtime_condition=f"{OPT}.positive_fn",
        ),
    )
    seen, errors, stop = set(), [], threading.Event()

    def caller():
        while not stop.is_set():
            try:
                seen.add(shapes.gaussian_2d((1,))[0])
            except Exception as err:  # any exception is a failure of the test
                errors.append(err)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(200):
        tpa.apply(groups=[g])
        tpa.rollback()
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert seen <= {"stock", "fast"} and "stock" in seen
    assert shapes.gaussian_2d is not opt.gaussian_2d
