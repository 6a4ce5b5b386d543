"""The aggregated layer's check logic on small hand-made frames: failing hours are named."""

from datetime import UTC, datetime

from pyspark.sql import functions as F

from backfill_assets.core.layers import models, rules, schemas
from backfill_assets.core.layers.sessions import client_hourly
from backfill_assets.defs.checks.aggregated import (
    duplicates_of,
    reconcile_client_hourly,
    split_rule_failures,
)
from backfill_assets.defs.layers.aggregated import (
    SESSIONS_DURATION,
    SESSIONS_END_NOT_BEFORE_START,
    SESSIONS_ROW_RULES,
    SESSIONS_START_IN_HOUR,
)

H1, H2 = "2026-11-20T05", "2026-11-20T06"


def sessions_frame(spark):
    def row(sid, client, hour, minute, seconds, payloads, pageviews, truncated=False):
        start = datetime(2026, 11, 20, int(hour[-2:]), minute, tzinfo=UTC)
        end = datetime.fromtimestamp(start.timestamp() + seconds, tz=UTC)
        return (sid, client, start, end, float(seconds), payloads, pageviews, truncated, hour)

    return spark.createDataFrame(
        [
            row("s1", 1, H1, 0, 60, 3, 2),
            row("s2", 1, H1, 10, 0, 1, 1),
            row("s3", 2, H1, 20, 600, 5, 1, True),
            row("s4", 1, H2, 5, 30, 2, 2),
        ],
        "session_id string, client_id bigint, session_start_at timestamp, "
        "session_end_at timestamp, duration_seconds double, payload_count bigint, "
        "pageview_count bigint, may_be_truncated boolean, hour string",
    )


def test_split_rule_failures_routes_rules_to_their_checks() -> None:
    per_check = split_rule_failures(
        {
            H1: {schemas.END_NOT_BEFORE_START: 2, "device:isin": 1},
            H2: {schemas.DURATION_IS_DIFFERENCE: 1, schemas.STARTS_IN_PARTITION_HOUR: 3},
        }
    )
    assert per_check == {
        SESSIONS_ROW_RULES: {H1: "device:isin=1"},
        SESSIONS_END_NOT_BEFORE_START: {H1: f"{schemas.END_NOT_BEFORE_START}=2"},
        SESSIONS_DURATION: {H2: f"{schemas.DURATION_IS_DIFFERENCE}=1"},
        SESSIONS_START_IN_HOUR: {H2: f"{schemas.STARTS_IN_PARTITION_HOUR}=3"},
    }


def test_client_hourly_reconciliation_names_the_broken_hour(spark) -> None:
    sessions = sessions_frame(spark).cache()
    hourly = client_hourly(sessions).cache()
    assert reconcile_client_hourly(sessions, hourly) == {}

    tampered = hourly.withColumn(
        "bounces",
        F.when((F.col("hour") == H1) & (F.col("client_id") == 1), 5).otherwise(F.col("bounces")),
    )
    failing = reconcile_client_hourly(sessions, tampered)
    assert list(failing) == [H1] and "bounces_differs=1" in failing[H1]

    missing_client = hourly.where(~((F.col("hour") == H2) & (F.col("client_id") == 1)))
    failing = reconcile_client_hourly(sessions, missing_client)
    assert list(failing) == [H2] and "only_in_sessions=1" in failing[H2]

    bad_p95 = hourly.withColumn("p95_duration_seconds", F.lit(10_000.0))
    assert sorted(reconcile_client_hourly(sessions, bad_p95)) == [H1, H2]


def duplicate_session_ids(sessions):
    """The duplicates of the sessions' rule evaluation (one job), as the check computes them."""
    report = rules.evaluate(
        sessions, models.SessionSchema, ["hour"], extra=schemas.session_id_aggregates()
    )
    return duplicates_of(report)


def test_duplicate_session_ids_are_named_per_hour(spark) -> None:
    sessions = sessions_frame(spark)
    assert duplicate_session_ids(sessions) == ({}, {H1: 3, H2: 1})
    doubled = sessions.unionByName(sessions.where(F.col("hour") == H2))
    failing, rows = duplicate_session_ids(doubled)
    assert failing == {H2: "1 duplicate session_id row(s) among 2"} and rows[H2] == 2
