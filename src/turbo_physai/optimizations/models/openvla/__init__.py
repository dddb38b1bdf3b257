"""OpenVLA: fused AdamW and a frozen GC before training."""
