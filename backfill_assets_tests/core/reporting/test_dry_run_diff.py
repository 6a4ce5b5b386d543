"""The dry-run diff: shadow version vs published table, per hour, by key, counts only."""

from __future__ import annotations

from pyspark.sql import SparkSession

from backfill_assets.core.reporting.diff import DiffCounts, diff_keys, diff_layer

H1, H2 = "2026-11-20T01", "2026-11-20T02"


def _table(
    spark: SparkSession, name: str, schema: str, rows: list[tuple], partitions: list[str]
) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {name.split('.')[0]}")
    spark.createDataFrame(rows, schema).write.partitionBy(*partitions).saveAsTable(name)


def test_rows_added_removed_and_changed_by_key_per_hour(spark: SparkSession, warehouse) -> None:
    payloads = "payload_id string, value int, run_id string, code_version string, hour string"
    _table(
        spark,
        "published.p",
        payloads,
        [
            ("a", 1, "old", "c1", H1),
            ("b", 2, "old", "c1", H1),
            ("c", 3, "old", "c1", H1),
            ("d", 4, "old", "c1", H1),
        ],
        ["hour"],
    )
    _table(
        spark,
        "shadow.p",
        payloads + ", version string",
        [
            ("a", 1, "new", "c2", H1, "v1"),  # same data, other lineage: unchanged
            ("b", 20, "new", "c2", H1, "v1"),  # changed
            ("d", 4, "new", "c2", H1, "v1"),
            ("d", 4, "new", "c2", H1, "v1"),  # one more copy
            ("e", 5, "new", "c2", H1, "v1"),  # added; c is removed
            ("x", 9, "new", "c2", H2, "v1"),  # an hour with nothing published
            ("a", 7, "new", "c2", H1, "v0"),  # another version: ignored
        ],
        ["hour", "version"],
    )
    quarantine = "file string, line_number bigint, reason string, hour string"
    _table(
        spark,
        "published.q",
        quarantine,
        [("f1", None, "bad file", H1), ("f2", 3, "x", H1)],
        ["hour"],
    )
    _table(
        spark,
        "shadow.q",
        quarantine + ", version string",
        [("f1", None, "bad file", H1, "v1"), ("f2", 3, "y", H1, "v1")],
        ["hour", "version"],
    )
    _table(
        spark,
        "shadow.n",
        "value int, hour string, version string",
        [(1, H1, "v1")],
        ["hour", "version"],
    )

    assert diff_keys("published.p", ["payload_id", "value"]) == ("payload_id",)
    assert diff_keys("published.q", ["file", "line_number", "reason"]) == ("file", "line_number")
    result = diff_layer(
        spark,
        [
            ("shadow.p", "published.p"),
            ("shadow.q", "published.q"),
            ("shadow.n", "published.n"),
            ("shadow.missing", "x.y"),
        ],
        "v1",
        [H1, H2],
    )
    assert result == {
        "published.p": {
            H1: DiffCounts(added=1, removed=1, changed=2, unchanged=1),
            H2: DiffCounts(added=1),
        },
        "published.q": {H1: DiffCounts(changed=1, unchanged=1), H2: DiffCounts()},
        "published.n": {H1: DiffCounts(added=1), H2: DiffCounts()},  # nothing published yet
    }
