"""BEVFusion: wrapper factories."""
