"""Backfill report: what a run, or every run of a backfill, read, wrote, published and why.

Everything comes from the Dagster instance (the runs, their materializations, check
evaluations and failures, and the materializations of the published tables before the
run), so a report needs no Spark, except the dry-run diff (``reporting.diff``), which
compares the shadow version with the published table per partition.

A backfill is either a Dagster backfill (run tag ``dagster/backfill``, launched from the
UI) or one reconciliation request (run tag ``backfill_assets/request_id``, set by the
sensor and the demo).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from backfill_assets import tags
from backfill_assets.partitions import InvalidHourError, hour_range
from backfill_assets.publishing.publisher import Layer
from backfill_assets.reporting.chart import rows_chart
from backfill_assets.reporting.diff import DiffCounts
from backfill_assets.sensors.findings import REQUEST_ID_TAG, describe_hours
from backfill_assets.sensors.state import (
    asset_key,
    latest_by_partition,
    metadata_value,
    partition_facts,
)

CHART_NAME = "rows_per_hour.png"
REPORT_NAME = "report.md"
_EVENTS = {
    dg.DagsterEventType.ASSET_MATERIALIZATION,
    dg.DagsterEventType.ASSET_CHECK_EVALUATION,
    dg.DagsterEventType.STEP_FAILURE,
}
DiffFn = Callable[[Layer, str, list[str]], Mapping[str, Mapping[str, DiffCounts]]]


class ReportError(ValueError):
    """No such run or backfill; the message says what was looked for."""


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
    """Rows of a published table at an hour before and after the run, and what happened."""

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
    partitions: list[PartitionRows] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    diff: dict[str, dict[str, DiffCounts]] | None = None

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


def _run_hours(run_tags: Mapping[str, str]) -> list[str]:
    first = run_tags.get("dagster/asset_partition_range_start") or run_tags.get("dagster/partition")
    last = run_tags.get("dagster/asset_partition_range_end") or first
    try:
        return hour_range(first, last) if first and last else []
    except InvalidHourError:
        return []


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)


def collect_run(
    instance: dg.DagsterInstance,
    run_id: str,
    layers: Sequence[Layer],
    diff: DiffFn | None = None,
) -> RunSummary:
    """Everything the report says about one run (``diff``: computes the dry-run diff)."""
    record = instance.get_run_record_by_id(run_id)
    if record is None:
        raise ReportError(f"no run {run_id!r} in the Dagster instance ({instance.root_directory})")
    run = record.dagster_run
    manifest = tags.run_manifest(run.tags)
    manifest = {k: v or "" for k, v in manifest.items()}
    manifest["request_id"] = run.tags.get(REQUEST_ID_TAG, "")
    selection = {key.to_user_string().replace("/", ".") for key in run.asset_selection or ()}
    involved = (
        [layer for layer in layers if selection & {t for pair in layer.pairs for t in pair}]
        if selection
        else []
    )
    summary = RunSummary(
        run_id=run_id,
        status=run.status.value,
        layers=[layer.name for layer in involved],
        hours=_run_hours(run.tags),
        manifest=manifest,
        started=record.start_time,
        ended=record.end_time,
    )
    shadow_tables = {
        shadow: (layer, published) for layer in involved for shadow, published in layer.pairs
    }
    published_tables = {published: layer for layer in involved for _, published in layer.pairs}
    after: dict[tuple[str, str], dict[str, Any]] = {}
    held: dict[str, list[str]] = {}
    for entry in instance.all_logs(run_id, of_type=_EVENTS):
        event = entry.dagster_event
        if event is None:
            continue
        if entry.asset_materialization is not None:
            mat = entry.asset_materialization
            table = mat.asset_key.to_user_string().replace("/", ".")
            if table in shadow_tables and not any(w["table"] == table for w in summary.written):
                meta = mat.metadata
                summary.written.append(
                    {
                        "table": table,
                        "version": metadata_value(meta, "version") or run_id,
                        "rows": metadata_value(meta, "rows_written") or 0,
                        "per_hour": metadata_value(meta, "rows_per_hour") or {},
                    }
                )
                for key in (
                    "input_files",
                    "input_bytes",
                    "manifest_records_per_hour",
                    "backup_problems",
                    "source_table",
                    "received_hours_read",
                    "allowed_missing_hours",
                ):
                    if key in meta and key not in summary.read:
                        summary.read[key] = metadata_value(meta, key)
            elif table in published_tables and mat.partition:
                after[(table, mat.partition)] = partition_facts(mat.metadata, mat.partition)
        elif entry.asset_check_evaluation is not None:
            check = entry.asset_check_evaluation
            failing = _plain(check.metadata.get("failing_hours")) or {}
            summary.checks.append(
                CheckOutcome(
                    check.check_name,
                    check.asset_key.to_user_string(),
                    check.passed,
                    check.severity.value,
                    check.description or "",
                    {str(k): str(v) for k, v in dict(failing).items()},
                )
            )
        elif event.event_type_value == "STEP_FAILURE":
            data = event.event_specific_data
            user = getattr(data, "user_failure_data", None)
            error = getattr(data, "error", None)
            text = (
                user.description
                if user and user.description
                else (error.message.strip().splitlines()[0] if error else "step failed")
            )
            summary.failures.append(f"{event.step_key}: {text}")
            for hour, reasons in dict(
                _plain((user.metadata if user else {}).get("held_back")) or {}
            ).items():
                held[hour] = list(reasons)

    check_failures: dict[str, list[str]] = {}
    for check in summary.checks:
        for hour, why in check.failing.items():
            check_failures.setdefault(hour, []).append(f"{check.name}: {why}")
    for table, layer in published_tables.items():
        before = latest_by_partition(
            instance, asset_key(table), summary.hours, before=summary.started
        )
        shadow_rows = next(
            (
                w["per_hour"]
                for w in summary.written
                if shadow_tables.get(w["table"], (None, ""))[1] == table
            ),
            {},
        )
        for hour in summary.hours:
            was = before[hour]["rows"] if hour in before else None
            reasons = held.get(hour) or check_failures.get(hour) or []
            if summary.dry_run:
                now = shadow_rows.get(hour)
                status = "would be held back" if reasons else "would publish"
            elif (table, hour) in after:
                now, status = after[(table, hour)]["rows"], after[(table, hour)]["status"]
            else:
                now = was
                status = "held back" if reasons else f"not published (run {summary.status})"
            summary.partitions.append(
                PartitionRows(layer.name, table, hour, was, now, status, "; ".join(reasons))
            )
    if summary.dry_run and diff is not None:
        summary.diff = {}
        for layer in involved:
            summary.diff.update({t: dict(d) for t, d in diff(layer, run_id, summary.hours).items()})
    return summary


def runs_of_backfill(instance: dg.DagsterInstance, backfill_id: str) -> list[str]:
    """Run ids of a Dagster backfill or of a reconciliation request, oldest first."""
    runs = []
    for tag in (tags.DAGSTER_BACKFILL, REQUEST_ID_TAG):
        runs += instance.get_run_records(filters=dg.RunsFilter(tags={tag: backfill_id}))
    if not runs:
        raise ReportError(
            f"no runs tagged {tags.DAGSTER_BACKFILL} or {REQUEST_ID_TAG} = "
            f"{backfill_id!r} in the Dagster instance ({instance.root_directory})"
        )
    unique = {r.dagster_run.run_id: r for r in runs}

    def started(record: dg.RunRecord) -> float:
        return record.start_time or record.create_timestamp.timestamp()

    return [r.dagster_run.run_id for r in sorted(unique.values(), key=started)]


# ------------------------------------------------------------------------------ render


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _bytes(size: float) -> str:
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
    """The report of one or more runs (a backfill), rendered as text, Markdown and a chart."""

    ident: str
    runs: list[RunSummary]
    truth: list[str] = field(default_factory=list)  # extra lines (the demo's ground truth)

    @property
    def partitions(self) -> list[PartitionRows]:
        return [p for run in self.runs for p in run.partitions]

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

    def headline(self) -> list[str]:
        """The summary lines: hours repaired, sessions, checks, time and throughput."""
        seconds = sum(r.seconds or 0 for r in self.runs)
        rows = sum(r.rows_written for r in self.runs)
        hours = sum(len(r.hours) for r in self.runs)
        lines = []
        for layer in dict.fromkeys(p.layer for p in self.partitions):
            mine = [p for p in self.partitions if p.layer == layer]
            changed = {p.hour for p in mine if p.status == "published" and p.after != p.before}
            published = {p.hour for p in mine if p.status == "published"}
            same = {p.hour for p in mine if p.status == "unchanged"}
            held = {p.hour for p in mine if "held back" in p.status}
            would = {p.hour for p in mine if p.status == "would publish"}
            parts = []
            if published:
                parts.append(
                    f"{len(published)} hour(s) published, {len(changed)} with "
                    f"different rows" + (f" ({describe_hours(changed)})" if changed else "")
                )
            if would:
                parts.append(f"{len(would)} hour(s) would be published (dry run)")
            if same:
                parts.append(f"{len(same)} unchanged")
            if held:
                parts.append(f"{len(held)} held back ({describe_hours(held)})")
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
        return lines

    def _run_lines(self, run: RunSummary, md: bool) -> list[str]:
        m = run.manifest
        took = f"{run.seconds:,.1f} s" if run.seconds is not None else "-"
        head = (
            f"run {run.run_id} - {', '.join(run.layers) or '?'} {run.span} - "
            f"{run.status} - mode {m.get('mode') or '-'} - {took}"
        )
        out = [f"### {head}" if md else head]
        bullet = "- " if md else "  "
        out.append(
            f"{bullet}manifest: reason {m.get('reason') or '-'}; requested by "
            f"{m.get('requested_by') or '-'}; ticket {m.get('ticket') or '-'}; "
            f"backfill {m.get('backfill_id') or m.get('request_id') or '-'}; "
            f"started {_when(run.started)}"
        )
        read = run.read
        if "input_files" in read:  # the layer that reads the backups
            records = read.get("manifest_records_per_hour") or {}
            problems = read.get("backup_problems") or []
            out.append(
                f"{bullet}read: {read.get('input_files', 0):,} backup file(s), "
                f"{_bytes(read.get('input_bytes') or 0)}, "
                f"{sum(records.values()):,} manifest record(s); backup problems: "
                f"{len(problems) or 'none'}"
            )
        elif read.get("source_table"):  # a layer that reads a published table
            window = read.get("received_hours_read")
            empty = read.get("allowed_missing_hours") or []
            out.append(
                f"{bullet}read: published {read['source_table']}"
                + (f", received hours {window}" if window else "")
                + (f"; read as empty (outside the data): {describe_hours(empty)}" if empty else "")
            )
        for w in run.written:
            out.append(
                f"{bullet}written: {w['table']} {int(w['rows']):,} row(s), version "
                f"{str(w['version'])[:8]}"
            )
        for c in run.checks:
            verdict = "passed" if c.passed else f"FAILED ({c.severity})"
            out.append(f"{bullet}check {c.name} on {c.asset}: {verdict} - {c.description}")
        for failure in run.failures:
            out.append(f"{bullet}failure: {failure}")
        if run.seconds:
            size = read.get("input_bytes") or 0
            per_hour = run.seconds / len(run.hours) if run.hours else run.seconds
            out.append(
                f"{bullet}throughput: {run.rows_written / run.seconds:,.0f} rows/s, "
                f"{per_hour:,.1f} s per partition-hour"
                + (f", {_bytes(size / run.seconds)}/s read" if size else "")
            )
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
            for p in run.partitions
        ]
        if run.diff:
            header += ["added", "removed", "changed"]
            for row, p in zip(rows, run.partitions, strict=True):
                d = run.diff.get(p.table, {}).get(p.hour)
                row += [_num(d.added), _num(d.removed), _num(d.changed)] if d else ["-"] * 3
        if rows:
            out.append("" if md else f"{bullet}partitions:")
            out += _table(header, rows, md, indent="" if md else "    ")
        return out

    def text(self) -> str:
        lines = [f"Backfill report: {self.ident}", *self.headline(), *self.truth, ""]
        for run in self.runs:
            lines += [*self._run_lines(run, md=False), ""]
        return "\n".join(lines).rstrip() + "\n"

    def markdown(self, chart: str | None = CHART_NAME) -> str:
        lines = [f"# Backfill report: {self.ident}", "", "## Summary", ""]
        lines += [f"- {line}" for line in [*self.headline(), *self.truth]]
        if chart:
            lines += ["", f"![rows per hour, before and after]({chart})"]
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
        escape = [[cell.replace("|", "\\|") for cell in row] for row in rows]
        return [
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in escape),
        ]
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


def build_report(
    instance: dg.DagsterInstance,
    layers: Sequence[Layer],
    *,
    run_id: str | None = None,
    backfill_id: str | None = None,
    diff: DiffFn | None = None,
) -> BackfillReport:
    """The report of ``run_id``, or of every run of ``backfill_id``."""
    if (run_id is None) == (backfill_id is None):
        raise ReportError("give a run id or a backfill id (exactly one)")
    run_ids = [run_id] if run_id else runs_of_backfill(instance, backfill_id or "")
    ident = f"run {run_id}" if run_id else f"backfill {backfill_id}"
    return BackfillReport(ident, [collect_run(instance, r, layers, diff) for r in run_ids])
