"""The ledger (``audit.publications``): publish transactions, crash recovery, history, verify.

A transaction is ``prepare`` rows for every (table, hour) to swap, all with one ``txn_id``,
committed to the ledger database together with one ``open_transactions`` row per table
(its primary key: one open transaction per table); then one metastore swap per table; then
the ``commit`` rows and the removal of the open rows, in one database transaction. A crash
between the two leaves ``prepare`` rows with no outcome, which ``recover`` settles as a
whole (commit if every swap happened, else undo the swaps that did and abort). The ledger
database unreachable after the swaps: they are undone before the error is raised (the
``prepare`` rows are settled by the next recovery), so nothing is left split.

Reading the ledger is a database query (no Spark); the metastore is read with Spark.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from pyspark.sql import SparkSession

from backfill_assets.core import faults
from backfill_assets.core.warehouse import audit, database
from backfill_assets.core.warehouse.tables import partition_locations, swap_partitions

PREPARE, COMMIT, ABORT = "prepare", "commit", "abort"
PUBLISH, ROLLBACK = "publish", "rollback"


class PublishError(RuntimeError):
    """Publishing or rolling back cannot proceed; the message says why and what to do."""


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


def stamp(events: Iterable[dict], phase: str, **extra) -> list[dict]:
    now = audit.now()
    return [{**e, **extra, "phase": phase, "recorded_at": now} for e in events]


def event(table: str, hour: str, mode: str, manifest: Mapping, run_id: str, **values) -> dict:
    """A ledger event of ``table`` at ``hour`` (its phase is stamped when it is recorded)."""
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


def _open(warehouse_dir: str, txn_id: str, events: Sequence[dict]) -> None:
    """Record the ``prepare`` rows and open the transaction on each of its tables."""
    tables = sorted({e["table_name"] for e in events})
    opened = [
        {"table_name": t, "txn_id": txn_id, "run_id": events[0]["run_id"], "opened_at": audit.now()}
        for t in tables
    ]
    try:
        with database.transaction(warehouse_dir) as connection:
            audit.insert(connection, audit.PUBLICATIONS, stamp(events, PREPARE))
            connection.execute(audit.OPEN.insert(), opened)
    except sa.exc.IntegrityError:
        holders = open_transactions(warehouse_dir, tables)
        raise PublishError(
            "; ".join(f"{t} has open transaction {txn} (run {run})" for t, (txn, run) in holders)
            + ": another publish is in flight, or one crashed (run verify to settle it)"
        ) from None


def _close(warehouse_dir: str, txn_id: str, outcome: Sequence[dict]) -> None:
    """Record a transaction's outcome and close it, in one database transaction; then its
    newest publication row in the ledger's marker (a ledger that loses it is refused)."""
    publications = audit.SQL[audit.PUBLICATIONS]
    with database.transaction(warehouse_dir) as connection:
        audit.insert(connection, audit.PUBLICATIONS, outcome)
        connection.execute(audit.OPEN.delete().where(audit.OPEN.c.txn_id == txn_id))
        last_row = connection.execute(sa.select(sa.func.max(publications.c._row))).scalar()
    database.mark_published(warehouse_dir, last_row)


def open_transactions(warehouse_dir: str, tables: Sequence[str]) -> list[tuple[str, tuple]]:
    """(table, (txn id, run id)) of the open transactions on ``tables``."""
    query = sa.select(audit.OPEN).where(audit.OPEN.c.table_name.in_(sorted(tables)))
    with database.transaction(warehouse_dir) as connection:
        found = connection.execute(query).all()
    return [(r.table_name, (r.txn_id, r.run_id)) for r in found]


def _swap(spark: SparkSession, events: Sequence[dict]) -> list[dict]:
    """Swap every table of ``events`` (fault points after each); returns the events swapped
    (all of them, unless the metastore failed)."""
    done: list[dict] = []
    for index, (table, moves) in enumerate(_by_table(events)):
        swap_partitions(spark, table, moves)
        done += [e for e in events if e["table_name"] == table]
        if index == 0:
            faults.checkpoint(faults.PUBLISH_SWAP)
        faults.checkpoint(f"{faults.PUBLISH_SWAP}.{index}")
    for table in sorted({e["table_name"] for e in events}):
        spark.catalog.refreshTable(table)
    return done


