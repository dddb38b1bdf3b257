"""The Ultralytics catalog's MSDA group: its compatibility check.

``ultralytics.nn.modules.utils.multi_scale_deformable_attn_pytorch`` is the code replaced; its
math (bilinear ``grid_sample``, zeros padding, ``align_corners=False``, the folded level-major
``L*P`` axis split in runs of ``P``) is what :func:`turbo_physai.ops.frontends.
ultralytics_function` reproduces, so the group applies where that function's code is a validated
version (8.3 releases pass rank-6 locations: a different fingerprint, blocked until validated).
"""

from __future__ import annotations

from ....engine.context import CompatibilityResult
from ..host_code import Validated
from ..host_code import check as _check

FUNCTION = "ultralytics.nn.modules.utils.multi_scale_deformable_attn_pytorch"

VALIDATED = Validated(
    package="ultralytics",
    fingerprints={
        FUNCTION: {
            "ast-v1:ae56cdf79c4cfa86edc8ab076dd922e3c51d5fa75a9e0809281fbc798162d1ec": ("8.4.190",),
        },
    },
    how="run tests/catalogs/test_ultralytics.py on it and add the fingerprint with the release "
    "to turbo_physai.optimizations.common.ultralytics.msda.VALIDATED",
)


def check(context) -> CompatibilityResult:
    return _check(context, VALIDATED)
