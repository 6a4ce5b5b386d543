"""Per-partition diff of a shadow version against the published table, by key.

For each (shadow, published) table pair of a layer, rows of both sides are reduced to one
row per (hour, key) with a count and an order-independent hash of their data columns, then
one full outer join per table classifies every key: added (shadow only), removed (published
only), changed (both, different rows) or unchanged; only the counts per hour reach the
driver. Keys: ``payload_id`` for payload tables, ``session_id`` for sessions, ``client_id``
for per-client aggregates, (``file``, ``line_number``) for the quarantine; any other table
is compared row by row (added / removed only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_assets.core.warehouse.tables import run_id, table_exists

LINEAGE = ("run_id", "code_version", "hour", "version")
KEYS: dict[str, tuple[str, ...]] = {
    "raw.payloads": ("payload_id",),
    "raw.quarantine": ("file", "line_number"),
    "transformed.payloads": ("payload_id",),
    "aggregated.sessions": ("session_id",),
    "aggregated.client_hourly": ("client_id",),
}
_KEY_PREFERENCE = (("session_id",), ("payload_id",), ("file", "line_number"))


@dataclass(frozen=True)
class DiffCounts:
    """Keys of one partition: only in the shadow, only published, in both but different."""

    added: int = 0
    removed: int = 0
    changed: int = 0
    unchanged: int = 0

    @property
    def differs(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff_keys(table: str, columns: Sequence[str]) -> tuple[str, ...]:
    """The key columns a table is compared by (empty: whole rows)."""
    if table in KEYS and all(c in columns for c in KEYS[table]):
        return KEYS[table]
    for keys in _KEY_PREFERENCE:
        if all(c in columns for c in keys):
            return keys
    return ()


def _keyed(df: DataFrame, keys: Sequence[str], data: Sequence[str], side: str) -> DataFrame:
    """One row per (hour, key): how many rows, and the sum of their hashes."""
    row_hash = F.xxhash64(*[F.col(c) for c in data]).cast("decimal(38,0)")
    group = list(keys) or ["_row_hash"]
    if not keys:
        df = df.withColumn("_row_hash", F.xxhash64(*[F.col(c) for c in data]))
    return df.groupBy("hour", *group).agg(
        F.count(F.lit(1)).alias(f"{side}_n"), F.sum(row_hash).alias(f"{side}_h")
    )


def diff_table(
    spark: SparkSession,
    shadow: str,
    published: str,
    version: str,
    hours: Sequence[str],
) -> dict[str, DiffCounts]:
    """Hour -> counts for shadow version ``version`` of ``shadow`` vs ``published``."""
    new = spark.table(shadow).where(
        (F.col("version") == run_id(version)) & F.col("hour").isin(list(hours))
    )
    data = [c for c in new.columns if c not in LINEAGE]
    keys = diff_keys(published, data)
    right = _keyed(new, keys, data, "s")
    if table_exists(spark, published):
        spark.catalog.refreshTable(published)
        old = spark.table(published).where(F.col("hour").isin(list(hours)))
        left = _keyed(old, keys, data, "p")
    else:  # nothing published yet: every key is added
        left = right.where(F.lit(False)).withColumnsRenamed({"s_n": "p_n", "s_h": "p_h"})
    group = ["hour", *(keys or ["_row_hash"])]
    s, p = right.alias("s"), left.alias("p")
    on: Column = reduce(
        lambda a, b: a & b, [F.col(f"s.{c}").eqNullSafe(F.col(f"p.{c}")) for c in group]
    )
    joined = s.join(p, on, "full_outer").select(
        F.coalesce(F.col("s.hour"), F.col("p.hour")).alias("hour"), "s_n", "s_h", "p_n", "p_h"
    )
    same = (F.col("s_n") == F.col("p_n")) & F.col("s_h").eqNullSafe(F.col("p_h"))
    counts = (
        joined.groupBy("hour")
        .agg(
            F.sum(F.when(F.col("p_n").isNull(), 1).otherwise(0)).alias("added"),
            F.sum(F.when(F.col("s_n").isNull(), 1).otherwise(0)).alias("removed"),
            F.sum(
                F.when(F.col("s_n").isNotNull() & F.col("p_n").isNotNull() & ~same, 1).otherwise(0)
            ).alias("changed"),
            F.sum(
                F.when(F.col("s_n").isNotNull() & F.col("p_n").isNotNull() & same, 1).otherwise(0)
            ).alias("unchanged"),
        )
        .collect()
    )
    result = {hour: DiffCounts() for hour in hours}
    for row in counts:
        result[row["hour"]] = DiffCounts(
            int(row["added"]), int(row["removed"]), int(row["changed"]), int(row["unchanged"])
        )
    return result


def diff_layer(
    spark: SparkSession,
    pairs: Sequence[tuple[str, str]],
    version: str,
    hours: Sequence[str],
) -> dict[str, dict[str, DiffCounts]]:
    """Published table -> hour -> counts, for every (shadow, published) pair of a layer."""
    return {
        published: diff_table(spark, shadow, published, version, hours)
        for shadow, published in pairs
        if table_exists(spark, shadow)
    }
