"""Releases in the test process and what releases left: ``execute_release`` runs a
release's stages in this process, as Dagster's daemon would run them (the suite's fast
path; the CLI tests drive the real daemon); ``published_state``, ``latest``,
``provisional`` and ``published_once_and_right`` read what a release published;
``empty_warehouse`` empties the catalog, the warehouse and the ledger between tests."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime

import dagster as dg
import pyarrow.parquet as pq

from backfill_assets.core import names, plan, tags
from backfill_assets.core.warehouse import audit
from backfill_assets.core.warehouse.publisher import PROVISIONAL
from backfill_assets.release import keys, launch, outcomes
from backfill_assets.release.keys import table_key
from backfill_assets.release.state import metadata_value
from backfill_assets.settings import Settings
from backfill_assets_dev import expected
from backfill_assets_tests.helpers.processes import COMMAND_TIMEOUT_SECONDS


def empty_warehouse(spark, settings: Settings) -> None:
    """An empty catalog and warehouse. The tables are external, so dropping them leaves
    their files (the audit tables' too, which a new table at the same place would read):
    drop every database, then delete the warehouse directory."""
    import shutil

    for row in spark.sql("SHOW DATABASES").collect():
        if row[0] != "default":
            spark.sql(f"DROP DATABASE IF EXISTS {row[0]} CASCADE")
    spark.catalog.clearCache()
    shutil.rmtree(settings.warehouse_dir, ignore_errors=True)
    empty_ledger(settings.warehouse_dir)


def empty_ledger(warehouse_dir: str) -> None:
    """Every row of the ledger database deleted (its schema stays, at the newest revision),
    and its marker with them (a ledger that lost publications is otherwise refused)."""
    from backfill_assets import settings
    from backfill_assets.core.warehouse import audit, database, ledger_file

    with database.transaction(warehouse_dir) as connection:
        for table in audit.METADATA.sorted_tables:
            connection.execute(table.delete())
    db = ledger_file.sqlite_file(settings.ledger_url(warehouse_dir))
    if db is not None:
        ledger_file.marker_of(db).unlink(missing_ok=True)


@dataclasses.dataclass
class ReleaseResult:
    """What an in-process release did: its id and each run's summary, in order."""

    release_id: str
    runs: list[outcomes.RunSummary]

    @property
    def success(self) -> bool:
        return bool(self.runs) and all(r.success for r in self.runs)

    @property
    def checks(self) -> dict[str, dict]:
        return {name: c for r in self.runs for name, c in r.checks.items()}

    @property
    def failures(self) -> list[str]:
        return [f for r in self.runs for f in r.failures]

    def run_of(self, asset: str) -> outcomes.RunSummary:
        return next(r for r in self.runs if asset in r.assets)


Stage = tuple[list[str], str, str]  # (layers, first, last); the layer PUBLISH: the publish step
PUBLISH = "publish"


def release_stages(layers: list[str], first: str, last: str, publish: bool) -> list[Stage]:
    """The runs Dagster's backfill daemon makes of a release, in order: the received-hour
    layers over ``first..last`` in one run, the session layer over the session hours their
    windows touch (or ``first..last`` when it is the root) in the same run when those are
    the same hours, else in a second one; the publish step in the last run (its hours)."""
    from backfill_assets.core.windows import session_hours_touching

    received = [layer for layer in layers if layer in names.RECEIVED_HOUR_LAYERS]
    session_span = session_hours_touching(first, last) if received else (first, last)
    stages: list[Stage] = []
    if received:
        stages.append((received, first, last))
    if "aggregated" in layers:
        if stages and session_span == (first, last):
            stages[0][0].append("aggregated")
        else:
            stages.append((["aggregated"], *session_span))
    if publish:  # the publish step's hours are the session hours (``publish_deps``)
        if (stages[-1][1], stages[-1][2]) == session_span:
            stages[-1][0].append(PUBLISH)
        else:
            stages.append(([PUBLISH], *session_span))
    return stages


def execute_stages(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    stages: list[Stage],
    *,
    release_id: str,
    run_tags: dict[str, str],
    run_config: dict | None = None,
) -> list[outcomes.RunSummary]:
    """Run a release's stages in this process with Dagster's public testing API
    (``execute_in_process``), each a Dagster run tagged with the release: the suite's fast
    path, without the daemon's iterations and the run processes. The product runs releases
    only as Dagster asset backfills (the CLI tests, the sensor and the stack test do).
    Stops after a stage whose asset step failed, as Dagster does not build downstream of a
    failed step."""
    job = defs.resolve_implicit_global_asset_job_def()
    summaries: list[outcomes.RunSummary] = []
    for stage_layers, first, last in stages:
        selection = [
            k for layer in stage_layers if layer != PUBLISH for k in keys.layer_keys(defs, layer)
        ]
        publishes = PUBLISH in stage_layers
        if publishes:
            selection.append(keys.PUBLISH_KEY)
        stage_tags = {
            **run_tags,
            tags.RELEASE: release_id,
            "dagster/asset_partition_range_start": first,
            "dagster/asset_partition_range_end": last,
        }
        result = job.execute_in_process(
            instance=instance,
            asset_selection=selection,
            tags=stage_tags,
            run_config=dict(run_config) if run_config and publishes else None,
            raise_on_error=False,
        )
        summary = outcomes.summarize_run(instance, instance.get_run_by_id(result.run_id))
        summaries.append(summary)
        if any(not f.split(":")[0].endswith("_checks") for f in summary.failures):
            break
    return summaries


def execute_release(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    first: str,
    last: str,
    *,
    layers: tuple[str, ...] = ("raw",),
    downstream: bool = True,
    publish: bool = True,
    release_id: str | None = None,
    extra_tags: dict[str, str] | None = None,
    publish_only: str | None = None,
    publish_config: dict | None = None,
) -> ReleaseResult:
    """Run a release in this process, stage by stage as the daemon would, all runs tagged
    with one release id (the suite's fast path; the CLI tests drive the real daemon)."""
    import uuid

    release_id = release_id or f"test-{uuid.uuid4().hex[:10]}"
    chosen = plan.release_layers(list(layers), downstream=downstream)
    stages = release_stages(chosen, first, last, publish)
    run_tags = launch.request_tags(dry_run=not publish, extra=extra_tags)
    config = None
    if publish_only:  # publish an earlier (dry-run) release without rebuilding it
        stages = [([PUBLISH], first, last)]
        run_tags[tags.MODE] = "publish"
        config = {
            "ops": {
                "release__publish": {
                    "config": {"release_id": publish_only, **(publish_config or {})}
                }
            }
        }
    runs = execute_stages(
        defs, instance, stages, release_id=release_id, run_tags=run_tags, run_config=config
    )
    return ReleaseResult(release_id, runs)


def end_backfill(instance: dg.DagsterInstance, backfill_id: str, status: str) -> None:
    """Mark a backfill that no daemon runs here as ended (``COMPLETED_SUCCESS``,
    ``CANCELED``), as Dagster's daemon would: a backfill left requested holds its hours
    for every later release of the instance (one release per hour at a time)."""
    backfill = instance.get_backfill(backfill_id)
    instance.update_backfill(backfill.with_status(getattr(type(backfill.status), status)))


def published_state(env: Mapping[str, str], tables: tuple[str, ...]) -> dict:
    """table -> hour -> [location, rows] as the metastore and the files say, read in a
    Spark session of a process of its own (the embedded metastore serves one JVM)."""
    code = f"""
import json
from backfill_assets.core.warehouse.tables import partition_locations, table_exists
from backfill_assets.core.spark.session import spark_session
from backfill_assets.settings import Settings

spark = spark_session(Settings.from_env())
state = {{}}
for table in {list(tables)!r}:
    if not table_exists(spark, table):
        continue
    rows = {{r["hour"]: r["count"] for r in spark.table(table).groupBy("hour").count().collect()}}
    where = partition_locations(spark, table)
    state[table] = {{h: [at, rows.get(h, 0)] for h, at in where.items()}}
print(json.dumps(state))
"""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], env=dict(env), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - started < COMMAND_TIMEOUT_SECONDS
    return json.loads(done.stdout.strip().splitlines()[-1])


