"""Checks for the Roboflow RF-DETR catalog."""