def _undo(spark: SparkSession, swapped: Sequence[dict]) -> None:
    for table, moves in _by_table(swapped, undo=True):  # back to where the txn found them
        swap_partitions(spark, table, moves)
    for table in sorted({e["table_name"] for e in swapped}):
        spark.catalog.refreshTable(table)


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
    _open(warehouse_dir, txn_id, events)
    swapped = _swap(spark, events)
    try:
        _close(warehouse_dir, txn_id, stamp(events, COMMIT))
    except database.LedgerUnavailable as error:
        _undo(spark, swapped)
        raise PublishError(
            f"transaction {txn_id} not committed, its swaps undone (nothing published): {error}"
        ) from None
    return txn_id


def ledger(spark: SparkSession, tables: Sequence[str] | None = None) -> list[dict]:
    """Ledger events (of ``tables``), oldest first (a database query)."""
    where = None if tables is None else {"table_name": list(tables)}
    return audit.rows(audit.warehouse_of(spark), audit.PUBLICATIONS, where, "recorded_at")


def pending_transactions(spark: SparkSession) -> dict[str, list[dict]]:
    """Transactions with ``prepare`` rows and no outcome (txn id -> their prepare rows)."""
    table = audit.SQL[audit.PUBLICATIONS]
    txn = sa.func.coalesce(table.c.txn_id, table.c.event_id)
    settled = sa.select(txn).where(table.c.phase != PREPARE)
    columns = [c for c in table.columns if c.name != "_row"]
    query = (
        sa.select(*columns, txn.label("_txn"))
        .where(table.c.phase == PREPARE, txn.not_in(settled))
        .order_by(table.c.recorded_at, table.c._row)
    )
    with database.transaction(audit.warehouse_of(spark)) as connection:
        found = connection.execute(query).mappings().all()
    pending: dict[str, list[dict]] = {}
    for row in found:
        values = {k: audit._aware(v) for k, v in row.items()}
        pending.setdefault(values.pop("_txn"), []).append(values)
    return pending


def recover(spark: SparkSession, warehouse_dir: str, tables: Iterable[str]) -> list[dict]:
    """Settle crashed transactions as a whole (commit if every swap happened, else undo the
    swaps that did and abort); returns the resolution rows written.

    Only the transactions whose every table is in ``tables``: the caller holds the publish
    fence of their layers, so none of them is still in flight in another run (a pending
    transaction of a table another run holds may be that run's, between two swaps:
    settling it would split it). The others are left for whoever holds their fence.
    """
    held = set(tables)
    resolutions: list[dict] = []
    for txn, events in pending_transactions(spark).items():
        touched = sorted({e["table_name"] for e in events})
        if not held.issuperset(touched):
            continue
        current = {t: partition_locations(spark, t) for t in touched}
        swapped = [
            e for e in events if current[e["table_name"]].get(e["hour"]) == e["new_location"]
        ]
        if len(swapped) == len(events):
            outcome = stamp(events, COMMIT, reason=f"recovered after crash: commit {txn}")
        else:
            _undo(spark, swapped)
            outcome = stamp(events, ABORT, reason=f"recovered after crash: undone {txn}")
        _close(warehouse_dir, txn, outcome)
        resolutions += outcome
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


def _split(pending: Mapping[str, list[dict]], listed: Mapping[str, dict]) -> list[str]:
    problems = []
    for txn, prepared in pending.items():
        moved = [e for e in prepared if listed[e["table_name"]].get(e["hour"]) == e["new_location"]]
        if 0 < len(moved) < len(prepared):
            problems.append(
                f"transaction {txn} is split: {len(moved)} of {len(prepared)} swaps applied "
                f"(run verify again to settle it)"
            )
    return problems


def verify(spark: SparkSession, tables: Sequence[str]) -> list[str]:
    """Disagreements between the ledger and the metastore, and split transactions."""
    stacks = history(ledger(spark, tables))
    pending = {
        txn: [e for e in rows if e["table_name"] in tables]
        for txn, rows in pending_transactions(spark).items()
    }
    pending = {txn: rows for txn, rows in pending.items() if rows}
    listed = {t: partition_locations(spark, t) for t in tables}  # one listing per table
    problems = _split(pending, listed)
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
    orphans: dict[tuple[str, str], dict] = {}
    for r in audit.rows(audit.warehouse_of(spark), audit.SHADOW_PARTITIONS):
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
