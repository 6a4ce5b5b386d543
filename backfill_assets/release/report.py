"""Release report: what one release (a Dagster backfill, or one run outside a backfill)
read, wrote, published or held back, and why.

A **release** is everything one Dagster backfill wrote (``core.tags.release_id``): a candidate
shadow version per (table, hour) of every layer it rebuilt, and, unless it was a dry run,
one publish transaction. The report compares, for every table and hour the release wrote,
the candidate with what is published:

- **dry run** (nothing of the release published yet): before = what is published now,
  after = the candidate's rows, status ``would publish`` / ``would be held back`` (the
  failing checks of the hour), and optionally the per-key diff of the candidate against
  the published partition (``core.reporting.diff``, the only part that needs Spark);
- **published** (by the release's own ``release/publish`` step, or later by
  ``backfill-assets publish --backfill ID``): before = what was published just before the
  publish transaction (what it replaced), after = the published rows, status
  ``published`` / ``unchanged`` / ``held back`` (with the publish step's reasons).

Everything else comes from the Dagster instance: the release's runs (time, failures), their
shadow materializations (rows per hour, what was read), the check evaluations (with their
failing hours) and the publish step's per-(table, hour) materializations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.core.names import BACKUP_PROBLEMS, MANIFEST_RECORDS, ROWS, Layer
from backfill_assets.core.reconcile.findings import REQUEST_ID_TAG
from backfill_assets.core.reporting.diff import DiffCounts
from backfill_assets.core.reporting.render import (
    MANIFEST_RECORDS_PER_HOUR,
    BackfillReport,
    CheckOutcome,
    PartitionRows,
    ReportError,
    RunSummary,
)
from backfill_assets.core.spark.session import (
    SPARK_CORES,
    SPARK_SESSION_SECONDS,
    SPARK_TASK_SECONDS,
)
from backfill_assets.core.warehouse.publisher import PROVISIONAL
from backfill_assets.core.warehouse.tables import UnsafeValueError
from backfill_assets.release.cancellation import cancellation_line
from backfill_assets.release.keys import PUBLISH_KEY, table_key, table_name
from backfill_assets.release.outcomes import step_failure, summarize
from backfill_assets.release.pause import paused_line
from backfill_assets.release.state import latest_by_partition, metadata_value, partition_facts

_EVENTS = {
    dg.DagsterEventType.ASSET_MATERIALIZATION,
    dg.DagsterEventType.ASSET_CHECK_EVALUATION,
    dg.DagsterEventType.STEP_FAILURE,
}
# (layer, candidate version, hours) -> published table -> hour -> counts
DiffFn = Callable[[Layer, str, list[str]], Mapping[str, Mapping[str, DiffCounts]]]
_READ_KEYS = (
    "input_files",
    "input_bytes",
    BACKUP_PROBLEMS,
    "source_table",
    "received_hours_read",
    "allowed_missing_hours",
)


_USAGE_KEYS = (SPARK_TASK_SECONDS, SPARK_CORES, SPARK_SESSION_SECONDS)

# ------------------------------------------------------------------------------ collect


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)


def _table_of(key: dg.AssetKey) -> str:
    try:
        return table_name(key)
    except UnsafeValueError:  # not a table (an asset of another code location)
        return key.to_user_string()


@dataclass
class _Collected:
    """What the runs' event logs say, beyond each run's summary."""

    published: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    published_at: float | None = None
    held: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (layer, hour)
    # (shadow table, hour) -> why the candidate is provisional (its build's metadata)
    provisional: dict[tuple[str, str], str] = field(default_factory=dict)


def _shadow_written(
    summary: RunSummary,
    collected: _Collected,
    run_id: str,
    table: str,
    mat: dg.AssetMaterialization,
) -> None:
    """A shadow table's materialization: what the run wrote and read, and the hour's
    provisional note."""
    meta = mat.metadata
    # whole-run facts on every hour's event; the hour's own counts on its event
    written = next((w for w in summary.written if w["table"] == table), None)
    if written is None:
        written = {
            "table": table,
            "version": metadata_value(meta, "version") or run_id,
            "rows": metadata_value(meta, "rows_written") or 0,
            "per_hour": {},
        }
        summary.written.append(written)
    if mat.partition and ROWS in meta:
        written["per_hour"][mat.partition] = metadata_value(meta, ROWS)
    notes = dict(_plain(meta.get("provisional_hours")) or {})
    if mat.partition in notes:
        collected.provisional[(table, mat.partition)] = str(notes[mat.partition])
    for key in _READ_KEYS:
        if key in meta and key not in summary.read:
            summary.read[key] = metadata_value(meta, key)
    if mat.partition and MANIFEST_RECORDS in meta:
        records = summary.read.setdefault(MANIFEST_RECORDS_PER_HOUR, {})
        records[mat.partition] = metadata_value(meta, MANIFEST_RECORDS)


def _published_fact(
    collected: _Collected,
    table: str,
    mat: dg.AssetMaterialization,
    release_id: str,
    stamp: float,
) -> None:
    """A published table's materialization by ``release_id``'s publish."""
    meta = mat.metadata
    if (metadata_value(meta, "release_id") or release_id) != release_id:
        return
    facts = partition_facts(meta, mat.partition)
    if facts["status"] not in ("published", "unchanged"):
        return
    facts["previous_location"] = metadata_value(meta, "previous_location") or ""
    collected.published[(table, mat.partition)] = facts
    if collected.published_at is None or stamp < collected.published_at:
        collected.published_at = stamp


def collect_run(
    instance: dg.DagsterInstance,
    record: dg.RunRecord,
    layers: Sequence[Layer],
    release_id: str,
    collected: _Collected,
) -> RunSummary:
    """One run's summary; publish facts of ``release_id`` go into ``collected``."""
    run = record.dagster_run
    manifest = {k: v or "" for k, v in tags.run_manifest(run.tags).items()}
    manifest["request_id"] = run.tags.get(REQUEST_ID_TAG, "")
    manifest["release_id"] = tags.release_id(run.tags, run.run_id)
    manifest["estimate_seconds"] = run.tags.get(tags.ESTIMATE_SECONDS, "")
    selection = {_table_of(key) for key in run.asset_selection or ()}
    summary = RunSummary(
        run_id=run.run_id,
        status=run.status.value,
        layers=[
            layer.name for layer in layers if selection & {t for pair in layer.pairs for t in pair}
        ],
        hours=tags.partition_range(run.tags),
        manifest=manifest,
        started=record.start_time,
        ended=record.end_time,
        publishes=PUBLISH_KEY in (run.asset_selection or ()),
    )
    shadows = {shadow for layer in layers for shadow, _ in layer.pairs}
    published = {table for layer in layers for table in layer.tables}
    evaluations = []  # one per (check, hour)
    for entry in instance.all_logs(run.run_id, of_type=_EVENTS):
        event = entry.dagster_event
        if event is None:
            continue
        if entry.asset_materialization is not None:
            mat = entry.asset_materialization
            table, meta = _table_of(mat.asset_key), mat.metadata
            for key in _USAGE_KEYS:  # the run's totals so far: keep the largest
                if key in meta:
                    value = float(metadata_value(meta, key) or 0)
                    summary.spark[key] = max(summary.spark.get(key, 0.0), value)
            if mat.asset_key == PUBLISH_KEY:  # the verdict on held-back hours
                _collect_held(collected, meta.get("held_back"))
                line = f"{event.step_key}: {metadata_value(meta, 'verdict')}"
                if "verdict" in meta and line not in summary.failures:  # one per hour
                    summary.failures.append(line)
            elif table in shadows:
                _shadow_written(summary, collected, run.run_id, table, mat)
            elif table in published and mat.partition:
                _published_fact(collected, table, mat, release_id, entry.timestamp)
        elif entry.asset_check_evaluation is not None:
            evaluations.append(entry.asset_check_evaluation)
        elif event.event_type_value == "STEP_FAILURE":
            summary.failures.append(step_failure(event))
            user = getattr(event.event_specific_data, "user_failure_data", None)
            # releases published before held-back hours ended the step successfully
            _collect_held(collected, (user.metadata if user else {}).get("held_back"))
    # steps that refused to build (an expected outcome: no step failure)
    summary.failures += tags.refusals(run.tags)
    summary.checks = [
        CheckOutcome(c.name, c.asset, c.passed, c.severity, c.description, c.failing)
        for c in summarize(evaluations).values()
    ]
    return summary


