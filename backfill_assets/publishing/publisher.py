"""Publish a release: every checked candidate of one backfill, in one ledger transaction.

A **release** is everything one Dagster backfill (or one run outside a backfill) wrote: a
shadow version per (table, hour) of each layer it rebuilt, tagged with the release id in
``audit.shadow_partitions``. Downstream layers of a release read their upstream's
candidates of the same release (and the published version for the other hours of their
window; ``audit.release_reads`` records which). Publishing a release:

1. **plan**: per layer and hour, the newest candidate of the release; it is held back if a
   check of its layer did not pass for that exact version, if it changes the published
   hour beyond the change gates' limits and nobody approved it (``gates``), if it read an
   upstream candidate of the release that is held back (so a session hour never goes live
   on top of a raw hour that did not) or another version of the release than the one going
   live there (the upstream hour was rebuilt after it), or if the published version is
   newer than it (an old build published again: going back is a rollback). The whole
   release is refused if an hour it read as *published* has changed since it was built
   (rebuild instead), whether or not this publish includes the layer it read; the upstream
   layers' locks are held with the published ones so that cannot change under it.
2. **one transaction**: ``prepare`` rows for every (table, hour) to swap, all with one
   ``txn_id``; then one swap per table (its hours relocated in one metastore transaction,
   added or dropped in one statement: ``tables.swap_partitions``; no data is copied or
   deleted); then the ``commit`` rows.
3. **recovery**: a transaction with ``prepare`` rows and no outcome (a crash) is settled as
   a whole by ``recover`` (run before every publish and rollback, and by ``verify``): if
   every swap happened it is committed, otherwise the swaps that happened are undone and
   it is aborted. Only by a caller holding the publish locks of every layer the
   transaction touches: otherwise it may be another run's, in flight between two swaps.
   Tables of a layer, and a layer and its downstream, are therefore never left on
   different releases once recovery has run.

Rollback is a transaction of the same kind: per (table, hour) the ledger is a stack
(a publish pushes a location, a rollback pops the release's entries), so repeated rollbacks
walk back through history, a release published twice in an hour goes back to what was
there before it, and rolling back a first publish drops the partition. A rollback is
refused while a later release that read what it published is still published (roll that
one back first).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from backfill_assets import faults
from backfill_assets.partitions import hours_between, shift_hour
from backfill_assets.publishing import audit, gates
from backfill_assets.publishing.lock import release_locks
from backfill_assets.publishing.tables import (
    ensure_table,
    partition_locations,
    split_table,
    swap_partitions,
    table_exists,
)

PREPARE, COMMIT, ABORT = "prepare", "commit", "abort"
PUBLISH, ROLLBACK = "publish", "rollback"
PUBLISHED, UNCHANGED, HELD_BACK = "published", "unchanged", "held_back"
SOURCE_RELEASE, SOURCE_PUBLISHED = "release", "published"
# An hour read as empty for good: the release declared it so, or it lies before the backups'
# first hour (where the data begins).
SOURCE_EMPTY = "empty"
# Hours a windowed build read as empty for want of data. OUTSIDE: after the newest hour of
# the backups, no data exists yet: the hours built from it are published *provisional* (the
# best there is; rebuilt when the later hours land). UNAVAILABLE: inside the backups but
# neither published nor rebuilt by the release: the data exists, so the hours built without
# it are held back (the rest of the release publishes).
SOURCE_OUTSIDE, SOURCE_UNAVAILABLE = "outside", "unavailable"
READ_AS_EMPTY = (SOURCE_EMPTY, SOURCE_OUTSIDE, SOURCE_UNAVAILABLE)
PROVISIONAL = "provisional"  # metadata of a published hour: why it is provisional, or ""
# How a reason says an hour is held back only because an upstream hour it reads is.
HELD_UPSTREAM = "of this release, which is held back"


@dataclass(frozen=True)
class Layer:
    """The tables a layer publishes together, the checks that gate them, what it reads."""

    name: str
    checked_table: str  # the shadow table whose checks gate the layer
    pairs: tuple[tuple[str, str], ...]  # (shadow table, published table)
    checks: tuple[str, ...]
    code_version: str
    upstream: str | None = None  # the layer whose published table this layer reads
    window: tuple[int, int] = (0, 0)  # upstream hours [H - back, H + ahead] an hour reads

    @property
    def tables(self) -> list[str]:
        return [published for _, published in self.pairs]

    def reads(self, hour: str) -> list[str]:
        """The upstream hours partition ``hour`` of this layer is built from."""
        back, ahead = self.window
        return hours_between(shift_hour(hour, -back), shift_hour(hour, ahead))


@dataclass
class HourOutcome:
    layer: str
    hour: str
    status: str  # published | unchanged | held_back
    version: str | None = None
    reasons: list[str] = field(default_factory=list)
    tables: dict[str, dict] = field(default_factory=dict)
    gates: list[str] = field(default_factory=list)  # change-gate findings (approved or not)
    approval: dict | None = None  # the approval that let the gate's findings through
    provisional: list[str] = field(default_factory=list)  # window hours read without data

    @property
    def provisional_note(self) -> str:
        """Why the hour is provisional ("" when it is final)."""
        return provisional_note(self.provisional)

    @property
    def awaiting_approval(self) -> bool:
        """Held back by change gates alone: an approval publishes it."""
        return self.status == HELD_BACK and all(r.startswith(gates.PREFIX) for r in self.reasons)


@dataclass
class ReleasePlan:
    release_id: str
    outcomes: list[HourOutcome]
    stale: list[str]  # published upstream hours that changed since the release read them
    approvals: list[dict] = field(default_factory=list)  # given by this publish, to record

    def by_layer(self, layer: str) -> list[HourOutcome]:
        return [o for o in self.outcomes if o.layer == layer]

    @property
    def held(self) -> list[HourOutcome]:
        return [o for o in self.outcomes if o.status == HELD_BACK]


class PublishError(RuntimeError):
    """Publishing or rolling back cannot proceed; the message says why and what to do."""


@dataclass(frozen=True)
class Approval:
    """A person's approval of a release's change-gate findings, given with a publish."""

    approved_by: str
    reason: str
    hours: frozenset[str] | None = None  # None: every hour the gates hold
    ticket: str | None = None

    def covers(self, hour: str) -> bool:
        return self.hours is None or hour in self.hours


# ----------------------------------------------------------------------- reading audit


def _newest(df, keys: Sequence[str], order: str):
    rank = F.row_number().over(Window.partitionBy(*keys).orderBy(F.col(order).desc()))
    return df.withColumn("_rank", rank).where(F.col("_rank") == 1).drop("_rank")


def release_candidates(
    spark: SparkSession, release_id: str, tables: Sequence[str]
) -> dict[tuple[str, str], dict]:
    """(shadow table, hour) -> newest shadow partition row the release wrote (one action)."""
    written = audit.read(spark, audit.SHADOW_PARTITIONS).where(
        (F.col("release_id") == release_id) & F.col("table_name").isin(list(tables))
    )
    rows = _newest(written, ["table_name", "hour"], "written_at").collect()
    return {(r["table_name"], r["hour"]): r.asDict() for r in rows}


def releases_of(spark: SparkSession, tables: Sequence[str], hours: Sequence[str]) -> list[dict]:
    """Releases that wrote any of ``tables`` x ``hours``: id, hours, newest write, newest first."""
    rows = (
        audit.read(spark, audit.SHADOW_PARTITIONS)
        .where(
            F.col("table_name").isin(list(tables))
            & F.col("hour").isin(list(hours))
            & F.col("release_id").isNotNull()
        )
        .groupBy("release_id")
        .agg(
            F.collect_set("hour").alias("hours"),
            F.collect_set("table_name").alias("tables"),
            F.max("written_at").alias("written_at"),
        )
        .orderBy(F.col("written_at").desc())
        .collect()
    )
    return [r.asDict() for r in rows]


def _check_outcomes(spark: SparkSession, tables: Sequence[str], versions: set[str]) -> dict:
    """(table, hour, version) -> check name -> (passed, detail), newest result per check."""
    if not versions:
        return {}
    rows = (
        audit.read(spark, audit.CHECK_RESULTS)
        .where(F.col("table_name").isin(list(tables)) & F.col("version").isin(list(versions)))
        .orderBy("checked_at")
        .collect()
    )
    outcomes: dict[tuple[str, str, str], dict[str, tuple[bool, str]]] = {}
    for r in rows:
        outcomes.setdefault((r["table_name"], r["hour"], r["version"]), {})[r["check_name"]] = (
            r["passed"],
            r["detail"],
        )
    return outcomes


def _reads(spark: SparkSession, release_id: str) -> list[dict]:
    rows = audit.read(spark, audit.RELEASE_READS).where(F.col("release_id") == release_id)
    return [r.asDict() for r in rows.collect()]


def _last_moves(spark: SparkSession, reads: Sequence[dict]) -> dict[tuple[str, str], object]:
    """(table, hour) -> when the ledger last records its published pointer moving (a
    publish, rollback or recovery), for the tables and hours of ``reads``: a build reads
    its published upstream when its Spark job runs, after it listed the location, so a
    move after the read is stale even if a rollback put the pointer back since. One Spark
    action (none without reads). The times are the hosts' clocks (the build's, the
    publisher's): keep them synchronized (NTP)."""
    if not reads:
        return {}
    rows = (
        audit.read(spark, audit.PUBLICATIONS)
        .where(
            F.col("table_name").isin(sorted({r["upstream_table"] for r in reads}))
            & F.col("hour").isin(sorted({r["hour"] for r in reads}))
        )
        .groupBy("table_name", "hour")
        .agg(F.max("recorded_at").alias("last"))
        .collect()
    )
    return {(r["table_name"], r["hour"]): r["last"] for r in rows}


