"""libreyolo catalog: turbo_physai as LibreYOLO's kernel provider.

- ``libreyolo.kernels``: our implementations registered into ``libreyolo.kernels`` slots,
  ``ms_deform_attn`` (CPU and CUDA, with a backward) and LibreYOLO's eight fake-quantization and
  two unpack slots (option ``slots`` picks some; default all). Every family that consults the
  slot then runs our op in eager runs (Grounding DINO, EC and the others too).
- ``libreyolo.<family>.msda``: the MSDA call sites of RT-DETR, RT-DETRv2, D-FINE, DEIM, LW-DETR,
  RF-DETR, Deformable DETR, Grounding DINO, EC (its pose decoder and v2 core) and OV-DEIM on our
  op directly, under ``torch.compile`` and ``torch.export`` as well (where LibreYOLO switches its
  slot off).
- ``libreyolo.<family>.cuda_graph``: the family's model forward captured and replayed as CUDA
  graphs (``optimizations.common.cuda_graph``), forward and backward; a call with targets (a
  list of dicts: denoising queries) runs eagerly, saying so. Not in the shipped config.

Validated against libreyolo 1.6 (``optimizations.common.libreyolo.slots.VALIDATED``; every
group's compatibility_check blocks other releases). Declaring imports nothing; see
docs/catalogs/libreyolo.md for the groups, what they reach and what they do not.
"""

from __future__ import annotations

from ..engine.declarations import group, replace, wrap
from ..optimizations.common.cuda_graph import capture_group

#: The distributions whose code this catalog patches (`turbo-physai list` shows their releases).
HOST_PACKAGES = ("libreyolo",)

_OPT = "turbo_physai.optimizations.common.libreyolo"
_REGISTRY = "libreyolo.kernels"

KERNELS = group(
    "libreyolo.kernels",
    wrap(target=f"{_REGISTRY}._REGISTRY", replacement=f"{_OPT}.slots.registry_with_ours"),
    wrap(target=f"{_REGISTRY}._RESOLVED", replacement=f"{_OPT}.slots.empty_cache"),
    compatibility_check=f"{_OPT}.slots.check",
)

_V1 = ("ms_deform_attn_available", "maybe_ms_deform_attn", "spatial_shapes_tensor")
_V2 = ("ms_deform_attn_available", "maybe_ms_deform_attn_v2", "spatial_shapes_tensor")

#: family -> its MSDA call sites: (the module holding a core, the slot functions that module
#: imports by name), under ``libreyolo.models``.
FAMILIES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "rtdetr": (("rtdetr.utils", _V1),),
    "rtdetrv2": (("rtdetrv2.utils", _V2),),
    "dfine": (("dfine.ms_deform", _V2),),
    "deim": (("deim.ms_deform", _V2),),
    "lwdetr": (("lwdetr.nn", _V1),),
    "rfdetr": (("rfdetr.transformer", ("maybe_ms_deform_attn",)),),
    "deformable_detr": (("deformable_detr.ms_deform_attn", ("maybe_ms_deform_attn",)),),
    "grounding_dino": (("grounding_dino.nn", _V1),),
    "ec": (("ec.decoder", _V1), ("ec.utils", _V2)),  # the pose decoder's core; the v2 core
    "ovdeim": (("openvocab.ovdeim.decoder", _V2),),
}


def _family_group(family: str, sites: tuple[tuple[str, tuple[str, ...]], ...]):
    return group(
        f"libreyolo.{family}.msda",
        *(
            replace(
                target=f"libreyolo.models.{module}.{name}", replacement=f"{_OPT}.families.{name}"
            )
            for module, names in sites
            for name in names
        ),
        compatibility_check=f"{_OPT}.slots.check_release",
    )


FAMILY_GROUPS = tuple(_family_group(f, sites) for f, sites in FAMILIES.items())

#: family -> its model class (under ``libreyolo.models``), whose forward takes the images (and
#: optional targets) and returns the detections.
MODELS = {
    "rtdetr": "rtdetr.nn.RTDETRModel",
    "rtdetrv2": "rtdetrv2.nn.RTDETRv2Model",
    "dfine": "dfine.nn.LibreDFINEModel",
    "deim": "deim.nn.LibreDEIMModel",
    "lwdetr": "lwdetr.nn.LibreLWDETRModel",
    "rfdetr": "rfdetr.nn.LibreRFDETRModel",
    "deformable_detr": "deformable_detr.nn.LibreDeformableDETRModel",
}

CUDA_GRAPH_GROUPS = tuple(
    capture_group(
        f"libreyolo.{family}.cuda_graph",
        f"libreyolo.models.{model}.forward",
        depends_on=(f"libreyolo.{family}.msda",),
    )
    for family, model in MODELS.items()
)

GROUPS = (KERNELS, *FAMILY_GROUPS, *CUDA_GRAPH_GROUPS)
