"""Where an operator's release spends its time, read back from the Dagster instance.

``bench`` times ``backfill-assets backfill`` from its process's start to its exit; this
module splits that wall time with the records the release left in the instance (public
API only: backfills, run records, each run's event log), into parts that add up to it:

- before the submission: the command's start, the estimate, the GraphQL submission;
- backfill daemon: from the submission (or the previous run's end) to the next run's
  creation (the daemon's iterations, 30 s apart, and its start for the first run);
- run queue: from a run's creation (or, for a run the daemon queued while the previous one
  ran, that run's end) to its launch (the queue daemon's interval);
- run process start: from the launch to the run's start (Python, Dagster, code location);
- Spark starts: the JVM, context and session each run process starts (run metadata);
- each layer's steps and the publish step (their Spark jobs, Dagster's events, metastore
  calls; the Spark start taken out);
- in runs outside steps: resource setup, the run's own events;
- after the last run: until the command exits (the daemon marks the backfill finished on
  its next iteration; the command then stops the daemon it started).

Each run's Dagster event count and Spark task time (executor core-seconds, run metadata)
are shown beside.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.core.spark.session import (
    DRIVER_PEAK_BYTES,
    SPARK_JOBS,
    SPARK_START_SECONDS,
    SPARK_STARTED_AT,
    SPARK_TASK_SECONDS,
)

LAYER_STEPS = (("raw", "raw_"), ("transformed", "transformed_"), ("aggregated", "aggregated_"))
PUBLISH_STEP = "release__publish"
_STEP_END = (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE)


@dataclass
class RunTimes:
    """One run of a release: its moments (epoch seconds) and what happened inside."""

    run_id: str
    status: str
    created: float
    launched: float  # RUN_STARTING: the queue handed it to the run launcher
    started: float  # RUN_START: its process loaded the code and began executing
    ended: float
    steps: dict[str, tuple[float, float]] = field(default_factory=dict)  # step: (start, end)
    events: int = 0
    spark_start: tuple[float, float] | None = None  # (at, seconds)
    spark_task_seconds: float = 0.0
    driver_peak_bytes: float = 0.0  # the run's driver (JVM + Python) at its peak
    spark_jobs: int = 0  # the Spark jobs (actions) the run ran


@dataclass
class ReleaseTimes:
    backfill_id: str
    status: str
    began: float  # the command's process started
    submitted: float
    exited: float
    runs: list[RunTimes]

    @property
    def wall(self) -> float:
        return self.exited - self.began


def _metadata_value(record: dg.EventLogRecord, key: str) -> float | None:
    materialization = record.asset_materialization
    entry = materialization.metadata.get(key) if materialization else None
    return None if entry is None else float(entry.value)


def read_run(instance: dg.DagsterInstance, record: dg.RunRecord) -> RunTimes:
    """A finished run's moments, steps, event count and Spark figures, from its records."""
    run_id = record.dagster_run.run_id
    logs = instance.all_logs(run_id)
    first = {}
    for entry in logs:
        kind = entry.dagster_event_type
        if kind is not None and kind not in first:
            first[kind] = entry.timestamp
    created = record.create_timestamp.timestamp()
    ended = record.end_time or max((e.timestamp for e in logs), default=created)
    launched = first.get(dg.DagsterEventType.RUN_STARTING, created)
    started = record.start_time or first.get(dg.DagsterEventType.RUN_START, launched)
    times = RunTimes(run_id, record.dagster_run.status.value, created, launched, started, ended)
    times.events = len(logs)
    for entry in logs:
        kind, step = entry.dagster_event_type, entry.step_key
        if step and kind == dg.DagsterEventType.STEP_START:
            times.steps[step] = (entry.timestamp, entry.timestamp)
        elif step in times.steps and kind in _STEP_END:
            times.steps[step] = (times.steps[step][0], entry.timestamp)
        task = _metadata_value(entry, SPARK_TASK_SECONDS)
        if task is not None:  # the run's total so far: the last one is the run's
            times.spark_task_seconds = max(times.spark_task_seconds, task)
        jobs = _metadata_value(entry, SPARK_JOBS)
        if jobs is not None:  # the run's total so far, as the task time
            times.spark_jobs = max(times.spark_jobs, int(jobs))
        peak = _metadata_value(entry, DRIVER_PEAK_BYTES)
        if peak is not None:  # the peak so far: the largest is the run's
            times.driver_peak_bytes = max(times.driver_peak_bytes, peak)
        at, seconds = (
            _metadata_value(entry, SPARK_STARTED_AT),
            _metadata_value(entry, SPARK_START_SECONDS),
        )
        if at is not None and seconds is not None:
            times.spark_start = (at, seconds)
    return times


def read_release(
    instance: dg.DagsterInstance, began: float, exited: float, backfill_id: str | None = None
) -> ReleaseTimes:
    """The release (``backfill_id``, or the last backfill submitted after ``began``) with
    its runs in the order they were created."""
    if backfill_id is None:
        recent = [b for b in instance.get_backfills(limit=20) if b.backfill_timestamp >= began]
        if not recent:
            raise LookupError("no backfill was submitted by the timed command")
        backfill = max(recent, key=lambda b: b.backfill_timestamp)
    else:
        backfill = instance.get_backfill(backfill_id)
        if backfill is None:
            raise LookupError(f"backfill {backfill_id} is not in the instance")
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: backfill.backfill_id})
    )
    runs = sorted((read_run(instance, r) for r in records), key=lambda r: r.created)
    return ReleaseTimes(
        backfill.backfill_id,
        backfill.status.value,
        began,
        backfill.backfill_timestamp,
        exited,
        runs,
    )