def _written(spark: SparkSession, locations: set[str]) -> dict[str, dict]:
    """Location -> its ``audit.shadow_partitions`` row (version, row count ...)."""
    if not locations:
        return {}
    rows = (
        audit.read(spark, audit.SHADOW_PARTITIONS)
        .where(F.col("location").isin(sorted(locations)))
        .select("location", "version", "row_count", "checksum", "written_at", "release_id")
        .collect()
    )
    return {r["location"]: r.asDict() for r in rows}


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
    if not table_exists(spark, audit.APPROVALS):
        return {}
    rows = audit.read(spark, audit.APPROVALS).where(F.col("release_id") == release_id)
    found: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows.orderBy("approved_at").collect():
        found.setdefault((r["layer"], r["hour"], r["version"]), []).append(r.asDict())
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


# ------------------------------------------------------------------------------ planning


def lock_names(layers: Sequence[Layer]) -> list[str]:
    """The publish locks a publish of ``layers`` takes: theirs and their upstreams'."""
    return sorted(
        {layer.name for layer in layers} | {lay.upstream for lay in layers if lay.upstream}
    )


def published_tables(layers: Sequence[Layer]) -> list[str]:
    """The published tables of ``layers`` (a caller holding their locks may settle their
    pending transactions: ``recover``)."""
    return [table for layer in layers for table in layer.tables]


