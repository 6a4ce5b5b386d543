"""Audit appends in the ledger database: read back whole and typed, with and without Spark;
the Parquet audit tables an earlier version wrote are imported once, every row."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from backfill_assets import settings
from backfill_assets.core.warehouse import audit, database

# Written by the previous version's Parquet writer (``audit.append`` and a compaction of the
# ledger, then appends into the compacted location, one of them a crashed publish's prepare).
LEGACY = Path(__file__).parent / "fixtures" / "parquet_audit"


def _rows(n: int, run: str) -> list[dict]:
    at = datetime(2026, 11, 20, 1, 2, 3, 456789, tzinfo=UTC)
    return [
        {
            "table_name": "raw.payloads",
            "hour": f"2026-11-20T{h:02d}",
            "version": run,
            "check_name": "raw_rules",
            "passed": h % 2 == 0,
            "detail": "ünïcode ✓" if h else None,
            "run_id": run,
            "checked_at": at,
        }
        for h in range(n)
    ]


def test_batches_are_read_back_whole_and_typed(spark, warehouse, base_settings) -> None:
    audit.append(base_settings.warehouse_dir, audit.CHECK_RESULTS, _rows(3, "r1"))
    audit.append(base_settings.warehouse_dir, audit.CHECK_RESULTS, [])
    audit.append(base_settings.warehouse_dir, audit.CHECK_RESULTS, _rows(2, "r2"))

    found = audit.rows(base_settings.warehouse_dir, audit.CHECK_RESULTS, {"run_id": "r1"})
    assert [r["hour"][-2:] for r in found] == ["00", "01", "02"]
    assert found[1]["passed"] is False and found[1]["detail"] == "ünïcode ✓"
    assert found[1]["checked_at"] == datetime(2026, 11, 20, 1, 2, 3, 456789, UTC)

    frame = audit.read(spark, audit.CHECK_RESULTS)
    assert frame.schema == audit.schema(audit.CHECK_RESULTS)
    assert frame.count() == 5
    first = next(r for r in frame.collect() if r["run_id"] == "r1" and r["hour"].endswith("01"))
    assert first["checked_at"].astimezone(UTC) == datetime(2026, 11, 20, 1, 2, 3, 456789, UTC)


def test_an_audit_table_never_written_reads_empty(spark, warehouse) -> None:
    frame = audit.read(spark, audit.PUBLICATIONS)
    assert frame.count() == 0
    assert frame.schema == audit.schema(audit.PUBLICATIONS)


def test_a_parquet_ledger_of_the_previous_version_is_imported_once_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse_dir = str(tmp_path / "data" / "warehouse")
    shutil.copytree(LEGACY, f"{warehouse_dir}/audit")
    monkeypatch.delenv(settings.LEDGER_URL_ENV, raising=False)

    ledger = audit.rows(warehouse_dir, audit.PUBLICATIONS, order_by="recorded_at")
    # 6 publishes (prepare + commit) before the compaction, a crashed prepare after it
    assert len(ledger) == 13
    assert [e["event_id"] for e in ledger[-3:]] == ["e5", "e5", "e9"]
    assert ledger[0]["reason"] == "ünïcode ✓" and ledger[0]["row_count"] == 10
    assert ledger[0]["recorded_at"] == datetime(2026, 11, 20, 5, 0, tzinfo=UTC)
    assert len(audit.rows(warehouse_dir, audit.SHADOW_PARTITIONS)) == 4
    assert [r["passed"] for r in audit.rows(warehouse_dir, audit.CHECK_RESULTS)] == [False]

    # once: a process starting on the upgraded database imports nothing again
    url = settings.ledger_url(warehouse_dir)
    assert url == f"sqlite:///{tmp_path}/data/{settings.LEDGER_FILE}"
    database._upgraded.cache_clear()
    assert len(audit.rows(warehouse_dir, audit.PUBLICATIONS)) == 13
    with sa.create_engine(url).connect() as connection:
        revision = connection.execute(
            sa.text("SELECT version_num FROM audit_schema_version")
        ).scalar()
    assert revision == "0004"


def test_an_unreachable_ledger_database_is_named_in_one_line(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "not-a-database"
    folder.mkdir()
    monkeypatch.setenv(settings.LEDGER_URL_ENV, f"sqlite:///{folder}")
    with pytest.raises(database.LedgerUnavailable) as error:
        audit.rows(str(tmp_path / "data" / "warehouse"), audit.PUBLICATIONS)
    assert str(error.value) == (
        f"ledger database {folder} unavailable: unable to open database file"
    )
