"""Shared mechanics of the blocking checks: what a run wrote, recording, severity."""

from __future__ import annotations

import functools
import typing
import warnings
from collections.abc import Iterator, Mapping, Sequence

import dagster as dg
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_assets.core import tags
from backfill_assets.core.layers import rules
from backfill_assets.core.warehouse import audit
from backfill_assets.core.warehouse.tables import run_id
from backfill_assets.defs.layers.common import json_metadata
from backfill_assets.defs.partitions import hourly_partitions
from backfill_assets.release.outcomes import NOT_EVALUATED


def check_spec(
    name: str, asset: dg.AssetKey, description: str, *, blocking: bool = True
) -> dg.AssetCheckSpec:
    """A check evaluated per hour: partitioned like the assets, so Dagster keeps (and the
    UI shows) one result per hour."""
    with warnings.catch_warnings():  # partitioned check specs are "preview" in dagster 1.13
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(
            name,
            asset=asset,
            description=description,
            blocking=blocking,
            partitions_def=hourly_partitions,
        )


def run_hours(context: dg.AssetCheckExecutionContext) -> list[str]:
    """The partitions (hours) the check step runs for; [] in a run without partitions."""
    if context.has_partition_key or context.has_partition_key_range:
        return list(context.partition_keys)
    return []


def evaluation(
    spec: dg.AssetCheckSpec,
    hour: str | None,
    passed: bool,
    description: str,
    metadata: Mapping[str, object],
    severity: dg.AssetCheckSeverity,
    *,
    blocks: bool = False,
    target: dg.EventLogRecord | None = None,
) -> dg.AssetCheckEvaluation:
    """One check's verdict for one hour; ``target``: the hour's materialization it judges
    (the UI shows a partition's check status only while it targets the partition's
    latest materialization)."""
    return dg.AssetCheckEvaluation(
        asset_key=spec.asset_key,
        check_name=spec.name,
        passed=passed,
        partition=hour,
        severity=severity,
        description=description[:1000],
        metadata=metadata,
        blocking=spec.blocking and blocks,
        target_materialization_data=None if target is None else _target_of(target),
    )


def unevaluated(
    spec: dg.AssetCheckSpec,
    hour: str | None,
    why: str,
    target: dg.EventLogRecord | None,
    metadata: Mapping[str, object] | None = None,
) -> dg.AssetCheckEvaluation:
    """An hour the check could not evaluate: a warning saying why, never a pass."""
    return evaluation(
        spec,
        hour,
        False,
        f"{NOT_EVALUATED}{why}",
        metadata or {},
        dg.AssetCheckSeverity.WARN,
        target=target,
    )


@functools.cache
def _target_type() -> type:
    # The documented type of AssetCheckEvaluation.target_materialization_data, taken from
    # the public class's annotations (dagster exports no name for it).
    hint = typing.get_type_hints(dg.AssetCheckEvaluation)["target_materialization_data"]
    return next(t for t in typing.get_args(hint) if t is not type(None))


def _target_of(record: dg.EventLogRecord):
    return _target_type()(
        run_id=record.run_id, storage_id=record.storage_id, timestamp=record.timestamp
    )


def latest_materializations(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, hours: Sequence[str]
) -> dict[str, dg.EventLogRecord]:
    """Hour -> the newest materialization of ``asset_key`` at that hour (newest first, a
    page per range in the usual case: this run's own materializations)."""
    wanted, found, cursor = set(hours), {}, None
    while wanted - found.keys():
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=sorted(wanted)),
            limit=max(len(wanted), 100),
            cursor=cursor,
        )
        for record in page.records:
            found.setdefault(record.partition_key, record)
        if not page.has_more:
            break
        cursor = page.cursor
    return found


def check_outputs(context: dg.AssetCheckExecutionContext) -> dict[dg.AssetCheckKey, str]:
    specs = context.op_execution_context.assets_def.check_specs_by_output_name
    return {spec.key: name for name, spec in specs.items()}