def plan_release(
    spark: SparkSession,
    release_id: str,
    layers: Sequence[Layer],
    *,
    limits: gates.Limits | None = None,
    approve: Approval | None = None,
) -> ReleasePlan:
    """Decide, per layer and hour of the release, what publishing it would do (read only).

    ``layers`` in dependency order. A few Spark actions for the whole release, whatever its
    size: candidates, check results, reads, approvals, published locations (one listing per
    table), and one measuring job per table whose published hours it would replace.
    ``approve``: approve the change-gate findings of these hours now (the approvals to
    record come back in ``ReleasePlan.approvals``); approvals recorded earlier count too,
    for the change they were given for (the same gate findings).
    """
    limits = limits or gates.Limits()
    shadows = [s for layer in layers for s, _ in layer.pairs]
    candidates = release_candidates(spark, release_id, shadows)
    versions = {row["version"] for row in candidates.values()}
    checks = _check_outcomes(spark, [layer.checked_table for layer in layers], versions)
    current = {t: partition_locations(spark, t) for t in published_tables(layers)}
    written = _written(spark, {loc for locs in current.values() for loc in locs.values() if loc})
    published_of = {shadow: published for layer in layers for shadow, published in layer.pairs}
    measured = _gate_measures(spark, candidates, current, published_of, written)
    known = _known_clients(spark, candidates, measured, current, written, published_of)
    approved = approvals_of(spark, release_id)
    new_approvals: list[dict] = []
    reads = _reads(spark, release_id)
    purged = audit.deleted(spark, {row["location"] for row in candidates.values()})

    # Every upstream table read as published, whether or not this publish includes its
    # layer (publishing only the downstream layer must not skip the check).
    # An hour read as empty is stale once something is published there.
    outside = [r for r in reads if r["source"] in (SOURCE_PUBLISHED, *READ_AS_EMPTY)]
    upstream_now = {
        t: current[t] if t in current else partition_locations(spark, t)
        for t in sorted({r["upstream_table"] for r in outside})
        if t in current or table_exists(spark, t)
    }
    last_moves = _last_moves(spark, outside)

    def moved_since(read: dict):
        """When the pointer the build read last moved, if after the read (else None)."""
        when = last_moves.get((read["upstream_table"], read["hour"]))
        return when if when is not None and read["read_at"] and when > read["read_at"] else None

    stale = sorted(
        {
            f"{r['upstream_table']} {r['hour']} (read "
            f"{'as empty' if r['source'] in READ_AS_EMPTY else 'at ' + r['location']}, now "
            f"{upstream_now.get(r['upstream_table'], {}).get(r['hour'])}"
            + (f"; republished or rolled back at {moved_since(r)}" if moved_since(r) else "")
            + ")"
            for r in outside
            if upstream_now.get(r["upstream_table"], {}).get(r["hour"]) != r["location"]
            or moved_since(r)
        }
    )
    # (reader, upstream hour) read without data: not yet in the backups / not available
    not_yet = {(r["reader_table"], r["hour"]) for r in reads if r["source"] == SOURCE_OUTSIDE}
    gaps = {(r["reader_table"], r["hour"]) for r in reads if r["source"] == SOURCE_UNAVAILABLE}
    # (reader, upstream, hour) -> the upstream versions of the release it read there
    read_from_release: dict[tuple[str, str, str], set[str]] = {}
    for r in reads:
        if r["source"] == SOURCE_RELEASE:
            key = (r["reader_table"], r["upstream_table"], r["hour"])
            read_from_release.setdefault(key, set()).add(r["version"])

    outcomes: list[HourOutcome] = []
    status_of: dict[tuple[str, str], HourOutcome] = {}  # (layer, hour) -> outcome
    by_name = {layer.name: layer for layer in layers}
    for layer in layers:
        hours = sorted({h for (t, h) in candidates if t == layer.checked_table})
        for hour in hours:
            version = candidates[(layer.checked_table, hour)]["version"]
            outcome = HourOutcome(layer.name, hour, PUBLISHED, version)
            window = layer.reads(hour)
            outcome.provisional = [h for h in window if (layer.checked_table, h) in not_yet]
            outcome.reasons += [
                f"reads {layer.upstream} {h}, which has backups but is neither published nor "
                f"rebuilt by this release: publish it (a release of that hour), then rebuild"
                for h in window
                if (layer.checked_table, h) in gaps
            ]
            results = checks.get((layer.checked_table, hour, version), {})
            outcome.reasons += [f"{n}: not checked" for n in layer.checks if n not in results]
            outcome.reasons += [f"{n}: {d}" for n, (ok, d) in sorted(results.items()) if not ok]
            upstream = by_name.get(layer.upstream or "")
            if upstream is not None:
                main = upstream.tables[0]
                for needed in layer.reads(hour):
                    held = status_of.get((upstream.name, needed))
                    read = read_from_release.get((layer.checked_table, main, needed))
                    if held is None or not read:
                        continue
                    if held.status == HELD_BACK:
                        outcome.reasons.append(f"reads {upstream.name} {needed} {HELD_UPSTREAM}")
                    elif read != {held.version}:
                        # built on another version of the release than the one going live
                        # (the upstream hour was rebuilt after this hour was built)
                        outcome.reasons.append(
                            f"reads {upstream.name} {needed} version "
                            f"{', '.join(sorted(v[:8] for v in read))}, but the release "
                            f"publishes version {held.version[:8]} there: rebuild this hour"
                        )
            elif layer.upstream and any(
                r[0] == layer.checked_table and r[2] in layer.reads(hour) for r in read_from_release
            ):
                outcome.reasons.append(
                    f"reads {layer.upstream} candidates of this release that are not published "
                    f"with it (publish {layer.upstream} too)"
                )
            for shadow, published in layer.pairs:
                row = candidates.get((shadow, hour))
                if row is None or row["version"] != version:
                    outcome.reasons.append(f"{shadow}: no partition of version {version}")
                    continue
                if row["location"] in purged:
                    gone = purged[row["location"]]
                    outcome.reasons.append(
                        f"{shadow} {hour}: version {version} was {deleted_by(gone)}; "
                        f"rebuild the hour"
                    )
                    continue
                was = current[published].get(hour)
                before = written.get(was or "", {})
                newer_live = (
                    was
                    and was != row["location"]
                    and before.get("written_at") is not None
                    and before["written_at"] > row["written_at"]
                )
                if newer_live and _same_rows(before, row):
                    # the same rows as the newer version (two backfills of the same input):
                    # what is published already holds them, nothing moves
                    row = {**row, "location": was}
                elif newer_live:
                    # an older build over a newer one (an old command run again, a release
                    # approved late): going back is a rollback's job, not a publish's
                    outcome.reasons.append(
                        f"{published} {hour}: the published version {before['version'][:8]} "
                        f"(release {before.get('release_id') or '?'}) is newer than version "
                        f"{version[:8]} (written {before['written_at']:%Y-%m-%d %H:%M:%S} "
                        f"after it); roll back to return to an older version"
                    )
                    continue
                if was and was != row["location"] and shadow in measured:
                    numbers = measured[shadow]
                    outcome.gates += gates.findings(
                        limits,
                        layer.name,
                        hour,
                        numbers.get((hour, before.get("version")), {}),
                        numbers.get((hour, version), {}),
                        known.get(shadow, {}).get(hour, set()),
                    )
                outcome.tables[published] = {
                    "previous_location": was,
                    "new_location": row["location"],
                    "row_count": row["row_count"],
                    "previous_row_count": int(before.get("row_count") or 0) if was else None,
                    "checksum": row["checksum"],
                    "code_version": row["code_version"],
                }
            if outcome.gates:
                # An approval covers the change it was given for: the same findings (the
                # same measures of the same candidate against what it replaces). If what is
                # published moved since (a rollback, say), the change is another one.
                change = "; ".join(outcome.gates)
                given = approved.get((layer.name, hour, version), [])
                covering = [a for a in given if a["gate"] == change]
                if covering:
                    outcome.approval = covering[-1]
                elif approve is not None and approve.covers(hour) and not outcome.reasons:
                    outcome.approval = {
                        "release_id": release_id,
                        "layer": layer.name,
                        "hour": hour,
                        "version": version,
                        "gate": change,
                        "approved_by": approve.approved_by,
                        "reason": approve.reason,
                        "ticket": approve.ticket,
                    }
                    new_approvals.append(outcome.approval)
                else:
                    outcome.reasons += [gates.PREFIX + finding for finding in outcome.gates]
                    if given:
                        outcome.reasons.append(
                            f"{gates.PREFIX}the approval on record (by "
                            f"{given[-1]['approved_by'] or '?'}) was for another change: "
                            f"{given[-1]['gate']}"
                        )
            if outcome.reasons:
                outcome.status = HELD_BACK
            elif all(t["previous_location"] == t["new_location"] for t in outcome.tables.values()):
                outcome.status = UNCHANGED
            outcomes.append(outcome)
            status_of[(layer.name, hour)] = outcome
    return ReleasePlan(release_id, outcomes, stale, new_approvals)


