"""Replacements shared by every model built on a framework."""
