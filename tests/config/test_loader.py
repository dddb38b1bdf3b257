"""The v1 loader: TurboPhysAI's layout loads as is; every mistake names file:line and key."""

# ruff: noqa: E501  (one case per line reads best in these tables)

import pytest

from turbo_physai.config import ConfigError, load_config

TURBOPHYSAI_STYLE = """\
# A config laid out the way TurboPhysAI ships them (trust per target path).
schema_version: turbophysai/optimization-config/v1
kind: OptimizationConfig
metadata:
  id: model.demo.base
  version: 1.0.0
  description: demo recipe
model:
  name: Demo
compatibility:
  commits:
  - 326653dc06e0938edf1aae7d01efcd158ba83de5
  dependencies:
    torch: [">=2.0,<3"]
optimization_groups:
- id: a.msda
  enabled: true
  options: {}
  trust:
    source_hashes: {}
    ast_hashes: {}
- id: a.gauss
  options:
    mode: max-autotune-no-cudagraphs
  trust:
    source_hashes:
      pkg.mod.f:
      - source-v1:4727602f15cdd1d6c1b27a345e59550ae4ac05aff33b921143e8349c5e11ba82
    ast_hashes:
      pkg.mod.f: ast-v1:106c345f0242b3d882d1eaa4a22679553083fa3d48fdbeaf93b0aa62286e2e73
optimization_modules:
- some.catalog
"""


def test_turbophysai_layout_loads(tmp_path):
    path = tmp_path / "optimization.yaml"
    path.write_text(TURBOPHYSAI_STYLE)
    config = load_config(path)
    assert [g.id for g in config.groups] == ["a.msda", "a.gauss"]
    gauss = config.group("a.gauss")
    assert gauss.enabled and gauss.options == {"mode": "max-autotune-no-cudagraphs"}
    assert gauss.trust.source_hashes["pkg.mod.f"][0].startswith("source-v1:4727")
    assert gauss.trust.ast_hashes["pkg.mod.f"] == (
        "ast-v1:106c345f0242b3d882d1eaa4a22679553083fa3d48fdbeaf93b0aa62286e2e73",)
    assert config.group("a.msda").trust.empty
    assert config.catalogs == ("some.catalog",)
    assert config.model == {"name": "Demo"}
    assert config.compatibility["dependencies"] == {"torch": [">=2.0,<3"]}
    assert config.metadata["description"] == "demo recipe"


@pytest.mark.parametrize("body, line, needle", [
    ("bogus: 1\n", 4, "bogus: unknown key"),
    ("optimization_groups:\n- id: a\n  colour: red\n", 6, "optimization_groups[0].colour: unknown key"),
    ("optimization_groups:\n- id: a\n  enabled: 'yes'\n", 6, "optimization_groups[0].enabled: expected true or false"),
    ("optimization_groups:\n- {enabled: true}\n", 5, "optimization_groups[0].id: required"),
    ("optimization_groups:\n- id: a\n- id: a\n", 6, "group 'a' is already selected"),
    ("optimization_groups:\n- id: a\n  options:\n    when: 2024-01-01\n", 7, "not JSON data: when: date"),
    ("optimization_groups:\n- id: a\n  options:\n    x: .nan\n", 7, "not finite"),
    ("optimization_groups:\n- id: a\n  options:\n    1: x\n", 7, "key 1 is not a string"),
    ("optimization_groups:\n- id: a\n  options: [1]\n", 6, "options: expected a mapping"),
    ("optimization_groups:\n- id: a\n  trust:\n    source_hashes: [x]\n", 7, "expected a mapping of target path"),
    ("optimization_groups:\n- id: a\n  trust:\n    source_hashes:\n      m.f: ['']\n", 8, "expected a non-empty string"),
    ("compatibility:\n  dependencies:\n    torch: '>>2'\n", 6, "compatibility.dependencies.torch"),
    ("compatibility:\n  allow_dirty: sometimes\n", 5, "compatibility.allow_dirty"),
    ("compatibility:\n  branch: main\n", 5, "compatibility.branch: unknown key"),
    ("model:\n  name: 3\n", 5, "model.name: expected a non-empty string"),
    ("extends: base.yaml\n", 4, "extends: expected a list"),
    ("optimization_modules: [a, a]\n", 4, "optimization_modules[1]: duplicate"),
    ("optimization_groups: {id: a}\n", 4, "optimization_groups: expected a list"),
    ("metadata: {id: x}\n", 4, "duplicate key 'metadata' (first on line 3)"),
])
def test_errors_name_file_line_and_key(write, body, line, needle):
    path = write("c.yaml", body)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}:"), message
    assert needle in message


