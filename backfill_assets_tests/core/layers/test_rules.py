"""The one-aggregation rule evaluation agrees with pandera's own data validation."""

import uuid
from datetime import datetime

import pandera.pyspark as pa
from pyspark.sql import functions as F

from backfill_assets.core.layers.models import RawPayloadSchema
from backfill_assets.core.layers.rules import (
    broken_count,
    evaluate,
    precount,
    precounted,
    violation_predicates,
)

T = datetime(2026, 11, 20, 3, 15)
COLUMNS = (
    "payload_id string, client_id bigint, user_id string, event_time timestamp, "
    "received_at timestamp, event_type string, page_url string, device string, "
    "referrer string, schema_version int, run_id string, code_version string, hour string"
)


def row(**change):
    base = {
        "payload_id": "p",
        "client_id": 1,
        "user_id": "u",
        "event_time": T,
        "received_at": T,
        "event_type": "pageview",
        "page_url": "https://a/",
        "device": "mobile",
        "referrer": None,
        "schema_version": 1,
        "run_id": "r",
        "code_version": "c",
        "hour": "2026-11-20T03",
    }
    base.update(change)
    return tuple(base[c.split()[0]] for c in COLUMNS.split(", "))


def test_violations_are_counted_per_hour_and_rule(spark):
    df = spark.createDataFrame(
        [
            row(),
            row(event_type="hover"),
            row(device=None, hour="2026-11-20T04", received_at=datetime(2026, 11, 20, 4, 1)),
            row(hour="2026-11-20T05"),  # received_at outside its partition hour: valid
            row(hour="2026-11-20T06", received_at=datetime(2026, 11, 20, 6, 0)),
        ],
        COLUMNS,
    )

    report = evaluate(df, RawPayloadSchema, ["hour", "payload_id"])

    assert not report.passed
    assert report.failing_hours == {
        "2026-11-20T03": {"event_type:isin": 1},
        "2026-11-20T04": {"device:not_null": 1},
    }
    assert report.hours == [f"2026-11-20T0{i}" for i in range(3, 7)]
    # pandera's own (one-job-per-rule) data validation reaches the same verdict
    errors = RawPayloadSchema.validate(df).pandera.errors
    pandera_failed = {
        e["column"] for level in errors.values() for errs in level.values() for e in errs
    }
    assert {"event_type", "device"} <= pandera_failed


def test_grouped_within_the_hour_the_violations_are_summed_and_the_rows_counted(spark):
    df = spark.createDataFrame(
        [
            row(),
            row(client_id=2, event_type="hover"),
            row(client_id=3, event_type="hover"),
            row(client_id=3),
        ],
        COLUMNS,
    )

    report = evaluate(df, RawPayloadSchema, ["hour"], by=("client_id",))

    # the hour's verdict is the one without grouping: violations of all clients summed
    assert report.failing_hours == {"2026-11-20T03": {"event_type:isin": 2}}
    assert report.failing_hours == evaluate(df, RawPayloadSchema, ["hour"]).failing_hours
    hour = "2026-11-20T03"
    assert report.group_rows == {(hour, 1): 1, (hour, 2): 1, (hour, 3): 2}


def test_a_row_breaking_several_rules_counts_once_per_rule(spark):
    df = spark.createDataFrame(
        [
            row(payload_id="", user_id="", page_url=None),  # three rules, one row
            row(payload_id="", client_id=2),
            row(page_url="x"),  # one character: long enough
        ],
        COLUMNS,
    )

    report = evaluate(df, RawPayloadSchema, ["hour", "payload_id"], by=("client_id",))

    assert report.failing_hours == {
        "2026-11-20T03": {
            "payload_id:str_length": 2,
            "user_id:str_length": 1,
            "page_url:not_null": 1,  # a null is not also "too short"
        }
    }
    assert report.group_rows == {("2026-11-20T03", 1): 2, ("2026-11-20T03", 2): 1}
    assert len(report.examples) == 2


def test_the_counts_a_build_kept_give_the_verdict_of_a_scan(spark):
    df = spark.createDataFrame(
        [row(), row(event_type="hover"), row(client_id=2), row(hour="2026-11-20T04")], COLUMNS
    )
    by = ("client_id",)
    scanned = evaluate(df, RawPayloadSchema, ["hour", "payload_id"], by=by)
    groups = (
        df.groupBy("hour", *by)
        .agg(F.count(F.lit(1)).alias("rows"), broken_count(RawPayloadSchema).alias("broken"))
        .collect()
    )
    version = uuid.uuid4().hex  # kept in the session's ledger database
    precount(spark, "shadow.t", version, RawPayloadSchema, by, [g.asDict() for g in groups])

    counted = precounted(spark, "shadow.t", version, RawPayloadSchema, by)

    assert precounted(spark, "shadow.t", uuid.uuid4().hex, RawPayloadSchema, by) is None
    assert precounted(spark, "shadow.t", version, RawPayloadSchema, ()) is None  # other groups
    assert counted is not None
    assert evaluate(df, RawPayloadSchema, ["hour", "payload_id"], by=by, counted=counted) == (
        scanned
    )
    assert scanned.failing_hours == {"2026-11-20T03": {"event_type:isin": 1}}


def test_a_clean_range_passes_and_schema_errors_fail_every_hour(spark):
    clean = spark.createDataFrame(
        [row(), row(hour="2026-11-20T04", received_at=datetime(2026, 11, 20, 4))], COLUMNS
    )
    assert evaluate(clean, RawPayloadSchema, ["hour"]).passed
    broken = evaluate(clean.drop("device"), RawPayloadSchema, ["hour"])
    assert set(broken.failing_hours) == {"2026-11-20T03", "2026-11-20T04"}
    assert broken.pandera_errors


def test_every_declared_rule_has_a_predicate(spark):  # column expressions need a session
    names = set(violation_predicates(RawPayloadSchema))
    assert {
        "event_type:isin",
        "device:isin",
        "schema_version:isin",
        "payload_id:str_length",
        "client_id:greater_than_or_equal_to",
    } <= names
    assert "received_at:in_partition_hour" not in names  # the folder decides the hour
    assert isinstance(RawPayloadSchema, type) and issubclass(RawPayloadSchema, pa.DataFrameModel)
