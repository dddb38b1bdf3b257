"""Catalog discovery: built-ins and entry points, lazily; duplicates; the trust rule."""

import subprocess
import sys
import types

import pytest

from turbo_physai import group, replace
from turbo_physai.catalogs import discovery
from turbo_physai.engine.catalog import GroupRegistry
from turbo_physai.engine.declarations import DeclarationError


def test_nothing_is_loaded_at_import():
    code = ("import sys, turbo_physai; print('tpa_fixture_catalog' in sys.modules, "
            "len(turbo_physai.registry.groups()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": ":".join(sys.path)})
    assert done.stdout.split() == ["False", "0"], done.stderr


def test_entry_point_catalog_is_registered_once():
    fresh = GroupRegistry()
    discovery.load(into=fresh)
    discovery.load(into=fresh)  # idempotent, no duplicate error
    assert "fixture.sparse" in fresh
    assert fresh.get("fixture.sparse").source == "tpa_fixture_catalog"


@pytest.fixture
def fake_catalogs(monkeypatch):
    def install(**modules):
        for name, groups in modules.items():
            module = types.ModuleType(name)
            module.GROUPS = groups
            monkeypatch.setitem(sys.modules, name, module)
        monkeypatch.setattr(discovery, "installed", lambda: [
            discovery.CatalogSource(f"ep-{n}", n) for n in modules])

    return install


def test_duplicate_group_ids_name_both_catalogs(fake_catalogs):
    g = group("dup.g", replace("a.b", "c.d"))
    fake_catalogs(cat_one=[g], cat_two=[group("dup.g", replace("e.f", "g.h"))])
    with pytest.raises(DeclarationError, match="'dup.g' is declared by both 'cat_one' and "
                                               "'cat_two'"):
        discovery.load(into=GroupRegistry())


def test_broken_catalog_is_named(fake_catalogs, monkeypatch):
    fake_catalogs()
    monkeypatch.setattr(discovery, "installed",
                        lambda: [discovery.CatalogSource("broken", "no_such_catalog_module")])
    with pytest.raises(discovery.CatalogError, match="catalog broken \\(no_such_catalog_module\\)"):
        discovery.load(into=GroupRegistry())


def test_config_named_module_needs_trust(fake_catalogs):
    fake_catalogs(cat_one=[group("t.one", replace("a.b", "c.d"))])
    module = types.ModuleType("stranger")
    module.G = group("t.stranger", replace("e.f", "g.h"))
    sys.modules["stranger"] = module
    try:
        fresh = GroupRegistry()
        discovery.load(["ep-cat_one", "cat_one"], into=fresh)  # installed: by name or module
        with pytest.raises(discovery.CatalogError, match="'stranger', which is not an installed"):
            discovery.load(["stranger"], into=fresh)
        assert "t.stranger" not in fresh
        discovery.load(["stranger"], trust=True, into=fresh)
        assert fresh.get("t.stranger").source == "stranger"
    finally:
        del sys.modules["stranger"]
