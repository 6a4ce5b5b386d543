"""Driver-made frames reach the plan without Python rows: no job over them starts Python
workers (a local table, or an RDD of no partitions)."""

from datetime import UTC, datetime

from backfill_assets.core import frames

SCHEMA = "name string, n bigint, at timestamp"


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_a_local_frame_is_a_local_table_with_the_rows_and_types(spark):
    at = datetime(2026, 11, 27, 12, tzinfo=UTC)
    rows = [("a", 1, at), ("b", None, None)]
    df = frames.local(spark, rows, SCHEMA)
    assert "LocalTableScan" in _plan(df) and "ExistingRDD" not in _plan(df)
    assert df.schema.simpleString() == "struct<name:string,n:bigint,at:timestamp>"
    got = sorted(tuple(r) for r in df.collect())
    assert [(n, v) for n, v, _ in got] == [("a", 1), ("b", None)]
    assert got[0][2].replace(tzinfo=UTC) == at and got[1][2] is None


def test_an_empty_frame_has_the_schema_and_no_partition(spark):
    df = frames.empty(spark, SCHEMA)
    assert df.schema.simpleString() == "struct<name:string,n:bigint,at:timestamp>"
    assert df.rdd.getNumPartitions() == 0  # no task, so no Python worker, ever runs
    assert df.groupBy("name").count().collect() == []
