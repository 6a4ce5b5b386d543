"""Production on this machine, driven through the CLI as an operator would: a release on a
Spark cluster, reading the backups from S3 and writing the warehouse there, published
through a shared Hive metastore, fenced through the shared database, rolled back and
verified, checked against the generator's truth.

The release is a dry run of every layer of the whole tree (``backfill --dry-run``), then
published without rebuilding (``publish --backfill``) while the test holds the raw publish
lock (as the shared database sees it) until the publisher waits on it: nothing of raw may be
published before it lets go. Then ``rollback --backfill`` removes it from every layer (a
first publish: the hours go back to nothing) and ``verify`` finds the ledger and the
metastore in agreement.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import sqlalchemy as sa

from backfill_assets.core.hours import hour_range
from backfill_assets.core.warehouse import database
from backfill_assets_dev import expected
from backfill_assets_dev.stack import servers
from backfill_assets_dev.stack.production import AWS, START, WAREHOUSE_BUCKET
from backfill_assets_dev.stack.servers import tail
from backfill_assets_tests.helpers import processes as real_processes
from backfill_assets_tests.helpers.stack import HOURS, Stack

LAST = "2026-11-20T06"  # START + HOURS - 1
SESSION_HOUR = "2026-11-20T03"
BACKFILL_DEADLINE = 900.0


def start_cli(stack: Stack, log: Path, *args: str) -> subprocess.Popen:
    """``backfill-assets ARGS`` with the stack's production environment (its Dagster
    commands are run by the stack's daemon), its output into ``log``."""
    with open(log, "wb") as out:
        return real_processes.start_cli(args, stack.env, stdout=out, text=False)


