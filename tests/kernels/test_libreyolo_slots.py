"""LibreYOLO's slot tests, rewritten for turbo_physai.kernels (issue 25 item 5).

The checks live in libreyolo_port.py and run in one fresh interpreter, against LibreYOLO's own
provider modules (from the installed package) changed in their registry import lines only. If
that interpreter dies (a crash in a provider's native code: seen on the GPU machine), each check
runs again in its own, so that the others still report and the crash names its check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_python

pytest.importorskip("torch")
pytest.importorskip("libreyolo")

SCRIPT = Path(__file__).with_name("libreyolo_port.py")
CHECKS = [
    "only_registry_import_lines_changed",
    "slot_resolves_to_none_when_its_providers_are_off",
    "call_site_routes_through_a_registered_implementation",
    "fixture_teardown_may_unregister_what_is_absent",
    "a_provider_returning_none_does_not_hide_the_next_one",
    "providers_that_flip_their_state_are_seen_after_clear_cache",
    "a_raising_predicate_counts_as_no_with_one_warning_each",
    "reference_slots_resolve_on_cpu",
    "the_override_variable_forces_the_reference",
    "a_gemm_slot_without_reference_resolves_to_its_hardware_only",
    "libreyolo_triton_fake_quant_joins_our_slot_for_cuda_inputs",
]


def _port(*names):
    """{check: "ok" or its traceback}, or the exit status and stderr of an interpreter that
    died (a str)."""
    done = run_python(
        "import faulthandler, runpy, sys; faulthandler.enable(); "
        f"sys.argv[1:] = {list(names)!r}; runpy.run_path({str(SCRIPT)!r}, run_name='__main__')",
        check=False,
    )
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    return f"the interpreter died: exit status {done.returncode}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def results():
    together = _port(*CHECKS)
    if not isinstance(together, str):
        return together
    alone = {name: _port(name) for name in CHECKS}
    return {name: r if isinstance(r, str) else r[name] for name, r in alone.items()}


def test_every_check_is_listed(results):
    assert sorted(results) == sorted(CHECKS)


@pytest.mark.parametrize("name", CHECKS)
def test_libreyolo_slot_contract(results, name):
    assert results[name] == "ok", results[name]
