"""Structural mistakes raise at declaration or registration time, naming group and declaration."""

import pytest

from turbo_physai import DeclarationError, group, replace, replace_import, wrap
from turbo_physai.compatibility import import_alias, optional_import, registry_override
from turbo_physai.engine.catalog import GroupRegistry


def test_mixing_import_compat_with_replace_names_both():
    with pytest.raises(DeclarationError) as err:
        group("g", optional_import("a.b"), replace("a.f", "b.f"))
    assert "group 'g'" in str(err.value)
    assert "optional_import('a.b')" in str(err.value) and "replace('a.f')" in str(err.value)


@pytest.mark.parametrize("bad_id", ["", "   ", None, 3])
def test_empty_or_non_string_group_id(bad_id):
    with pytest.raises(DeclarationError, match="group ID"):
        group(bad_id, replace("a.f", "b.f"))


def test_group_without_declarations():
    with pytest.raises(DeclarationError, match="group 'g' has no declarations"):
        group("g")


def test_bad_paths_name_the_declaration():
    with pytest.raises(DeclarationError, match=r"replace\('a\.f'\): replacement"):
        replace("a.f", "not a path")
    with pytest.raises(DeclarationError, match="runtime_condition"):
        wrap("a.f", "b.f", runtime_condition="1bad")
    with pytest.raises(DeclarationError, match="names must be non-empty"):
        registry_override("m", "r.R", ())
    with pytest.raises(DeclarationError, match="alias must be a name"):
        import_alias("m", "A", "not.a.name")


def test_replace_import_takes_no_runtime_condition():
    with pytest.raises(TypeError):
        replace_import("a.b", "c.d", runtime_condition="x.y")  # type: ignore[call-arg]


def test_same_path_written_twice_in_a_group():
    with pytest.raises(DeclarationError, match="already written by replace"):
        group("g", replace("a.f", "b.f"), wrap("a.g", "b.w", aliases=("a.f",)))


def test_target_listed_as_its_own_alias():
    with pytest.raises(DeclarationError, match="target is listed among its aliases"):
        replace("a.f", "b.f", aliases=("a.f",))


def test_self_dependency():
    with pytest.raises(DeclarationError, match="depends on itself"):
        group("g", replace("a.f", "b.f"), depends_on="g")


def test_registry_duplicate_names_both_sources():
    reg = GroupRegistry()
    reg.register(group("g", replace("a.f", "b.f")), source="cat_one")
    with pytest.raises(DeclarationError, match="declared by both 'cat_one' and 'cat_two'"):
        reg.register(group("g", replace("a.h", "b.h")), source="cat_two")
    assert [g.source for g in reg.groups()] == ["cat_one"]


def test_registry_rejects_a_batch_atomically():
    reg = GroupRegistry()
    with pytest.raises(DeclarationError):
        reg.register(group("a", replace("a.f", "b.f")), "not a group", source="cat")
    assert reg.groups() == []


def test_registry_validation_finds_unknown_dependency_and_phase_violation():
    reg = GroupRegistry()
    reg.register(group("a", replace("a.f", "b.f"), depends_on="missing"), source="cat")
    with pytest.raises(DeclarationError, match="group 'a' depends_on unknown group 'missing'"):
        reg.validate()
    reg = GroupRegistry()
    reg.register(
        group("regular", replace("a.f", "b.f")),
        group("compat", optional_import("x.y"), depends_on="regular"),
        source="cat",
    )
    with pytest.raises(DeclarationError, match="import-compatibility group 'compat'"):
        reg.validate()
