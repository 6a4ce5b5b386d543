"""The production stack the stack tests run on (``backfill_assets_tests/stack/conftest.py``
starts it once per session): what a test gets of it, and the tree it holds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HOURS = 7  # one session hour (T03) has its whole ±3 h window in the data
CLIENTS = 2


@dataclass
class Stack:
    env: dict[str, str]
    backups: Path  # the local copy of what was uploaded (with its _truth/)
    data_root: str
    dagster_home: Path
    logs: Path
    postgres_url: str
