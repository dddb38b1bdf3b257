"""Fuzzing: whatever the bytes or the structure, load_config returns or raises ConfigError."""

import string

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turbo_physai.config import ConfigError, load_config
from turbo_physai.config.runtime import load_runtime_config

SAFE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
                    st.dates())
keys = st.sampled_from(["schema_version", "kind", "metadata", "id", "version", "enabled",
                        "options", "trust", "source_hashes", "ast_hashes", "extends",
                        "optimization_groups", "compatibility", "dependencies", "model",
                        "environment", "set", "unset", "process", "rank_affinity", "x"])
trees = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(keys, st.integers()), inner,
                                                 max_size=4)), max_leaves=20)


def _expect_config_error_only(path, loader):
    try:
        loader(path)
    except ConfigError:
        pass


@SAFE
@given(st.text(alphabet=string.printable + "\u00e9\u4e2d&*!|>-:{}[]", max_size=300))
def test_arbitrary_text(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    _expect_config_error_only(path, load_config)
    _expect_config_error_only(path, load_runtime_config)


@SAFE
@given(trees)
def test_arbitrary_structures(tmp_path, tree):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    _expect_config_error_only(path, load_config)
    _expect_config_error_only(path, load_runtime_config)


@SAFE
@given(st.dictionaries(st.sampled_from(["enabled", "options", "trust", "id", "x"]), trees,
                       max_size=4),
       st.dictionaries(st.sampled_from(["dependencies", "commits", "allow_dirty", "backend"]),
                       trees, max_size=3),
       st.one_of(st.none(), trees))
def test_near_valid_configs(tmp_path, group, compat, extends):
    doc = {"schema_version": "turbophysai/optimization-config/v1", "kind": "OptimizationConfig",
           "metadata": {"id": "f", "version": "1"}, "optimization_groups": [group],
           "compatibility": compat}
    if extends is not None:
        doc["extends"] = extends
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    _expect_config_error_only(path, load_config)


def test_deep_nesting_is_a_config_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("[" * 5000 + "]" * 5000)
    _expect_config_error_only(path, load_config)
