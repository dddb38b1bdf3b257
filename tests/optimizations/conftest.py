"""What the tests of host-code rewrites share: a host module written for the test."""

from __future__ import annotations

import importlib
import sys
import textwrap


def host_module(tmp_path, monkeypatch, name: str, source: str):
    """Yield module ``name`` written from ``source`` into ``tmp_path`` and imported; forgotten
    after (a fixture body: ``yield from host_module(...)``)."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    yield importlib.import_module(name)
    sys.modules.pop(name, None)
