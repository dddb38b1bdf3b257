"""Cosmos3 catalog (TurboPhysAI's ``turbo_physai.optimizations.models.cosmos3.catalog``).

Targets are NVIDIA's Cosmos framework (``cosmos_framework``, commit 9726697a as TurboPhysAI
pins it). Ours: ``cosmos3.hf_attention`` (the HF-protocol attention through PyTorch SDPA).
TurboPhysAI's other groups are ports from an HCU-adapted Cosmos commit: HIP kernels and
Hygon DCU settings (``platform.unsupported``) or rewrites of Cosmos's own code turbo_physai does
not have (``replacement.unavailable``); they are declared with their targets and blocked.
Unlike TurboPhysAI's catalog, importing this one does not install a ``tomllib`` fallback
(turbo_physai needs Python >= 3.11, which has it).
"""

from __future__ import annotations

from ....engine.declarations import group, replace
from ...unsupported import PLATFORM, UNAVAILABLE, blocked, module, target

#: Cosmos is installed from its source tree; no distribution names it (`turbo-physai list`).
HOST_PACKAGES = ()

_CF = "cosmos_framework"
_ATT = f"{_CF}.model.attention"
_GEN = f"{_CF}.model.generator"
_MOT = f"{_GEN}.mot"
_VAE = f"{_GEN}.tokenizers.wan2pt2_vae_4x16x16"
_QWEN = f"{_GEN}.reasoner.qwen3_vl.qwen3_vl"
_CKPT = f"{_CF}.checkpoint.dcp.DistributedCheckpointer"
_ACTION = f"{_CF}.data.generator.action.datasets"
_LEROBOT = f"{_ACTION}.cosmos3_action_lerobot"
_PORT = "turbo_physai has no replacement for TurboPhysAI's port of Cosmos3's {} (from an " \
        "HCU-adapted Cosmos commit)"


def _port(group_id: str, what: str, *targets, depends_on=()):
    return blocked(group_id, *targets, code=UNAVAILABLE, missing=_PORT.format(what),
                   depends_on=depends_on)


COMPILE_OPTIONS = _port("cosmos3.compile_options", "torch.compile options",
                        target(f"{_CF}.utils.misc.set_torch_compile_options"))
DEVICE_MONITOR = _port("cosmos3.device_monitor", "device monitor callback",
                       target(f"{_CF}.callbacks.device_monitor.DeviceMonitor.on_train_start"),
                       target(f"{_CF}.callbacks.device_monitor.DeviceMonitor.every_n_impl"))
DTENSOR_NORM = _port("cosmos3.dtensor_norm", "DTensor gradient clipping",
                     target(f"{_CF}.callbacks.grad_clip._clip_grad"))
DATAFLOW_CONTEXT = _port("cosmos3.dataflow_context", "data loader context",
                         target(f"{_CF}.data.generator.dataflow.loader.CosmosDataLoader.__init__"))

FLASH2_HIP = blocked(
    "cosmos3.flash2_hip",
    target(f"{_ATT}.flash2.flash2_attention",
           aliases=(f"{_ATT}.frontend.flash2_attention", f"{_ATT}.frontend.BACKEND_MAP.flash2")),
    target(f"{_ATT}.flash2.functions.flash2_attention"),
    target(f"{_ATT}.flash2.checks.flash2_attention_check",
           aliases=(f"{_ATT}.backends.BACKEND_CHECK_MAP.flash2",)),
    target(f"{_ATT}.backends.get_backend_list"),
    target(f"{_ATT}.utils.get_arch_tag",
           aliases=tuple(f"{_ATT}.{m}.get_arch_tag" for m in (
               "backends", "flash2.checks", "cudnn.checks", "flash3.checks", "natten.checks"))),
    code=PLATFORM,
    missing="HIP FlashAttention-2 and the HIP architecture tag (Hygon DCU/ROCm); on CUDA "
    "Cosmos's own flash2 backend runs with flash-attn",
)

