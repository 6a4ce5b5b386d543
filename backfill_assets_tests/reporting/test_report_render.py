"""The backfill report's rendering: headline, text, Markdown and the PNG chart (no Spark)."""

from __future__ import annotations

from pathlib import Path

from backfill_assets.reporting.diff import DiffCounts
from backfill_assets.reporting.report import (
    BackfillReport,
    CheckOutcome,
    PartitionRows,
    RunSummary,
)

MANIFEST = {
    "mode": "backfill",
    "reason": "late files",
    "requested_by": "alice",
    "ticket": "OPS-1",
    "backfill_id": "",
    "request_id": "req-1",
}


def _runs() -> list[RunSummary]:
    raw = RunSummary(
        run_id="run-raw",
        status="FAILURE",
        layers=["raw"],
        hours=["2026-11-20T09", "2026-11-20T10"],
        manifest=MANIFEST,
        started=0.0,
        ended=20.0,
        read={
            "input_files": 4,
            "input_bytes": 2_500_000,
            "manifest_records_per_hour": {"2026-11-20T09": 60, "2026-11-20T10": 70},
        },
        written=[
            {"table": "shadow.raw_payloads", "version": "run-raw", "rows": 128, "per_hour": {}}
        ],
        checks=[
            CheckOutcome(
                "raw_manifest_reconciliation",
                "shadow/raw_payloads",
                False,
                "WARN",
                "1 of 2 hour(s) fail: 2026-11-20T10",
                {"2026-11-20T10": "read 68 line(s), manifest says 70"},
            )
        ],
        partitions=[
            PartitionRows("raw", "raw.payloads", "2026-11-20T09", 40, 60, "published"),
            PartitionRows(
                "raw",
                "raw.payloads",
                "2026-11-20T10",
                50,
                50,
                "held back",
                "raw_manifest_reconciliation: read 68 line(s), manifest says 70",
            ),
        ],
        failures=["raw_publish: 1 hour(s) of raw held back"],
    )
    sessions = RunSummary(
        run_id="run-agg",
        status="SUCCESS",
        layers=["aggregated"],
        hours=["2026-11-20T09"],
        manifest={**MANIFEST, "mode": "dry_run"},
        started=20.0,
        ended=30.0,
        written=[{"table": "shadow.sessions", "version": "run-agg", "rows": 12, "per_hour": {}}],
        partitions=[
            PartitionRows(
                "aggregated", "aggregated.sessions", "2026-11-20T09", 9, 12, "would publish"
            )
        ],
        diff={"aggregated.sessions": {"2026-11-20T09": DiffCounts(4, 1, 2, 6)}},
    )
    return [raw, sessions]


def test_the_report_says_what_was_published_held_back_and_why(tmp_path: Path) -> None:
    report = BackfillReport("backfill req-1", _runs(), truth=["ground truth: 2/2 hours match"])
    text = report.text()
    assert text.splitlines()[:6] == [
        "Backfill report: backfill req-1",
        "raw: 1 hour(s) published, 1 with different rows (2026-11-20T09); 1 held back "
        "(2026-11-20T10)",
        "aggregated: 1 hour(s) would be published (dry run)",
        "sessions: 9 -> 12 (+3 net) in 1 session hour(s)",
        "checks: 0 of 1 passed: failed raw_manifest_reconciliation",
        "time: 30.0 s in 2 run(s); 140 rows written over 3 partition-hour(s), 5 rows/s, "
        "10.0 s per partition-hour",
    ]
    assert "ground truth: 2/2 hours match" in text
    assert "read: 4 backup file(s), 2.5 MB, 130 manifest record(s); backup problems: none" in text
    assert "manifest: reason late files; requested by alice; ticket OPS-1; backfill req-1" in text
    assert (
        "2026-11-20T10  raw.payloads      50     50      +0  held back: "
        "raw_manifest_reconciliation: read 68 line(s), manifest says 70"
    ) in text
    assert (
        "hour           table                before  after  change  status         added  "
        "removed  changed" in text
    )
    assert "failure: raw_publish: 1 hour(s) of raw held back" in text

    markdown, chart = report.write(tmp_path / "out")
    body = markdown.read_text()
    assert body.startswith("# Backfill report: backfill req-1\n")
    assert "- sessions: 9 -> 12 (+3 net) in 1 session hour(s)" in body
    assert (
        "| 2026-11-20T09 | aggregated.sessions | 9 | 12 | +3 | would publish | 4 | 1 | 2 |" in body
    )
    assert "![rows per hour, before and after](rows_per_hour.png)" in body
    assert chart == tmp_path / "out" / "rows_per_hour.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 5_000
