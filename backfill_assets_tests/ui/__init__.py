"""Browser tests: the Dagster UI as the operator's console."""
