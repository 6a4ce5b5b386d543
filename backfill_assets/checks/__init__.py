"""Blocking asset checks: pandera row rules (``rules``, ``schemas``) and per-layer checks."""
