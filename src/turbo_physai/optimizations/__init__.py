"""Replacement objects that catalogs point to by import path.

``common/<framework>`` holds replacements shared by every model built on a framework,
``models/<model>`` those specific to one model. These modules may import torch; nothing imports
them until check() or apply() resolves a replacement path.
"""
