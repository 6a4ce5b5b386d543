"""The reconciliation sensor: compare the backups with what is published, request releases."""
