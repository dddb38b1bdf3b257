"""transformers catalog: our ``ms_deform_attn`` op in every deformable model of HF transformers,
and ``torch.compile`` of their encoder/decoder layers.

Compatibility is by evidence, not by release: each MSDA group accepts the transformers releases
whose code at its targets has a fingerprint the catalog tests passed on
(``optimizations.common.transformers.evidence``; validated.json lists them). Releases differ in
structure, so a model may have one group per structure: 5.x and 4.50+ give every model its own
``MultiScaleDeformableAttention`` class (``transformers.<m>.msda``); 4.46 and older call a
module-level ``multi_scale_deformable_attention`` from ``<M>MultiscaleDeformableAttention``
(``transformers.<m>.msda_function``). Where a release lacks a model or a structure, the group is
blocked with ``target.unresolved``. Every model module defines its own copy of the class or
function, so no module re-exports another's: there are no aliases to declare. Declaring imports
nothing; see docs/catalogs/transformers.md for the groups and the releases validated. D-FINE and
DEIMv2 store the v2 function on each attention module: ``replace_stored`` reaches them.
"""

from __future__ import annotations

from ..engine.declarations import group, replace, replace_stored, wrap
from ..optimizations.common.cuda_graph import capture_group

#: The distributions whose code this catalog patches (`turbo-physai list` shows their releases).
HOST_PACKAGES = ("transformers",)

_MODELS = "transformers.models"
_OPS = "turbo_physai.ops.frontends"
_OPT = "turbo_physai.optimizations.common"
_CHECK = f"{_OPT}.transformers.msda.check"
COMMON = "transformers.msda.common"

#: Models whose ``MultiScaleDeformableAttention.forward`` has Deformable DETR's signature
#: ``(self, value, value_spatial_shapes, value_spatial_shapes_list, level_start_index,
#: sampling_locations, attention_weights, im2col_step)`` and math (grid_sample, bilinear, zeros).
CLASS_MODELS = (
    "deformable_detr",
    "rt_detr",
    "grounding_dino",
    "mm_grounding_dino",
    "omdet_turbo",
    "lw_detr",
    "rf_detr",
    "pp_doclayout_v2",
    "pp_doclayout_v3",
    "pp_doclayout_v4",
)

#: Models that call a module-level ``multi_scale_deformable_attention(value, shapes, locations,
#: weights)`` by its global name from their attention module's forward.
FUNCTION_MODELS = ("mask2former", "oneformer")
#: Models that did the same in 4.46 and older, before their per-model class (4.50 on).
LEGACY_FUNCTION_MODELS = ("deformable_detr", "rt_detr", "grounding_dino", "omdet_turbo")


def _module(model: str) -> str:
    return f"{_MODELS}.{model}.modeling_{model}"


# Shared by every MSDA group: kernelize binds forwards to instances, past any class-level
# replacement; the guard reports it (optimizations/common/transformers/msda.py says how). Releases
# kernelize in one of two places: 4.57 to 5.10 in the method PreTrainedModel.kernelize (which
# use_kernels calls), later in a module function that modeling_utils imports by name (that copy
# is the one set_use_kernels calls); 4.50 and older have neither. Each target is optional: a
# release that lacks one has nothing there to guard.
MSDA_COMMON = group(
    COMMON,
    wrap(
        target="transformers.integrations.hub_kernels.kernelize",
        aliases=("transformers.modeling_utils.kernelize",),
        replacement=f"{_OPT}.transformers.msda.kernelize_guard",
        optional=True,
    ),
    wrap(
        target="transformers.modeling_utils.PreTrainedModel.kernelize",
        replacement=f"{_OPT}.transformers.msda.kernelize_guard",
        optional=True,
    ),
)

def _msda_group(model: str, target: str, replacement: str, runtime_condition: str | None = None,
                name: str = "msda"):
    return group(
        f"transformers.{model}.{name}",
        replace(
            target=f"{_module(model)}.{target}",
            replacement=f"{_OPS}.{replacement}",
            runtime_condition=runtime_condition,
        ),
        depends_on=(COMMON,),
        compatibility_check=_CHECK,
    )


_CLASS_GROUPS = tuple(
    _msda_group(m, "MultiScaleDeformableAttention.forward", "transformers_forward")
    for m in CLASS_MODELS
)
_FUNCTION_GROUPS = tuple(
    _msda_group(m, "multi_scale_deformable_attention", "transformers_function")
    for m in FUNCTION_MODELS
)
_LEGACY_GROUPS = tuple(
    _msda_group(m, "multi_scale_deformable_attention", "transformers_function",
                name="msda_function")
    for m in LEGACY_FUNCTION_MODELS
)
# RT-DETRv2 concatenates the points of all levels and has a "discrete" sampling method; the
# condition keeps that method on transformers' code (uneven points per level are padded).
RT_DETR_V2 = _msda_group(
    "rt_detr_v2",
    "multi_scale_deformable_attention_v2",
    "transformers_function_v2",
    runtime_condition=f"{_OPS}.v2_supported",
)


