"""Fixtures of the host-library catalog tests (tests/fixtures/tpa_hosts.py)."""

from tpa_hosts import no_network, op_calls  # noqa: F401  (fixtures, found here by pytest)