def _span(steps: dict[str, tuple[float, float]], prefix: str) -> float:
    return sum(end - start for step, (start, end) in steps.items() if step.startswith(prefix))


def _spark_start_in(run: RunTimes, prefix: str) -> float:
    """The run's Spark start when it happened inside a step named ``prefix...``."""
    if run.spark_start is None:
        return 0.0
    at, seconds = run.spark_start
    inside = any(
        start - 1 <= at <= end
        for step, (start, end) in run.steps.items()
        if step.startswith(prefix)
    )
    return seconds if inside else 0.0


def breakdown(release: ReleaseTimes) -> list[tuple[str, float]]:
    """The release's wall time in parts that add up to it (see the module docstring)."""
    runs = release.runs
    previous = [release.submitted, *(r.ended for r in runs[:-1])]
    spark = sum(r.spark_start[1] for r in runs if r.spark_start)
    parts = [
        ("before the submission (command, estimate, GraphQL)", release.submitted - release.began),
        (
            "backfill daemon: submission / previous run's end -> run created",
            sum(max(r.created - p, 0.0) for r, p in zip(runs, previous, strict=True)),
        ),
        (
            "run queue: created (or previous run's end) -> launched",
            sum(r.launched - max(r.created, p) for r, p in zip(runs, previous, strict=True)),
        ),
        (
            "run process start (Python, Dagster, code location)",
            sum(r.started - r.launched for r in runs),
        ),
        ("Spark starts (JVM, context, session)", spark),
    ]
    in_steps = 0.0
    for layer, prefix in (*LAYER_STEPS, ("publish", PUBLISH_STEP)):
        seconds = sum(_span(r.steps, prefix) - _spark_start_in(r, prefix) for r in runs)
        in_steps += seconds + sum(_spark_start_in(r, prefix) for r in runs)
        parts.append((f"{layer} steps (Spark jobs, events, metastore)", seconds))
    run_spans = sum(r.ended - r.started for r in runs)
    outside = run_spans - in_steps - (spark - sum(_spark_start_in(r, "") for r in runs))
    parts.append(("in runs outside steps (resources, run events)", outside))
    last_end = runs[-1].ended if runs else release.submitted
    parts.append(
        ("after the last run (backfill marked done, daemon stop)", release.exited - last_end)
    )
    return parts


def run_lines(release: ReleaseTimes) -> list[str]:
    """One line per run: its wait, start, Spark start, steps, events and Spark task time."""
    lines = [
        f"{'run':<9} {'status':<8} {'waited':>7} {'process':>8} {'spark':>6} {'steps':>7} "
        f"{'events':>7} {'jobs':>5} {'task s':>7} {'peak MB':>8}  steps"
    ]
    previous = release.submitted
    for run in release.runs:
        steps = sum(end - start for start, end in run.steps.values())
        spark = run.spark_start[1] if run.spark_start else 0.0
        names = ",".join(sorted({step.split("_")[0] for step in run.steps}))
        lines.append(
            f"{run.run_id[:8]:<9} {run.status:<8} {run.launched - previous:>7.1f} "
            f"{run.started - run.launched:>8.1f} {spark:>6.1f} {steps:>7.1f} {run.events:>7} "
            f"{run.spark_jobs:>5} "
            f"{run.spark_task_seconds:>7.1f} {run.driver_peak_bytes / 2**20:>8.0f}  {names}"
        )
        previous = run.ended
    return lines


def breakdown_table(releases: Sequence[ReleaseTimes]) -> list[str]:
    """The breakdown of each release (a column each) and the median of each part."""
    tables = [breakdown(r) for r in releases]
    heads = " ".join(f"{f'#{n}':>7}" for n in range(1, len(releases) + 1))
    lines = [f"{'where the release time goes (s)':<62} {heads} {'median':>7}"]
    for index, (name, _) in enumerate(tables[0]):
        values = [table[index][1] for table in tables]
        cells = " ".join(f"{v:>7.1f}" for v in values)
        lines.append(f"{name:<62} {cells} {statistics.median(values):>7.1f}")
    walls = [r.wall for r in releases]
    cells = " ".join(f"{w:>7.1f}" for w in walls)
    lines.append(
        f"{'wall: the command from start to exit':<62} {cells} {statistics.median(walls):>7.1f}"
    )
    runs = [len(r.runs) for r in releases]
    events = [sum(run.events for run in r.runs) for r in releases]
    lines.append(f"{'runs':<62} " + " ".join(f"{n:>7}" for n in runs))
    peaks = [max((run.driver_peak_bytes for run in r.runs), default=0) / 2**20 for r in releases]
    lines.append(
        f"{'driver peak memory, MB (JVM + Python, largest run)':<62} "
        + " ".join(f"{p:>7.0f}" for p in peaks)
        + f" {statistics.median(peaks):>7.0f}"
    )
    lines.append(f"{'Dagster events written':<62} " + " ".join(f"{n:>7}" for n in events))
    return lines
