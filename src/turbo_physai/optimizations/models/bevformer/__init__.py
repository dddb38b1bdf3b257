"""BEVFormer: wrapper factories."""
