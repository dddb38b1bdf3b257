"""The generator: planner errors, unresolvable targets, evidence that check accepts."""

import pytest

import turbo_physai as tpa
from turbo_physai import group, replace
from turbo_physai.config import load_config
from turbo_physai.config.generator import GenerateError, evidence, generate, write
from turbo_physai.engine.catalog import registry


@pytest.fixture
def declared():
    added = []

    def declare(*groups):
        registry.register(*groups, source="test")
        added.extend(g.id for g in groups)

    yield declare
    for gid in added:
        registry.unregister(gid)


def test_cycle_and_conflict_and_unknown_are_errors(declared):
    declared(group("gen.a", replace("tpa_fixture_lib.shapes.Layer", "tpa_fixture_opt.Layer"),
                   depends_on="gen.b"),
             group("gen.b", replace("tpa_fixture_lib.shapes.Base.forward",
                                    "tpa_fixture_opt.forward"), depends_on="gen.a"),
             group("gen.c", replace("tpa_fixture_lib.shapes.Layer", "tpa_fixture_opt.Layer")))
    with pytest.raises(GenerateError, match="gen.a -> gen.b -> gen.a|gen.b -> gen.a -> gen.b"):
        generate(["gen.a"], metadata={"id": "x", "version": "1"})
    # The pair comes in plan order, which follows registration order (catalog discovery first).
    both = "('fixture.incompatible' and 'gen.c'|'gen.c' and 'fixture.incompatible')"
    with pytest.raises(GenerateError, match=f"{both} both write 'tpa_fixture_lib.shapes.Layer'"):
        generate(["fixture.incompatible", "gen.c"], metadata={"id": "x", "version": "1"})
    with pytest.raises(GenerateError, match="nope"):
        generate(["nope"], metadata={"id": "x", "version": "1"})


def test_unresolvable_target_names_group_and_target(declared):
    declared(group("gen.missing", replace("tpa_fixture_lib.shapes.nothing",
                                          "tpa_fixture_opt.Layer")))
    with pytest.raises(GenerateError, match="group 'gen.missing': target "
                                            "'tpa_fixture_lib.shapes.nothing'"):
        generate(["gen.missing"], metadata={"id": "x", "version": "1"})


def test_an_optional_target_this_release_lacks_gets_no_hash_and_no_error(declared):
    declared(group("gen.optional",
                   replace("tpa_fixture_lib.shapes.nothing", "tpa_fixture_opt.Layer",
                           optional=True),
                   replace("tpa_fixture_lib.shapes.Layer", "tpa_fixture_opt.Layer")))
    trust = evidence(registry.get("gen.optional"))
    assert list(trust.source_hashes) == ["tpa_fixture_lib.shapes.Layer"]


def test_a_property_gets_one_hash_of_its_accessors_together(declared):
    declared(group("gen.prop", replace("tpa_fixture_lib.shapes.SparseTensor.sparity",
                                       "tpa_fixture_opt.sparity")))
    trust = evidence(registry.get("gen.prop"))
    [source] = trust.source_hashes["tpa_fixture_lib.shapes.SparseTensor.sparity"]
    assert source.startswith("source-v1:")


def test_written_config_loads_and_checks(tmp_path):
    config = generate(["fixture.forward"], metadata={"id": "x", "version": "1"},
                      options={"fixture.forward": {"k": [1, 2]}})
    path = tmp_path / "out.yaml"
    write(config, path)
    loaded = load_config(path)
    assert [g.id for g in loaded.groups] == ["fixture.gaussian", "fixture.forward"]
    assert loaded.group("fixture.forward").options == {"k": [1, 2]}
    report = tpa.check(loaded)
    assert report.ok
    assert all(c.status == "pass" for g in report.groups for c in g.checks
               if c.code == "source.identity")
    with pytest.raises(FileExistsError):
        write(config, path)
