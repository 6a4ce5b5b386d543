"""backfill_assets: rebuild damaged hours of web-analytics tables from backups, safely."""

__version__ = "0.1.0"