def not_evaluated(context: dg.AssetCheckExecutionContext, why: str) -> Iterator:
    """For every check of the step and every hour of the run: evaluated nothing (a
    warning, never a pass)."""
    outputs = check_outputs(context)
    hours = run_hours(context)
    for spec in context.check_specs:
        targets = latest_materializations(context.instance, spec.asset_key, hours)
        for hour in hours or [None]:
            yield unevaluated(spec, hour, why, targets.get(hour))
        yield dg.Output(None, output_name=outputs[spec.key])


def version_to_check(
    context: dg.AssetCheckExecutionContext, spark: SparkSession, table: str
) -> tuple[str, list[str], str]:
    """The shadow version a check step evaluates, its hours, and why nothing (if so).

    In a build run: the version this run wrote. In a run that wrote nothing (the check
    launched alone, from the UI): the newest version written for the run's hours, so a
    re-check evaluates the candidate a publish would take, with the current rules.
    """
    own = context.run.run_id
    hours = written_hours(spark, table, own)
    if hours:
        return own, hours, ""
    wanted = tags.partition_range(context.run.tags)
    if not wanted:
        return own, [], "this run wrote no shadow version and names no hours (choose a range)"
    written = audit.rows(
        audit.warehouse_of(spark),
        audit.SHADOW_PARTITIONS,
        {"table_name": table, "hour": wanted},
        order_by="written_at",
    )
    if not written:
        return own, [], f"no shadow version of {table} for {wanted[0]}..{wanted[-1]} yet"
    newest = written[-1]["version"]  # oldest first
    return newest, sorted({r["hour"] for r in written if r["version"] == newest}), ""


def release_of(
    context: dg.AssetCheckExecutionContext, spark: SparkSession, table: str, version: str
) -> str:
    """The release whose candidate ``version`` is: this run's when it wrote it, else the
    one ``audit.shadow_partitions`` records (a check launched alone re-checks another
    run's version, against what that run's release read)."""
    if version == context.run.run_id:
        return tags.release_id(context.run.tags, context.run.run_id)
    found = _versions_rows(spark, table, version)
    return (found[0]["release_id"] if found else None) or version


def written_hours(spark: SparkSession, table: str, version: str) -> list[str]:
    """Hours of ``table`` that run ``version`` wrote (from ``audit.shadow_partitions``)."""
    return sorted({r["hour"] for r in _versions_rows(spark, table, version)})


def _versions_rows(spark: SparkSession, table: str, version: str) -> list[dict]:
    """``audit.shadow_partitions``' rows of ``table`` written by run ``version`` (SQL, no
    Spark job)."""
    where = {"table_name": table, "version": run_id(version)}
    return audit.rows(audit.warehouse_of(spark), audit.SHADOW_PARTITIONS, where)


def shadow_version(spark: SparkSession, table: str, version: str) -> DataFrame:
    return spark.table(table).where(F.col("version") == run_id(version)).drop("version")


PRECOUNTED_LOG = "rules counted by the build over the rows it wrote (no scan)"


def evaluate_rules(
    context: dg.AssetCheckExecutionContext,
    check_name: str,
    table: str,
    version: str,
    df: DataFrame,
    model: type,
    example_columns: list[str],
    *,
    by: tuple[str, ...] = (),
    extra: Mapping[str, Column] | None = None,
) -> rules.RuleReport:
    """``rules.evaluate`` of ``version`` of ``table``: in the run that built it, with the
    counts the build kept (``rules.precount``); else (a check run alone, a re-check) counted
    in one scan of ``df``."""
    built_here = version == run_id(context.run.run_id)
    counted = rules.precounted(df.sparkSession, table, version, model, by) if built_here else None
    report = rules.evaluate(df, model, example_columns, by=by, extra=extra, counted=counted)
    if counted is not None:
        context.log.info(f"{check_name}: {PRECOUNTED_LOG}")
    return report


