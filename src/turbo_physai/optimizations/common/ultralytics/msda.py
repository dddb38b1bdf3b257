"""The Ultralytics catalog's MSDA group: its compatibility check.

``ultralytics.nn.modules.utils.multi_scale_deformable_attn_pytorch`` is the code replaced; its
math (bilinear ``grid_sample``, zeros padding, ``align_corners=False``, the folded level-major
``L*P`` axis split in runs of ``P``) is what :func:`turbo_physai.ops.frontends.
ultralytics_function` reproduces, so the group applies where that function's code is a validated
version (:mod:`..host_code`, table ``validated.json`` beside this file; 8.3 releases pass rank-6
locations: a different fingerprint, blocked until validated).
``python -m turbo_physai.optimizations.common.ultralytics.msda record`` records the installed
release's fingerprints after the catalog tests passed on it.
"""

from __future__ import annotations

from pathlib import Path

from ....engine.context import CompatibilityResult
from .. import host_code

FUNCTION = "ultralytics.nn.modules.utils.multi_scale_deformable_attn_pytorch"

EVIDENCE = host_code.Evidence(
    package="ultralytics",
    file=Path(__file__).with_name("validated.json"),
    validate="run tests/catalogs/test_ultralytics.py with TPA_VALIDATE_ULTRALYTICS={release}, "
    f"then `python -m {__spec__.name} record`",
)


def check(context) -> CompatibilityResult:
    return host_code.check(context, EVIDENCE)


if __name__ == "__main__":
    import sys

    from ....catalogs import ultralytics as catalog
    from . import denoising

    # the same table; the denoising group's evidence also records the head's forward it reads
    host_code.main(denoising.EVIDENCE, catalog.GROUPS, sys.argv[1:])
