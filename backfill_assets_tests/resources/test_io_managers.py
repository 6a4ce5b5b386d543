"""The shadow IO manager's upstream view: which version of each hour a build reads."""

from pathlib import Path

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from backfill_assets.publishing.tables import ensure_table
from backfill_assets.resources.io_managers import UpstreamView

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