def provisional_note(hours: Sequence[str]) -> str:
    """One line saying which hours of a window were read without data ("" for none)."""
    if not hours:
        return ""
    span = hours[0] if len(hours) == 1 else f"{hours[0]}..{hours[-1]}"
    return (
        f"provisional: built while {len(hours)} hour(s) of its window had no data "
        f"({span}); rebuilt when they land"
    )


# --------------------------------------------------------------------------- transactions


def _ensure_published_table(spark: SparkSession, warehouse_dir: str, shadow: str, published: str):
    if table_exists(spark, published):
        return
    schema = spark.table(shadow).drop("version").schema
    database, name = split_table(published)
    ensure_table(spark, published, schema, ["hour"], f"{warehouse_dir}/published/{database}/{name}")


def _by_table(events: Sequence[dict], undo: bool = False) -> list[tuple[str, list]]:
    """Events grouped per table (first-appearance order) as ``swap_partitions`` moves;
    ``undo`` moves them back to where the transaction found them."""
    grouped: dict[str, list[tuple[str, str | None, str | None]]] = {}
    for e in events:
        previous, new = e["previous_location"], e["new_location"]
        grouped.setdefault(e["table_name"], []).append(
            (e["hour"], new, previous) if undo else (e["hour"], previous, new)
        )
    return list(grouped.items())


