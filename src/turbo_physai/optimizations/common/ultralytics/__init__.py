"""Checks for the Ultralytics catalog (RT-DETR)."""
