"""Reconciliation: what differs between the backups and what is published, and the releases
that repair it."""