@pytest.mark.parametrize("text, needle", [
    ("schema_version: turbophysai/optimization-config/v2\nkind: OptimizationConfig\n", "schema_version: must be"),
    ("schema_version: turbophysai/optimization-config/v1\nkind: RuntimeConfig\n", "kind: must be"),
    ("schema_version: turbophysai/optimization-config/v1\nkind: OptimizationConfig\n", "metadata: required"),
    ("- a\n- b\n", "expected a mapping at the top level"),
    ("a: [1, 2\n", "invalid YAML"),
    ("a: &x 1\nb: *x\n", "anchors and aliases (&name, *name) are not allowed"),
    ("a: !!python/object:os.system {}\n", "invalid YAML"),
    ("? [1, 2]\n: x\n", "is not a plain value"),
])
def test_document_level_errors(tmp_path, text, needle):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"c\.yaml:\d+: ") as err:
        load_config(path)
    assert needle in str(err.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_extends_by_path_merges_parent_first(write):
    write("base/common.yaml", """\
        model: {name: Base}
        optimization_modules: [cat.one]
        compatibility:
          commits: [aaaa]
          dependencies: {torch: ">=2", numpy: ">=1"}
        optimization_groups:
        - id: a
          enabled: true
          options: {x: 1, y: 1}
          trust:
            source_hashes: {m.f: source-v1:00000000000000000000, m.g: source-v1:11111111111111111111}
        - id: b
        """)
    child = write("child.yaml", """\
        extends: [base/common.yaml]
        optimization_modules: [cat.two, cat.one]
        compatibility:
          commits: [bbbb]
          dependencies: {torch: ">=2.4"}
        optimization_groups:
        - id: a
          options: {y: 2}
          trust:
            source_hashes: {m.f: source-v1:22222222222222222222}
        - id: b
          enabled: false
        - id: c
        """)
    config = load_config(child)
    assert config.metadata["id"] == "child"  # metadata is never inherited
    assert config.model == {"name": "Base"}
    assert config.catalogs == ("cat.one", "cat.two")
    assert config.compatibility == {"commits": ["bbbb"],
                                    "dependencies": {"torch": [">=2.4"], "numpy": [">=1"]}}
    assert [g.id for g in config.groups] == ["a", "b", "c"]
    a = config.group("a")
    assert a.enabled and a.options == {"x": 1, "y": 2}
    assert a.trust.source_hashes == {"m.f": ("source-v1:22222222222222222222",),
                                     "m.g": ("source-v1:11111111111111111111",)}
    assert config.group("b").enabled is False
    assert config.sources == (str(child.parent / "base/common.yaml"), str(child))


def test_extends_by_config_id_next_to_the_file_and_on_the_search_path(write, tmp_path,
                                                                      monkeypatch):
    write("framework.yaml", "optimization_groups: [{id: a}]\n", config_id="framework.x")
    write("broken.yaml", "not: [valid\n", head=False)  # unrelated files do not get in the way
    write("elsewhere/other.yaml", "optimization_groups: [{id: b}]\n", config_id="other.y")
    child = write("child.yaml", "extends: [framework.x, other.y]\n")
    with pytest.raises(ConfigError, match=r"child\.yaml:4: extends: 'other\.y': no config"):
        load_config(child)
    monkeypatch.setenv("TURBO_PHYSAI_CONFIG_PATH", str(tmp_path / "elsewhere"))
    assert [g.id for g in load_config(child).groups] == ["a", "b"]


def test_extends_cycle_shows_the_chain(write):
    write("a.yaml", "extends: [b.yaml]\n")
    write("b.yaml", "extends:\n- c.yaml\n")
    c = write("c.yaml", "extends: [a.yaml]\n")
    with pytest.raises(ConfigError) as err:
        load_config(c)
    message = str(err.value)
    assert message.startswith(f"{c.parent / 'b.yaml'}:5: extends cycle: ")
    assert message.endswith("c.yaml -> " + str(c.parent / "a.yaml") + " -> "
                            + str(c.parent / "b.yaml") + " -> " + str(c))


def test_extends_missing_file_and_duplicate_id(write):
    child = write("child.yaml", "extends: [nope.yaml]\n")
    with pytest.raises(ConfigError, match=r"child\.yaml:4: extends: 'nope\.yaml': no such file"):
        load_config(child)
    write("one.yaml", "", config_id="same")
    write("two.yaml", "", config_id="same")
    child = write("child.yaml", "extends: [same]\n")
    with pytest.raises(ConfigError, match="declared by both .*one.yaml and .*two.yaml"):
        load_config(child)


def test_programmatic_options_must_be_json():
    from turbo_physai.config import GroupSelection

    with pytest.raises(ConfigError, match="group 'g'.*set is not a JSON value"):
        GroupSelection("g", options={"x": {1, 2}})
