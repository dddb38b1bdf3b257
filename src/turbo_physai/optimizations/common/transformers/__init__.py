"""Replacements and checks for models of HF transformers."""
