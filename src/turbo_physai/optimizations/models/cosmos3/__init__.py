"""Cosmos3: the HF-protocol attention through SDPA."""
