"""Suite-wide fixtures: ONE Spark session (local mode, embedded metastore) for every test.

Tests share the session and its metastore, so the ``warehouse`` fixture empties the catalog
before each test that uses it; backup trees are generated per test (milliseconds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.definitions import build_definitions
from backfill_assets.generator import generate_backups
from backfill_assets.launch import LayerRun, launch
from backfill_assets.settings import Settings


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("suite")
    return Settings.from_env({
        "BACKUP_ROOT": str(root / "backups"),
        "DATA_ROOT": str(root / "data"),
        "DAGSTER_HOME": str(root / "dagster_home"),
    })


@pytest.fixture(scope="session")
def spark(base_settings: Settings):
    from backfill_assets.resources.spark import spark_session

    session = spark_session(base_settings)
    yield session
    session.stop()


@pytest.fixture
def warehouse(spark) -> None:
    """An empty catalog for this test (data files of earlier tests stay, unreferenced)."""
    for row in spark.sql("SHOW DATABASES").collect():
        if row[0] != "default":
            spark.sql(f"DROP DATABASE IF EXISTS {row[0]} CASCADE")
    spark.catalog.clearCache()


@pytest.fixture
def instance(tmp_path: Path) -> dg.DagsterInstance:
    """A real SQLite-backed Dagster instance in a temporary DAGSTER_HOME."""
    with dg.DagsterInstance.local_temp(str(tmp_path / "dagster_home")) as inst:
        yield inst


@pytest.fixture
def make_backups(tmp_path: Path) -> Callable[..., Path]:
    """Generate a small backup tree; keyword arguments go to ``generate_backups``."""

    def make(**kwargs) -> Path:
        root = tmp_path / f"backups{len(list(tmp_path.glob('backups*')))}"
        options = {"start": "2026-11-20T00", "hours": 4, "clients": 2, "users_per_client": 25,
                   "seed": 11, "workers": 1}
        options.update(kwargs)
        generate_backups(root, **options)
        return root

    return make


@pytest.fixture
def settings_for(base_settings: Settings) -> Callable[[Path], Settings]:
    """The suite's settings pointed at another backup tree (same Spark session/warehouse)."""
    return lambda backups: dataclasses.replace(base_settings, backup_root=str(backups))


@pytest.fixture
def run_layers(
    spark, warehouse, instance: dg.DagsterInstance, settings_for
) -> Callable[..., list[LayerRun]]:
    """Launch layer runs exactly as the CLI does, against a given backup tree."""

    def run(backups: Path, ranges: list[tuple[str, str, str]], **kwargs) -> list[LayerRun]:
        defs = build_definitions(settings_for(backups))
        return launch(defs, instance, ranges, **kwargs)

    return run
