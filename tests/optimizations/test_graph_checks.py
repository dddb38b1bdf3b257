"""optimizations.common.graph_checks: errors decided on the device (the deferral itself, under a
CUDA graph, is checked on a GPU: tests/catalogs/test_transformers_cuda_graph.py and
tests/ops/test_linear_sum_assignment.py)."""

from __future__ import annotations

import numpy as np
import pytest

from turbo_physai.optimizations.common.graph_checks import Collected, check_later, collecting

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("value", [torch.tensor(True), np.bool_(True), True])
def test_outside_a_capture_the_error_is_raised_at_once(value):
    built = []

    def message():
        built.append(1)
        return "boxes are bad"

    with pytest.raises(KeyError, match="boxes are bad"):
        check_later(value, message, KeyError)
    check_later(value, message, KeyError, raise_if=False)  # raises only when false
    with pytest.raises(ValueError, match="no"):
        check_later(not bool(value), "no", raise_if=False)
    assert built == [1]  # the message is built only when raised


def test_host_flags_are_not_queued_while_collecting():
    with collecting() as checks:
        check_later(torch.tensor(False), "never")
        with pytest.raises(ValueError, match="at once"):
            check_later(torch.tensor(True), "at once")
    assert checks.flags == [] and checks.stacked is None
    checks.raise_failed()  # nothing queued: nothing to read


def test_queued_checks_raise_the_first_failed_error_after_a_replay():
    checks = Collected()  # as a capture leaves it, with host tensors standing for device ones
    for flag, error in [(False, (ValueError, "first")), (True, (KeyError, "second")),
                        (True, (ValueError, "third"))]:
        checks.flags.append(torch.tensor(flag))
        checks.errors.append(error)
    checks.seal()
    with pytest.raises(KeyError, match="second"):
        checks.raise_failed()
    checks.stacked.zero_()  # the next replay found nothing
    checks.raise_failed()
