"""The package, engine and registry import and work with torch unavailable."""

import subprocess
import sys
import textwrap
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def test_engine_works_with_torch_blocked():
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        sys.path.insert(0, {str(FIXTURES)!r})
        import turbo_physai as tpa
        from tpa_fixture_lib import shapes
        g = tpa.group("g", tpa.replace("tpa_fixture_lib.shapes.gaussian_2d",
                                       "tpa_fixture_opt.gaussian_2d"))
        report = tpa.apply(groups=[g])
        assert report.group("g").status == "applied", str(report)
        assert shapes.gaussian_2d((1,))[0] == "fast"
        tpa.rollback()
        assert shapes.gaussian_2d((1,))[0] == "stock"
        conditional = tpa.group("c", tpa.replace(  # a Dispatcher: traced_dispatch needs no torch
            "tpa_fixture_lib.shapes.gaussian_2d", "tpa_fixture_opt.gaussian_2d",
            runtime_condition="tpa_fixture_opt.positive_fn"))
        with tpa.applied(groups=[conditional], strict=True):
            assert type(shapes.gaussian_2d).__name__ == "Dispatcher"
            assert shapes.gaussian_2d((1,))[0] == "fast"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_torch_is_imported_first_exactly_when_the_core_has_cuda():
    # A CUDA core loaded before torch crashed torch's import on the GPU image (__init__.py).
    code = "import sys, turbo_physai; print(turbo_physai._WITH_CUDA, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with_cuda, torch_loaded = out.stdout.split()
    try:
        import torch  # noqa: F401
    except ImportError:
        assert torch_loaded == "False"
    else:
        assert torch_loaded == with_cuda
