"""Runs whose process is gone: mark them failed so the queue and reconciliation move on.

A run killed with SIGKILL (or whose machine rebooted) never reports its end and would stay
STARTED forever, blocking the run queue's slot and the reconciliation of its hours ("being
backfilled by run ..."). Dagster records the run worker's pid in an engine event when the
process starts; with the local run launcher (runs are processes of this machine) a run
whose pid no longer exists is marked failed, naming the pid. Other launchers (Kubernetes)
have Dagster's own run monitoring for this, configured in ``deploy/dagster.production.yaml``.
"""

from __future__ import annotations

import os

import dagster as dg

LIVE = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def worker_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    """The pid Dagster recorded for the run's worker process (the newest one)."""
    pid = None
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        event = record.dagster_event
        data = event.event_specific_data if event else None
        value = getattr(data, "metadata", {}).get("pid") if data else None
        if value is not None:
            pid = int(getattr(value, "value", value))
    return pid


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_orphaned_runs(
    instance: dg.DagsterInstance, known: dict[str, int] | None = None
) -> list[str]:
    """Mark failed every started run of this machine whose worker process is gone.

    ``known`` (run id -> pid) keeps the pids found, for a caller that asks every fraction
    of a second: a run's worker pid, once recorded, does not change, and finding it reads
    the run's engine events (hundreds in a long run)."""
    if type(instance.run_launcher).__name__ != "DefaultRunLauncher":
        return []
    known = {} if known is None else known
    failed = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=LIVE)):
        pid = known.get(run.run_id) or worker_pid(instance, run.run_id)
        if pid is not None:
            known[run.run_id] = pid
        if pid is None or process_exists(pid):
            continue
        instance.report_run_failed(
            run,
            f"the run's process (pid {pid}) is gone without reporting an end (killed or "
            f"crashed); marked failed so the run queue and reconciliation move on. Its "
            f"shadow versions stay unpublished; run the backfill again.",
        )
        failed.append(run.run_id)
    return failed