#: Models whose attention module stores the v2 function on each instance in ``__init__``
#: (``self.ms_deformable_attn_core = multi_scale_deformable_attention_v2``) and calls it from
#: there: replacing the module function would miss instances built before apply() and outlive
#: rollback() in those built while applied, so ``replace_stored`` answers the instance's read.
STORED_V2_MODELS = {
    "d_fine": "DFineMultiscaleDeformableAttention",
    "deimv2": "Deimv2MultiscaleDeformableAttention",
}
_STORED_GROUPS = tuple(
    group(
        f"transformers.{model}.msda",
        replace_stored(
            owner=f"{_module(model)}.{cls}",
            attribute="ms_deformable_attn_core",
            original=f"{_module(model)}.multi_scale_deformable_attention_v2",
            replacement=f"{_OPS}.transformers_function_v2",
            runtime_condition=f"{_OPS}.v2_supported",
            callers=f"{_module(model)}.{cls}.forward",
        ),
        depends_on=(COMMON,),
        compatibility_check=_CHECK,
    )
    for model, cls in STORED_V2_MODELS.items()
)


def _compile_group(model: str, *classes: str, name: str = "compile"):
    # depends_on the model's MSDA group: the compiled code then holds our op as one graph node
    # (a torch.library custom op with a fake implementation), the combination the tests check
    # with fullgraph=True; transformers' grid_sample loop would be traced op by op instead.
    return group(
        f"transformers.{model}.{name}",
        *(
            wrap(
                target=f"{_module(model)}.{cls}.forward",
                replacement=f"{_OPT}.compile.compile_wrapper",
            )
            for cls in classes
        ),
        depends_on=(f"transformers.{model}.msda",),
    )


COMPILE_DEFORMABLE_DETR = _compile_group(
    "deformable_detr", "DeformableDetrEncoderLayer", "DeformableDetrDecoderLayer"
)
# The whole DeformableDetrModel.forward (backbone, encoder, decoder; the detection heads stay
# eager), which traces without a break (tested with fullgraph=True): for inference on a GPU, where
# the eager model is host-bound, with mode "reduce-overhead" (CUDA graphs).
COMPILE_DEFORMABLE_DETR_MODEL = _compile_group(
    "deformable_detr", "DeformableDetrModel", name="compile_model"
)
COMPILE_RT_DETR = _compile_group("rt_detr", "RTDetrDecoderLayer")
# The whole RTDetrModel.forward (RTDetrForObjectDetection.forward calls it): backbone, hybrid
# encoder, query selection and decoder in one graph, which traces without a break (tested with
# fullgraph=True). Eager RT-DETR is host-bound on a GPU (issue 7): with mode "reduce-overhead"
# the whole forward replays as one CUDA graph instead of launching its kernels from Python, which
# the layer group does for everything outside the decoder layers.
COMPILE_RT_DETR_MODEL = _compile_group("rt_detr", "RTDetrModel", name="compile_model")

#: Layers whose ``forward`` guards float16 overflow in training with a host-side branch on
#: ``torch.isfinite(hidden_states).all()``: ``transformers.<m>.graph_safe`` rewrites it to select
#: on the device, same values (``optimizations.common.graph_safe``), so that a training forward
#: runs without a stream synchronization per layer, compiles without a graph break per layer and
#: can be captured in a CUDA graph (issue 29). Models whose release lacks the class are blocked
#: (target.unresolved); a forward without the guard in a known form, by its check.
GRAPH_SAFE_LAYERS = {
    "deformable_detr": "DeformableDetrEncoderLayer",
    "rt_detr": "RTDetrEncoderLayer",
    "rt_detr_v2": "RTDetrV2EncoderLayer",
    "grounding_dino": "GroundingDinoDeformableLayer",
    "mm_grounding_dino": "MMGroundingDinoDeformableLayer",
    "d_fine": "DFineEncoderLayer",
    "deimv2": "Deimv2EncoderLayer",
    "conditional_detr": "ConditionalDetrEncoderLayer",
    "detr": "DetrEncoderLayer",
    "mask2former": "Mask2FormerPixelDecoderEncoderLayer",
    "oneformer": "OneFormerPixelDecoderEncoderLayer",
    "omdet_turbo": "OmDetTurboEncoderLayer",
    "pp_doclayout_v2": "PPDocLayoutV2EncoderLayer",
}
_GRAPH_SAFE_GROUPS = tuple(
    group(
        f"transformers.{model}.graph_safe",
        wrap(
            target=f"{_module(model)}.{cls}.forward",
            replacement=f"{_OPT}.graph_safe.finite_clamp_wrapper",
        ),
        compatibility_check=f"{_OPT}.graph_safe.check",
    )
    for model, cls in GRAPH_SAFE_LAYERS.items()
)


_LOSS = "transformers.loss"
_DETR_LOSS = f"{_LOSS}.loss_for_object_detection"