def latest(instance: dg.DagsterInstance, key: dg.AssetKey, hours: list[str]) -> dict[str, dict]:
    """hour -> metadata of the latest materialization of ``key`` there (published hours)."""
    found = {}
    for hour in hours:
        result = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[hour]), limit=1
        )
        if result.records:
            found[hour] = result.records[0].asset_materialization.metadata
    return found


def provisional(instance: dg.DagsterInstance, hours: list[str]) -> dict[str, str]:
    """Published session hour -> its provisional note ("" once final)."""
    return {
        h: str(metadata_value(meta, PROVISIONAL) or "")
        for h, meta in latest(instance, table_key("aggregated.sessions"), hours).items()
    }


def backfill_id_of(done: subprocess.CompletedProcess) -> str:
    """The release id a ``backfill`` or ``publish`` command printed ("submitted ... ID:")."""
    return next(
        line.split(":")[0].split()[-1]
        for line in done.stdout.splitlines()
        if line.startswith("submitted ")
    )


def _ms(value: datetime) -> int:
    moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def published_sessions(warehouse_dir: str, release: str) -> dict[str, set[tuple]]:
    """Session hour -> the sessions the release published there (read from the Parquet the
    ledger points at, without Spark)."""
    found = {}
    where = {"table_name": "aggregated.sessions", "backfill_id": release, "phase": "commit"}
    for row in audit.rows(warehouse_dir, audit.PUBLICATIONS, where):
        location = row["new_location"].removeprefix("file:")
        table = pq.read_table(location) if os.listdir(location) else None
        rows = table.to_pylist() if table is not None else []
        found[row["hour"]] = {
            (
                r["client_id"],
                r["user_id"],
                _ms(r["session_start_at"]),
                _ms(r["session_end_at"]),
                r["payload_count"],
            )
            for r in rows
        }
    return found


