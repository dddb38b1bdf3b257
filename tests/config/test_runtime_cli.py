"""``turbo-physai run`` with a RuntimeConfig (trust rule, --set, placement in the report) and
``turbo-physai check`` of a RuntimeConfig, through the real command line."""

# ruff: noqa: E501  (one case per line reads best in these tables)

import json
import os
import subprocess
import sys
import textwrap

import pytest

import turbo_physai

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(turbo_physai.__file__)))
HEAD = "schema_version: turbophysai/runtime-config/v1\nkind: RuntimeConfig\n"
SHOW = "import os; print('A=' + os.environ.get('A', '-'), 'B=' + os.environ.get('B', '-'))"


def cli(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURBO_PHYSAI")}
    env["PYTHONPATH"] = PACKAGE_ROOT
    return subprocess.run([sys.executable, "-m", "turbo_physai.cli", *map(str, args)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def runtime(tmp_path, body):
    path = tmp_path / "runtime.yaml"
    path.write_text(HEAD + textwrap.dedent(body))
    return path


def test_set_goes_on_top_of_the_runtime_config_and_the_report_shows_placement(tmp_path):
    path = runtime(tmp_path, """\
        environment:
          set: {A: from-file, B: from-file}
        process:
          numa: auto
        """)
    done = cli(tmp_path, "run", "--runtime-config", path, "--set", "A=from-cli",
               "--report-dir", "reports", "--", sys.executable, "-c", SHOW)
    assert done.returncode == 0, done.stderr
    assert "A=from-cli B=from-file" in done.stdout
    [proc] = json.loads((tmp_path / "reports/report.json").read_text())["processes"]
    assert proc["placement"]["local_rank"] == 0
    # numa: auto on this machine: bound to its GPU's node, or a note saying why not.
    assert proc["placement"]["numa_node"] is not None or proc["placement"]["notes"]


def test_disable_numa_and_set_without_a_runtime_config(tmp_path):
    path = runtime(tmp_path, "process:\n  rank_numa: {0: 99}\n")
    done = cli(tmp_path, "run", "--runtime-config", path, "--report-dir", "r", "--",
               sys.executable, "-c", SHOW)
    assert done.returncode == 86 and "NUMA node 99 does not exist here" in done.stderr
    done = cli(tmp_path, "run", "--runtime-config", path, "--disable-numa", "--report-dir", "r",
               "--", sys.executable, "-c", SHOW)
    assert done.returncode == 0, done.stderr
    done = cli(tmp_path, "run", "--set", "B=2", "--report-dir", "r", "--", sys.executable, "-c",
               SHOW)
    assert done.returncode == 0 and "A=- B=2" in done.stdout
    done = cli(tmp_path, "run", "--set", "B", "--", sys.executable, "-c", SHOW)
    assert done.returncode == 2 and "--set 'B': expected NAME=VALUE" in done.stderr


def test_code_loading_variables_need_trust(tmp_path):
    """Issue 24 item 9: PYTHONPATH from a RuntimeConfig ran DIR/sitecustomize.py unasked."""
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "sitecustomize.py").write_text("print('EVIL CODE RAN')\n")
    path = runtime(tmp_path, f"environment:\n  set:\n    OK: '1'\n    PYTHONPATH: {evil}\n")
    done = cli(tmp_path, "run", "--runtime-config", path, "--", sys.executable, "-c", "pass")
    assert done.returncode == 2, done.stdout
    assert "EVIL CODE RAN" not in done.stdout
    assert f"{path}:6: PYTHONPATH: setting it makes processes load code" in done.stderr
    assert "--trust-config" in done.stderr
    trusted = cli(tmp_path, "run", "--runtime-config", path, "--trust-config", "--report-dir",
                  "r", "--", sys.executable, "-c", "pass")
    assert trusted.returncode == 0, trusted.stderr
    assert "EVIL CODE RAN" in trusted.stdout  # trusted: the user asked for it


@pytest.mark.parametrize("body, trust, status, needle", [
    ("environment:\n  set: {NCCL_ALGO: Ring}\nprocess:\n  numa: true\n", False, 0, "NCCL_ALGO"),
    ("environment:\n  set: {LD_PRELOAD: x.so}\n", False, 1, "LD_PRELOAD: loads code; run needs --trust-config"),
    ("environment:\n  set: {LD_PRELOAD: x.so}\n", True, 0, "LD_PRELOAD"),
    ("process:\n  rank_numa: {0: 99}\n", False, 1, "rank_numa.0: node 99 does not exist here"),
    ("process:\n  numa: false\n  rank_numa: {0: 99}\n", False, 0, "rank_numa"),
    ("process:\n  rank_affinity: {3: '4000'}\n", False, 1, "rank_affinity.3: CPUs [4000] not usable"),
])
def test_check_reports_a_runtime_config(tmp_path, body, trust, status, needle):
    path = runtime(tmp_path, body)
    done = cli(tmp_path, "check", path, *(["--trust-config"] if trust else []))
    assert done.returncode == status, done.stdout + done.stderr
    assert needle in done.stdout
    as_json = cli(tmp_path, "check", path, "--json", *(["--trust-config"] if trust else []))
    data = json.loads(as_json.stdout)
    assert data["kind"] == "RuntimeConfig" and bool(data["findings"]) == bool(status)


def test_check_of_a_broken_runtime_config_is_a_config_error(tmp_path):
    path = runtime(tmp_path, "process:\n  numa: maybe\n")
    done = cli(tmp_path, "check", path)
    assert done.returncode == 2 and f"{path}:4: process.numa" in done.stderr


def test_run_refuses_unknown_groups_before_starting(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("schema_version: turbophysai/optimization-config/v1\n"
                    "kind: OptimizationConfig\nmetadata: {id: c, version: '1'}\n"
                    "optimization_groups: [{id: no.such.group}, {id: other.unknown, "
                    "enabled: false}]\n")
    done = cli(tmp_path, "run", "--config", path, "--", sys.executable, "-c", "print('ran')")
    assert done.returncode == 2 and "ran" not in done.stdout
    assert "no installed catalog declares 'no.such.group'" in done.stderr
