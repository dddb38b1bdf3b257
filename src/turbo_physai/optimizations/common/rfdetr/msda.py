"""The RF-DETR catalog's MSDA group: its compatibility check.

``rfdetr.models.ops.functions.ms_deform_attn_func.ms_deform_attn_core_pytorch`` is the code
replaced, and it samples through ``rfdetr.utilities.tensors._bilinear_grid_sample`` (bilinear
``grid_sample``, zeros padding, ``align_corners=False`` on CPU and CUDA): the group applies where
both are validated versions (:func:`turbo_physai.ops.frontends.rfdetr_function` reproduces them).
"""

from __future__ import annotations

from ....engine.context import CompatibilityResult
from ..host_code import Validated
from ..host_code import check as _check

FUNCTION = "rfdetr.models.ops.functions.ms_deform_attn_func.ms_deform_attn_core_pytorch"
GRID_SAMPLE = "rfdetr.utilities.tensors._bilinear_grid_sample"

VALIDATED = Validated(
    package="rfdetr",
    fingerprints={
        FUNCTION: {
            "ast-v1:090d6771c0582dbeb79cc7196836f873ae1bc2f90d2a771c08d3f8baa9c7dd99": ("1.11.2",)
        },
        GRID_SAMPLE: {
            "ast-v1:8fa5c008473392d868a8ec96dd4635e9ad7305e61f67afe01ae2c7bf3c3de5e4": ("1.11.2",)
        },
    },
    how="run tests/catalogs/test_rfdetr.py on it and add the fingerprints with the release "
    "to turbo_physai.optimizations.common.rfdetr.msda.VALIDATED",
)


def check(context) -> CompatibilityResult:
    return _check(context, VALIDATED)
