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
deliveries). Per-client metrics are not gated on their own: their checks reconcile them
with the sessions, which are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

ENV_MAX_DECREASE = "BACKFILL_GATE_MAX_DECREASE"
ENV_MAX_INCREASE = "BACKFILL_GATE_MAX_INCREASE"
DEFAULT_MAX_DECREASE = 0.2
DEFAULT_MAX_INCREASE = None  # growth is what repairs do (late or lost files restored)
PREFIX = "change gate: "  # how a gate's finding starts among an hour's held-back reasons

Key = tuple[str, str]  # (hour, version)


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

    def __post_init__(self):
        if not 0 <= self.max_decrease <= 1:
            raise ValueError(f"{ENV_MAX_DECREASE}={self.max_decrease}: expected 0..1")
        if self.max_increase is not None and self.max_increase < 0:
            raise ValueError(f"{ENV_MAX_INCREASE}={self.max_increase}: expected 0 or more")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Limits:
        env = os.environ if env is None else env
        values = {}
        for name, field in ((ENV_MAX_DECREASE, "max_decrease"), (ENV_MAX_INCREASE, "max_increase")):
            text = (env.get(name) or "").strip()
            if text.lower() == "off" and field == "max_increase":
                values[field] = None
            elif text:
                try:
                    values[field] = float(text)
                except ValueError:
                    raise ValueError(f"{name}={text!r}: expected a share such as 0.2") from None
        return cls(**values)

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


def measure(
    spark: SparkSession, table: str, row_counts: Mapping[Key, int]
) -> dict[Key, dict[str, float]]:
    """(hour, version) -> measure -> value for the versions of a shadow table that
    ``row_counts`` holds (their recorded row counts), and the measures that need the rows
    in one Spark job (partition pruning on hour and version, only the measured columns
    read), none for a table whose only measure is its row count."""
    counted = COUNTED.get(table)
    measures = _measures(table)
    if not row_counts or not (counted or measures):
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
    return {
        key: {
            **({counted: float(row_counts.get(key) or 0)} if counted else {}),
            **{name: float(found.get(key, {}).get(name) or 0) for name in measures},
        }
        for key in row_counts
    }


def findings(
    limits: Limits,
    layer: str,
    hour: str,
    old: Mapping[str, float],
    new: Mapping[str, float],
) -> list[str]:
    """The gate's findings for one (layer, hour), in the form operators read."""
    result = []
    for name, was in old.items():
        breach = limits.breach(name, was, new.get(name, 0.0))
        if breach:
            result.append(f"{layer} {hour}: {breach}")
    return result


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
