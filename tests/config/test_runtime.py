"""RuntimeConfig: TurboPhysAI's v1 layout, errors with file:line, cpulists."""

# ruff: noqa: E501  (one case per line reads best in these tables)

import pytest

from turbo_physai.config import ConfigError
from turbo_physai.config.runtime import cpu_list, load_runtime_config

HEAD = "schema_version: turbophysai/runtime-config/v1\nkind: RuntimeConfig\n"


def load(tmp_path, body):
    path = tmp_path / "runtime.yaml"
    path.write_text(HEAD + body)
    return load_runtime_config(path)


def test_turbophysai_layout(tmp_path):
    rc = load(tmp_path, "environment:\n  set:\n    A: '1'\n    B: x\n  unset: [C]\n"
                        "process:\n  numa: false\n  rank_affinity: {0: '0-1', 1: [2, 3]}\n"
                        "  rank_numa: {}\n")
    assert rc.set == {"A": "1", "B": "x"} and rc.unset == ("C",)
    assert rc.rank_affinity == {0: (0, 1), 1: (2, 3)}
    assert rc.environ({"C": "gone", "D": "kept"}) == {"D": "kept", "A": "1", "B": "x"}


@pytest.mark.parametrize("body, line, needle", [
    ("environment:\n  set:\n    A: true\n", 5, "environment.set.A: expected a string"),
    ("environment:\n  sett: {}\n", 4, "environment.sett: unknown key"),
    ("process:\n  numa: true\n", 4, "process.numa: NUMA binding is not supported"),
    ("process:\n  rank_affinity: {0: 'x-1'}\n", 4, "process.rank_affinity.0: 'x-1' is not a cpulist"),
    ("process:\n  rank_affinity: {-1: [0]}\n", 4, "ranks are non-negative"),
    ("extra: 1\n", 3, "extra: unknown key"),
])
def test_errors(tmp_path, body, line, needle):
    with pytest.raises(ConfigError) as err:
        load(tmp_path, body)
    assert str(err.value).startswith(f"{tmp_path / 'runtime.yaml'}:{line}:")
    assert needle in str(err.value)


@pytest.mark.parametrize("value, cpus", [("0-2,5", (0, 1, 2, 5)), ([4], (4,)), ("7", (7,))])
def test_cpu_list(value, cpus):
    assert cpu_list(value) == cpus


@pytest.mark.parametrize("value", ["3-1", "", [], [True], "a"])
def test_bad_cpu_list(value):
    with pytest.raises(ValueError):
        cpu_list(value)