def _stamp(events: Iterable[dict], phase: str, **extra) -> list[dict]:
    now = audit.now()
    return [{**e, **extra, "phase": phase, "recorded_at": now} for e in events]


def apply_transaction(spark: SparkSession, warehouse_dir: str, events: list[dict]) -> str | None:
    """Swap every event's partition in one ledger transaction; returns the txn id.

    A swap moves every hour of one table at once (``tables.swap_partitions``: one
    metastore transaction for the relocated hours), so a transaction is one swap per table.
    Fault points: ``publish.swap`` after the first swap and ``publish.swap.<i>`` after
    swap ``i`` (0-based), so a test can SIGKILL the process between any two swaps.
    """
    if not events:
        return None
    txn_id = uuid.uuid4().hex
    events = [{**e, "txn_id": txn_id} for e in events]
    audit.append(spark, warehouse_dir, audit.PUBLICATIONS, _stamp(events, PREPARE))
    for index, (table, moves) in enumerate(_by_table(events)):
        swap_partitions(spark, table, moves)
        if index == 0:
            faults.checkpoint(faults.PUBLISH_SWAP)
        faults.checkpoint(f"{faults.PUBLISH_SWAP}.{index}")
    for table in sorted({e["table_name"] for e in events}):
        spark.catalog.refreshTable(table)
    audit.append(spark, warehouse_dir, audit.PUBLICATIONS, _stamp(events, COMMIT))
    return txn_id


def _event(table: str, hour: str, mode: str, manifest: Mapping, run_id: str, **values) -> dict:
    return {
        "event_id": uuid.uuid4().hex,
        "table_name": table,
        "hour": hour,
        "mode": mode,
        "run_id": run_id,
        "backfill_id": manifest.get("backfill_id"),
        "reason": manifest.get("reason"),
        "requested_by": manifest.get("requested_by"),
        "ticket": manifest.get("ticket"),
        "run_mode": manifest.get("mode"),
        **values,
    }