def record_all(
    spark: SparkSession,
    warehouse_dir: str,
    table: str,
    version: str,
    hours: list[str],
    outcomes: dict[str, dict[str, str]],
    checked_by: str | None = None,
) -> None:
    """Append one row per (check, hour) to ``audit.check_results`` (the publisher's gate),
    in one Spark job; ``outcomes`` maps check name -> {failing hour: reason}."""
    now = audit.now()
    audit.append(
        warehouse_dir,
        audit.CHECK_RESULTS,
        [
            {
                "table_name": table,
                "hour": h,
                "version": version,
                "check_name": name,
                "passed": h not in failing,
                "detail": failing.get(h, "ok")[:2000],
                "run_id": checked_by or version,
                "checked_at": now,
            }
            for name, failing in outcomes.items()
            for h in hours
        ],
    )


def record_and_log(
    context: dg.AssetCheckExecutionContext,
    spark: SparkSession,
    warehouse_dir: str,
    layer: str,
    table: str,
    version: str,
    hours: list[str],
    failing: dict[str, dict[str, str]],
) -> None:
    """Record every check's per-hour outcome of ``version`` (one job) and log each failing
    hour."""
    record_all(spark, warehouse_dir, table, version, hours, failing, context.run.run_id)
    for name, reasons in failing.items():
        for hour, reason in sorted(reasons.items()):
            context.log.warning(f"{layer} {hour} fails {name}: {reason}")


def results(
    context: dg.AssetCheckExecutionContext,
    check_name: str,
    hours: Sequence[str],
    failing: Mapping[str, str],
    *,
    version: str,
    per_hour: Mapping[str, Mapping[str, object]] | None = None,
    on_failure: Mapping[str, object] | None = None,
) -> Iterator:
    """One check's outcome as one evaluation per hour (Dagster shows them on the hour's
    partition), then the check's output (which downstream blocking waits on).

    - a checked hour passes, or fails with its reason as the description (severity
      ERROR: the publish step holds it back); when *every* hour fails the evaluations are
      blocking and Dagster does not start the publish step at all;
    - an hour of the run that this check did not evaluate (the run wrote nothing for it)
      is a warning "not evaluated", never a pass;
    - ``per_hour``: metadata of each hour (counts); ``on_failure``: range-level detail
      (pandera errors, examples: those of the hour when they name hours) attached to the
      failing hours only, so the event log does not grow with hours x range.
    """
    spec = next(s for s in context.check_specs if s.name == check_name)
    checked = set(hours)
    all_fail = bool(hours) and len(failing) == len(checked)
    every = sorted(checked | set(run_hours(context)))
    targets = latest_materializations(context.instance, spec.asset_key, every)
    for hour in every:
        facts = {"shadow_version": version, **(per_hour or {}).get(hour, {})}
        target = targets.get(hour)
        if hour not in checked:
            yield unevaluated(spec, hour, "this run wrote no rows for the hour", target, facts)
        elif hour in failing:
            detail = {k: _of_hour(v, hour) for k, v in (on_failure or {}).items()}
            yield evaluation(
                spec,
                hour,
                False,
                failing[hour],
                {**facts, **detail},
                dg.AssetCheckSeverity.ERROR,
                blocks=all_fail,
                target=target,
            )
        else:
            yield evaluation(
                spec, hour, True, "pass", facts, dg.AssetCheckSeverity.ERROR, target=target
            )
    context.log.info(
        f"{spec.asset_key.to_user_string()} {check_name}: "
        + (
            f"{len(checked)} hour(s) pass"
            if not failing
            else f"{len(failing)} of {len(checked)} hour(s) fail: {', '.join(sorted(failing))}"
        )
    )
    yield dg.Output(None, output_name=check_outputs(context)[spec.key])


def _of_hour(value: object, hour: str) -> object:
    """Of a list of rows naming their hour, those of ``hour``; of a mapping by hour, the
    hour's entry; anything else whole (lists and mappings as JSON metadata)."""
    if isinstance(value, list) and all(isinstance(v, dict) and "hour" in v for v in value):
        value = [v for v in value if v["hour"] == hour]
    elif isinstance(value, dict) and hour in value:
        value = value[hour]
    return json_metadata(value) if isinstance(value, list | dict) else value