HF_ATTENTION = group(
    "cosmos3.hf_attention",
    replace(f"{_CF}.utils.generator.hf_attention_cosmos.hf_attention_cosmos",
            "turbo_physai.optimizations.models.cosmos3.attention.hf_attention_cosmos"),
)

SEQUENCE_PACKING = _port(
    "cosmos3.sequence_packing", "sequence packing and MoT attention",
    target(f"{_CF}.data.generator.sequence_packing.runtime.init_sequence_pack"),
    target(f"{_MOT}.attention.two_way_attention"),
    target(f"{_MOT}.attention.three_way_attention"),
    target(f"{_MOT}.attention.multi_control_two_way_attention"),
    target(f"{_MOT}.attention.dispatch_attention", aliases=tuple(
        f"{_MOT}.{m}.dispatch_attention"
        for m in ("unified_mot", "parallelize_unified_mot", "inference_text_kv_memory"))),
)
FSDP_VLM = _port(
    "cosmos3.fsdp_vlm", "FSDP setup and loss reductions of the VLM",
    target(f"{_GEN}.parallelize_vlm.apply_fsdp"),
    target(f"{_GEN}.algorithm.loss.cross_entropy.cross_entropy_loss",
           aliases=(f"{_GEN}.vlm_model.cross_entropy_loss",)),
    target(f"{_GEN}.vlm_model.VLMModel.training_step"),
)
GENERATOR_MODEL = _port(
    "cosmos3.generator_model", "generator model build, step and parallelism",
    target(f"{_GEN}.omni_mot_model.OmniMoTModel.build_net"),
    target(f"{_GEN}.omni_mot_model.OmniMoTModel.training_step"),
    target(f"{_GEN}.omni_mot_model.OmniMoTModel.set_up_parallelism"),
    target(f"{_CF}.utils.misc.to"),
)
VAE_LAYOUT = blocked(
    "cosmos3.vae_layout",
    *(target(f"{_VAE}.{name}") for name in (
        "_contiguous_clone", "_update_cache_and_apply", "CausalConv3d.forward", "Resample.forward",
        "AttentionBlock.forward", "AvgDown3D.forward", "DupUp3D.forward",
        "WanVAE_._encode_chunk_impl", "WanVAE_.encode", "WanVAE.encode", "WanVAE.decode",
        "WanVAE.__init__", "Wan2pt2VAEInterface.__init__")),
    code=PLATFORM,
    missing="the Wan VAE's channels-last port with hipDNN fused causal Conv3d (Hygon DCU)",
)
VAE_COMPILE = _port("cosmos3.vae_compile", "VAE compile warm-up",
                    target(f"{_VAE}._collect_warmup_shapes"),
                    target(f"{_VAE}.Wan2pt2VAEInterface.compile_encode"),
                    depends_on=("cosmos3.vae_layout",))
QWEN_ENCODER = _port(
    "cosmos3.qwen_encoder", "Qwen3-VL vision tower",
    target(f"{_GEN}.hf_model.HFModel.__init__"),
    target(f"{_QWEN}.Qwen3VLVisionPatchEmbed.forward"),
    target(f"{_GEN}.reasoner.qwen3_vl_moe.qwen3_vl_moe.Qwen3VLMoeVisionPatchEmbed.forward"),
    target(f"{_QWEN}.Qwen3VLVisionAttention.forward"),
    target(f"{_QWEN}.Qwen3VLVisionBlock.forward"),
    target(f"{_QWEN}.Qwen3VLVisionModel.__init__"),
    target(f"{_QWEN}.Qwen3VLVisionModel.forward"),
    target(f"{_GEN}.reasoner.qwen3_vl.utils.get_rope_index",
           aliases=(f"{_QWEN}._get_rope_index",)),
)
CHECKPOINT_DCP = _port(
    "cosmos3.checkpoint_dcp", "distributed checkpointing",
    *(target(f"{_CKPT}.{name}") for name in (
        "__init__", "get_storage_writer", "_checkpoint_async_with_pinned_memory",
        "save_state_dict_worker", "load")),
)
DATA_PIPELINE = _port(
    "cosmos3.data_pipeline", "data pipeline",
    target(f"{_CF}.data.generator.joint_dataloader.RankPartitionedDataLoader.__init__"),
    target(f"{_CF}.data.generator.augmentors.video_parsing.VideoParsing._extract_audio_chunk"),
)
RUNTIME_INIT = blocked(
    "cosmos3.runtime_init",
    target(f"{_CF}.utils.distributed.init"),
    code=PLATFORM,
    missing="distributed init without NVML for Hygon DCUs; on CUDA Cosmos's own init runs",
)
VIDEO_DECODE = blocked("cosmos3.video_decode", module(f"{_CF}.utils.video_decode"),
                       code=UNAVAILABLE, missing=_PORT.format("video decoding module"))