def publish_release(
    spark: SparkSession,
    warehouse_dir: str,
    release_id: str,
    layers: Sequence[Layer],
    *,
    run_id: str,
    manifest: Mapping[str, str | None],
    limits: gates.Limits | None = None,
    approve: Approval | None = None,
) -> ReleasePlan:
    """Publish every passing (layer, hour) of the release in one transaction, recording
    the approvals ``approve`` gives to hours the change gates hold.

    Raises ``PublishError`` (nothing published) when the release read published hours that
    changed since it was built, or when it wrote nothing for ``layers``.
    """
    # The upstream layers' locks too: what the release read as published must not move
    # between the stale-read check and the swaps.
    with release_locks(warehouse_dir, lock_names(layers), run_id):
        return _publish_release(
            spark, warehouse_dir, release_id, layers, run_id, manifest, limits, approve
        )


def _publish_release(
    spark: SparkSession,
    warehouse_dir: str,
    release_id: str,
    layers: Sequence[Layer],
    run_id: str,
    manifest: Mapping[str, str | None],
    limits: gates.Limits | None,
    approve: Approval | None,
) -> ReleasePlan:
    recover(spark, warehouse_dir, published_tables(layers))
    for layer in layers:
        for shadow, published in layer.pairs:
            if table_exists(spark, shadow):
                _ensure_published_table(spark, warehouse_dir, shadow, published)
    plan = plan_release(spark, release_id, layers, limits=limits, approve=approve)
    if not plan.outcomes:
        raise PublishError(
            f"release {release_id} wrote no shadow partition of "
            f"{', '.join(layer.name for layer in layers)}: nothing to publish"
        )
    if plan.stale:
        raise PublishError(
            f"release {release_id} read published data that has changed since it was built: "
            f"{'; '.join(plan.stale[:10])}{' ...' if len(plan.stale) > 10 else ''}. "
            f"Nothing was published; rebuild the release (run the backfill again)"
        )
    manifest = {**manifest, "backfill_id": release_id}
    events = [
        _event(
            table,
            o.hour,
            PUBLISH,
            manifest,
            run_id,
            version=o.version,
            previous_location=info["previous_location"],
            new_location=info["new_location"],
            row_count=info["row_count"],
            checksum=info["checksum"],
            code_version=info["code_version"],
        )
        for o in plan.outcomes
        if o.status == PUBLISHED
        for table, info in o.tables.items()
    ]
    if plan.approvals:  # the approval is on record before anything it allows goes live
        approved_at = audit.now()
        audit.append(
            spark,
            warehouse_dir,
            audit.APPROVALS,
            [{**a, "run_id": run_id, "approved_at": approved_at} for a in plan.approvals],
        )
    txn = apply_transaction(spark, warehouse_dir, events)
    for o in plan.outcomes:
        for info in o.tables.values():
            info["txn_id"] = txn if o.status == PUBLISHED else None
    return plan


def ledger(spark: SparkSession, tables: Sequence[str] | None = None) -> list[dict]:
    """Ledger events (of ``tables``), oldest first."""
    df = audit.read(spark, audit.PUBLICATIONS)
    if tables is not None:
        df = df.where(F.col("table_name").isin(list(tables)))
    return [r.asDict() for r in df.orderBy("recorded_at").collect()]


def pending_transactions(spark: SparkSession) -> dict[str, list[dict]]:
    """Transactions with ``prepare`` rows and no outcome (txn id -> their prepare rows): an
    anti-join in Spark, so only the (usually zero) pending rows reach the driver."""
    events = audit.read(spark, audit.PUBLICATIONS).withColumn(
        "_txn", F.coalesce("txn_id", "event_id")
    )
    settled = events.where(F.col("phase") != PREPARE).select("_txn").distinct()
    rows = (
        events.where(F.col("phase") == PREPARE)
        .join(settled, "_txn", "left_anti")
        .orderBy("recorded_at")
        .collect()
    )
    pending: dict[str, list[dict]] = {}
    for row in rows:
        event = row.asDict()
        pending.setdefault(event.pop("_txn"), []).append(event)
    return pending


def recover(spark: SparkSession, warehouse_dir: str, tables: Iterable[str]) -> list[dict]:
    """Settle crashed transactions as a whole (commit if every swap happened, else undo the
    swaps that did and abort); returns the resolution rows written.

    Only the transactions whose every table is in ``tables``: the caller holds the publish
    locks of their layers, so none of them is still in flight in another run (a pending
    transaction of a table whose lock another run holds may be that run's, between two
    swaps: settling it would split it). The others are left for whoever holds their locks.
    """
    held = set(tables)
    resolutions: list[dict] = []
    for txn, events in pending_transactions(spark).items():
        tables = sorted({e["table_name"] for e in events})
        if not held.issuperset(tables):
            continue
        current = {t: partition_locations(spark, t) for t in tables}
        swapped = [
            e for e in events if current[e["table_name"]].get(e["hour"]) == e["new_location"]
        ]
        if len(swapped) == len(events):
            resolutions += _stamp(events, COMMIT, reason=f"recovered after crash: commit {txn}")
            continue
        for table, moves in _by_table(swapped, undo=True):  # back to where the txn found them
            swap_partitions(spark, table, moves)
        for table in tables:
            spark.catalog.refreshTable(table)
        resolutions += _stamp(events, ABORT, reason=f"recovered after crash: undone {txn}")
    audit.append(spark, warehouse_dir, audit.PUBLICATIONS, resolutions)
    return resolutions