def _collect_held(collected: _Collected, held_back: Any) -> None:
    """The held-back hours of a publish's ``held_back`` metadata ("layer hour" -> reasons)."""
    for key, reasons in dict(_plain(held_back) or {}).items():
        layer, _, hour = str(key).partition(" ")
        collected.held[(layer, hour)] = [str(r) for r in reasons]


def _records(instance: dg.DagsterInstance, release_id: str) -> list[dg.RunRecord]:
    records = []
    for tag in (*tags.RELEASE_TAGS, tags.RELEASE, REQUEST_ID_TAG):
        records += instance.get_run_records(filters=dg.RunsFilter(tags={tag: release_id}))
    own = instance.get_run_record_by_id(release_id)  # a run outside a backfill
    if own is not None and tags.release_id(own.dagster_run.tags, release_id) == release_id:
        records.append(own)
    return records


def _publishers(
    instance: dg.DagsterInstance, release_id: str, tables: Sequence[str], hours: Sequence[str]
) -> list[str]:
    """Runs that published ``release_id`` although they are not part of it (``publish
    --backfill ID`` of a dry run is a backfill of its own)."""
    runs: set[str] = set()
    if not hours:
        return []
    for table in tables:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=table_key(table), asset_partitions=list(hours)),
            limit=1000,
        )
        for record in page.records:
            mat = record.asset_materialization
            if mat is not None and metadata_value(mat.metadata, "release_id") == release_id:
                runs.add(record.run_id)
    return sorted(runs)