def published_rows(warehouse_dir: str, release: str, table: str) -> dict[str, int]:
    """Hour -> rows of ``table`` the release published there (Parquet footers, no Spark)."""
    where = {"table_name": table, "backfill_id": release, "phase": "commit"}
    counts = {}
    for row in audit.rows(warehouse_dir, audit.PUBLICATIONS, where):
        location = row["new_location"].removeprefix("file:")
        files = [os.path.join(location, f) for f in os.listdir(location) if f.endswith(".parquet")]
        counts[row["hour"]] = sum(pq.read_metadata(f).num_rows for f in files)
    return counts


def published_once_and_right(settings, release: str) -> set[str]:
    """Asserts the release published in one ledger transaction, every layer, its raw and
    transformed rows and its sessions equal to the referee's (what a clean release
    publishes: the fidelity tests hold releases to it); returns the raw hours it
    published."""
    where = {"backfill_id": release, "phase": "commit"}
    commits = audit.rows(settings.warehouse_dir, audit.PUBLICATIONS, where)
    assert len({c["txn_id"] for c in commits}) == 1
    assert {c["table_name"] for c in commits} >= {
        "raw.payloads",
        "transformed.payloads",
        "aggregated.sessions",
        "aggregated.client_hourly",
    }
    raw = published_rows(settings.warehouse_dir, release, "raw.payloads")
    quarantine = published_rows(settings.warehouse_dir, release, "raw.quarantine")
    truth_raw = expected.raw_rows(settings.backup_root)  # (payload rows, quarantined lines)
    assert {hour: (raw[hour], quarantine.get(hour, 0)) for hour in raw} == {
        hour: truth_raw.get(hour, (0, 0)) for hour in raw
    }
    deliveries = expected.read_deliveries(settings.backup_root)
    transformed = published_rows(settings.warehouse_dir, release, "transformed.payloads")
    truth_transformed = expected.transformed_rows(deliveries)
    assert transformed == {hour: truth_transformed.get(hour, 0) for hour in transformed}
    sessions = published_sessions(settings.warehouse_dir, release)
    truth = expected.sessions(deliveries, sorted(sessions))
    assert sessions and sessions == {
        hour: {expected.session_key(s) for s in found} for hour, found in truth.items()
    }
    return {c["hour"] for c in commits if c["table_name"] == "raw.payloads"}