# ------------------------------------------------------------------------ history, verify


@dataclass
class Entry:
    """One published location in a (table, hour)'s history."""

    location: str | None
    release_id: str | None
    event: dict


def history(events: Sequence[dict]) -> dict[tuple[str, str], list[Entry]]:
    """Per (table, hour), the stack of published locations: a committed publish pushes,
    a committed rollback pops the rolled-back release's entries down to the location it
    restored (a release published twice there is rolled back as a whole). The top is what
    should be published now."""
    committed = [e for e in events if e["phase"] == COMMIT]
    stacks: dict[tuple[str, str], list[Entry]] = {}
    for e in committed:
        stack = stacks.setdefault((e["table_name"], e["hour"]), [])
        if e["mode"] == ROLLBACK:
            if stack:
                stack.pop()
            while (
                stack
                and stack[-1].release_id == e["backfill_id"]
                and stack[-1].location != e["new_location"]
            ):
                stack.pop()
        elif not stack or stack[-1].location != e["new_location"]:
            stack.append(Entry(e["new_location"], e["backfill_id"], e))
    return stacks


def verify(spark: SparkSession, tables: Sequence[str]) -> list[str]:
    """Disagreements between the ledger and the metastore, and split transactions."""
    stacks = history(ledger(spark, tables))
    pending = {
        txn: [e for e in rows if e["table_name"] in tables]
        for txn, rows in pending_transactions(spark).items()
    }
    pending = {txn: rows for txn, rows in pending.items() if rows}
    problems = []
    listed = {t: partition_locations(spark, t) for t in tables}  # one listing per table
    for txn, prepared in pending.items():
        moved = [e for e in prepared if listed[e["table_name"]].get(e["hour"]) == e["new_location"]]
        if 0 < len(moved) < len(prepared):
            problems.append(
                f"transaction {txn} is split: {len(moved)} of {len(prepared)} swaps applied "
                f"(run verify again to settle it)"
            )
    in_flight = {(e["table_name"], e["hour"]) for p in pending.values() for e in p}
    for table in tables:
        actual = listed[table]
        keys = {h for (t, h) in stacks if t == table} | set(actual)
        for hour in sorted(keys):
            if (table, hour) in in_flight:
                continue
            stack = stacks.get((table, hour), [])
            expected = stack[-1].location if stack else None
            if actual.get(hour) != expected:
                problems.append(
                    f"{table} hour={hour}: metastore {actual.get(hour)} but ledger {expected}"
                )
    return problems


def orphan_versions(spark: SparkSession) -> list[dict]:
    """Shadow versions no published partition points to and no ledger event ever named
    (failed, killed or never-published runs), with their size in rows."""
    events = ledger(spark)
    named = {e["new_location"] for e in events} | {e["previous_location"] for e in events}
    named |= set(audit.deleted(spark))  # deleted by vacuum: no longer an orphan
    rows = audit.read(spark, audit.SHADOW_PARTITIONS).collect()
    orphans: dict[tuple[str, str], dict] = {}
    for r in rows:
        if r["location"] in named:
            continue
        entry = orphans.setdefault(
            (r["table_name"], r["version"]),
            {
                "table_name": r["table_name"],
                "version": r["version"],
                "release_id": r["release_id"],
                "hours": 0,
                "rows": 0,
            },
        )
        entry["hours"] += 1
        entry["rows"] += int(r["row_count"] or 0)
    return sorted(orphans.values(), key=lambda e: (e["table_name"], e["version"]))


# ------------------------------------------------------------------------------ rollback


def _below(stack: Sequence[Entry], release_id: str) -> str | None:
    """The location under ``release_id``'s entries at the top of ``stack`` (None: none)."""
    index = len(stack) - 1
    while index >= 0 and stack[index].release_id == release_id:
        index -= 1
    return stack[index].location if index >= 0 else None