def runs_of_release(instance: dg.DagsterInstance, release_id: str) -> list[dg.RunRecord]:
    """Run records of a release (a Dagster backfill, a release tag, or a single run),
    oldest first."""
    unique = {r.dagster_run.run_id: r for r in _records(instance, release_id)}
    if not unique:
        raise ReportError(
            f"no release {release_id!r}: no run tagged {tags.DAGSTER_BACKFILL} or "
            f"{tags.RELEASE} with it, and no such run, in the Dagster instance "
            f"({instance.root_directory})"
        )
    return _by_start(unique.values())


def _by_start(records) -> list[dg.RunRecord]:
    def started(record: dg.RunRecord) -> float:
        return record.start_time or record.create_timestamp.timestamp()

    return sorted(records, key=started)


# ------------------------------------------------------------------------------ release


def _just_before(epoch: float | None) -> float | None:
    """A moment before the publish transaction's first event (what it replaced)."""
    return None if epoch is None else epoch - 0.001


def _check_reasons(runs: Sequence[RunSummary], layer: Layer) -> dict[str, list[str]]:
    """Hour -> failing checks of ``layer``'s shadows in the release's runs."""
    shadows = {shadow for shadow, _ in layer.pairs}
    reasons: dict[str, list[str]] = {}
    for run in runs:
        for check in run.checks:
            if _table_of(dg.AssetKey.from_user_string(check.asset)) not in shadows:
                continue
            for hour, why in check.failing.items():
                reasons.setdefault(hour, []).append(f"{check.name}: {why}")
    return reasons


def _hours_of(layers: Sequence[Layer], written: Mapping[str, dict]) -> dict[str, list[str]]:
    """Per layer, the hours the release wrote in any of its shadow tables."""
    return {
        layer.name: sorted(
            {
                h
                for shadow, _ in layer.pairs
                for h in (written.get(shadow) or {}).get("per_hour", {})
            }
        )
        for layer in layers
    }


def _outside_publishers(
    instance: dg.DagsterInstance,
    release_id: str,
    layers: Sequence[Layer],
    hours_of: Mapping[str, list[str]],
    runs: Sequence[RunSummary],
    collected: _Collected,
) -> list[RunSummary]:
    """The runs outside the release that published it (a dry run published by id or
    range)."""
    tables = [t for layer in layers for t in layer.tables]
    all_hours = sorted({h for hours in hours_of.values() for h in hours})
    known = {r.run_id for r in runs}
    extra = [
        rid for rid in _publishers(instance, release_id, tables, all_hours) if rid not in known
    ]
    found = []
    for rid in extra:
        record = instance.get_run_record_by_id(rid)
        if record is not None:
            found.append(collect_run(instance, record, layers, release_id, collected))
    return found


def _dry_run_diff(
    layers: Sequence[Layer],
    written: Mapping[str, dict],
    hours_of: Mapping[str, list[str]],
    diff: DiffFn,
) -> dict[str, dict]:
    """The per-key diff of each layer's candidate against what is published."""
    result_of: dict[str, dict] = {}
    for layer in layers:
        version = (written.get(layer.checked_table) or {}).get("version")
        if version and hours_of[layer.name]:
            result = diff(layer, str(version), hours_of[layer.name])
            result_of.update({t: dict(d) for t, d in result.items()})
    return result_of


