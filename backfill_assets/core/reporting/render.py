"""The release report's rendering: the report's summaries (runs, checks, rows per hour)
and ``BackfillReport``, which renders them as text, Markdown and a chart
(``report`` collects them from the Dagster instance)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from backfill_assets.core import tags
from backfill_assets.core.names import BACKUP_PROBLEMS
from backfill_assets.core.reconcile.findings import describe_hours
from backfill_assets.core.reporting.chart import rows_bars, rows_chart
from backfill_assets.core.reporting.diff import DiffCounts
from backfill_assets.core.spark.session import (
    SPARK_CORES,
    SPARK_SESSION_SECONDS,
    SPARK_TASK_SECONDS,
)
from backfill_assets.core.text import markdown_text, one_line
from backfill_assets.core.warehouse.publisher import PROVISIONAL

CHART_NAME = "rows_per_hour.png"
# Gathered from the raw shadow's per-hour events (``core.names.MANIFEST_RECORDS``).
MANIFEST_RECORDS_PER_HOUR = "manifest_records_per_hour"
REPORT_NAME = "report.md"


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
    progress: str = ""  # "progress: raw 4/4 h built, ...": hours built and checked, runs, time

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

    def _progress(self) -> list[str]:
        return [self.progress] if self.progress else []

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
        summary = [*self.headline(), *self._progress(), *self.truth, *self.provisional()]
        summary += self.held_back()
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
        summary = [*self.headline(), *self._progress(), *self.truth, *self.provisional()]
        summary += self.held_back()
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