def _built_on(
    spark: SparkSession,
    release_id: str,
    locations: set[str],
    stacks: Mapping[tuple[str, str], Sequence[Entry]],
) -> list[str]:
    """Other releases still published somewhere that read any of ``locations`` as
    published data (``audit.release_reads``): rolling back under them would leave them
    built on data no longer published."""
    if not locations:
        return []
    readers = {
        r["release_id"]
        for r in audit.read(spark, audit.RELEASE_READS)
        .where(
            (F.col("source") == SOURCE_PUBLISHED)
            & F.col("location").isin(sorted(locations))
            & (F.col("release_id") != release_id)
        )
        .select("release_id")
        .distinct()
        .collect()
    }
    live = {stack[-1].release_id for stack in stacks.values() if stack}
    return sorted(readers & live)


def rollback_release(
    spark: SparkSession,
    warehouse_dir: str,
    layers: Sequence[Layer],
    *,
    release_id: str | None = None,
    hour: str | None = None,
    layer: str | None = None,
    run_id: str,
    manifest: Mapping[str, str | None],
) -> tuple[str, list[dict]]:
    """Roll back one release in every table and hour it published, in one transaction.

    With ``release_id``: that release (it must still be on top everywhere it published).
    With ``hour`` (and ``layer``, default the first): the release currently published there,
    so repeated rollbacks walk back through the ledger's history. Returns (release, events).
    """
    with release_locks(warehouse_dir, [lay.name for lay in layers], run_id):
        return _rollback_release(
            spark, warehouse_dir, layers, release_id, hour, layer, run_id, manifest
        )


def _rollback_release(
    spark: SparkSession,
    warehouse_dir: str,
    layers: Sequence[Layer],
    release_id: str | None,
    hour: str | None,
    layer: str | None,
    run_id: str,
    manifest: Mapping[str, str | None],
) -> tuple[str, list[dict]]:
    tables = published_tables(layers)
    recover(spark, warehouse_dir, tables)
    recorded = ledger(spark, tables)
    stacks = history(recorded)
    if release_id is None:
        if hour is None:
            raise PublishError("name a release (--backfill ID) or an hour (--hour H)")
        table = next(lay for lay in layers if layer in (None, lay.name)).tables[0]
        stack = stacks.get((table, hour), [])
        if not stack:
            raise PublishError(f"{table} hour={hour}: nothing published, nothing to roll back")
        release_id = stack[-1].release_id
        if release_id is None:
            raise PublishError(f"{table} hour={hour}: the published version has no release id")
    touched = [
        (key, stack)
        for key, stack in sorted(stacks.items())
        if any(entry.release_id == release_id for entry in stack)
    ]
    if not touched:
        if any(
            e["backfill_id"] == release_id and e["mode"] == PUBLISH and e["phase"] == COMMIT
            for e in recorded
        ):
            raise PublishError(
                f"release {release_id} is no longer published anywhere (rolled back)"
            )
        raise PublishError(f"release {release_id} published nothing; nothing to roll back")
    on_top = [(key, stack) for key, stack in touched if stack[-1].release_id == release_id]
    later = sorted(
        {stack[-1].release_id or "?" for _, stack in touched if stack[-1].release_id != release_id}
    )
    if not on_top:
        raise PublishError(f"release {release_id} is no longer published anywhere (rolled back)")
    if later:
        raise PublishError(
            f"release {release_id} has been superseded in some partitions by "
            f"{', '.join(later)}; roll those back first"
        )
    # What each hour goes back to: the newest entry below the release's own (a release
    # published twice in an hour is rolled back as a whole, not to its first version).
    restore = {key: _below(stack, release_id) for key, stack in on_top}
    built_on = _built_on(spark, release_id, {stack[-1].location for _, stack in on_top}, stacks)
    if built_on:
        raise PublishError(
            f"cannot roll back release {release_id}: release(s) {', '.join(built_on)} read "
            f"what it published and are still published; roll those back first"
        )
    purged = audit.deleted(spark, {loc for loc in restore.values() if loc})
    if purged:
        (table, hour_), lost = next(
            (key, loc) for key, loc in sorted(restore.items()) if loc in purged
        )
        gone = purged[lost]
        raise PublishError(
            f"cannot roll back release {release_id}: the version it would restore in {table} "
            f"hour={hour_} (release {gone['release_id'] or '?'}, {lost}) was "
            f"{deleted_by(gone)}; publish a new release of those hours instead"
        )
    manifest = {**manifest, "reason": manifest.get("reason") or f"rollback of {release_id}"}
    events = [
        _event(
            table,
            hour_,
            ROLLBACK,
            {**manifest, "backfill_id": release_id},
            run_id,
            version=None,
            previous_location=stack[-1].location,
            new_location=restore[(table, hour_)],
            row_count=None,
            checksum=None,
            code_version=None,
        )
        for (table, hour_), stack in on_top
    ]
    apply_transaction(spark, warehouse_dir, events)
    return release_id, events
