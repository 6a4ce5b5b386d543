"""Audit appends: one file per batch, read back whole, typed as the table says."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from backfill_assets.publishing import audit


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
    audit.append(spark, base_settings.warehouse_dir, audit.CHECK_RESULTS, _rows(3, "r1"))
    audit.append(spark, base_settings.warehouse_dir, audit.CHECK_RESULTS, [])
    audit.append(spark, base_settings.warehouse_dir, audit.CHECK_RESULTS, _rows(2, "r2"))

    frame = audit.read(spark, audit.CHECK_RESULTS)
    assert frame.schema == audit.schema(audit.CHECK_RESULTS)
    got = sorted(tuple(r) for r in frame.collect())
    assert len(got) == 5
    first = next(r for r in frame.collect() if r["run_id"] == "r1" and r["hour"].endswith("01"))
    assert first["passed"] is False and first["detail"] == "ünïcode ✓"
    assert first["checked_at"].astimezone(UTC) == datetime(2026, 11, 20, 1, 2, 3, 456789, UTC)

    # a writer killed before its rename leaves a hidden file that no reader counts
    directory = Path(base_settings.warehouse_dir) / "audit" / "check_results"
    files = sorted(p.name for p in directory.iterdir() if p.suffix == ".parquet")
    assert len(files) == 2
    (directory / f"_{files[0]}").write_bytes((directory / files[0]).read_bytes()[:100])
    assert audit.read(spark, audit.CHECK_RESULTS).count() == 5


def test_an_audit_table_never_written_reads_empty(spark, warehouse) -> None:
    frame = audit.read(spark, audit.PUBLICATIONS)
    assert frame.count() == 0
    assert frame.schema == audit.schema(audit.PUBLICATIONS)
