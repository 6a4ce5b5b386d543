"""Release report: what one release (a Dagster backfill, or one run outside a backfill)
read, wrote, published or held back, and why.

A **release** is everything one Dagster backfill wrote (``tags.release_id``): a candidate
shadow version per (table, hour) of every layer it rebuilt, and, unless it was a dry run,
one publish transaction. The report compares, for every table and hour the release wrote,
the candidate with what is published:

- **dry run** (nothing of the release published yet): before = what is published now,
  after = the candidate's rows, status ``would publish`` / ``would be held back`` (the
  failing checks of the hour), and optionally the per-key diff of the candidate against
  the published partition (``reporting.diff``, the only part that needs Spark);
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from backfill_assets import tags
from backfill_assets.checks.outcomes import summarize
from backfill_assets.launch import PUBLISH_KEY, step_failure
from backfill_assets.names import BACKUP_PROBLEMS, MANIFEST_RECORDS, Layer
from backfill_assets.publishing.cancel import cancellation_line
from backfill_assets.publishing.publisher import PROVISIONAL
from backfill_assets.publishing.tables import UnsafeValueError, table_key, table_name
from backfill_assets.reporting.chart import rows_bars, rows_chart
from backfill_assets.reporting.diff import DiffCounts
from backfill_assets.resources.io_managers import ROWS
from backfill_assets.resources.spark import (
    SPARK_CORES,
    SPARK_SESSION_SECONDS,
    SPARK_TASK_SECONDS,
)
from backfill_assets.sensors.findings import REQUEST_ID_TAG, describe_hours
from backfill_assets.sensors.state import (
    latest_by_partition,
    metadata_value,
    partition_facts,
)
from backfill_assets.text import markdown_text, one_line

CHART_NAME = "rows_per_hour.png"
# Gathered from the raw shadow's per-hour events (``names.MANIFEST_RECORDS``).
MANIFEST_RECORDS_PER_HOUR = "manifest_records_per_hour"
REPORT_NAME = "report.md"
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


class ReportError(ValueError):
    """No such run or release; the message says what was looked for."""


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    asset: str
    passed: bool
    severity: str
    description: str
    failing: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionRows:
    """Rows of a published table at an hour before and after the release, and what happened."""

    layer: str
    table: str
    hour: str
    before: int | None
    after: int | None
    status: str  # published | unchanged | held back | would publish | would be held back | ...
    reason: str = ""

    @property
    def change(self) -> int | None:
        if self.after is None:
            return None
        return self.after - (self.before or 0)


@dataclass
class RunSummary:
    """One run of the release: what it read, wrote, checked, and how long it took."""

    run_id: str
    status: str
    layers: list[str]
    hours: list[str]
    manifest: dict[str, str]
    started: float | None
    ended: float | None
    read: dict[str, Any] = field(default_factory=dict)
    written: list[dict[str, Any]] = field(default_factory=list)
    checks: list[CheckOutcome] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    publishes: bool = False  # the run ran ``release/publish``
    spark: dict[str, float] = field(default_factory=dict)  # the run's Spark usage, at its end

    @property
    def dry_run(self) -> bool:
        return self.manifest.get("mode") == "dry_run"

    @property
    def seconds(self) -> float | None:
        if self.started is None or self.ended is None:
            return None
        return self.ended - self.started

    @property
    def rows_written(self) -> int:
        return sum(int(w.get("rows") or 0) for w in self.written)

    @property
    def span(self) -> str:
        return f"{self.hours[0]}..{self.hours[-1]} ({len(self.hours)} h)" if self.hours else "-"


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
                if "verdict" in meta:
                    summary.failures.append(f"{event.step_key}: {metadata_value(meta, 'verdict')}")
            elif table in shadows:
                # whole-run facts on every hour's event; the hour's own counts on its event
                written = next((w for w in summary.written if w["table"] == table), None)
                if written is None:
                    written = {
                        "table": table,
                        "version": metadata_value(meta, "version") or run.run_id,
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
            elif table in published and mat.partition:
                if (metadata_value(meta, "release_id") or release_id) != release_id:
                    continue
                facts = partition_facts(meta, mat.partition)
                if facts["status"] not in ("published", "unchanged"):
                    continue
                facts["previous_location"] = metadata_value(meta, "previous_location") or ""
                collected.published[(table, mat.partition)] = facts
                stamp = entry.timestamp
                if collected.published_at is None or stamp < collected.published_at:
                    collected.published_at = stamp
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
    for tag in (tags.DAGSTER_BACKFILL, tags.RELEASE, REQUEST_ID_TAG):
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


# ------------------------------------------------------------------------------ render


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def format_bytes(size: float) -> str:
    """A size for people: ``93.9 kB``, ``1.2 GB`` (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1000
    return f"{size:,.1f} GB"


def _num(value: int | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+,}" if signed else f"{value:,}"


@dataclass
class BackfillReport:
    """The report of a release: its partitions (candidate vs published), its runs, and the
    rendering as text, Markdown and a chart."""

    ident: str
    runs: list[RunSummary]
    partitions: list[PartitionRows] = field(default_factory=list)
    diff: dict[str, dict[str, DiffCounts]] | None = None
    truth: list[str] = field(default_factory=list)  # extra lines (the demo's ground truth)
    release_id: str = ""
    dry_run: bool = False  # nothing of the release is published (yet)
    cancelled: str = ""  # "cancelled by X at T ...": the release was stopped

    def _sessions(self) -> tuple[int, int, int] | None:
        rows = [
            p
            for p in self.partitions
            if p.table.endswith(".sessions")
            and p.status in ("published", "unchanged", "would publish")
        ]
        if not rows:
            return None
        before = sum(p.before or 0 for p in rows)
        after = sum(p.after or 0 for p in rows)
        return before, after, len({p.hour for p in rows})

    def _differs(self, p: PartitionRows) -> bool:
        d = (self.diff or {}).get(p.table, {}).get(p.hour)
        return p.after != p.before or (d is not None and d.differs)

    def headline(self) -> list[str]:
        """The summary lines: hours repaired, sessions, checks, time and throughput."""
        seconds = sum(r.seconds or 0 for r in self.runs)
        rows = sum(r.rows_written for r in self.runs)
        hours = sum(len(r.hours) for r in self.runs)
        lines = [self.cancelled] if self.cancelled else []
        for layer in dict.fromkeys(p.layer for p in self.partitions):
            mine = [p for p in self.partitions if p.layer == layer]
            published = {p.hour for p in mine if p.status == "published"}
            changed = {p.hour for p in mine if p.status == "published" and self._differs(p)}
            would = {p.hour for p in mine if p.status == "would publish"}
            would_change = {
                p.hour for p in mine if p.status == "would publish" and self._differs(p)
            }
            same = {p.hour for p in mine if p.status == "unchanged"} - published
            held = {p.hour for p in mine if "held back" in p.status}
            other = {p.hour for p in mine if p.status.startswith("not published")}
            parts = []
            if published:
                parts.append(
                    f"{len(published)} hour(s) published, {len(changed)} with "
                    f"different rows" + (f" ({describe_hours(changed)})" if changed else "")
                )
            if would:
                parts.append(
                    f"{len(would)} hour(s) would be published (dry run), {len(would_change)} "
                    f"with different rows"
                    + (f" ({describe_hours(would_change)})" if would_change else "")
                )
            if same:
                parts.append(f"{len(same)} unchanged")
            if held:
                parts.append(f"{len(held)} held back ({describe_hours(held)})")
            if other:
                parts.append(f"{len(other)} not published ({describe_hours(other)})")
            lines.append(f"{layer}: " + ("; ".join(parts) or "nothing published"))
        sessions = self._sessions()
        if sessions:
            before, after, count = sessions
            lines.append(
                f"sessions: {before:,} -> {after:,} ({after - before:+,} net) in "
                f"{count} session hour(s)"
            )
        checks = [c for r in self.runs for c in r.checks]
        failed = [c for c in checks if not c.passed]
        lines.append(
            f"checks: {len(checks) - len(failed)} of {len(checks)} passed"
            + (": failed " + ", ".join(sorted({c.name for c in failed})) if failed else "")
        )
        rate = (
            f", {rows / seconds:,.0f} rows/s, {seconds / hours:,.1f} s per partition-hour"
            if seconds and hours
            else ""
        )
        lines.append(
            f"time: {seconds:,.1f} s in {len(self.runs)} run(s); {rows:,} rows "
            f"written over {hours} partition-hour(s){rate}"
        )
        lines += self.speed_lines()
        return lines

    def speed(self) -> dict[str, float]:
        """Speed and cost of the release: payloads read per second of wall time, the
        multiple of real time (hours of traffic rebuilt per hour of wall time; the payload
        rate over the live rate of those hours), Spark executor task core-seconds and the
        core-seconds the sessions held. {} when the runs did not say."""
        wall = sum(r.seconds or 0 for r in self.runs)
        traffic = {h for r in self.runs if "input_files" in r.read for h in r.hours} or {
            h for r in self.runs for h in r.hours
        }
        if not wall or not traffic:
            return {}
        payloads = sum(
            sum((r.read.get(MANIFEST_RECORDS_PER_HOUR) or {}).values()) for r in self.runs
        )
        live_rate = payloads / (len(traffic) * 3600)
        return {
            "wall_seconds": round(wall, 1),
            "traffic_hours": len(traffic),
            "payloads": payloads,
            "payloads_per_second": round(payloads / wall, 1),
            "live_payloads_per_second": round(live_rate, 2),
            "real_time_multiple": round(len(traffic) * 3600 / wall, 1),
            "payload_rate_multiple": round(payloads / wall / live_rate, 1) if payloads else 0.0,
            "task_core_seconds": round(
                sum(r.spark.get(SPARK_TASK_SECONDS, 0) for r in self.runs), 1
            ),
            "held_core_seconds": round(
                sum(
                    r.spark.get(SPARK_CORES, 0) * r.spark.get(SPARK_SESSION_SECONDS, 0)
                    for r in self.runs
                ),
                1,
            ),
        }

    def speed_lines(self) -> list[str]:
        speed = self.speed()
        if not speed:
            return []
        line = (
            f"speed: {speed['traffic_hours']} hour(s) of traffic in {speed['wall_seconds']:,.1f} "
            f"s = {speed['real_time_multiple']:,.1f}x real time"
        )
        if speed["payloads"]:  # runs recorded before per-hour manifest records had none
            line += (
                f"; {speed['payloads']:,} payloads at {speed['payloads_per_second']:,.1f}/s, "
                f"{speed['payload_rate_multiple']:,.1f}x their live rate "
                f"({speed['live_payloads_per_second']:,.2f}/s)"
            )
        lines = [line]
        estimates = {r.manifest.get("estimate_seconds") for r in self.runs} - {"", None}
        if estimates:
            lines.append(
                f"estimate before launch: {float(max(estimates)):,.0f} s; took "
                f"{speed['wall_seconds']:,.1f} s"
            )
        if speed["task_core_seconds"] or speed["held_core_seconds"]:
            lines.append(
                f"cost: {speed['task_core_seconds']:,.1f} executor core-seconds of Spark "
                f"tasks; {speed['held_core_seconds']:,.1f} core-seconds held by the runs' "
                f"Spark sessions"
            )
        return lines

    def provisional(self) -> list[str]:
        """One line per layer with hours published (or to be) provisional, and why."""
        hours: dict[str, dict[str, str]] = {}
        for p in self.partitions:
            if "held back" not in p.status and p.reason.startswith(PROVISIONAL):
                hours.setdefault(p.layer, {})[p.hour] = p.reason
        return [
            f"{PROVISIONAL}: {layer} {describe_hours(set(notes))} ({next(iter(notes.values()))})"
            for layer, notes in hours.items()
        ]

    def held_back(self) -> list[str]:
        """One line per held-back (layer, hour) with its reasons."""
        seen: dict[tuple[str, str], str] = {}
        for p in self.partitions:
            if "held back" in p.status and (p.layer, p.hour) not in seen:
                seen[(p.layer, p.hour)] = p.reason
        return [
            f"held back: {layer} {hour}" + (f": {reason}" if reason else "")
            for (layer, hour), reason in sorted(seen.items())
        ]

    def _run_lines(self, run: RunSummary, md: bool) -> list[str]:
        m = run.manifest
        took = f"{run.seconds:,.1f} s" if run.seconds is not None else "-"
        what = ", ".join(run.layers) or ("publish" if run.publishes else "?")
        if run.publishes and run.layers:
            what += " + publish"
        head = f"run {run.run_id} - {what} {run.span} - {run.status} - mode {m.get('mode') or '-'}"
        head += f" - {took}"
        reason = one_line(m.get("reason") or "-", tags.MAX_REASON_CHARS)
        who = one_line(m.get("requested_by") or "-", tags.MAX_REQUESTED_BY_CHARS)
        ticket = one_line(m.get("ticket") or "-", tags.MAX_TICKET_CHARS)
        out = [
            f"manifest: reason {reason}; requested by {who}; ticket {ticket}; "
            f"backfill {m.get('backfill_id') or m.get('request_id') or '-'}; "
            f"started {_when(run.started)}"
        ]
        read = run.read
        if "input_files" in read:  # the layer that reads the backups
            records = read.get(MANIFEST_RECORDS_PER_HOUR) or {}
            problems = read.get(BACKUP_PROBLEMS) or 0
            if isinstance(problems, list):  # runs before the count: the listed problems
                problems = len(problems)
            out.append(
                f"read: {read.get('input_files', 0):,} backup file(s), "
                f"{format_bytes(read.get('input_bytes') or 0)}, "
                f"{sum(records.values()):,} manifest record(s); backup problems: "
                f"{problems or 'none'}"
            )
        elif read.get("source_table"):  # a layer that reads an upstream layer
            window = read.get("received_hours_read")
            empty = read.get("allowed_missing_hours") or []
            out.append(
                f"read: {read['source_table']} (this release's candidates where it "
                f"rebuilt the hour, else published)"
                + (f", received hours {window}" if window else "")
                + (f"; read as empty (outside the data): {describe_hours(empty)}" if empty else "")
            )
        for w in run.written:
            out.append(
                f"written: {w['table']} {int(w['rows']):,} row(s), version {str(w['version'])[:8]}"
            )
        for c in run.checks:
            verdict = "passed" if c.passed else f"FAILED ({c.severity})"
            out.append(f"check {c.name} on {c.asset}: {verdict} - {c.description}")
        for failure in run.failures:
            out.append(f"failure: {failure}")
        if run.seconds and run.rows_written:
            size = read.get("input_bytes") or 0
            per_hour = run.seconds / len(run.hours) if run.hours else run.seconds
            out.append(
                f"throughput: {run.rows_written / run.seconds:,.0f} rows/s, "
                f"{per_hour:,.1f} s per partition-hour"
                + (f", {format_bytes(size / run.seconds)}/s read" if size else "")
            )
        if md:  # every line is text: Markdown only from the report's own markers
            return [f"### {markdown_text(head)}", *(f"- {markdown_text(line)}" for line in out)]
        return [one_line(head), *(f"  {one_line(line)}" for line in out)]

    def _partition_lines(self, md: bool) -> list[str]:
        header = ["hour", "table", "before", "after", "change", "status"]
        rows = [
            [
                p.hour,
                p.table,
                _num(p.before),
                _num(p.after),
                _num(p.change, True),
                p.status + (f": {p.reason}" if p.reason else ""),
            ]
            for p in self.partitions
        ]
        if self.diff:
            header += ["added", "removed", "changed"]
            for row, p in zip(rows, self.partitions, strict=True):
                d = self.diff.get(p.table, {}).get(p.hour)
                row += [_num(d.added), _num(d.removed), _num(d.changed)] if d else ["-"] * 3
        if not rows:
            return []
        return _table(header, rows, md, indent="" if md else "  ")

    def text(self) -> str:
        summary = [*self.headline(), *self.truth, *self.provisional(), *self.held_back()]
        lines = [f"Backfill report: {self.ident}", *(one_line(line) for line in summary)]
        partitions = self._partition_lines(md=False)
        if partitions:
            what = "candidate vs published" if self.dry_run else "published before vs after"
            lines += ["", f"partitions ({what}):", *partitions]
        lines.append("")
        for run in self.runs:
            lines += [*self._run_lines(run, md=False), ""]
        return "\n".join(lines).rstrip() + "\n"

    def markdown(self, chart: str | None = CHART_NAME) -> str:
        """The report in Markdown; ``chart``: the PNG's file name, or None for the chart
        drawn in text (where no image can be shown: the Dagster UI's metadata)."""
        lines = [f"# Backfill report: {markdown_text(self.ident)}", "", "## Summary", ""]
        summary = [*self.headline(), *self.truth, *self.provisional(), *self.held_back()]
        lines += [f"- {markdown_text(line)}" for line in summary]
        if chart:
            lines += ["", f"![rows per hour, before and after]({chart})"]
        else:
            bars = rows_bars(self.chart_series())
            if bars:
                lines += ["", "## Rows per hour, before and after", "", "```", *bars, "```"]
        partitions = self._partition_lines(md=True)
        if partitions:
            what = "candidate vs published" if self.dry_run else "published before vs after"
            lines += ["", f"## Partitions ({what})", "", *partitions]
        lines += ["", "## Runs", ""]
        for run in self.runs:
            lines += [*self._run_lines(run, md=True), ""]
        return "\n".join(lines).rstrip() + "\n"

    def chart_series(self) -> dict[str, list[tuple[str, int | None, int | None]]]:
        """Per table: (hour, rows before, rows after) for the chart."""
        series: dict[str, list[tuple[str, int | None, int | None]]] = {}
        for p in self.partitions:
            series.setdefault(p.table, []).append((p.hour, p.before, p.after))
        return series

    def write(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write ``report.md`` and ``rows_per_hour.png`` into ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        title = self.ident if len(self.ident) <= 44 else self.ident[:43] + "…"
        chart = rows_chart(
            self.chart_series(), out / CHART_NAME, f"Rows per hour, before and after ({title})"
        )
        markdown = out / REPORT_NAME
        markdown.write_text(self.markdown(CHART_NAME))
        return markdown, chart


def _table(header: list[str], rows: list[list[str]], md: bool, indent: str) -> list[str]:
    if md:
        escape = [[markdown_text(cell) for cell in row] for row in rows]
        return [
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in escape),
        ]
    rows = [[one_line(cell) for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    numeric = {"before", "after", "change", "added", "removed", "changed"}

    def fmt(cells: list[str]) -> str:
        return (
            indent
            + "  ".join(
                c.rjust(w) if h in numeric else c.ljust(w)
                for c, w, h in zip(cells, widths, header, strict=True)
            ).rstrip()
        )

    return [fmt(header), *(fmt(r) for r in rows)]


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
    hours_of = {
        layer.name: sorted(
            {
                h
                for shadow, _ in layer.pairs
                for h in (written.get(shadow) or {}).get("per_hour", {})
            }
        )
        for layer in layers
    }
    # Publish runs outside the release (publishing a dry run by id or range).
    tables = [t for layer in layers for t in layer.tables]
    all_hours = sorted({h for hours in hours_of.values() for h in hours})
    known = {r.run_id for r in runs}
    extra = [
        rid for rid in _publishers(instance, release_id, tables, all_hours) if rid not in known
    ]
    for rid in extra:
        record = instance.get_run_record_by_id(rid)
        if record is not None:
            runs.append(collect_run(instance, record, layers, release_id, collected))
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
        cancelled=cancelled,
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
        report.diff = {}
        for layer in layers:
            version = (written.get(layer.checked_table) or {}).get("version")
            if version and hours_of[layer.name]:
                result = diff(layer, str(version), hours_of[layer.name])
                report.diff.update({t: dict(d) for t, d in result.items()})
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
