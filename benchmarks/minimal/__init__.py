"""Minimal hand-written training loops, one per framework (common.py says what they are)."""
