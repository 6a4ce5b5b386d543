"""Blocking checks of the aggregated shadow tables (sessions, client_hourly).

All results are recorded under ``shadow.sessions`` (the layer's checked table), so the
publisher publishes an hour's sessions and client_hourly together or not at all. Spark
work: the pandera rules and the distinct session ids per hour in one aggregation
(``rules.evaluate``; in a build run, counted by the IO manager's read-back of the sessions
it wrote, so no scan here), one job for the client_hourly reconciliation, one append of
all outcomes.
"""

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill_assets.core.layers import rules, schemas
from backfill_assets.core.layers.schemas import DISTINCT_SESSION_IDS, session_id_aggregates
from backfill_assets.defs.checks import common
from backfill_assets.defs.layers.aggregated import (
    CLIENT_HOURLY_RECONCILIATION,
    LAYER,
    SESSIONS_DURATION,
    SESSIONS_END_NOT_BEFORE_START,
    SESSIONS_ROW_RULES,
    SESSIONS_START_IN_HOUR,
    SESSIONS_UNIQUE_ID,
    SHADOW_CLIENT_HOURLY,
    SHADOW_SESSIONS,
)
from backfill_assets.defs.resources.warehouse import Warehouse

# Row rules of ``SessionSchema`` reported under their own check; the others under row rules.
RULE_CHECKS = {
    schemas.END_NOT_BEFORE_START: SESSIONS_END_NOT_BEFORE_START,
    schemas.DURATION_IS_DIFFERENCE: SESSIONS_DURATION,
    schemas.STARTS_IN_PARTITION_HOUR: SESSIONS_START_IN_HOUR,
}
SESSION_CHECKS = (
    SESSIONS_ROW_RULES,
    SESSIONS_END_NOT_BEFORE_START,
    SESSIONS_DURATION,
    SESSIONS_START_IN_HOUR,
    SESSIONS_UNIQUE_ID,
)
MEAN_TOLERANCE_SECONDS = 1e-6
TOTALS = ("sessions", "payloads", "pageviews", "bounces", "truncated_sessions")


def split_rule_failures(failing_hours: dict[str, dict[str, int]]) -> dict[str, dict[str, str]]:
    """``rules.evaluate``'s {hour: {rule: violations}} -> {check name: {hour: reason}}."""
    per_check: dict[str, dict[str, str]] = {
        name: {} for name in (SESSIONS_ROW_RULES, *RULE_CHECKS.values())
    }
    for hour, violations in failing_hours.items():
        grouped: dict[str, list[str]] = {}
        for rule, count in violations.items():
            grouped.setdefault(RULE_CHECKS.get(rule, SESSIONS_ROW_RULES), []).append(
                f"{rule}={count}"
            )
        for name, texts in grouped.items():
            per_check[name][hour] = ", ".join(texts)
    return per_check


def duplicates_of(report: rules.RuleReport) -> tuple[dict[str, str], dict[str, int]]:
    """Failing hours (a session_id more than once in the hour) and rows per hour, from a
    rule evaluation with ``session_id_aggregates``."""
    rows = {hour: n for (hour,), n in report.group_rows.items()}
    ids = {hour: v[DISTINCT_SESSION_IDS] for (hour,), v in report.group_values.items()}
    failing = {
        hour: f"{n - ids[hour]} duplicate session_id row(s) among {n}"
        for hour, n in sorted(rows.items())
        if n != ids[hour]
    }
    return failing, rows


