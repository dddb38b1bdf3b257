"""OpenVLA catalog (TurboPhysAI's ``turbo_physai.optimizations.models.openvla.catalog``).

Targets are OpenVLA's ``prismatic`` package (commit c8f03f48 as TurboPhysAI pins it) and torch.
Ours: ``openvla.adamw.fused`` and ``openvla.gc.freeze`` (``training.py``). TurboPhysAI's other
groups are a Hygon DCU fix (``platform.unsupported``) or rewrites of OpenVLA's own code
turbo_physai does not have (``replacement.unavailable``): declared with their targets, blocked.
"""

from __future__ import annotations

from ....engine.declarations import group, wrap
from ...unsupported import PLATFORM, UNAVAILABLE, blocked, target

#: OpenVLA (``prismatic``) is installed from its source tree; no distribution names it
#: (`turbo-physai list`).
HOST_PACKAGES = ()

_OPT = "turbo_physai.optimizations.models.openvla.training"
_REWRITE = "turbo_physai has no replacement for TurboPhysAI's {}"
_STRATEGY = "prismatic.training.strategies"
_DATASETS = "prismatic.vla.datasets"


def _rewrite(group_id: str, what: str, *targets):
    return blocked(group_id, *targets, code=UNAVAILABLE, missing=_REWRITE.format(what))


BF16_SUPPORT = blocked(
    "openvla.bf16_support",
    target("prismatic.util.torch_utils.check_bloat16_supported", aliases=(
        "prismatic.util.check_bloat16_supported",
        f"{_STRATEGY}.base_strategy.check_bloat16_supported",
    )),
    code=PLATFORM,
    missing="TurboPhysAI's bfloat16 detection for Hygon DCUs, where prismatic's check fails; "
    "on CUDA prismatic's own check is right",
)
COMPILE_FSDP1 = _rewrite(
    "openvla.compile.fsdp1", "per-layer torch.compile inside prismatic's FSDP strategy",
    target(f"{_STRATEGY}.fsdp.FSDPStrategy.run_setup"),
    target(f"{_STRATEGY}.fsdp.FSDPStrategy.save_checkpoint"),
    target("timm.models.vision_transformer.VisionTransformer._intermediate_layers"),
)
FUSED_ADAMW = group("openvla.adamw.fused", wrap("torch.optim.AdamW", f"{_OPT}.adamw_fused_wrapper"))
FSDP_PREFETCH = _rewrite(
    "openvla.fsdp.prefetch", "FSDP1 prefetch defaults",
    target("torch.distributed.fsdp.FullyShardedDataParallel",
           aliases=(f"{_STRATEGY}.fsdp.FSDP",)),
)
TEXT_LEN_BUCKET = _rewrite(
    "openvla.data.text_len_bucket", "bucketed text padding",
    target("prismatic.util.data_utils.PaddedCollatorForActionPrediction.__call__"),
)
SKIP_FA2_UNPAD = _rewrite(
    "openvla.llm.skip_fa2_unpad",
    "FlashAttention-2 causal-mask shortcut in transformers' Llama (a method current "
    "transformers no longer has)",
    target("transformers.models.llama.modeling_llama.LlamaModel._update_causal_mask"),
)
DATALOADER_SPAWN = _rewrite(
    "openvla.dataloader.spawn", "spawned RLDS data-loader workers",
    target(f"{_DATASETS}.datasets.RLDSDataset", aliases=(
        f"{_DATASETS}.RLDSDataset", "prismatic.vla.materialize.RLDSDataset")),
    target(f"{_DATASETS}.datasets.EpisodicRLDSDataset", aliases=(
        f"{_DATASETS}.EpisodicRLDSDataset", "prismatic.vla.materialize.EpisodicRLDSDataset")),
    target("torch.utils.data.DataLoader", aliases=(f"{_STRATEGY}.base_strategy.DataLoader",)),
)
DATA_ORDER = _rewrite(
    "openvla.reproducibility.data_order", "seeded RLDS data order",
    target("prismatic.util.torch_utils.set_global_seed",
           aliases=("prismatic.util.set_global_seed",)),
    target("prismatic.util.torch_utils.worker_init_function"),
    target(f"{_DATASETS}.rlds.dataset.make_dataset_from_rlds"),
    target(f"{_DATASETS}.rlds.dataset.make_interleaved_dataset", aliases=(
        f"{_DATASETS}.rlds.make_interleaved_dataset",
        f"{_DATASETS}.datasets.make_interleaved_dataset")),
    target("dlimp.DLataset.sample_from_datasets"),
    target("dlimp.DLataset.shuffle"),
)
DETERMINISM = _rewrite(
    "openvla.reproducibility.determinism", "determinism settings after PrismaticVLM.__init__",
    target("prismatic.models.vlms.prismatic.PrismaticVLM.__init__"),
)
GC_FREEZE = group(
    "openvla.gc.freeze",
    wrap(f"{_STRATEGY}.base_strategy.TrainingStrategy.run_vla_training",
         f"{_OPT}.gc_freeze_wrapper"),
)

GROUPS = (
    BF16_SUPPORT, COMPILE_FSDP1, FUSED_ADAMW, FSDP_PREFETCH, TEXT_LEN_BUCKET, SKIP_FA2_UNPAD,
    DATALOADER_SPAWN, DATA_ORDER, DETERMINISM, GC_FREEZE,
)
