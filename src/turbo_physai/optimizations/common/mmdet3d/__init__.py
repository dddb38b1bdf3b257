"""Replacements for MMDetection3D objects."""
