"""Shared fixtures: a scratch slot name per test, and subprocess helpers for env/import checks."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import turbo_physai

# Where the package under test lives: src/ in a developer build, site-packages when installed.
PACKAGE_ROOT = Path(turbo_physai.__file__).resolve().parents[1]
_counter = itertools.count()


@pytest.fixture
def slot_name(request):
    """A slot nobody else uses (the registry is process-wide and has no 'delete slot')."""
    return f"test_{request.node.name}_{next(_counter)}".replace("[", "_").replace("]", "_")


def run_python(code: str, env: dict[str, str] | None = None, path: list[str] | None = None,
               check: bool = True):
    """Run ``code`` in a fresh interpreter with the package importable; no network (HF offline).
    Its stdout, or with ``check=False`` the finished process whatever its exit status."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TURBO_PHYSAI_")}
    # The caller's entries stay after ours: a package the tests import may live on PYTHONPATH
    # (wheels unpacked into a folder on a machine without an installed environment).
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    full_env["PYTHONPATH"] = os.pathsep.join([*(path or []), str(PACKAGE_ROOT), *inherited])
    full_env["HF_HUB_OFFLINE"] = "1"
    full_env.update(env or {})
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if not check:
        return result
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout
