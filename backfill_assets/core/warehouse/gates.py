"""Change gates: a candidate that changes its hour too much waits for a person's approval.

Checks prove that a candidate is well formed, not that it is right: a wrong backup root, a
tree that shrank or a transform bug can pass every row rule and still halve an hour. So,
when a release would replace a published hour, the publisher compares the candidate with
the version it replaces on a few measures per table (rows or sessions, as their builds
recorded them; users, payloads in sessions: one Spark job per table) and holds the hour
when one of them moves beyond the configured limits, with a result that names the change::

    raw 2026-11-20T04: rows 8,210 -> 4,012, -51%, over the 20% limit

A held hour is published only once approved (``backfill-assets approve``, or
``release/publish`` launched with ``approve: true``); the approval is recorded with who
gave it and why (``audit.approvals``). An hour published for the first time has nothing
to compare with and is not gated; quarantine tables are not gated (fewer malformed lines
is good news, more is what the checks are for).

Limits: a decrease of more than ``BACKFILL_GATE_MAX_DECREASE`` (default 0.2: 20%), and an
increase of more than ``BACKFILL_GATE_MAX_INCREASE`` when set (default off: growth is what
repairs do, a client's late folder can double an hour; set it to catch, say, duplicated
deliveries).

Keys, not only counts: a repair keeps the payload ids an hour already had (it restores lost
or late lines), a wrong tree of the same shape keeps none of them while its counts look
the same. So the share of an hour's published payload ids (raw and transformed) that the
candidate no longer has is gated too, beyond ``BACKFILL_GATE_MAX_REMOVED`` (default 0.1: an
hour losing more than a tenth of its ids is another source or a bug, not a repair).
Session ids are not gated so: a repair that restores a session's first payloads moves its
start, hence its id, and the session hours reading a held raw hour are held with it::

    raw 2026-11-20T00: payload ids 25 of 25 published not in the candidate (100%), over
    the 10% limit

One Spark job per table (partition pruning on hour and version, the key column read).

Clients, not only totals: the raw gate also compares each client's rows in the hour (one
Spark job counting ``client_id`` of the two versions, partition-pruned, one column read),
so a client that vanishes behind a larger total (a wrong ``BACKUP_ROOT``: another source's
tree of the same hours) holds the hour, naming the client::

    raw 2026-11-20T00: client 2 rows 40 -> 0, every row of the client removed

A client that appears in a published hour is held back only when it has no published
rows within ``NEIGHBOURHOOD_HOURS`` of the hour (a client nobody has seen: another
source); a known client's late folder landing (the usual repair) publishes as before.
An hour's first publish is not gated (nothing to compare with). Other per-client metrics
are not gated on their own: their checks reconcile them with the sessions, which are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime, timedelta

from pyspark.sql import Column, SparkSession, Window
from pyspark.sql import functions as F

from backfill_assets import settings
from backfill_assets.core.hours import HOUR_FORMAT

ENV_MAX_DECREASE = settings.GATE_MAX_DECREASE_ENV
ENV_MAX_INCREASE = settings.GATE_MAX_INCREASE_ENV
ENV_MAX_REMOVED = settings.GATE_MAX_REMOVED_ENV
DEFAULT_MAX_DECREASE = 0.2
DEFAULT_MAX_INCREASE = None  # growth is what repairs do (late or lost files restored)
DEFAULT_MAX_REMOVED = 0.1  # a repair keeps the keys it had: it adds what was lost

# The key of each gated shadow table whose removal is gated, and how findings name it.
KEYED = {
    "shadow.raw_payloads": ("payload_id", "payload ids"),
    "shadow.transformed_payloads": ("payload_id", "payload ids"),
}
KEYS, KEYS_ONLY = "_keys", "_keys_only_here"  # a version's distinct keys, and those the
# other version of its hour lacks (for the published version: the keys a candidate removes)
PREFIX = "change gate: "  # how a gate's finding starts among an hour's held-back reasons

Key = tuple[str, str]  # (hour, version)

# The shadow tables whose gate also counts each client's rows, and the published table a
# client must have rows in (near the hour) for its appearance in an hour to be a repair.
CLIENT_GATED = {"shadow.raw_payloads": "raw.payloads"}
CLIENT = "client "  # how a per-client measure is named: "client 2 rows"
NEIGHBOURHOOD_HOURS = 24  # a client known within this many hours of an hour may appear


# The measure that is a shadow partition's row count: recorded by the build that wrote it
# (``audit.shadow_partitions``), never counted again.
COUNTED = {
    "shadow.raw_payloads": "rows",
    "shadow.transformed_payloads": "rows",
    "shadow.sessions": "sessions",
}


def _measures(table: str) -> dict[str, Column]:
    """What a gate scans a shadow table for (built on demand: Columns need Spark). The raw
    hour's distinct payloads and users are the transformed hour's rows and users: gated
    there, not scanned twice."""
    users = F.countDistinct("client_id", "user_id")
    return {
        "shadow.transformed_payloads": {"users": users},
        "shadow.sessions": {"users": users, "payloads": F.sum("payload_count")},
    }.get(table, {})


@dataclass(frozen=True)
class Limits:
    """How much a measure may move before the hour waits for approval (shares of the
    published value)."""

    max_decrease: float = DEFAULT_MAX_DECREASE
    max_increase: float | None = DEFAULT_MAX_INCREASE  # None: growth is not gated
    max_removed: float = DEFAULT_MAX_REMOVED  # share of the published keys

    def __post_init__(self):
        if not 0 <= self.max_decrease <= 1:
            raise ValueError(f"{ENV_MAX_DECREASE}={self.max_decrease}: expected 0..1")
        if not 0 <= self.max_removed <= 1:
            raise ValueError(f"{ENV_MAX_REMOVED}={self.max_removed}: expected 0..1")
        if self.max_increase is not None and self.max_increase < 0:
            raise ValueError(f"{ENV_MAX_INCREASE}={self.max_increase}: expected 0 or more")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Limits:
        return cls(**settings.gate_limits(env))

    def breach(self, measure: str, old: float, new: float) -> str | None:
        """The gate's finding if ``old -> new`` is beyond the limits (None within them)."""
        if not old:
            return None  # nothing to compare with: a first or empty hour is not gated
        change = (new - old) / old
        limit = self.max_decrease if change < 0 else self.max_increase
        if limit is None or abs(change) <= limit:
            return None
        moved = f"{_number(old)} -> {_number(new)}, {change:+.0%}"
        return f"{measure} {moved}, over the {limit:.0%} limit"

    def removal(self, table_keys: str, old: Mapping[str, float]) -> str | None:
        """The gate's finding if the candidate lacks more than ``max_removed`` of the keys
        the published version (``old``, its measures) has (None within it)."""
        total, removed = old.get(KEYS) or 0, old.get(KEYS_ONLY) or 0
        if not total or removed / total <= self.max_removed:
            return None
        return (
            f"{table_keys} {_number(removed)} of {_number(total)} published not in the "
            f"candidate ({removed / total:.0%}), over the {self.max_removed:.0%} limit"
        )


def measure(
    spark: SparkSession, table: str, row_counts: Mapping[Key, int]
) -> dict[Key, dict[str, float]]:
    """(hour, version) -> measure -> value for the versions of a shadow table that
    ``row_counts`` holds (their recorded row counts), and the measures that need the rows
    in one Spark job (partition pruning on hour and version, only the measured columns
    read), none for a table whose only measure is its row count."""
    counted = COUNTED.get(table)
    measures = _measures(table)
    if not row_counts or not (counted or measures or table in CLIENT_GATED or table in KEYED):
        return {}
    found: dict[Key, dict] = {}
    if measures:
        hours = sorted({h for h, _ in row_counts})
        versions = sorted({v for _, v in row_counts})
        rows = (
            spark.table(table)
            .where(F.col("hour").isin(hours) & F.col("version").isin(versions))
            .groupBy("hour", "version")
            .agg(*[expr.alias(name) for name, expr in measures.items()])
            .collect()
        )
        found = {(r["hour"], r["version"]): r.asDict() for r in rows}
    clients = _client_rows(spark, table, row_counts) if table in CLIENT_GATED else {}
    keys = _keys(spark, table, row_counts) if table in KEYED else {}
    return {
        key: {
            **({counted: float(row_counts.get(key) or 0)} if counted else {}),
            **{name: float(found.get(key, {}).get(name) or 0) for name in measures},
            **clients.get(key, {}),
            **keys.get(key, {}),
        }
        for key in row_counts
    }


def _keys(
    spark: SparkSession, table: str, row_counts: Mapping[Key, int]
) -> dict[Key, dict[str, float]]:
    """(hour, version) -> its distinct keys (``KEYS``) and those no other measured version
    of its hour has (``KEYS_ONLY``): an hour's two versions here are the published one and
    its candidate. One Spark job for the table (partition pruning on hour and version, the
    key column read)."""
    column = KEYED[table][0]
    hours = sorted({h for h, _ in row_counts})
    versions = sorted({v for _, v in row_counts})
    distinct = (
        spark.table(table)
        .where(F.col("hour").isin(hours) & F.col("version").isin(versions))
        .select("hour", "version", column)
        .distinct()
    )
    holders = F.count(F.lit(1)).over(Window.partitionBy("hour", column))
    rows = (
        distinct.withColumn("_holders", holders)
        .groupBy("hour", "version")
        .agg(
            F.count(F.lit(1)).alias(KEYS),
            F.sum((F.col("_holders") == 1).cast("long")).alias(KEYS_ONLY),
        )
        .collect()
    )
    return {
        (r["hour"], r["version"]): {KEYS: float(r[KEYS]), KEYS_ONLY: float(r[KEYS_ONLY] or 0)}
        for r in rows
        if (r["hour"], r["version"]) in row_counts
    }