def collect_release(
    instance: dg.DagsterInstance,
    release_id: str,
    layers: Sequence[Layer],
    *,
    diff: DiffFn | None = None,
    ident: str | None = None,
    held: Mapping[str, Sequence[str]] | None = None,
) -> BackfillReport:
    """The report of release ``release_id`` (``diff``: per-key diff of a dry run; ``held``:
    the publish's held-back hours when it reports before its own result is stored)."""
    records = runs_of_release(instance, release_id)
    collected = _Collected()
    _collect_held(collected, held)
    runs = [collect_run(instance, r, layers, release_id, collected) for r in records]
    written = {w["table"]: w for run in runs for w in run.written}
    hours_of = _hours_of(layers, written)
    # Publish runs outside the release (publishing a dry run by id or range).
    runs += _outside_publishers(instance, release_id, layers, hours_of, runs, collected)
    runs.sort(key=lambda r: r.started or 0)
    publish_runs = [r for r in runs if r.publishes and not r.dry_run]  # a dry run's publish
    # step publishes nothing
    cancelled = cancellation_line(instance, release_id)
    dry_run = not collected.published and not publish_runs and not cancelled
    report = BackfillReport(
        ident or f"release {release_id}",
        runs,
        release_id=release_id,
        dry_run=dry_run,
        cancelled=cancelled or paused_line(instance, release_id),
    )
    publish_failures = [f for r in publish_runs for f in r.failures]
    for layer in layers:
        hours = hours_of[layer.name]
        if not hours:
            continue
        checks = _check_reasons(runs, layer)
        for shadow, table in layer.pairs:
            candidate = (written.get(shadow) or {}).get("per_hour", {})
            before = latest_by_partition(
                instance,
                table_key(table),
                hours,
                before=None if dry_run else _just_before(collected.published_at),
            )
            for hour in hours:
                was = before[hour]["rows"] if hour in before else None
                held = collected.held.get((layer.name, hour))
                reasons = held or checks.get(hour) or []
                if dry_run:
                    now = candidate.get(hour)
                    status = "would be held back" if reasons else "would publish"
                    note = collected.provisional.get((shadow, hour))
                    reasons = reasons or ([note] if note else [])
                elif (table, hour) in collected.published:
                    facts = collected.published[(table, hour)]
                    now, status = facts["rows"], facts["status"]
                    reasons = [facts[PROVISIONAL]] if facts.get(PROVISIONAL) else []
                elif held is not None or reasons:
                    now, status = was, "held back"
                else:
                    now = was
                    status = "not published"
                    no_publish = (
                        "no publish step ran (publish the release with "
                        f"`backfill-assets publish --backfill {release_id}`)"
                    )
                    reasons = (
                        ["release cancelled"] if cancelled else publish_failures[:1] or [no_publish]
                    )
                report.partitions.append(
                    PartitionRows(layer.name, table, hour, was, now, status, "; ".join(reasons))
                )
    if dry_run and diff is not None:
        report.diff = _dry_run_diff(layers, written, hours_of, diff)
    return report


def build_report(
    instance: dg.DagsterInstance,
    layers: Sequence[Layer],
    *,
    run_id: str | None = None,
    backfill_id: str | None = None,
    diff: DiffFn | None = None,
    held: Mapping[str, Sequence[str]] | None = None,
) -> BackfillReport:
    """The report of release ``backfill_id``, or of the release ``run_id`` belongs to (a run
    outside a backfill is a release of its own); ``held``: see ``collect_release``."""
    if (run_id is None) == (backfill_id is None):
        raise ReportError("give a run id or a backfill id (exactly one)")
    if run_id is not None:
        record = instance.get_run_record_by_id(run_id)
        if record is None:
            raise ReportError(
                f"no run {run_id!r} in the Dagster instance ({instance.root_directory})"
            )
        release = tags.release_id(record.dagster_run.tags, run_id)
        ident = f"run {run_id}" + (f" (release {release})" if release != run_id else "")
        return collect_release(instance, release, layers, diff=diff, ident=ident, held=held)
    return collect_release(instance, backfill_id or "", layers, diff=diff, held=held)
