"""Providers in fresh interpreters: lazy imports, TURBO_PHYSAI_KERNELS=off, entry points, hub."""

from __future__ import annotations

import importlib.util
import json
import textwrap

import pytest

import turbo_physai
from turbo_physai.kernels import providers

from .conftest import run_python

torch = pytest.importorskip("torch")

from turbo_physai import _core  # noqa: E402

# The newest built-in implementation of fake_quant_fp8: CUDA where it can run, else C++.
NEWEST = "cuda" if torch.cuda.is_available() and _core.cuda_kernels else "cpp"
needs_hub_package = pytest.mark.skipif(
    importlib.util.find_spec("kernels") is None, reason="the optional `kernels` package is absent"
)

# A made-up commit of a test-only hub repository that exists only in the cache the tests build.
SHA = "5d0c6a1e8b7f4c3a2e1d0c9b8a7f6e5d4c3b2a19"
REPO = "tpa-test/fake-quant"

KERNEL_SOURCE = """
import torch
CALLS = 0

def fake_quant_fp8(x, scale):
    global CALLS
    CALLS += 1
    s = scale.clamp(min=1e-12)
    return (x / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s
"""

HUB_CHECK = f"""
    import json, sys, warnings
    import torch
    from turbo_physai import kernels
    from turbo_physai.kernels import providers, reference
    spec = providers.HubKernel(slot="fake_quant_fp8", repo_id="{REPO}", revision="{SHA}",
                               function="fake_quant_fp8", name="hubfq",
                               requires={{"device": "cpu", "dtype": "float32"}})
    registered = providers.register_hub_kernel(spec)
    x, s = torch.randn(16, 16) * 300, torch.tensor(0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [kernels.fake_quant_fp8(x, s) for _ in range(3)]
    want = reference.fake_quant_fp8_forward(x, s)
    module = next((m for n, m in sys.modules.items() if n.startswith("fq_")), None)
    print(json.dumps({{
        "registered": registered,
        "correct": all(torch.equal(r, want) for r in results),
        "hub_calls": getattr(module, "CALLS", None),
        "warnings": [str(w.message) for w in caught],
        "active": kernels.active()["fake_quant_fp8"],
        "kernels_imported": "kernels" in sys.modules,
    }}))
"""


def build_kernel_repo(root, init_source):
    """A kernel repository as the `kernels` package lays it out: build/<variant>/..."""
    # A noarch "universal" variant: `kernels` accepts it for CPU and CUDA builds of torch alike.
    variant = root / "build" / "torch-universal"
    variant.mkdir(parents=True)
    metadata = {
        "id": "fq_test",
        "name": "fake-quant",
        "version": 1,
        "license": "Apache-2.0",
        "backend": {"type": "cpu"},
        "python-depends": [],
    }
    (variant / "metadata.json").write_text(json.dumps(metadata))
    (variant / "__init__.py").write_text(textwrap.dedent(init_source))
    return root


def build_hub_cache(tmp_path, init_source):
    """The Hugging Face cache holding REPO at the pinned SHA, so `kernels` resolves the pin
    offline through exactly the code path it takes after a download."""
    repo = tmp_path / "hub" / ("kernels--" + REPO.replace("/", "--"))
    build_kernel_repo(repo / "snapshots" / SHA, init_source)
    cache = str(tmp_path / "hub")
    return {"HF_HUB_CACHE": cache, "KERNELS_CACHE": cache}


def result_of(code, env=None, path=None):
    return json.loads(run_python(code, env=env, path=path).strip().splitlines()[-1])


def test_import_does_not_import_torch_or_providers():
    out = result_of("""
        import json, sys
        import turbo_physai, turbo_physai.kernels
        print(json.dumps(sorted(m for m in ("torch", "kernels", "turbo_physai.ops.fake_quant_fp8")
                                if m in sys.modules)))
    """)
    # A CUDA-built core imports torch first (turbo_physai/__init__.py says why); never providers.
    assert out == (["torch"] if turbo_physai._WITH_CUDA else [])


def make_entry_points(tmp_path):
    site = tmp_path / "site"
    dist = site / "tpa_fake_provider-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tpa-fake-provider\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[turbo_physai.kernels]\ngood = tpa_fake_provider:register\nbad = tpa_broken_provider\n"
    )
    (site / "tpa_fake_provider.py").write_text(
        textwrap.dedent("""
        from turbo_physai import kernels
        from turbo_physai.kernels import reference

        def register():
            kernels.register("fake_quant_fp8", reference.fake_quant_fp8_forward, name="ext",
                             requires={"dtype": "float16", "args": [0]})
    """)
    )
    (site / "tpa_broken_provider.py").write_text("raise ImportError('libfoo.so not found')\n")
    return [str(site)]


