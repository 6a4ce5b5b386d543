"""What a release's plan reads from the ledger database (candidates, check results, reads,
approvals, deletions, when published pointers last moved) and the change gates' measures
(Spark jobs over the candidates and what they replace)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import SparkSession

from backfill_assets.core.names import Layer
from backfill_assets.core.warehouse import audit, gates
from backfill_assets.core.warehouse.tables import partition_locations


def _rows(spark: SparkSession, table: str, where: Mapping, order_by: str | None = None) -> list:
    return audit.rows(audit.warehouse_of(spark), table, where, order_by)


def release_candidates(
    spark: SparkSession, release_id: str, tables: Sequence[str]
) -> dict[tuple[str, str], dict]:
    """(shadow table, hour) -> newest shadow partition row the release wrote (one query)."""
    where = {"release_id": release_id, "table_name": list(tables)}
    newest: dict[tuple[str, str], dict] = {}
    for r in _rows(spark, audit.SHADOW_PARTITIONS, where, "written_at"):
        newest[(r["table_name"], r["hour"])] = r  # oldest first: the newest wins
    return newest


def releases_of(spark: SparkSession, tables: Sequence[str], hours: Sequence[str]) -> list[dict]:
    """Releases that wrote any of ``tables`` x ``hours``: id, hours, newest write, newest first."""
    found: dict[str, dict] = {}
    where = {"table_name": list(tables), "hour": list(hours)}
    for r in _rows(spark, audit.SHADOW_PARTITIONS, where, "written_at"):
        if r["release_id"] is None:
            continue
        entry = found.setdefault(
            r["release_id"], {"release_id": r["release_id"], "hours": set(), "tables": set()}
        )
        entry["hours"].add(r["hour"])
        entry["tables"].add(r["table_name"])
        entry["written_at"] = r["written_at"]
    ordered = sorted(found.values(), key=lambda e: e["written_at"], reverse=True)
    return [{**e, "hours": sorted(e["hours"]), "tables": sorted(e["tables"])} for e in ordered]


def _check_outcomes(spark: SparkSession, tables: Sequence[str], versions: set[str]) -> dict:
    """(table, hour, version) -> check name -> (passed, detail), newest result per check."""
    if not versions:
        return {}
    where = {"table_name": list(tables), "version": versions}
    outcomes: dict[tuple[str, str, str], dict[str, tuple[bool, str]]] = {}
    for r in _rows(spark, audit.CHECK_RESULTS, where, "checked_at"):
        outcomes.setdefault((r["table_name"], r["hour"], r["version"]), {})[r["check_name"]] = (
            r["passed"],
            r["detail"],
        )
    return outcomes


def _reads(spark: SparkSession, release_id: str) -> list[dict]:
    return _rows(spark, audit.RELEASE_READS, {"release_id": release_id})


def _last_moves(spark: SparkSession, reads: Sequence[dict]) -> dict[tuple[str, str], object]:
    """(table, hour) -> when the ledger last records its published pointer moving (a
    publish, rollback or recovery), for the tables and hours of ``reads``: a build reads
    its published upstream when its Spark job runs, after it listed the location, so a
    move after the read is stale even if a rollback put the pointer back since. One query
    (none without reads). The times are the hosts' clocks (the build's, the publisher's):
    keep them synchronized (NTP)."""
    if not reads:
        return {}
    where = {"table_name": {r["upstream_table"] for r in reads}, "hour": {r["hour"] for r in reads}}
    last: dict[tuple[str, str], object] = {}
    for r in _rows(spark, audit.PUBLICATIONS, where, "recorded_at"):
        last[(r["table_name"], r["hour"])] = r["recorded_at"]
    return last


def _written(spark: SparkSession, locations: set[str]) -> dict[str, dict]:
    """Location -> its ``audit.shadow_partitions`` row (version, row count ...)."""
    if not locations:
        return {}
    return {
        r["location"]: r for r in _rows(spark, audit.SHADOW_PARTITIONS, {"location": locations})
    }


def published_versions_checked(
    spark: SparkSession, layer: Layer, hours: Sequence[str]
) -> dict[str, dict[str, tuple[bool, str]]]:
    """Published table -> hour -> (passed, why): did the version published at each hour
    pass every check of ``layer`` (from the ledger: a few jobs for the whole range)? An
    hour with nothing published is left out."""
    located = {t: partition_locations(spark, t) for t in layer.tables}
    wanted = {loc for locs in located.values() for h, loc in locs.items() if h in hours}
    written = _written(spark, wanted)
    outcomes = _check_outcomes(
        spark, [layer.checked_table], {w["version"] for w in written.values()}
    )
    found: dict[str, dict[str, tuple[bool, str]]] = {}
    for table, locs in located.items():
        for hour in hours:
            if hour not in locs:
                continue
            row = written.get(locs[hour])
            if row is None:
                found.setdefault(table, {})[hour] = (
                    False,
                    f"published location {locs[hour]} is not in the ledger",
                )
                continue
            results = outcomes.get((layer.checked_table, hour, row["version"]), {})
            missing = [c for c in layer.checks if c not in results]
            failed = [
                f"{c}: {results[c][1]}" for c in layer.checks if c in results and not results[c][0]
            ]
            why = (
                f"version {row['version'][:8]} "
                + (f"has no result for {', '.join(missing)}" if missing else "")
                + ("; " if missing and failed else "")
                + (f"failed {'; '.join(failed)}" if failed else "")
            )
            found.setdefault(table, {})[hour] = (
                (True, f"version {row['version'][:8]} passed {len(layer.checks)} check(s)")
                if not (missing or failed)
                else (False, why)
            )
    return found


def approvals_of(spark: SparkSession, release_id: str) -> dict[tuple[str, str, str], list[dict]]:
    """(layer, hour, version) -> the recorded approvals of the release's gate findings, oldest
    first (each names the change it approved: ``gate``, the findings as they were then)."""
    found: dict[tuple[str, str, str], list[dict]] = {}
    for r in _rows(spark, audit.APPROVALS, {"release_id": release_id}, "approved_at"):
        found.setdefault((r["layer"], r["hour"], r["version"]), []).append(r)
    return found


def _gate_measures(
    spark: SparkSession,
    candidates: Mapping[tuple[str, str], dict],
    current: Mapping[str, Mapping[str, str]],
    published_of: Mapping[str, str],
    written: Mapping[str, dict],
) -> dict[str, dict[gates.Key, dict[str, float]]]:
    """Per shadow table, the gates' measures of each candidate that replaces a published
    version and of the version it replaces: their recorded row counts, and at most one
    Spark job per table for the rest; none when nothing published is replaced by other
    rows."""
    row_counts: dict[str, dict[gates.Key, int]] = {}  # table -> the versions to measure
    for (shadow, hour), row in candidates.items():
        was = current.get(published_of.get(shadow, ""), {}).get(hour)
        if was and was != row["location"] and was in written:
            old = written[was]
            if _same_rows(old, row):
                continue  # a rebuild of the same input: nothing can move
            row_counts.setdefault(shadow, {}).update(
                {(hour, row["version"]): row["row_count"], (hour, old["version"]): old["row_count"]}
            )
    return {table: gates.measure(spark, table, counts) for table, counts in row_counts.items()}


def _known_clients(
    spark: SparkSession,
    candidates: Mapping[tuple[str, str], dict],
    measured: Mapping[str, dict[gates.Key, dict[str, float]]],
    current: Mapping[str, Mapping[str, str]],
    written: Mapping[str, dict],
    published_of: Mapping[str, str],
) -> dict[str, dict[str, set[str]]]:
    """Per client-gated shadow table, hour -> the clients appearing in the hour's candidate
    that have published rows near it: one Spark job per table, and only when a client
    appears in a published hour (a late folder landing, or another source's tree)."""
    found: dict[str, dict[str, set[str]]] = {}
    for shadow, published in gates.CLIENT_GATED.items():
        numbers = measured.get(shadow, {})
        appearing: dict[str, list[str]] = {}
        for (table, hour), row in candidates.items():
            was = current.get(published_of.get(table, ""), {}).get(hour)
            old = written.get(was or "", {}).get("version")
            if table == shadow and (hour, row["version"]) in numbers and old:
                new = numbers[(hour, row["version"])]
                clients = gates.appearing(numbers.get((hour, old), {}), new)
                if clients:
                    appearing[hour] = clients
        clients = sorted({c for cs in appearing.values() for c in cs})
        found[shadow] = gates.known_clients(spark, published, sorted(appearing), clients)
    return found


def _same_rows(a: Mapping, b: Mapping) -> bool:
    """Do two ``audit.shadow_partitions`` rows record the same rows (checksum and count)?"""
    return (a.get("checksum"), a.get("row_count")) == (b.get("checksum"), b.get("row_count"))


def deleted_by(deletion: Mapping) -> str:
    """How an ``audit.deletions`` row says what deleted a version, and why."""
    erased = deletion["kind"] == audit.ERASURE_KIND
    what = "purged by erasure run" if erased else "deleted by vacuum run"
    return (
        f"{what} {deletion['run_id']} at {deletion['deleted_at']:%Y-%m-%d %H:%M} "
        f"({deletion['reason']})"
    )