def _client_rows(
    spark: SparkSession, table: str, row_counts: Mapping[Key, int]
) -> dict[Key, dict[str, float]]:
    """(hour, version) -> "client N rows" -> rows, clients in id order (one Spark job for
    every version of the table: partition pruning on hour and version, ``client_id`` read)."""
    hours = sorted({h for h, _ in row_counts})
    versions = sorted({v for _, v in row_counts})
    rows = (
        spark.table(table)
        .where(F.col("hour").isin(hours) & F.col("version").isin(versions))
        .groupBy("hour", "version", "client_id")
        .count()
        .orderBy("client_id")
        .collect()
    )
    found: dict[Key, dict[str, float]] = {}
    for r in rows:
        if (r["hour"], r["version"]) in row_counts:
            found.setdefault((r["hour"], r["version"]), {})[f"{CLIENT}{r['client_id']} rows"] = (
                float(r["count"])
            )
    return found


def appearing(old: Mapping[str, float], new: Mapping[str, float]) -> list[str]:
    """The client ids with rows in ``new`` and none in ``old`` (a published hour's version)."""
    return [
        name[len(CLIENT) : -len(" rows")]
        for name, value in new.items()
        if name.startswith(CLIENT) and value and not old.get(name)
    ]


def known_clients(
    spark: SparkSession, published: str, hours: Sequence[str], clients: Sequence[str]
) -> dict[str, set[str]]:
    """hour -> which of ``clients`` have published rows in ``published`` within
    ``NEIGHBOURHOOD_HOURS`` of it, the hour itself excluded (one Spark job for every hour:
    partition pruning on the window, ``client_id`` read)."""
    if not hours or not clients:
        return {}
    window = timedelta(hours=NEIGHBOURHOOD_HOURS)
    first = _shift(min(hours), -window)
    last = _shift(max(hours), window)
    rows = (
        spark.table(published)
        .where(
            F.col("hour").between(first, last)
            & F.col("client_id").cast("string").isin(list(clients))
        )
        .select("hour", F.col("client_id").cast("string").alias("client_id"))
        .distinct()
        .collect()
    )
    found: dict[str, set[str]] = {hour: set() for hour in hours}
    for hour in hours:
        low, high = _shift(hour, -window), _shift(hour, window)
        found[hour] = {
            r["client_id"] for r in rows if r["hour"] != hour and low <= r["hour"] <= high
        }
    return found


def _shift(hour: str, by: timedelta) -> str:
    return (datetime.strptime(hour, HOUR_FORMAT) + by).strftime(HOUR_FORMAT)


def findings(
    limits: Limits,
    layer: str,
    hour: str,
    old: Mapping[str, float],
    new: Mapping[str, float],
    known: Set[str] = frozenset(),
    table: str = "",
) -> list[str]:
    """The gate's findings for one (layer, hour), in the form operators read: clients
    removed or unknown first (the first reason is the one a release's summary shows), then
    the hour's measures, the published keys the candidate lacks, clients' own changes.
    ``known``: the clients with published rows near the hour (their appearance here is a
    repair); ``table``: the shadow table, naming its keys."""
    clients, totals, moved = [], [], []
    removal = limits.removal(KEYED[table][1], old) if table in KEYED else None
    for name, was in old.items():
        if name in (KEYS, KEYS_ONLY):
            continue
        now = new.get(name, 0.0)
        if name.startswith(CLIENT) and was and not now:
            clients.append(f"{name} {_number(was)} -> 0, every row of the client removed")
        elif breach := limits.breach(name, was, now):
            (moved if name.startswith(CLIENT) else totals).append(breach)
    if any(name.startswith(CLIENT) for name in old):
        for client in appearing(old, new):
            if client not in known:
                clients.append(
                    f"{CLIENT}{client} rows 0 -> {_number(new[f'{CLIENT}{client} rows'])}, "
                    f"a client with no published rows within {NEIGHBOURHOOD_HOURS} hours"
                )
    removed = [removal] if removal else []
    return [f"{layer} {hour}: {finding}" for finding in (*clients, *totals, *removed, *moved)]


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