def _loss_group(group_id: str, *targets: str | tuple[str, tuple[str, ...]],
                depends_on: tuple[str, ...] = ()):
    """The DETR loss code at ``targets`` (a path, or (path, aliases)) without its host
    synchronizations (graph_safe.loss_wrapper): the matcher's assignment on the device (scipy's
    algorithm and answer), box checks raised after a replay, the box count from the host;
    losses and errors are stock's."""
    return group(
        group_id,
        *(wrap(target=t, replacement=f"{_OPT}.graph_safe.loss_wrapper", aliases=a)
          for t, a in (t if isinstance(t, tuple) else (t, ()) for t in targets)),
        depends_on=depends_on, compatibility_check=f"{_OPT}.graph_safe.check_loss",
    )


#: generalized_box_iou's corner checks, where the DETR losses import it (shared: one wrap).
LOSS_BOX_CHECKS = _loss_group(
    "transformers.detr_loss.box_checks",
    (f"{_DETR_LOSS}.generalized_box_iou",
     (f"{_LOSS}.loss_deformable_detr.generalized_box_iou",
      f"{_LOSS}.loss_rt_detr.generalized_box_iou")))
LOSS_GRAPH_SAFE_DEFORMABLE_DETR = _loss_group(
    "transformers.deformable_detr.loss_graph_safe",
    f"{_LOSS}.loss_deformable_detr.DeformableDetrHungarianMatcher.forward",
    f"{_DETR_LOSS}.ImageLoss.forward", depends_on=(LOSS_BOX_CHECKS.id,))
#: RT-DETR's, and the denoising queries its model builds from the labels (a nonzero).
LOSS_GRAPH_SAFE_RT_DETR = _loss_group(
    "transformers.rt_detr.loss_graph_safe",
    f"{_LOSS}.loss_rt_detr.RTDetrHungarianMatcher.forward",
    f"{_LOSS}.loss_rt_detr.RTDetrLoss.forward",
    f"{_module('rt_detr')}.get_contrastive_denoising_training_group",
    depends_on=(LOSS_BOX_CHECKS.id,))


def _cuda_graph_group(model: str, cls: str, *outer: str, depends_on: tuple[str, ...] = ()):
    # The model forward (backbone, encoder, decoder) captured and replayed as CUDA graphs, its
    # backward too in training (optimizations.common.cuda_graph). Capture needs the forward free
    # of host syncs: our op (no shape copy to the host) and the encoder layers' finite check
    # decided on the device. ``outer``: forwards around it (heads and loss) captured whole where
    # their host syncs are gone too; where they cannot be, the model forward inside still is.
    return capture_group(
        f"transformers.{model}.cuda_graph",
        *(f"{_module(model)}.{c}.forward" for c in (cls, *outer)),
        depends_on=(f"transformers.{model}.msda", f"transformers.{model}.graph_safe",
                    *depends_on),
    )


CUDA_GRAPH_DEFORMABLE_DETR = _cuda_graph_group(
    "deformable_detr", "DeformableDetrModel", "DeformableDetrForObjectDetection",
    depends_on=(LOSS_GRAPH_SAFE_DEFORMABLE_DETR.id,))
# RT-DETR's denoising queries take their shapes from the label counts, which are in the call's
# signature (label shapes); loss_graph_safe leaves them no read-back.
CUDA_GRAPH_RT_DETR = _cuda_graph_group(
    "rt_detr", "RTDetrModel", "RTDetrForObjectDetection",
    depends_on=(LOSS_GRAPH_SAFE_RT_DETR.id,))

GROUPS = (
    MSDA_COMMON,
    *_CLASS_GROUPS,
    *_FUNCTION_GROUPS,
    *_LEGACY_GROUPS,
    RT_DETR_V2,
    *_STORED_GROUPS,
    COMPILE_DEFORMABLE_DETR,
    COMPILE_DEFORMABLE_DETR_MODEL,
    COMPILE_RT_DETR,
    COMPILE_RT_DETR_MODEL,
    *_GRAPH_SAFE_GROUPS,
    LOSS_BOX_CHECKS,
    LOSS_GRAPH_SAFE_DEFORMABLE_DETR,
    LOSS_GRAPH_SAFE_RT_DETR,
    CUDA_GRAPH_DEFORMABLE_DETR,
    CUDA_GRAPH_RT_DETR,
)

#: The MSDA groups (each replaces one model's MSDA code), for every structure of every release.
MSDA_IDS = tuple(
    g.id
    for g in (*_CLASS_GROUPS, *_FUNCTION_GROUPS, *_LEGACY_GROUPS, RT_DETR_V2, *_STORED_GROUPS)
)


def msda_group(model: str) -> str:
    """The id of ``model``'s MSDA group whose target the installed transformers has."""
    from ..engine.paths import ResolutionError, resolve

    declared = [g for g in GROUPS if g.id in MSDA_IDS and g.id.split(".")[1] == model]
    for g in declared:
        decl = g.declarations[0]
        try:
            resolve(getattr(decl, "owner", decl.target))  # replace_stored writes a new name
        except ResolutionError:
            continue
        return g.id
    raise LookupError(f"no MSDA group of {model!r} has its target in the installed transformers "
                      f"(declared: {', '.join(g.id for g in declared) or 'none'})")
