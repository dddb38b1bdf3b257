"""The RF-DETR catalog's MSDA group: its compatibility check.

``rfdetr.models.ops.functions.ms_deform_attn_func.ms_deform_attn_core_pytorch`` is the code
replaced, and it samples through ``rfdetr.utilities.tensors._bilinear_grid_sample`` (bilinear
``grid_sample``, zeros padding, ``align_corners=False`` on CPU and CUDA): the group applies where
both are validated versions (:mod:`..host_code`, table ``validated.json`` beside this file;
:func:`turbo_physai.ops.frontends.rfdetr_function` reproduces them).
``python -m turbo_physai.optimizations.common.rfdetr.msda record`` records the installed
release's fingerprints after the catalog tests passed on it.
"""

from __future__ import annotations

from pathlib import Path

from ....engine.context import CompatibilityResult
from .. import host_code

FUNCTION = "rfdetr.models.ops.functions.ms_deform_attn_func.ms_deform_attn_core_pytorch"
GRID_SAMPLE = "rfdetr.utilities.tensors._bilinear_grid_sample"

EVIDENCE = host_code.Evidence(
    package="rfdetr",
    file=Path(__file__).with_name("validated.json"),
    validate="run tests/catalogs/test_rfdetr.py with TPA_VALIDATE_RFDETR={release}, "
    f"then `python -m {__spec__.name} record`",
    relies_on=(GRID_SAMPLE,),
)


def check(context) -> CompatibilityResult:
    return host_code.check(context, EVIDENCE)


if __name__ == "__main__":
    import sys

    from ....catalogs import rfdetr as catalog

    host_code.main(EVIDENCE, catalog.GROUPS, sys.argv[1:])
