"""Configs shipped with the built-in catalogs: they load from the installed package, name only
groups the catalogs declare with options those groups accept, and work as ``extends`` parents."""

import textwrap

import pytest

import turbo_physai as tpa
from turbo_physai.config import ConfigError, load_config, shipped_configs

EXPECTED = {
    "turbo_physai.deformable_detr",
    "turbo_physai.deformable_detr.gpu_inference",
    "turbo_physai.deformable_detr.cuda_graph",
    "turbo_physai.libreyolo",
    "turbo_physai.rt_detr.gpu_inference",
    "turbo_physai.rt_detr.cuda_graph",
    "turbo_physai.rt_detr.gpu_inference_tf32",
    "turbo_physai.ultralytics",
    "turbo_physai.rfdetr",
}
# The host library each shipped config's groups patch (the rest: transformers).
HOSTS = {
    "turbo_physai.ultralytics": "ultralytics",
    "turbo_physai.rfdetr": "rfdetr",
    "turbo_physai.libreyolo": "libreyolo",
}


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_the_installed_package_ships_them():
    assert set(shipped_configs()) == EXPECTED


@pytest.mark.parametrize("config_id", sorted(EXPECTED))
def test_each_checks_with_every_group_found_and_its_options_accepted(config_id):
    pytest.importorskip(HOSTS.get(config_id, "transformers"))
    config = load_config(shipped_configs()[config_id])
    assert config.metadata["id"] == config_id
    report = tpa.check(config)  # builds every wrap factory: bad options would block the group
    assert {g.id: g.status for g in report.groups} == {g.id: "checked" for g in config.groups}


def test_extends_by_id_reaches_a_shipped_config_and_merges_options(tmp_path):
    mine = write(tmp_path, "mine.yaml", """\
        schema_version: turbophysai/optimization-config/v1
        kind: OptimizationConfig
        metadata: {id: my.rt_detr, version: "1"}
        extends: [turbo_physai.rt_detr.gpu_inference_tf32]
        optimization_groups:
        - id: transformers.rt_detr.compile_model
          options: {fullgraph: false}
        """)
    config = load_config(mine)
    options = {g.id: g.options for g in config.groups}["transformers.rt_detr.compile_model"]
    # two shipped generations below the user's file, each adding keys; the user's value wins
    assert options == {"mode": "reduce-overhead", "fullgraph": False, "dynamic": False,
                       "matmul_precision": "high"}
    assert [s.rsplit("/", 1)[-1] for s in config.sources] == [
        "rt_detr_gpu_inference.yaml", "rt_detr_gpu_inference_tf32.yaml", "mine.yaml"]


def test_a_users_config_with_the_same_id_shadows_the_shipped_one(tmp_path):
    write(tmp_path, "own.yaml", """\
        schema_version: turbophysai/optimization-config/v1
        kind: OptimizationConfig
        metadata: {id: turbo_physai.deformable_detr, version: "mine"}
        optimization_groups: [{id: demo.group}]
        """)
    child = write(tmp_path, "child.yaml", """\
        schema_version: turbophysai/optimization-config/v1
        kind: OptimizationConfig
        metadata: {id: child, version: "1"}
        extends: [turbo_physai.deformable_detr]
        """)
    assert [g.id for g in load_config(child).groups] == ["demo.group"]


def test_an_unknown_id_lists_the_shipped_ones(tmp_path):
    child = write(tmp_path, "child.yaml", """\
        schema_version: turbophysai/optimization-config/v1
        kind: OptimizationConfig
        metadata: {id: child, version: "1"}
        extends: [turbo_physai.rt_detr.gpu]
        """)
    with pytest.raises(ConfigError, match=r"child.yaml:4: extends: 'turbo_physai.rt_detr.gpu': "
                       r"no config .* shipped configs \(turbo_physai.deformable_detr, "):
        load_config(child)
