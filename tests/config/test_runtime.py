"""RuntimeConfig: TurboPhysAI's v1 layout and meaning, errors with file:line, cpulists, the
trust rule for code-loading variables, ``--set``."""

# ruff: noqa: E501  (one case per line reads best in these tables)

import pytest

from turbo_physai.config import ConfigError
from turbo_physai.config.runtime import (
    cpu_list,
    is_runtime_config,
    load_runtime_config,
    loads_code,
    overrides,
)

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
    assert rc.numa is False
    assert rc.environ({"C": "gone", "D": "kept"}) == {"D": "kept", "A": "1", "B": "x"}
    assert rc.environ({"A": "0"}, {"A": "2", "E": "e"}) == {"A": "2", "B": "x", "E": "e"}


@pytest.mark.parametrize("body, numa, rank_numa", [
    ("", True, {}),  # TurboPhysAI's default: numa on when the key is absent
    ("process:\n  numa: true\n", True, {}),
    ("process:\n  numa: auto\n", True, {}),
    ("process:\n  numa: false\n  rank_numa: {'1': 3}\n", False, {1: 3}),
    ("process:\n  rank_numa: {'0': 2, 1: '1'}\n", True, {0: 2, 1: 1}),
])
def test_numa_settings(tmp_path, body, numa, rank_numa):
    rc = load(tmp_path, body)
    assert rc.numa is numa and rc.rank_numa == rank_numa
    placement = rc.placement()
    assert placement["numa"] is numa
    # numa: false drops rank_numa, as TurboPhysAI's prepare_environment does.
    assert placement["rank_numa"] == ({str(r): n for r, n in rank_numa.items()} if numa else {})
    assert rc.placement(numa=False)["rank_numa"] == {}


def test_scalars_become_strings_as_in_turbophysai(tmp_path):
    rc = load(tmp_path, "environment:\n  set:\n    A: 1\n    B: 1.5\n    C: true\n")
    assert rc.set == {"A": "1", "B": "1.5", "C": "True"}


@pytest.mark.parametrize("body, line, needle", [
    ("environment:\n  set:\n    A: [1]\n", 5, "environment.set.A: expected a string"),
    ("environment:\n  set:\n    A:\n", 5, "environment.set.A: expected a string"),
    ("environment:\n  set:\n    A=B: x\n", 5, "not an environment variable name"),
    ("environment:\n  sett: {}\n", 4, "environment.sett: unknown key"),
    ("process:\n  numa: maybe\n", 4, "process.numa: expected true, false or 'auto'"),
    ("process:\n  rank_numa: {0: -1}\n", 4, "process.rank_numa.0: expected a NUMA node"),
    ("process:\n  rank_numa: {x: 1}\n", 4, "process.rank_numa.x: ranks are non-negative"),
    ("process:\n  rank_affinity: {0: 'x-1'}\n", 4, "process.rank_affinity.0: 'x-1' is not a cpulist"),
    ("process:\n  rank_affinity: {-1: [0]}\n", 4, "ranks are non-negative"),
    ("process:\n  rank_affinity: [0]\n", 4, "process.rank_affinity: expected a mapping"),
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


@pytest.mark.parametrize("value", ["3-1", "", [], [True], "a", "1" * 40, "0-" + "9" * 9])
def test_bad_cpu_list(value):
    with pytest.raises(ValueError):
        cpu_list(value)


@pytest.mark.parametrize("name", ["PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "LD_PRELOAD",
                                  "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "PATH",
                                  "PYTHONWARNINGS", "PYTHONBREAKPOINT", "TORCHINDUCTOR_CACHE_DIR"])
def test_code_loading_variables(name):
    assert loads_code(name)


@pytest.mark.parametrize("name", ["OMP_NUM_THREADS", "NCCL_ALGO", "MIOPEN_FIND_MODE", "HF_HUB_OFFLINE"])
def test_plain_variables(name):
    assert not loads_code(name)


def test_untrusted_names_file_line_and_variable(tmp_path):
    rc = load(tmp_path, "environment:\n  set:\n    OK: '1'\n    PYTHONPATH: evil\n    LD_PRELOAD: x.so\n")
    where = tmp_path / "runtime.yaml"
    assert rc.untrusted() == [f"{where}:6: PYTHONPATH", f"{where}:7: LD_PRELOAD"]


def test_set_overrides():
    assert overrides(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    for bad in ["A", "=1", "1A=2", "A B=1"]:
        with pytest.raises(ConfigError, match="--set"):
            overrides([bad])


def test_is_runtime_config(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(HEAD)
    assert is_runtime_config(path)
    path.write_text("kind: OptimizationConfig\n")
    assert not is_runtime_config(path)
    path.write_text("a: [\n")
    assert not is_runtime_config(path)
