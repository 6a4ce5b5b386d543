"""The Dagster wiring, thin over the engine: assets, checks, resources, sensors, jobs."""
