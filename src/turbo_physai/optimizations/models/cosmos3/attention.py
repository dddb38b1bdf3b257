"""``cosmos3.hf_attention``: Cosmos3's HF-protocol attention callable through PyTorch SDPA.

Cosmos registers ``hf_attention_cosmos`` with transformers' ``AttentionInterface`` for its
Qwen3-VL towers; stock, it routes to Cosmos's own attention backends (flash2/flash3/cuDNN/
NATTEN), which take float16/bfloat16 only, so float32 inputs are cast to bfloat16 and back.
This one calls ``torch.nn.functional.scaled_dot_product_attention`` (FlashAttention-2,
memory-efficient or math kernels, chosen by PyTorch for the device and dtype): any dtype as it
comes, grouped-query attention, and the same contract as the stock callable: query/key/value
``(batch, heads, seq, head_dim)``, output ``(batch, seq, heads, head_dim)`` and ``None`` for
the weights, causal when ``module.is_causal`` (top-left aligned, as the stock function does
for unequal query and key lengths), no dropout and no explicit mask (the stock one refuses both).
"""

from __future__ import annotations

from typing import Any


def hf_attention_cosmos(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    import torch.nn.functional as F

    if dropout != 0.0:
        raise NotImplementedError(f"hf_attention_cosmos: dropout {dropout} is not supported")
    if attention_mask is not None:
        raise NotImplementedError("hf_attention_cosmos: an explicit attention_mask is not "
                                  "supported (the stock Cosmos adapter refuses it too)")
    if sliding_window is not None:
        raise NotImplementedError("hf_attention_cosmos: sliding_window is not supported")
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # grouped-query attention: each key/value head serves `groups` query heads
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(
        query, key, value, is_causal=bool(getattr(module, "is_causal", False)), scale=scaling
    )
    return out.transpose(1, 2), None