def reconcile_client_hourly(sessions: DataFrame, hourly: DataFrame) -> dict[str, str]:
    """Failing hours -> reason: per (hour, client), client_hourly's sessions, payloads,
    pageviews, bounces and truncated sessions must equal the sums over the sessions, its
    mean duration their mean, its p95 lie between their shortest and longest duration,
    and no client may be in one table only. One Spark job."""
    expected = sessions.groupBy("hour", "client_id").agg(
        F.count(F.lit(1)).alias("e_sessions"),
        F.sum("payload_count").alias("e_payloads"),
        F.sum("pageview_count").alias("e_pageviews"),
        F.sum(F.when(F.col("pageview_count") <= 1, 1).otherwise(0)).alias("e_bounces"),
        F.sum(F.col("may_be_truncated").cast("long")).alias("e_truncated_sessions"),
        F.avg("duration_seconds").alias("e_mean"),
        F.min("duration_seconds").alias("e_min"),
        F.max("duration_seconds").alias("e_max"),
        F.lit(True).alias("in_sessions"),
    )
    actual = hourly.select(
        "hour",
        "client_id",
        *TOTALS,
        "mean_duration_seconds",
        "p95_duration_seconds",
        F.lit(True).alias("in_hourly"),
    )
    joined = expected.join(actual, ["hour", "client_id"], "full_outer")
    problems = {
        "only_in_sessions": F.col("in_hourly").isNull(),
        "only_in_client_hourly": F.col("in_sessions").isNull(),
        **{f"{name}_differs": ~F.col(name).eqNullSafe(F.col(f"e_{name}")) for name in TOTALS},
        "mean_differs": ~F.coalesce(
            F.abs(F.col("mean_duration_seconds") - F.col("e_mean")) <= MEAN_TOLERANCE_SECONDS,
            F.lit(False),
        ),
        "p95_out_of_range": ~F.coalesce(
            F.col("p95_duration_seconds").between(F.col("e_min"), F.col("e_max")), F.lit(False)
        ),
    }
    rows = (
        joined.select("hour", *[c.alias(n) for n, c in problems.items()])
        .groupBy("hour")
        .agg(*[F.sum(F.col(n).cast("long")).alias(n) for n in problems])
        .collect()
    )
    failing = {}
    for r in rows:
        found = {n: int(r[n]) for n in problems if r[n]}
        if found:
            failing[r["hour"]] = "client(s) with " + ", ".join(f"{n}={c}" for n, c in found.items())
    return failing


@dg.multi_asset_check(
    specs=[
        common.check_spec(
            SESSIONS_ROW_RULES,
            SHADOW_SESSIONS,
            "pandera: types, nullability and values of sessions, session_id = sha256 key",
        ),
        common.check_spec(
            SESSIONS_END_NOT_BEFORE_START,
            SHADOW_SESSIONS,
            "session_end_at >= session_start_at",
        ),
        common.check_spec(
            SESSIONS_DURATION,
            SHADOW_SESSIONS,
            "duration_seconds = session_end_at - session_start_at",
        ),
        common.check_spec(
            SESSIONS_START_IN_HOUR,
            SHADOW_SESSIONS,
            "every session starts inside its partition hour",
        ),
        common.check_spec(
            SESSIONS_UNIQUE_ID,
            SHADOW_SESSIONS,
            "session_id is unique within the hour",
        ),
        common.check_spec(
            CLIENT_HOURLY_RECONCILIATION,
            SHADOW_CLIENT_HOURLY,
            "client_hourly totals = sums over the hour's sessions",
        ),
    ],
    can_subset=False,
)
def aggregated_checks(context: dg.AssetCheckExecutionContext, warehouse: Warehouse):
    """Check the sessions and client_hourly versions this run wrote; record per hour."""
    from backfill_assets.core.layers.models import SessionSchema

    spark = warehouse.spark
    table = LAYER.checked_table
    version, hours, why = common.version_to_check(context, spark, table)
    if not hours:
        yield from common.not_evaluated(context, why)
        return
    sessions = common.shadow_version(spark, table, version)
    hourly = common.shadow_version(spark, "shadow.client_hourly", version)
    # The rules and the distinct session ids: counted by the build in its read-back of the
    # sessions it wrote, else in one scan here; the reconciliation with client_hourly is
    # one more job.
    report = common.evaluate_rules(
        context,
        SESSIONS_ROW_RULES,
        table,
        version,
        sessions,
        SessionSchema,
        # no session_id or user_id: Dagster's event log keeps examples, and an erasure
        # cannot purge it
        ["hour", "client_id", "session_start_at", "session_end_at", "duration_seconds"],
        extra=session_id_aggregates(),
    )
    unique_failing, rows_per_hour = duplicates_of(report)
    recon_failing = reconcile_client_hourly(sessions, hourly)
    failing = {
        **split_rule_failures(report.failing_hours),
        SESSIONS_UNIQUE_ID: unique_failing,
        CLIENT_HOURLY_RECONCILIATION: recon_failing,
    }
    common.record_and_log(
        context,
        spark,
        warehouse.warehouse_dir,
        LAYER.name,
        table,
        version,
        hours,
        {name: failing[name] for name in LAYER.checks},
    )
    sessions_of = {h: {"sessions_checked": rows_per_hour.get(h, 0)} for h in hours}
    for name in SESSION_CHECKS:
        yield from common.results(
            context,
            name,
            hours,
            failing[name],
            version=version,
            per_hour=sessions_of,
            on_failure={
                "pandera_errors": report.pandera_errors,
                "failing_examples": report.examples,
            },
        )
    yield from common.results(
        context,
        CLIENT_HOURLY_RECONCILIATION,
        hours,
        recon_failing,
        version=version,
        per_hour=sessions_of,
    )
