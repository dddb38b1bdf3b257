"""Issue 24 item 8: only ConfigError with file:line leaves the loader, whatever the file; the
documented limits refuse huge inputs before they cost memory or time; extends-by-ID in
TurboPhysAI's layout, with recipes and broken neighbours out of the way."""

# ruff: noqa: E501  (one case per line reads best in these tables)

import os

import pytest

from turbo_physai.config import ConfigError, load_config
from turbo_physai.config.loader import LIMITS as LOAD_LIMITS
from turbo_physai.config.marks import LIMITS

HEAD = ("schema_version: turbophysai/optimization-config/v1\nkind: OptimizationConfig\n"
        "metadata: {id: %s, version: '1'}\n")


def write(path, body, config_id="c"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEAD % config_id + body)
    return path


@pytest.mark.parametrize("body, line, needle", [
    ("optimization_groups:\n- id: a\n  enabled: !!bool maybe\n", 6, "cannot read bool value 'maybe'"),
    ("optimization_groups:\n- id: a\n  options: {t: !!timestamp garbage}\n", 6, "cannot read timestamp value 'garbage'"),
    ("optimization_groups:\n- id: a\n  options: {n: " + "9" * 5000 + "}\n", 6, "cannot read int value"),
    ("optimization_groups:\n- id: a\n  options: {d: 2020-13-45}\n", 6, "month must be in 1..12"),
    ("optimization_groups:\n- id: a\n  options: {n: !!int abc}\n", 6, "cannot read int value 'abc'"),
    ("optimization_groups:\n- id: a\n  options: {n: !!float abc}\n", 6, "cannot read float value 'abc'"),
    ("x: " + "[" * (LIMITS["depth"] + 5) + "]" * (LIMITS["depth"] + 5) + "\n", 4, "nested deeper than"),
])
def test_values_yaml_cannot_read_name_their_line(tmp_path, body, line, needle):
    path = write(tmp_path / "c.yaml", body)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert needle in str(err.value)


def test_too_many_nodes_is_refused(tmp_path):
    groups = "".join(f"- {{id: g{i}}}\n" for i in range(LIMITS["nodes"] // 2 + 10))
    path = write(tmp_path / "c.yaml", "optimization_groups:\n" + groups)
    assert path.stat().st_size < LIMITS["bytes"]
    with pytest.raises(ConfigError, match=f"more than {LIMITS['nodes']} YAML nodes"):
        load_config(path)


def test_huge_files_are_refused_before_reading(tmp_path):
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:
        f.truncate(4 << 30)  # 4 GB and sparse: reading it would take minutes and all memory
    with pytest.raises(ConfigError, match=r"huge\.yaml: 4294967296 bytes, larger than"):
        load_config(huge)
    parent = write(tmp_path / "parent.yaml", "extends: [huge.yaml]\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_config(parent)


def test_not_regular_files_and_symlink_loops(tmp_path):
    os.mkfifo(tmp_path / "fifo.yaml")  # reading would block forever
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(tmp_path / "fifo.yaml")
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    with pytest.raises(ConfigError, match="loop.yaml: cannot read"):
        load_config(tmp_path / "loop.yaml")
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(tmp_path)


def test_bad_neighbours_do_not_break_extends_by_id(tmp_path):
    """One bad file in a folder searched by ID used to break every config there."""
    write(tmp_path / "parent.yaml", "optimization_groups: [{id: a}]\n", config_id="the.parent")
    (tmp_path / "bad.yaml").write_text(HEAD % "x" + "enabled: !!bool maybe\n")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00junk")
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    with open(tmp_path / "big.yaml", "wb") as f:
        f.truncate(4 << 30)
    child = write(tmp_path / "child.yaml", "extends: [the.parent]\n")
    assert [g.id for g in load_config(child).groups] == ["a"]
    # A broken file that mentions the ID it was meant to declare is named in the error.
    (tmp_path / "typo.yaml").write_text(HEAD % "the.missing" + "optimization_groups: [\n")
    lost = write(tmp_path / "lost.yaml", "extends: [the.missing]\n")
    with pytest.raises(ConfigError, match="a file that could not be read mentions it: .*typo.yaml"):
        load_config(lost)


def test_extends_chains_and_fans_are_bounded(tmp_path):
    for i in range(LOAD_LIMITS["chain"] + 2):
        write(tmp_path / f"c{i}.yaml", f"extends: [c{i + 1}.yaml]\n" if i <= LOAD_LIMITS["chain"] else "")
    with pytest.raises(ConfigError, match=f"more than {LOAD_LIMITS['chain']} files deep"):
        load_config(tmp_path / "c0.yaml")
    for i in range(12):  # a chain of 12, extended 10 times: 121 files merged
        write(tmp_path / f"fan{i}.yaml", f"extends: [fan{i + 1}.yaml]\n" if i < 11 else "")
    wide = write(tmp_path / "wide.yaml", "extends: [" + ", ".join(["fan0.yaml"] * 10) + "]\n")
    with pytest.raises(ConfigError, match=f"more than {LOAD_LIMITS['files']} files"):
        load_config(wide)


def test_turbophysai_layout_recipes_are_not_ids(tmp_path):
    root = tmp_path / "turbo_physai" / "optimizations"
    write(root / "common/mmcv/configs/optimization.yaml", "optimization_groups: [{id: mmcv.msda}]\n", "framework.mmcv.hcu")
    write(root / "common/mmcv/configs/recipe.yaml", "optimization_groups: [{id: other}]\n", "framework.mmcv.hcu")
    write(root / "common/configs/recipe.yaml", "", "common.hcu.base")
    base = write(root / "common/configs/optimization.yaml", "extends: [framework.mmcv.hcu]\n", "common.hcu.base")
    model = write(root / "models/m/configs/optimization.yaml", "extends: [common.hcu.base]\n", "model.m")
    assert [g.id for g in load_config(base).groups] == ["mmcv.msda"]
    assert [g.id for g in load_config(model).groups] == ["mmcv.msda"]
    # Outside a configs folder of the layout only the neighbours are searched.
    outside = write(tmp_path / "mine.yaml", "extends: [framework.mmcv.hcu]\n")
    with pytest.raises(ConfigError, match="no config with metadata.id 'framework.mmcv.hcu'"):
        load_config(outside)
    # A recipe alone is named: it is the input to generate, not an extends target.
    (root / "common/mmcv/configs/optimization.yaml").unlink()
    with pytest.raises(ConfigError, match="recipe.yaml declares it, but recipes are not extends targets"):
        load_config(base)
