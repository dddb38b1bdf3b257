"""The pages a newcomer reads first: every relative link leads to a file of the repository, and
BENCHMARKS.md stays a page of current figures (history lives in git)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "CHANGELOG.md",
         ROOT / "benchmarks" / "experiments" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    links = [x for x in LINK.findall(page.read_text(encoding="utf-8")) if "://" not in x]
    missing = [x for x in links if not (page.parent / x).exists()]
    assert not missing, f"{page.name}: {missing}"


def test_benchmarks_page_stays_short():
    assert (ROOT / "BENCHMARKS.md").stat().st_size <= 30_000
