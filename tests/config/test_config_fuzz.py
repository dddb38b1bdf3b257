"""Config fuzz (issue 24): 1,000 mutated configs (tests/fixtures/turbophysai_mutations.py)
through the loader and ``turbo-physai check``, in TurboPhysAI's layout so extends-by-ID
searches real folders. Exit
0, 1 or 2 only, never a traceback; errors name ``file:line`` or ``file:``. Most run in-process
(``cli.main``), a sample through the real command line. A watchdog stops a case that hangs;
how long cases take is measured by benchmarks/config_fuzz.py, not here."""

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from turbophysai_mutations import CORPUS, cases

import turbo_physai
from turbo_physai.cli.main import main

IN_PROCESS, SUBPROCESS = 1000, 8
WATCHDOG_S = 20  # a hang, not a speed limit (the shared 2-core CI box is slow)
OWN = Path("turbo_physai/optimizations/models/fuzz/configs")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz") / "corpus"
    shutil.copytree(CORPUS, root, ignore=shutil.ignore_patterns("targets", "*.py"))
    (root / OWN).mkdir(parents=True)
    return root


def place(tree, name, text):
    """Write the case where its seed lives (or, for our own seeds, inside the layout); return
    the path and what was there, to restore after."""
    seed = name.split("-", 1)[1]
    path = tree / (OWN / f"{seed}.yaml" if seed.startswith("own-") else seed)
    before = path.read_bytes() if path.exists() else None
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    return path, before


def restore(path, before):
    if before is None:
        path.unlink()
    else:
        path.write_bytes(before)


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def run_in_process(path):
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, WATCHDOG_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["check", str(path), "--json"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        turbo_physai.rollback()
    return status, out.getvalue(), err.getvalue()


def assert_outcome(name, path, status, out, err):
    assert status in (0, 1, 2), (name, status)
    assert "Traceback" not in out + err, (name, err)
    if status == 2:
        assert err.startswith("turbo-physai check: error: "), (name, err)
    else:
        assert json.loads(out), name  # a report (optimization or runtime config)


def test_mutated_configs_in_process(tree):
    statuses = {0: 0, 1: 0, 2: 0}
    for name, text in cases(IN_PROCESS):
        path, before = place(tree, name, text)
        try:
            status, out, err = run_in_process(path)
        except Hang:
            pytest.fail(f"{name}: check did not finish within {WATCHDOG_S} s")
        finally:
            restore(path, before)
        assert_outcome(name, path, status, out, err)
        statuses[status] += 1
    # The mix shows the fuzz reaches past the loader: reports as well as config errors.
    assert statuses[2] > 100 and statuses[0] + statuses[1] > 100, statuses


def test_mutated_configs_through_the_command_line(tree):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURBO_PHYSAI")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    for name, text in cases(SUBPROCESS, seed=2024):
        path, before = place(tree, name, text)
        try:
            done = subprocess.run([sys.executable, "-m", "turbo_physai.cli", "check", str(path),
                                   "--json"], capture_output=True, text=True, env=env,
                                  timeout=120)
        finally:
            restore(path, before)
        assert_outcome(name, path, done.returncode, done.stdout, done.stderr)
