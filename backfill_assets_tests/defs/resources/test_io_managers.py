"""The shadow IO manager: its upstream view (which version of each hour a build reads) and
the statistics it adds up from several aggregations."""

from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from backfill_assets.core.layers.shadow_stats import added_groups, stats_aggregates, stats_of
from backfill_assets.core.layers.upstream import UpstreamView
from backfill_assets.core.warehouse.tables import ensure_table

TABLE = "shadow.upstream_probe"
SCHEMA = StructType([StructField(c, StringType()) for c in ("payload_id", "hour", "version")])


@pytest.mark.usefixtures("warehouse")
def test_each_hour_is_read_at_its_release_version_by_partition_pruning(spark, tmp_path: Path):
    ensure_table(spark, TABLE, SCHEMA, ["hour", "version"], str(tmp_path / "probe"))
    written = [  # (hour, version, payload): v1 wrote both hours, then v2 rebuilt T01
        ("2026-11-20T00", "v1", "a"),
        ("2026-11-20T01", "v1", "stale"),
        ("2026-11-20T01", "v2", "b"),
        ("2026-11-20T02", "v2", "not read"),  # an hour the build does not read
    ]
    for hour, version, payload in written:
        spark.sql(
            f"INSERT INTO {TABLE} PARTITION (hour='{hour}', version='{version}') "
            f"VALUES ('{payload}')"
        )
    view = UpstreamView(
        spark,
        TABLE,
        "raw.payloads",
        "release-1",
        candidates={"2026-11-20T00": ("v1", ""), "2026-11-20T01": ("v2", "")},
        live={},
        empty=[],
        missing=[],
    )

    frame = view.frame

    assert sorted((r.hour, r.payload_id) for r in frame.collect()) == [
        ("2026-11-20T00", "a"),
        ("2026-11-20T01", "b"),
    ]
    assert "version" not in frame.columns
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "Join" not in plan and "Exchange" not in plan  # pruned at the scan, not joined


def test_groups_of_disjoint_aggregations_add_up_to_the_aggregation_of_all(spark):
    """The raw layer counts its valid lines and its other rows in two actions: added up,
    they are the counts and checksum one aggregation over every row gives."""
    rows = [("2026-11-20T00", 1, f"p{i}", i % 3 == 0, "raw-1") for i in range(40)]
    rows += [("2026-11-20T01", 2, None, False, None)]  # a group of the second part only
    frame = spark.createDataFrame(
        rows, "hour string, client_id long, payload_id string, odd boolean, code_version string"
    )
    kept = F.col("payload_id").isNotNull()

    def aggregated(df):
        return [
            r.asDict()
            for r in df.groupBy("hour", "client_id")
            .agg(
                F.sum(F.col("odd").cast("int")).alias("odd"),
                *[c.alias(n) for n, c in stats_aggregates(["payload_id"], where=kept).items()],
            )
            .collect()
        ]

    whole = aggregated(frame)
    parts = added_groups(
        [*aggregated(frame.where("odd")), *aggregated(frame.where("not odd"))],
        ("hour", "client_id"),
    )

    def key(group: dict) -> tuple:
        return group["hour"], group["client_id"]

    assert sorted(parts, key=key) == sorted(whole, key=key)
    assert stats_of(parts) == stats_of(whole)
    assert stats_of(parts)["2026-11-20T00"][0] == 40
