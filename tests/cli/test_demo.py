"""``turbo-physai demo`` end to end in a subprocess, as tools/demo.sh runs it, and the fixture
example that was the main job before it."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _check_output(done):
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "optimized outputs agree with stock: yes" in out
    assert "rollback restored 3 object(s), exactly: yes" in out
    assert "outputs identical to stock again: yes" in out
    for line in ("inference", "training step", "transformers.deformable_detr.msda"):
        assert line in out
    return out


def test_quick_demo_with_a_plot(cli, tmp_path):
    pytest.importorskip("matplotlib")
    done = cli("demo", "--quick", "--plot", tmp_path / "demo.png", "--workdir", tmp_path,
               timeout=300)
    _check_output(done)
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "optimization_groups" in (tmp_path / "deformable_detr.yaml").read_text()


def test_default_demo_is_the_main_job(cli):
    _check_output(cli("demo", timeout=300))  # minutes only on a machine shared with others


def test_plot_without_matplotlib_says_so(cli, tmp_path):
    blocker = tmp_path / "no_mpl"
    blocker.mkdir()
    (blocker / "matplotlib.py").write_text("raise ImportError('blocked for the test')\n")
    done = cli("demo", "--quick", "--plot", tmp_path / "x.png",
               env={"PYTHONPATH": f"{blocker}:{cli.pythonpath}"})
    assert done.returncode == 0, done.stderr
    assert "matplotlib is not installed" in done.stdout and not (tmp_path / "x.png").exists()


def test_fixture_library_example_still_runs():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "patch_fixture_library.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "outputs back to stock: True" in done.stdout
