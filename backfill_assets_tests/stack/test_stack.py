"""Production on this machine: backfills on a Spark cluster, reading S3, publishing through
a shared Hive metastore, fenced through the shared database, checked against the truth.

Two releases run at the same time over different ranges (A: every layer of the whole tree,
submitted as one Dagster backfill; B: raw of its first two hours, no downstream); both
publish raw, so they are fenced. The test itself holds the raw publish lock (as the shared
database sees it) until a publisher is waiting on it: nothing of raw may be published
before it lets go, and the two releases' publications of raw never interleave in the
ledger.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import sqlalchemy as sa

from backfill_assets.partitions import hour_range
from backfill_assets.publishing import database
from backfill_assets_dev import expected
from backfill_assets_tests.stack import servers
from backfill_assets_tests.stack.conftest import AWS, HOURS, START, WAREHOUSE_BUCKET, Stack
from backfill_assets_tests.stack.servers import tail

LAST = "2026-11-20T06"  # START + HOURS - 1
SESSION_HOUR = "2026-11-20T03"
BACKFILL_DEADLINE = 900.0


def backfill(stack: Stack, first: str, last: str, log: Path, *extra: str):
    """The one way these tests launch a release: ``backfill-assets backfill`` (a Dagster
    asset backfill, run by the stack's daemon) with the stack's production environment."""
    args = [str(Path(sys.executable).parent / "backfill-assets"), "backfill"]
    args += ["--from", first, "--to", last, "--reason", "stack test", *extra]
    with open(log, "wb") as out:
        return subprocess.Popen(
            args, env=stack.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def sql(stack: Stack, query: str, log: Path) -> list[dict]:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "backfill-assets"), "sql", query, "--format", "jsonl"],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log.write_text(result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _publisher_waiting(url: str) -> bool:
    """A publisher waits for a publish fence in the ledger database (we hold the raw one)."""
    with psycopg2.connect(servers.libpq_url(url)) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return cur.fetchone()[0] > 0


def _wait(processes: dict[str, subprocess.Popen], logs: dict[str, Path], ready, what: str):
    deadline = time.monotonic() + BACKFILL_DEADLINE
    while not ready():
        for name, process in processes.items():
            assert process.poll() is None, f"backfill {name} ended before {what}:\n" + tail(
                logs[name], 60
            )
        assert time.monotonic() < deadline, f"no {what} after {BACKFILL_DEADLINE:.0f}s"
        time.sleep(0.5)


def test_concurrent_fenced_backfills_on_the_cluster_match_the_truth(stack: Stack):
    """A release of every hour runs on the cluster while the test holds the raw layer's
    publish lock (its publish waits, fenced); it publishes once the lock is released, and
    what it published matches the generator's truth. (A second, overlapping release is
    refused at launch: the CLI tests cover that.)"""
    started = time.monotonic()
    url = stack.env["BACKFILL_LEDGER_URL"]
    logs = {"A": stack.logs / "backfill-A.log"}
    processes: dict[str, subprocess.Popen] = {}
    try:
        with database.fence_on(sa.create_engine(url), ["raw"]):
            processes["A"] = backfill(stack, START, LAST, logs["A"])
            _wait(processes, logs, lambda: _publisher_waiting(url), "raw publish wait")
            released_at = datetime.now(UTC)
        assert processes["A"].wait(timeout=BACKFILL_DEADLINE) == 0, "backfill A failed:\n" + (
            tail(logs["A"], 80)
        )
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    backfills_done = time.monotonic()

    # The releases' runs ran on the cluster: the worker launched executors for them.
    worker_log = (stack.logs / "spark-worker.log").read_text(errors="replace")
    assert worker_log.count("Asked to launch executor") >= 3
    # The part files were read from S3: only the executors' pyarrow reads part files (the
    # driver reads manifests), and the backups exist nowhere else the runs are told of.
    s3_log = (stack.logs / "s3.log").read_text(errors="replace")
    parts = sorted(stack.backups.glob("raw/date=*/hour=*/client_id=*/part-*"))
    assert len(parts) >= HOURS
    for part in parts:
        key = part.relative_to(stack.backups).as_posix()
        assert f"GET /backups/tree/{key}" in s3_log, key

    # The warehouse is on S3: the shadow versions (which published partitions point at) are
    # objects of its bucket, written by Spark's S3A magic committer (its __magic paths in the
    # log); the ledger is in the stack's Postgres (database `ledger`), none of it on S3.
    client = servers.s3_client(stack.env["AWS_ENDPOINT_URL_S3"], AWS)
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=WAREHOUSE_BUCKET)
        for o in page.get("Contents", [])
    ]
    assert any(k.startswith("data/warehouse/shadow/") and k.endswith(".parquet") for k in keys)
    assert not any(k.startswith("data/warehouse/audit/") for k in keys)
    assert "__magic" in s3_log
    ledger_url = servers.libpq_url(stack.env["BACKFILL_LEDGER_URL"])
    with psycopg2.connect(ledger_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM publications WHERE phase = 'commit'")
        assert cur.fetchone()[0] > 0

    counted = [SESSION_HOUR]
    rows = sql(
        stack,
        " UNION ALL ".join(
            [
                "SELECT 'raw' AS t, hour, count(*) AS n, '' AS run_id, '' AS phase, "
                "'' AS at FROM raw.payloads GROUP BY hour",
                "SELECT 'quarantine', hour, count(*), '', '', '' FROM raw.quarantine GROUP BY hour",
                "SELECT 'transformed', hour, count(*), '', '', '' FROM transformed.payloads "
                "GROUP BY hour",
                "SELECT 'sessions', hour, count(*), '', '', '' FROM aggregated.sessions "
                "GROUP BY hour",
                "SELECT concat('ledger:', table_name), hour, 0, run_id, phase, "
                "date_format(recorded_at, \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\") "
                "FROM audit.publications",
            ]
        ),
        stack.logs / "sql.log",
    )
    published: dict[str, dict[str, int]] = defaultdict(dict)
    ledger = []
    for row in rows:
        if row["t"].startswith("ledger:"):
            ledger.append(row)
        else:
            published[row["t"]][row["hour"]] = row["n"]

    # Against the generator's truth.
    truth = expected.raw_rows(stack.backups)
    hours = hour_range(START, LAST)
    assert len(hours) == HOURS
    assert {h: (published["raw"].get(h, 0), published["quarantine"].get(h, 0)) for h in hours} == {
        h: truth.get(h, (0, 0)) for h in hours
    }
    deliveries = expected.read_deliveries(stack.backups)
    assert {h: published["transformed"].get(h, 0) for h in hours} == {
        h: expected.transformed_rows(deliveries).get(h, 0) for h in hours
    }
    sessions = expected.sessions(deliveries, counted)
    assert sum(published["raw"].values()) > 0 and sum(len(s) for s in sessions.values()) > 0
    assert {h: published["sessions"].get(h, 0) for h in counted} == {
        h: len(sessions[h]) for h in counted
    }

    # Fencing: nothing of raw published while the test held the lock; one release did.
    raw_events = [r for r in ledger if r["t"].startswith("ledger:raw.")]
    assert raw_events and min(datetime.fromisoformat(r["at"]) for r in raw_events) > released_at
    assert len({r["run_id"] for r in raw_events}) == 1
    assert Counter(r["phase"] for r in ledger)["commit"] > 0

    print(
        f"\nstack: backfills {backfills_done - started:.0f}s, "
        f"check {time.monotonic() - backfills_done:.0f}s"
    )
