"""Replacements of the Cosmos3 and OpenVLA catalogs: HF attention through SDPA against the
stock contract (explicit softmax attention in float64), fused AdamW, gc.freeze; each group
applied to the stand-ins (tests/fixtures/turbophysai/targets) and rolled back."""

import gc

import pytest
from turbophysai_env import corpus_targets

import turbo_physai as tpa
from turbo_physai.optimizations.models.cosmos3.attention import hf_attention_cosmos
from turbo_physai.optimizations.models.openvla import training

torch = pytest.importorskip("torch")


@pytest.fixture
def targets():
    with corpus_targets():
        yield


class Module:
    def __init__(self, is_causal):
        self.is_causal = is_causal


@pytest.mark.usefixtures("targets")
@pytest.mark.parametrize("causal, heads, kv_heads, q_len, k_len, scale", [
    (False, 4, 4, 5, 5, None), (True, 4, 4, 6, 6, None), (True, 4, 2, 3, 7, 0.3),
    (False, 6, 1, 1, 9, None), (True, 2, 2, 1, 1, None)])
def test_sdpa_attention_matches_the_stock_contract(causal, heads, kv_heads, q_len, k_len, scale):
    from cosmos_framework.utils.generator.hf_attention_cosmos import hf_attention_cosmos as stock

    gen = torch.Generator().manual_seed(heads * 7 + q_len)
    q = torch.randn(2, heads, q_len, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, kv_heads, k_len, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, kv_heads, k_len, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    module = Module(causal)
    expected, none = stock(module, q, k, v, None, scaling=scale)
    got, weights = hf_attention_cosmos(module, q, k, v, None, scaling=scale)
    assert none is None and weights is None and got.shape == (2, q_len, heads, 8)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    grad = torch.randn(got.shape, generator=gen, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(got, (q, k, v), grad),
                    torch.autograd.grad(expected, (q, k, v), grad), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_sdpa_attention_refuses_what_the_stock_one_refuses():
    q = torch.zeros(1, 2, 3, 4)
    for kwargs in ({"dropout": 0.1}, {"sliding_window": 4}):
        with pytest.raises(NotImplementedError):
            hf_attention_cosmos(Module(False), q, q, q, None, **kwargs)
    with pytest.raises(NotImplementedError, match="attention_mask"):
        hf_attention_cosmos(Module(False), q, q, q, torch.ones(1, 1, 3, 3))


@pytest.mark.usefixtures("targets")
def test_cosmos3_hf_attention_group_applies_and_rolls_back():
    from cosmos_framework.utils.generator import hf_attention_cosmos as module

    stock = module.hf_attention_cosmos
    with tpa.applied(tpa.OptimizationConfig.for_groups("cosmos3.hf_attention")) as report:
        assert report.group("cosmos3.hf_attention").status == "applied", str(report)
        assert module.hf_attention_cosmos is hf_attention_cosmos
    assert module.hf_attention_cosmos is stock


def test_fused_adamw_only_for_cuda_parameters(monkeypatch):
    adamw = training.adamw_fused_wrapper(torch.optim.AdamW, {})
    assert (adamw.__name__, adamw.__module__) == ("AdamW", torch.optim.AdamW.__module__)
    cpu = [torch.nn.Parameter(torch.zeros(3))]
    assert not adamw(cpu, lr=0.1).defaults["fused"]  # CPU parameters: as written
    monkeypatch.setattr(training, "_all_cuda", lambda params: True)
    assert adamw(cpu, lr=0.1).defaults["fused"] is True
    assert not adamw(cpu, lr=0.1, foreach=False).defaults["fused"]  # the caller chose
    assert adamw([{"params": cpu}], lr=0.1, fused=False).defaults["fused"] is False
    with pytest.raises(ValueError, match="takes no options"):
        training.adamw_fused_wrapper(torch.optim.AdamW, {"fused": True})


def test_all_cuda_reads_parameter_groups():
    class Fake:
        is_cuda = True

        def is_floating_point(self):
            return True

    assert training._all_cuda([Fake(), {"params": [Fake()]}])
    assert not training._all_cuda([Fake(), torch.zeros(1)])
    assert not training._all_cuda([])


@pytest.mark.usefixtures("targets")
def test_gc_freeze_before_the_training_loop():
    from prismatic.training.strategies.base_strategy import TrainingStrategy

    gc.unfreeze()
    assert TrainingStrategy().run_vla_training(None, None, None) == 0
    try:
        with tpa.applied(tpa.OptimizationConfig.for_groups("openvla.gc.freeze")) as report:
            assert report.group("openvla.gc.freeze").status == "applied", str(report)
            assert TrainingStrategy().run_vla_training(None, None, None) > 0
    finally:
        gc.unfreeze()
    assert TrainingStrategy().run_vla_training(None, None, None) == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.usefixtures("targets")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_attention_on_cuda(dtype):
    from cosmos_framework.utils.generator.hf_attention_cosmos import hf_attention_cosmos as stock

    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, h, 64, 64, generator=gen, device="cuda", dtype=dtype)
               for h in (8, 2, 2))
    expected, _ = stock(Module(True), q.double(), k.double(), v.double(), None)
    got, _ = hf_attention_cosmos(Module(True), q, k, v, None)
    assert got.dtype == dtype
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3  # float32 SDPA may use TF32 tensor cores
    torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol)