def cli(stack: Stack, log: Path, *args: str) -> str:
    """``backfill-assets ARGS`` to its end; its output, which must say it succeeded."""
    process = start_cli(stack, log, *args)
    try:
        returncode = process.wait(timeout=BACKFILL_DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert returncode == 0, f"backfill-assets {' '.join(args)} exited {returncode}:\n" + tail(
        log, 80
    )
    return log.read_text(errors="replace")


def sql(stack: Stack, query: str, log: Path) -> list[dict]:
    result = real_processes.cli(stack.env, "sql", query, "--format", "jsonl", timeout=600)
    log.write_text(result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _publisher_waiting(url: str) -> bool:
    """A publisher waits for a publish fence in the ledger database (the test holds raw's)."""
    with psycopg2.connect(servers.libpq_url(url)) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return cur.fetchone()[0] > 0


def _wait_for_publisher(process: subprocess.Popen, log: Path, url: str) -> None:
    deadline = time.monotonic() + BACKFILL_DEADLINE
    while not _publisher_waiting(url):
        assert process.poll() is None, "publish ended before waiting on the fence:\n" + tail(
            log, 60
        )
        assert time.monotonic() < deadline, f"no raw publish wait after {BACKFILL_DEADLINE}s"
        time.sleep(0.5)


def _submitted(output: str) -> str:
    """The release a ``backfill`` command submitted (the report command it prints)."""
    found = re.search(r"^report: backfill-assets report --backfill (\S+)$", output, re.MULTILINE)
    assert found, output[-4000:]
    return found.group(1)


def _publish_fenced(stack: Stack, release: str) -> datetime:
    """``publish --backfill RELEASE`` while the test holds the raw publish lock until the
    publisher waits on it; returns when the lock was let go."""
    url = stack.env["BACKFILL_LEDGER_URL"]
    log = stack.logs / "publish.log"
    process = None
    try:
        with database.fence_on(sa.create_engine(url), ["raw"]):
            process = start_cli(stack, log, "publish", "--backfill", release, "--reason", "stack")
            _wait_for_publisher(process, log, url)
            released_at = datetime.now(UTC)
        assert process.wait(timeout=BACKFILL_DEADLINE) == 0, "publish failed:\n" + tail(log, 80)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
    return released_at


def _assert_on_s3(stack: Stack) -> None:
    """The runs ran on the cluster, read the part files from S3 and wrote the warehouse
    there with the magic committer."""
    worker_log = (stack.logs / "spark-worker.log").read_text(errors="replace")
    assert worker_log.count("Asked to launch executor") >= 3
    # The part files were read from S3 (Spark reads them through S3A; the driver reads
    # manifests), and the backups exist nowhere else the runs are told of.
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


def ledger_rows(stack: Stack, where: str) -> list[tuple]:
    """(table, phase, mode) of the ledger's rows in the stack's Postgres matching ``where``."""
    url = servers.libpq_url(stack.env["BACKFILL_LEDGER_URL"])
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT table_name, phase, mode FROM publications WHERE {where}")
        return cur.fetchall()


COUNTS = " UNION ALL ".join(
    [
        "SELECT 'raw' AS t, hour, count(*) AS n, '' AS run_id, '' AS phase, '' AS mode, "
        "'' AS release, '' AS at FROM raw.payloads GROUP BY hour",
        "SELECT 'quarantine', hour, count(*), '', '', '', '', '' FROM raw.quarantine GROUP BY hour",
        "SELECT 'transformed', hour, count(*), '', '', '', '', '' FROM transformed.payloads "
        "GROUP BY hour",
        "SELECT 'sessions', hour, count(*), '', '', '', '', '' FROM aggregated.sessions "
        "GROUP BY hour",
        "SELECT concat('ledger:', table_name), hour, 0, run_id, phase, mode, backfill_id, "
        "date_format(recorded_at, \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\") "
        "FROM audit.publications",
    ]
)


def published_and_ledger(stack: Stack, log: Path) -> tuple[dict[str, dict[str, int]], list]:
    """Rows per table and hour as published, and the ledger, with ``backfill-assets sql``."""
    published: dict[str, dict[str, int]] = defaultdict(dict)
    ledger = []
    for row in sql(stack, COUNTS, log):
        if row["t"].startswith("ledger:"):
            ledger.append(row)
        else:
            published[row["t"]][row["hour"]] = row["n"]
    return published, ledger


def _assert_truth(stack: Stack, published: dict[str, dict[str, int]]) -> None:
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
    counted = [SESSION_HOUR]
    sessions = expected.sessions(deliveries, counted)
    assert sum(published["raw"].values()) > 0 and sum(len(s) for s in sessions.values()) > 0
    assert {h: published["sessions"].get(h, 0) for h in counted} == {
        h: len(sessions[h]) for h in counted
    }


def test_dry_run_publish_rollback_verify_on_the_cluster_match_the_truth(stack: Stack):
    """A dry run of every hour and layer, then its publish (fenced by the raw lock the
    test holds), matches the generator's truth; its rollback empties every layer; verify
    finds the ledger and the metastore in agreement."""
    started, test_began = time.monotonic(), datetime.now(UTC)
    logs = stack.logs
    dry = cli(
        stack,
        logs / "dry-run.log",
        "backfill",
        "--from",
        START,
        "--to",
        LAST,
        "--dry-run",
        "--reason",
        "stack test",
    )
    release = _submitted(dry)
    released_at = _publish_fenced(stack, release)
    released = time.monotonic()
    _assert_on_s3(stack)

    published, ledger = published_and_ledger(stack, logs / "sql.log")
    _assert_truth(stack, published)
    # Nothing of raw was published while the test held the lock (the dry run, over by
    # then, published nothing); one run published the dry run's release.
    # (rows of the stack's other tests, which share its ledger database, came before it)
    raw_events = [
        r
        for r in ledger
        if r["t"].startswith("ledger:raw.") and datetime.fromisoformat(r["at"]) >= test_began
    ]
    assert raw_events and min(datetime.fromisoformat(r["at"]) for r in raw_events) > released_at
    assert len({r["run_id"] for r in raw_events}) == 1
    assert {r["release"] for r in raw_events} == {release}
    assert Counter(r["phase"] for r in ledger)["commit"] > 0
    checked = time.monotonic()

    cli(stack, logs / "rollback.log", "rollback", "--backfill", release, "--reason", "stack")
    verified = cli(stack, logs / "verify.log", "verify")
    assert "ledger and metastore agree" in verified, verified[-4000:]
    # A first publish rolled back in every layer, in one transaction the ledger records (the
    # metastore agrees with it: verify above).
    rollbacks = ledger_rows(stack, "mode = 'rollback' AND phase = 'commit'")
    assert {table for table, _, _ in rollbacks} >= {
        "raw.payloads",
        "transformed.payloads",
        "aggregated.sessions",
    }
    print(
        f"\nstack: dry run + publish {released - started:.0f}s, check "
        f"{checked - released:.0f}s, rollback + verify + check {time.monotonic() - checked:.0f}s"
    )