ENTRY_POINT_CHECK = """
    import json, sys, warnings
    import torch
    from turbo_physai import kernels
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        active = kernels.active()
    half = kernels.resolve("fake_quant_fp8", torch.ones(2, dtype=torch.float16), torch.tensor(1.0))
    print(json.dumps({
        "active": active["fake_quant_fp8"],
        "half": getattr(half, "__name__", None),
        "warnings": [str(w.message) for w in caught],
        "modules": sorted(m for m in ("turbo_physai.ops.fake_quant_fp8", "tpa_fake_provider",
                                      "kernels") if m in sys.modules),
    }))
"""


def test_entry_points_register_and_a_broken_one_warns_once(tmp_path):
    out = result_of(ENTRY_POINT_CHECK, path=make_entry_points(tmp_path))
    assert out["half"] == "fake_quant_fp8_forward"  # the entry point's float16 implementation
    assert out["active"] == "ext"
    assert len(out["warnings"]) == 1
    assert "entry point 'bad'" in out["warnings"][0] and "libfoo.so not found" in out["warnings"][0]


@pytest.mark.parametrize("value", ["off", "reference", "Reference"])
def test_off_imports_no_accelerated_provider(tmp_path, value):
    out = result_of(
        ENTRY_POINT_CHECK, env={"TURBO_PHYSAI_KERNELS": value}, path=make_entry_points(tmp_path)
    )
    assert out["active"] == "reference"
    assert out["half"] == "fake_quant_fp8"  # the reference itself
    assert out["modules"] == []
    assert out["warnings"] == []


def test_named_selection_keeps_only_that_implementation(tmp_path):
    out = result_of(
        ENTRY_POINT_CHECK, env={"TURBO_PHYSAI_KERNELS": "cpp"}, path=make_entry_points(tmp_path)
    )
    assert out["active"] == "cpp"
    assert out["half"] == "fake_quant_fp8"  # 'ext' is registered but not selected


@needs_hub_package
def test_hub_kernel_loads_from_the_pinned_revision(tmp_path):
    out = result_of(HUB_CHECK, env=build_hub_cache(tmp_path, KERNEL_SOURCE))
    assert out["registered"] and out["correct"]
    assert out["hub_calls"] == 3
    assert out["active"] == "hubfq"
    assert out["warnings"] == []


@needs_hub_package
def test_hub_kernel_from_a_local_directory(tmp_path):
    # The `kernels` package's own local override: LOCAL_KERNELS=<repo id>=<directory>.
    repo = build_kernel_repo(tmp_path / "local-repo", KERNEL_SOURCE)
    out = result_of(
        HUB_CHECK,
        env={"LOCAL_KERNELS": f"{REPO}={repo}", "HF_HUB_CACHE": str(tmp_path / "empty-cache")},
    )
    assert out["correct"] and out["hub_calls"] == 3


@needs_hub_package
def test_hub_kernel_that_fails_to_load_falls_back_with_one_warning(tmp_path):
    env = build_hub_cache(tmp_path, "raise ImportError('undefined symbol: _ZN3c10')\n")
    out = result_of(HUB_CHECK, env=env)
    assert out["registered"] and out["correct"]
    assert out["hub_calls"] is None
    assert len(out["warnings"]) == 1
    assert "'hubfq'" in out["warnings"][0] and "undefined symbol" in out["warnings"][0]
    assert out["active"] == NEWEST


def test_hub_disabled_by_variable_never_imports_kernels(tmp_path):
    env = {**build_hub_cache(tmp_path, KERNEL_SOURCE), "TURBO_PHYSAI_HUB_KERNELS": "0"}
    out = result_of(HUB_CHECK, env=env)
    assert not out["registered"] and out["correct"]
    assert not out["kernels_imported"]
    assert out["active"] == NEWEST


@needs_hub_package
def test_hub_variable_also_filters_an_already_registered_hub_kernel(tmp_path):
    code = HUB_CHECK.replace(
        "    x, s = torch.randn",
        "    import os; os.environ['TURBO_PHYSAI_HUB_KERNELS'] = '0'\n    x, s = torch.randn",
    )
    out = result_of(code, env=build_hub_cache(tmp_path, KERNEL_SOURCE))
    assert out["registered"] and out["correct"]
    assert out["hub_calls"] is None and out["active"] == NEWEST


def test_hub_package_absent():
    out = result_of("""
        import importlib.util, json, sys
        real = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *a: None if name == "kernels" else real(name, *a)
        from turbo_physai.kernels import providers
        spec = providers.HubKernel(slot="fake_quant_fp8", repo_id="a/b", revision="0" * 40,
                                   function="f")
        print(json.dumps({"registered": providers.register_hub_kernel(spec),
                          "imported": "kernels" in sys.modules}))
    """)
    assert out == {"registered": False, "imported": False}


@pytest.mark.parametrize("revision", ["main", "v1", SHA[:12], SHA.upper()])
def test_hub_pin_must_be_a_full_commit_sha(revision):
    with pytest.raises(ValueError, match="revision must be a full 40-hex commit SHA"):
        providers.HubKernel(slot="s", repo_id="a/b", revision=revision, function="f")
