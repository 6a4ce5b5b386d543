"""What a release's runs did, read from the instance: one outcome per check from its
per-hour evaluations, and a summary per run (the CLI's lines, the report, the tests).

The check steps record one Dagster evaluation per (check, hour); a run's summary of a
check is: passed if every hour passed, else the failing hours with their reasons.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.core.errors import cause_line
from backfill_assets.core.text import one_line
from backfill_assets.release.keys import PUBLISH_KEY

NOT_EVALUATED = "not evaluated: "


@dataclass
class CheckSummary:
    name: str
    asset: str
    hours: list[str] = field(default_factory=list)
    failing: dict[str, str] = field(default_factory=dict)
    errors: set[str] = field(default_factory=set)  # failing hours of severity ERROR

    @property
    def severity(self) -> str:
        """ERROR if an hour fails with ERROR (held back), WARN if only warnings (e.g. not
        evaluated), ERROR when nothing fails (the checks' declared severity)."""
        warn_only = self.failing and not self.errors
        return (dg.AssetCheckSeverity.WARN if warn_only else dg.AssetCheckSeverity.ERROR).value

    @property
    def passed(self) -> bool:
        return bool(self.hours) and not self.failing

    @property
    def description(self) -> str:
        if not self.failing:
            return f"{len(self.hours)} hour(s) pass"
        reasons = set(self.failing.values())
        if len(reasons) == 1 and len(self.failing) == len(self.hours):
            (reason,) = reasons  # e.g. every hour "not evaluated: ..." for the same cause
            if reason.startswith(NOT_EVALUATED):
                return reason
        names = sorted(self.failing)
        return f"{len(names)} of {len(self.hours)} hour(s) fail: {', '.join(names[:24])}" + (
            " ..." if len(names) > 24 else ""
        )


def summarize(
    evaluations: Iterable[dg.AssetCheckEvaluation],
) -> dict[tuple[str, str], CheckSummary]:
    """(asset, check name) -> its summary over the evaluations (one per hour, or one per
    run)."""
    found: dict[tuple[str, str], CheckSummary] = {}
    for e in evaluations:
        asset = e.asset_key.to_user_string()
        summary = found.setdefault((asset, e.check_name), CheckSummary(e.check_name, asset))
        hour = e.partition or "(run)"
        summary.hours.append(hour)
        if not e.passed:
            summary.failing[hour] = e.description or "failed"
            if e.severity == dg.AssetCheckSeverity.ERROR:
                summary.errors.add(hour)
    return found


# ----------------------------------------------------------------------------------- runs


@dataclass
class RunSummary:
    run_id: str
    status: str
    assets: list[str]
    partition_range: str
    seconds: float
    failures: list[str] = field(default_factory=list)
    checks: dict[str, dict] = field(default_factory=dict)
    held_back: int = 0  # hours the run's publish held back (the run itself succeeded)
    refused: list[str] = field(default_factory=list)  # steps that ended without building

    @property
    def success(self) -> bool:
        """The run did everything it was asked: it succeeded, refused nothing and held no
        hour back."""
        return self.status == "SUCCESS" and not self.held_back and not self.refused


@dataclass
class BackfillOutcome:
    backfill_id: str
    status: str
    runs: list[RunSummary]

    @property
    def success(self) -> bool:
        return self.status in ("COMPLETED", "COMPLETED_SUCCESS") and all(
            r.success for r in self.runs
        )


def run_messages(instance: dg.DagsterInstance, run_id: str, step_key: str) -> list[str]:
    """What a step of a run logged itself (``context.log``), in order."""
    return [
        entry.user_message
        for entry in instance.all_logs(run_id)
        if entry.dagster_event is None and entry.step_key == step_key and entry.user_message
    ]


def step_failure(event: dg.DagsterEvent) -> str:
    """``step: why`` of a STEP_FAILURE event: the ``dg.Failure``'s description when the
    step raised one, else the cause of the error in words (``core.errors.cause_line``: the Java
    cause chain of a Spark failure, not the Py4J call)."""
    data = event.event_specific_data
    user = getattr(data, "user_failure_data", None)
    if user is not None and user.description:
        return f"{event.step_key}: {one_line(user.description)}"
    error = getattr(data, "error", None)
    return f"{event.step_key}: {cause_line(error) if error is not None else event.message}"


def run_failure(instance: dg.DagsterInstance, run_id: str) -> str | None:
    """``run: why`` of a run that failed outside its steps (a resource that refused to start
    in a run of one process, a worker that could not start), None if none did."""
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE):
        error = getattr(record.dagster_event.event_specific_data, "error", None)
        if error is not None:
            return f"run: {cause_line(error)}"
    return None


def summarize_run(instance: dg.DagsterInstance, run: dg.DagsterRun) -> RunSummary:
    """What a finished run did: its step failures (``step_failure``), the verdicts of steps
    that refused to build and of a publish that held hours back (expected outcomes: the
    steps succeeded) and check results."""
    failures, evaluations = [], []
    held_back = int(run.tags.get(tags.HELD_BACK) or 0)
    refused = tags.refusals(run.tags)
    kinds = {dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.ASSET_CHECK_EVALUATION}
    if held_back:
        kinds.add(dg.DagsterEventType.ASSET_MATERIALIZATION)
    events = instance.all_logs(run.run_id, of_type=kinds)
    for record in events:
        event = record.dagster_event
        if event is None:
            continue
        if event.event_type == dg.DagsterEventType.STEP_FAILURE:
            failures.append(step_failure(event))
        elif event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluations.append(event.event_specific_data)
        elif event.asset_key == PUBLISH_KEY and record.asset_materialization is not None:
            # one materialization per hour of the run's range, each with the verdict
            verdict = record.asset_materialization.metadata.get("verdict")
            line = None if verdict is None else f"{event.step_key}: {verdict.value}"
            if line is not None and line not in failures:
                failures.append(line)
    failures += refused
    if run.status == dg.DagsterRunStatus.FAILURE and not failures:
        failures += filter(None, [run_failure(instance, run.run_id)])
    summaries = summarize(evaluations)
    per_name = collections.Counter(name for _, name in summaries)
    checks = {  # by check name; "asset name" for a name several assets' checks share
        f"{asset} {name}" if per_name[name] > 1 else name: {
            "passed": summary.passed,
            "severity": summary.severity,
            "description": summary.description,
            "failing": summary.failing,
        }
        for (asset, name), summary in summaries.items()
    }
    stats = instance.get_run_stats(run.run_id)
    seconds = (stats.end_time or time.time()) - (stats.start_time or stats.end_time or time.time())
    first = run.tags.get("dagster/asset_partition_range_start")
    last = run.tags.get("dagster/asset_partition_range_end")
    return RunSummary(
        run.run_id,
        run.status.value,
        sorted(k.to_user_string() for k in (run.asset_selection or [])),
        f"{first}..{last}" if first else "(unpartitioned)",
        max(seconds, 0.0),
        failures,
        checks,
        held_back,
        refused,
    )
