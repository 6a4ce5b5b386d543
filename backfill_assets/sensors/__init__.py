"""Sensors of the code location: reconciliation of backups against published data."""
