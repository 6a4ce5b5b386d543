"""The release report's rendering: headline, text, Markdown and the PNG chart (no Spark)."""

from __future__ import annotations

from pathlib import Path

from backfill_assets.core.reporting.diff import DiffCounts
from backfill_assets.core.reporting.render import (
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
    "backfill_id": "rel-1",
    "request_id": "",
}
HELD = "raw_manifest_reconciliation: read 68 line(s), manifest says 70"


def _runs(mode: str = "backfill") -> list[RunSummary]:
    manifest = {**MANIFEST, "mode": mode}
    received = RunSummary(
        run_id="run-raw",
        status="SUCCESS",
        layers=["raw", "transformed"],
        hours=["2026-11-20T09", "2026-11-20T10"],
        manifest=manifest,
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
        spark={"spark_task_seconds": 12.5, "spark_cores": 2, "spark_session_seconds": 19.0},
        checks=[
            CheckOutcome(
                "raw_manifest_reconciliation",
                "shadow/raw_payloads_candidate",
                False,
                "WARN",
                "1 of 2 hour(s) fail: 2026-11-20T10",
                {"2026-11-20T10": "read 68 line(s), manifest says 70"},
            )
        ],
    )
    sessions = RunSummary(
        run_id="run-agg",
        status="SUCCESS",
        layers=["aggregated"],
        hours=["2026-11-20T09"],
        manifest=manifest,
        started=20.0,
        ended=30.0,
        written=[{"table": "shadow.sessions", "version": "run-agg", "rows": 12, "per_hour": {}}],
        spark={"spark_task_seconds": 3.0, "spark_cores": 2, "spark_session_seconds": 10.0},
    )
    runs = [received, sessions]
    if mode != "dry_run":
        runs.append(
            RunSummary(
                run_id="run-pub",
                status="SUCCESS",  # held-back hours are an outcome, not a failed run
                layers=[],
                hours=[],
                manifest=manifest,
                started=30.0,
                ended=32.0,
                failures=["release__publish: release rel-1: 1 hour(s) held back"],
                publishes=True,
            )
        )
    return runs


def test_the_report_says_what_was_published_held_back_and_why(tmp_path: Path) -> None:
    partitions = [
        PartitionRows("raw", "raw.payloads", "2026-11-20T09", 40, 60, "published"),
        PartitionRows("raw", "raw.payloads", "2026-11-20T10", 50, 50, "held back", HELD),
        PartitionRows("aggregated", "aggregated.sessions", "2026-11-20T09", 9, 12, "published"),
    ]
    report = BackfillReport(
        "release rel-1",
        _runs(),
        partitions=partitions,
        truth=["ground truth: 2/2 hours match"],
        release_id="rel-1",
    )
    text = report.text()
    assert text.splitlines()[:9] == [
        "Backfill report: release rel-1",
        "raw: 1 hour(s) published, 1 with different rows (2026-11-20T09); 1 held back "
        "(2026-11-20T10)",
        "aggregated: 1 hour(s) published, 1 with different rows (2026-11-20T09)",
        "sessions: 9 -> 12 (+3 net) in 1 session hour(s)",
        "checks: 0 of 1 passed: failed raw_manifest_reconciliation",
        "time: 32.0 s in 3 run(s); 140 rows written over 3 partition-hour(s), 4 rows/s, "
        "10.7 s per partition-hour",
        # the raw run rebuilt 2 hours of traffic (130 payloads) and the release took 32 s
        "speed: 2 hour(s) of traffic in 32.0 s = 225.0x real time; 130 payloads at 4.1/s, "
        "225.0x their live rate (0.02/s)",
        "cost: 15.5 executor core-seconds of Spark tasks; 58.0 core-seconds held by the "
        "runs' Spark sessions",
        "ground truth: 2/2 hours match",
    ]
    assert f"held back: raw 2026-11-20T10: {HELD}" in text
    assert "read: 4 backup file(s), 2.5 MB, 130 manifest record(s); backup problems: none" in text
    assert "manifest: reason late files; requested by alice; ticket OPS-1; backfill rel-1" in text
    assert "partitions (published before vs after):" in text
    assert f"2026-11-20T10  raw.payloads             50     50      +0  held back: {HELD}" in text
    assert "run run-pub - publish - - SUCCESS - mode backfill - 2.0 s" in text
    assert "failure: release__publish: release rel-1: 1 hour(s) held back" in text

    markdown, chart = report.write(tmp_path / "out")
    body = markdown.read_text()
    assert body.startswith("# Backfill report: release rel-1\n")
    assert "- sessions: 9 -> 12 (+3 net) in 1 session hour(s)" in body
    assert "| 2026-11-20T09 | aggregated.sessions | 9 | 12 | +3 | published |" in body
    assert "![rows per hour, before and after](rows_per_hour.png)" in body
    assert chart == tmp_path / "out" / "rows_per_hour.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 5_000


def test_a_dry_run_report_diffs_the_whole_release(tmp_path: Path) -> None:
    partitions = [
        PartitionRows("raw", "raw.payloads", "2026-11-20T09", 40, 60, "would publish"),
        PartitionRows("raw", "raw.payloads", "2026-11-20T10", 50, 68, "would be held back", HELD),
        PartitionRows("aggregated", "aggregated.sessions", "2026-11-20T09", 9, 9, "would publish"),
    ]
    report = BackfillReport(
        "release rel-1",
        _runs("dry_run"),
        partitions=partitions,
        diff={
            "raw.payloads": {"2026-11-20T09": DiffCounts(20, 0, 0, 40)},
            "aggregated.sessions": {"2026-11-20T09": DiffCounts(1, 1, 2, 6)},
        },
        release_id="rel-1",
        dry_run=True,
    )
    text = report.text()
    assert text.splitlines()[1:4] == [
        "raw: 1 hour(s) would be published (dry run), 1 with different rows (2026-11-20T09); "
        "1 held back (2026-11-20T10)",
        # same row count, different sessions: the diff says it changes
        "aggregated: 1 hour(s) would be published (dry run), 1 with different rows (2026-11-20T09)",
        "sessions: 9 -> 9 (+0 net) in 1 session hour(s)",
    ]
    assert "partitions (candidate vs published):" in text
    assert (
        "hour           table                before  after  change  status" in text
        and "added  removed  changed" in text
    )
    body = report.markdown()
    assert (
        "| 2026-11-20T09 | aggregated.sessions | 9 | 9 | +0 | would publish | 1 | 1 | 2 |" in body
    )
    assert "| 2026-11-20T10 | raw.payloads | 50 | 68 | +18 | would be held back: " in body
