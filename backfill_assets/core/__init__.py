"""The engine, Dagster-free: hours, layer specs, the backup reader, the layers' Spark work, the
ledger and publisher, reconciliation and reports. It imports no Dagster (pyproject.toml)."""
