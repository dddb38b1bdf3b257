"""Catalog discovery: built-ins and entry points, lazily; duplicates; the trust rule."""

import subprocess
import sys
import types

import pytest

from turbo_physai import group, replace
from turbo_physai.catalogs import discovery
from turbo_physai.config.checks import gate
from turbo_physai.engine import catalog
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


def test_an_id_two_catalogs_declare_goes_to_the_one_the_config_names(fake_catalogs,
                                                                      monkeypatch):
    one = group("dup.g", replace("a.b", "c.d"))
    two = group("dup.g", replace("e.f", "g.h"))
    fake_catalogs(cat_one=[one, group("other.g", replace("i.j", "k.l"))], cat_two=[two])
    fresh = GroupRegistry()
    monkeypatch.setattr(catalog, "registry", fresh)
    discovery.load(into=fresh)  # named by nobody: kept, first registered active, blocked
    assert fresh.get("dup.g").declarations == one.declarations
    assert fresh.choice("dup.g") == (None, ("cat_one", "cat_two"))
    assert fresh.choice("other.g") is None
    [check] = gate(None)(fresh.get("dup.g"))
    assert check.code == "catalog.duplicate" and check.blocks and not check.overrideable
    assert "cat_one and cat_two" in check.message
    assert gate(None)(fresh.get("other.g")) == []
    for name in ("cat_two", "ep-cat_two"):  # by module path or by entry-point name
        discovery.load([name], into=fresh)
        assert fresh.get("dup.g").declarations == two.declarations
        [check] = gate(None)(fresh.get("dup.g"))
        assert (check.code, check.status, check.actual) == ("catalog.choice", "warning", "cat_two")
    discovery.load(["cat_one", "cat_two"], into=fresh)  # both named: ambiguous again
    assert fresh.choice("dup.g") == (None, ("cat_one", "cat_two"))


def test_a_trusted_catalog_takes_part_only_while_a_config_names_it(fake_catalogs, monkeypatch):
    fake_catalogs(cat_one=[group("dup.g", replace("a.b", "c.d"))])
    stranger = types.ModuleType("stranger_dup")
    stranger.G = group("dup.g", replace("e.f", "g.h"))
    monkeypatch.setitem(sys.modules, "stranger_dup", stranger)
    fresh = GroupRegistry()
    discovery.load(["stranger_dup"], trust=True, into=fresh)
    assert fresh.get("dup.g").source == "stranger_dup"
    assert fresh.choice("dup.g") == ("stranger_dup", ("cat_one", "stranger_dup"))
    discovery.load(into=fresh)  # the next config names nothing: the installed one, no note
    assert fresh.get("dup.g").source == "cat_one" and fresh.choice("dup.g") is None


def test_registering_an_id_twice_directly_names_both():
    fresh = GroupRegistry()
    fresh.register(group("dup.g", replace("a.b", "c.d")), source="cat_one")
    with pytest.raises(DeclarationError, match="'dup.g' is declared by both 'cat_one' and "
                                               "'cat_two'"):
        fresh.register(group("dup.g", replace("e.f", "g.h")), source="cat_two")


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
