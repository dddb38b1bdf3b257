"""Every ```python block of docs/ runs: page by page, blocks in order in one namespace, in a
fresh interpreter (examples import and patch fixture modules; the test process must not keep
them), with the fixture packages and examples/ on sys.path."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import turbo_physai

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PACKAGE_ROOT = Path(turbo_physai.__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
PAGES = sorted(p for p in DOCS.rglob("*.md") if BLOCK.search(p.read_text(encoding="utf-8")))
NEEDS = {"quickstart.md": ("torch", "transformers"), "transformers.md": ("torch", "transformers"),
         "libreyolo.md": ("torch", "libreyolo")}


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def test_the_pages_with_examples_are_found():
    names = {p.name for p in PAGES}
    assert {"quickstart.md", "catalog-guide.md", "troubleshooting.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_examples_run(page):
    for module in NEEDS.get(page.name, ()):
        pytest.importorskip(module)
    # One script: later blocks use names earlier ones defined, as a reader would type them.
    script = "\n\n".join(f"# --- block {i}\n{code}" for i, code in enumerate(blocks(page)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_ROOT), str(ROOT / "tests" / "fixtures"), str(ROOT / "examples")])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, f"{page.name}:\n{done.stdout}\n{done.stderr}"
