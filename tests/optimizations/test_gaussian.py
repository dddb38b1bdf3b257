"""mmdet3d.gaussian and bevfusion.gaussian replacements against the fixture's stock numpy
implementation (MMDetection3D's code), and the sparity property."""

import numpy as np
import pytest
from openmmlab_env import openmmlab_packages

from turbo_physai.optimizations.common.mmdet3d import gaussian, sparse_tensor
from turbo_physai.optimizations.models.bevfusion import gaussian as bevfusion

torch = pytest.importorskip("torch")


@pytest.fixture
def stock():
    with openmmlab_packages():
        from mmdet3d.core.utils import gaussian as stock_gaussian

        yield stock_gaussian


# Odd and even sizes (half-integer centres), non-square, and sigmas small enough that the
# eps * max cut-off zeroes the corners.
SHAPES = [((7, 7), 7 / 6), ((4, 6), 1.0), ((9, 5), 0.5), ((25, 25), 0.3), ((1, 3), 2.0)]


@pytest.mark.parametrize("shape, sigma", SHAPES)
def test_stock_call_returns_the_stock_ndarray(shape, sigma, stock):
    ours, theirs = gaussian.gaussian_2d(shape, sigma), stock.gaussian_2d(shape, sigma=sigma)
    assert isinstance(ours, np.ndarray) and ours.dtype == theirs.dtype == np.float64
    assert ours.shape == theirs.shape
    assert np.array_equal(ours == 0, theirs == 0)  # same cut-off pattern
    # numpy and torch use different exp implementations: a few ulp apart at most.
    np.testing.assert_allclose(ours, theirs, rtol=4e-16, atol=0)


def test_tensor_call_builds_on_device_in_dtype(stock):
    ours = gaussian.gaussian_2d((5, 5), 5 / 6, device="cpu")
    assert isinstance(ours, torch.Tensor) and ours.dtype == torch.float32
    expected = torch.from_numpy(stock.gaussian_2d((5, 5), sigma=5 / 6)).float()
    torch.testing.assert_close(ours, expected, rtol=2.4e-7, atol=0)  # float32 exp: 2 ulp
    assert gaussian.gaussian_2d((5, 5), 1, dtype=torch.float64).dtype == torch.float64


def _centers(gen, height, width):
    inside = torch.stack(
        [
            torch.randint(0, width, (6,), generator=gen),
            torch.randint(0, height, (6,), generator=gen),
        ],
        1,
    )
    edges = torch.tensor([[0, 0], [width - 1, height - 1], [-2, 3], [width + 1, 2], [3, -9]])
    return torch.cat([inside, edges]).to(torch.int32)


@pytest.mark.parametrize("radius, k", [(0, 1), (2, 1), (5, 0.5), (9, 2)])
def test_draw_heatmap_gaussian_matches_stock(radius, k, stock):
    gen = torch.Generator().manual_seed(radius)
    height, width = 20, 17
    base = torch.rand(height, width, generator=gen) * 0.5
    ours, theirs = base.clone(), base.clone()
    for center in _centers(gen, height, width):
        assert bevfusion.draw_heatmap_gaussian(ours, center, radius, k) is ours
        stock.draw_heatmap_gaussian(theirs, center, radius, k)
    # float32 values from float64 Gaussians that agree to a few ulp: equal after rounding,
    # one float32 ulp allowed for a value sitting on a rounding boundary.
    torch.testing.assert_close(ours, theirs, rtol=1.2e-7, atol=0)
    assert not torch.equal(ours, base)  # the boxes did draw


def test_draw_heatmap_gaussian_float_centre_and_non_contiguous_heatmap(stock):
    storage = torch.zeros(2, 12, 15)
    ours = storage.clone().transpose(1, 2)[0]  # (15, 12), not contiguous
    theirs = ours.clone()
    for center in ([3.7, 4.2], torch.tensor([10.9, 0.5]), (11, 14)):
        bevfusion.draw_heatmap_gaussian(ours, center, 3)
        stock.draw_heatmap_gaussian(theirs, center, 3)
    torch.testing.assert_close(ours, theirs, rtol=1.2e-7, atol=0)


@pytest.mark.parametrize(
    "spatial_shape", [[41, 1440, 1440], np.array([11, 400, 352]), (7, 9)]
)
def test_sparity_equals_the_numpy_property(spatial_shape):
    # structure.py loaded by file: importing its package needs the registry override.
    import importlib.util

    with openmmlab_packages() as root:
        path = root / "mmdet3d" / "ops" / "spconv" / "structure.py"
        spec = importlib.util.spec_from_file_location("tpa_stock_structure", path)
        structure = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(structure)
    indices = torch.zeros(12345, 4, dtype=torch.int32)
    tensor = structure.SparseConvTensor(None, indices, spatial_shape, batch_size=3)
    assert sparse_tensor.sparity.fget(tensor) == tensor.sparity