TRAINING_WORKERS = _port("cosmos3.training_workers", "DataLoader worker settings",
                         target("torch.utils.data.DataLoader.__init__"))
LOAD_ONLY = blocked("cosmos3.load_only", module(f"{_CF}.checkpoint.load_only"),
                    code=UNAVAILABLE, missing=_PORT.format("load-only checkpoint module"))
ACTION_POLICY = _port(
    "cosmos3.action_policy", "action-policy datasets",
    target(f"{_LEROBOT}._LRUVideoDecoderCache"),
    target(f"{_LEROBOT}._patch_decoder_cache"),
    target(f"{_LEROBOT}.BaseActionLeRobotDataset.__init__"),
    target(f"{_LEROBOT}.BaseActionLeRobotDataset._register_sources"),
    target(f"{_LEROBOT}.BaseActionLeRobotDataset._get_dataset"),
    target(f"{_ACTION}.droid_lerobot_dataset.DROIDLeRobotDataset.__init__"),
    target(f"{_ACTION}.action_sft_dataset.get_action_droid_sft_dataset"),
    depends_on=("cosmos3.training_workers", "cosmos3.data_pipeline"),
)
ACTION_RECIPE = blocked(
    "cosmos3.action_recipe",
    module(f"{_CF}.configs.base.experiment.action.posttrain_config.action_policy_droid_nano"),
    code=UNAVAILABLE, missing=_PORT.format("action-policy recipe"),
)
REASONER_VIDEO = _port(
    "cosmos3.reasoner_video", "reasoner video decoding",
    target(f"{_CF}.data.generator.reasoner.video_decoder_qwen._video_decoder_qwen_func"),
    target(f"{_CF}.data.generator.augmentors.interleaved_video_parsing._create_video_decoder"),
    target(f"{_CF}.data.generator.augmentors.interleaved_video_parsing."
           "VideoTransferAlignedFullFramesParsing._probe_video_len"),
    depends_on=("cosmos3.training_workers", "cosmos3.dataflow_context"),
)
REASONER_RECIPES = blocked(
    "cosmos3.reasoner_recipes",
    *(module(f"{_CF}.configs.base.reasoner.experiment.{name}")
      for name in ("videophy2_dataflow_roles", "videophy2_sft_nano", "videophy2_sft_edge")),
    code=UNAVAILABLE, missing=_PORT.format("reasoner recipes"),
)

GROUPS = (
    COMPILE_OPTIONS, DEVICE_MONITOR, DTENSOR_NORM, DATAFLOW_CONTEXT, FLASH2_HIP, HF_ATTENTION,
    SEQUENCE_PACKING, FSDP_VLM, GENERATOR_MODEL, VAE_LAYOUT, VAE_COMPILE, QWEN_ENCODER,
    CHECKPOINT_DCP, DATA_PIPELINE, RUNTIME_INIT, VIDEO_DECODE, TRAINING_WORKERS, LOAD_ONLY,
    ACTION_POLICY, ACTION_RECIPE, REASONER_VIDEO, REASONER_RECIPES,
)
