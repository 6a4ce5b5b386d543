"""The persistent Dagster instance every command uses (``DAGSTER_HOME``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg

from backfill_assets.settings import PROJECT_ROOT, Settings


def prepare_dagster_home(settings: Settings) -> Path:
    """Create ``DAGSTER_HOME`` with the project's ``dagster.yaml`` if it has none."""
    home = Path(settings.dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        shutil.copyfile(PROJECT_ROOT / "deploy" / "dagster.yaml", config)
    return home


def get_instance(settings: Settings) -> dg.DagsterInstance:
    """The SQLite-backed instance in ``DAGSTER_HOME`` (the one ``make ui`` shows)."""
    os.environ["DAGSTER_HOME"] = str(prepare_dagster_home(settings))
    return dg.DagsterInstance.get()
