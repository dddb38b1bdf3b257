"""Run ``turbo-physai`` in a subprocess the way a user would, with the fixture packages (and
their installed-distribution metadata, which publishes the fixture catalog) on PYTHONPATH."""

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import turbo_physai

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
# Where the package under test lives: src/ in a developer build, site-packages when installed.
PACKAGE_ROOT = Path(turbo_physai.__file__).resolve().parents[1]


@pytest.fixture
def fixtures(tmp_path):
    """A private copy of the fixture packages: tests may edit their source."""
    target = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


@pytest.fixture
def cli(tmp_path, fixtures):
    def run(*args, env=None, timeout=120):
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TURBO_PHYSAI")}
        environ["PYTHONPATH"] = run.pythonpath
        environ["COLUMNS"] = "250"  # rich folds table cells to the terminal width
        # torchrun's rendezvous port (its --master-port): a free one, so that tests running in
        # parallel (pytest -n) do not collide on the default 29500.
        environ["PET_MASTER_PORT"] = str(_free_port())
        environ.update(env or {})
        return subprocess.run([sys.executable, "-m", "turbo_physai.cli", *map(str, args)],
                              cwd=tmp_path, env=environ, capture_output=True, text=True,
                              timeout=timeout)

    run.pythonpath = os.pathsep.join([str(PACKAGE_ROOT), str(fixtures)])
    return run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
