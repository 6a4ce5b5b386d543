"""Submit releases to Dagster exactly as the UI does, and follow them.

A release is one Dagster **asset backfill**: the CLI and the reconciliation sensor submit
it through Dagster's GraphQL API (``launchPartitionBackfill``, the mutation the UI's launch
dialog sends), with ``dagster-graphql`` against the workspace (or ``--remote`` when
``DAGSTER_GRAPHQL_URL`` names a webserver). Dagster then orders the layers, queues the
runs under the instance's limits and retries; nothing here launches a run by hand.

The selection names the *root* layer's shadow assets with the damaged hours and, by
default, every downstream shadow and ``release/publish``; Dagster derives the downstream
partitions through the partition mappings (a session hour is rebuilt when its window
touches a damaged hour), as it does for a backfill launched in the UI.

``release.daemon.DaemonSupervisor`` runs ``dagster-daemon`` (and its code server) for the duration
of a command when no daemon serves the instance, so the CLI works without ``dagster dev``.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.release.orphans import fail_orphaned_runs
from backfill_assets.release.outcomes import BackfillOutcome, RunSummary, summarize_run
from backfill_assets.release.pace import FINISHED, RUN_DONE
from backfill_assets.release.prestart import Prestarted, completed
from backfill_assets.settings import PROJECT_ROOT, Settings, graphql_url

log = logging.getLogger(__name__)

WORKSPACE = PROJECT_ROOT / "workspace.yaml"


@dataclass(frozen=True)
class GraphQLTarget:
    """Where a GraphQL call goes: a workspace file (the project's, each process loading the
    code itself, or the code server of the command's daemon: ``DaemonSupervisor``) and the
    ``dagster-graphql`` process started ahead for the call (None: it starts its own)."""

    workspace: Path = WORKSPACE
    prestarted: Prestarted | None = None


PROJECT = GraphQLTarget()  # the project's workspace, a process per call
LOCATION = "backfill_assets"
REPOSITORY = "__repository__"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


class LaunchError(RuntimeError):
    """Dagster refused the request; the message is Dagster's."""


def request_tags(
    *,
    dry_run: bool,
    reason: str | None = None,
    ticket: str | None = None,
    requested_by: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    result = {
        tags.MODE: "dry_run" if dry_run else "backfill",
        tags.REQUESTED_BY: requested_by or getpass.getuser(),
    }
    if reason:
        result[tags.REASON] = reason
    if ticket:
        result[tags.TICKET] = ticket
    result.update(extra or {})
    return result


# ------------------------------------------------------------------------------- GraphQL


def settings_env(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a Dagster process needs to see the same project as ``settings``."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "BACKUP_ROOT": settings.backup_root,
            "DATA_ROOT": settings.data_root,
            "DAGSTER_HOME": settings.dagster_home,
            "SPARK_CONF_DIR": settings.spark_conf_dir,
            "BACKFILL_ENV": settings.environment,
        }
    )
    return env


def bin_path(name: str) -> str:
    local = Path(sys.executable).with_name(name)
    return str(local) if local.exists() else (shutil.which(name) or name)


def graphql(
    settings: Settings,
    query: str,
    variables: Mapping,
    target: GraphQLTarget = PROJECT,
) -> dict:
    """Run one GraphQL operation against ``target``'s workspace or ``DAGSTER_GRAPHQL_URL``,
    in a ``dagster-graphql`` process (``target``'s when it has one)."""
    with tempfile.TemporaryDirectory(prefix="backfill-assets-graphql-") as scratch:
        output = Path(scratch) / "result.json"
        args = ["-t", query, "-v", json.dumps(variables), "-o", str(output)]
        remote = graphql_url()
        args += ["--remote", remote] if remote else ["-w", str(target.workspace)]
        command = [bin_path("dagster-graphql"), *args]
        done = completed(command, settings_env(settings), target.prestarted)
        try:
            result = json.loads(output.read_text())
        except (OSError, ValueError):
            result = None
    if done.returncode != 0 or not isinstance(result, dict) or result.get("errors"):
        lines = (done.stderr + done.stdout).strip().splitlines()
        detail = (result or {}).get("errors") or " | ".join(lines[-5:])
        raise LaunchError(f"dagster-graphql failed: {detail}")
    return result["data"]


def mutation_outcome(payload: dict, success: str) -> dict:
    if payload.get("__typename") == success:
        return payload
    message = payload.get("message") or payload.get("__typename")
    errors = payload.get("errors") or []
    if errors:
        message = f"{message}: " + "; ".join(e.get("message", "") for e in errors)
    raise LaunchError(f"Dagster refused the request: {message}")


_BACKFILL = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on Error { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""

_RUN = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on Error { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""


def submit_backfill(
    settings: Settings,
    keys: Sequence[dg.AssetKey],
    hours: Sequence[str],
    run_tags: Mapping[str, str],
    *,
    title: str,
    description: str = "",
    run_config: Mapping | None = None,
    target: GraphQLTarget = PROJECT,
) -> str:
    """Submit an asset backfill (the UI's launch dialog request); returns its id.

    ``hours`` are the partitions of the selection's root assets; Dagster derives the others
    through the partition mappings, as the launch dialog does.
    """
    params: dict = {
        "assetSelection": [{"path": list(k.path)} for k in keys],
        "tags": [{"key": k, "value": v} for k, v in sorted(run_tags.items())],
        "title": title[:200],
        "description": description,
        "partitionNames": list(hours),
    }
    if run_config:
        params["runConfigData"] = dict(run_config)
    data = graphql(settings, _BACKFILL, {"params": params}, target)
    return mutation_outcome(data["launchPartitionBackfill"], "LaunchBackfillSuccess")["backfillId"]


_CANCEL = """
mutation Cancel($backfillId: String!) {
  cancelPartitionBackfill(backfillId: $backfillId) {
    __typename
    ... on CancelBackfillSuccess { backfillId }
    ... on Error { message }
  }
}"""


def cancel_backfill(
    settings: Settings,
    backfill_id: str,
    target: GraphQLTarget = PROJECT,
) -> str:
    """Cancel a backfill as the UI's cancel button does: Dagster stops submitting its
    runs and terminates those queued or running; returns its id."""
    data = graphql(settings, _CANCEL, {"backfillId": backfill_id}, target)
    return mutation_outcome(data["cancelPartitionBackfill"], "CancelBackfillSuccess")["backfillId"]


_REEXECUTE = """
mutation Reexecute($backfillId: String!) {
  reexecutePartitionBackfill(
    reexecutionParams: {parentRunId: $backfillId, strategy: FROM_FAILURE}
  ) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on Error { message }
  }
}"""


def reexecute_backfill(
    settings: Settings,
    backfill_id: str,
    target: GraphQLTarget = PROJECT,
) -> str:
    """Re-execute a finished backfill from failure, as the UI's *Re-execute* does: Dagster
    creates a backfill of what it did not materialize (tagged with the first backfill of
    the chain: the same release); returns its id."""
    data = graphql(settings, _REEXECUTE, {"backfillId": backfill_id}, target)
    outcome = mutation_outcome(data["reexecutePartitionBackfill"], "LaunchBackfillSuccess")
    return outcome["backfillId"]


_RESUME = """
mutation Resume($backfillId: String!) {
  resumePartitionBackfill(backfillId: $backfillId) {
    __typename
    ... on ResumeBackfillSuccess { backfillId }
    ... on Error { message }
  }
}"""


def resume_backfill(
    settings: Settings,
    backfill_id: str,
    target: GraphQLTarget = PROJECT,
) -> str:
    """Set a paused backfill back to requested (Dagster's ``resumePartitionBackfill``): the
    daemon goes on from its data, nothing materialized or requested is requested again."""
    data = graphql(settings, _RESUME, {"backfillId": backfill_id}, target)
    return mutation_outcome(data["resumePartitionBackfill"], "ResumeBackfillSuccess")["backfillId"]


_TERMINATE = """
mutation Terminate($runId: String!, $policy: TerminateRunPolicy) {
  terminateRun(runId: $runId, terminatePolicy: $policy) {
    __typename
    ... on TerminateRunSuccess { run { runId } }
    ... on Error { message }
  }
}"""
NOT_STARTED = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED)


def terminate_run(
    settings: Settings,
    run: dg.DagsterRun,
    target: GraphQLTarget = PROJECT,
) -> str:
    """Stop one run as the UI's *Terminate* does: a run that never started (queued, or left
    not started) is marked cancelled at once, a started one is asked to stop; returns its id."""
    policy = "MARK_AS_CANCELED_IMMEDIATELY" if run.status in NOT_STARTED else "SAFE_TERMINATE"
    variables = {"runId": run.run_id, "policy": policy}
    data = graphql(settings, _TERMINATE, variables, target)
    return mutation_outcome(data["terminateRun"], "TerminateRunSuccess")["run"]["runId"]


def submit_run(
    settings: Settings,
    job: str,
    run_config: Mapping,
    run_tags: Mapping[str, str],
    target: GraphQLTarget = PROJECT,
) -> str:
    """Submit one run of ``job`` to the instance's run queue; returns its id."""
    params = {
        "selector": {
            "repositoryLocationName": LOCATION,
            "repositoryName": REPOSITORY,
            "jobName": job,
        },
        "runConfigData": dict(run_config),
        "executionMetadata": {
            "tags": [{"key": k, "value": v} for k, v in sorted(run_tags.items())]
        },
    }
    data = graphql(settings, _RUN, {"params": params}, target)
    return mutation_outcome(data["launchRun"], "LaunchRunSuccess")["run"]["runId"]


# ------------------------------------------------------------------------------ following


class Supervisor(Protocol):
    """What ``follow`` asks of a daemon supervisor (``release.daemon.DaemonSupervisor``)."""

    def ensure(self) -> None: ...

    def kick(self) -> None: ...


class Ticker(Protocol):
    """What ``follow`` asks of a progress reporter (``release.pace.Reporter``): called at
    every poll, it prints at its own pace, and when a run ended (``ended``)."""

    def tick(self, ended: bool = False) -> None: ...


def follow(
    instance: dg.DagsterInstance,
    *,
    backfill_id: str | None = None,
    run_id: str | None = None,
    supervisor: Supervisor | None = None,
    on_run: Callable[[RunSummary], None] | None = None,
    paused: Callable[[], bool] | None = None,
    poll_seconds: float = 0.5,
    progress: Ticker | None = None,
) -> BackfillOutcome:
    """Wait until the backfill (or the single run) is finished, reporting each run as it
    ends; keeps a daemon running through ``supervisor``, kicked when every run has ended
    (its iteration launches the next run, or ends the backfill, now, not in up to 30 s);
    ``progress`` is ticked at every poll (it prints at its own pace). A backfill that
    ``paused()`` says is paused has not finished: it is followed on until it is resumed (or
    cancelled) and ends."""

    reported: dict[str, RunSummary] = {}
    pids: dict[str, int] = {}  # run id -> its worker's pid, once Dagster recorded it
    while True:
        if supervisor is not None:
            supervisor.ensure()
        for orphan in fail_orphaned_runs(instance, pids):
            log.warning("run %s: its process is gone; marked failed", orphan)
        if backfill_id is not None:
            backfill = instance.get_backfill(backfill_id)
            status = backfill.status.value if backfill else "UNKNOWN"
            runs = instance.get_runs(
                filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: backfill_id})
            )
        else:
            run = instance.get_run_by_id(run_id)
            runs = [run] if run else []
            status = (
                ("COMPLETED" if run.status == dg.DagsterRunStatus.SUCCESS else "FAILED")
                if run and run.status in RUN_DONE
                else "REQUESTED"
            )
        ended = False
        for run in sorted(runs, key=lambda r: r.run_id):
            if run.status in RUN_DONE and run.run_id not in reported:
                reported[run.run_id] = summarize_run(instance, run)
                ended = True
                if on_run:
                    on_run(reported[run.run_id])
        if progress is not None:
            progress.tick(ended)
        active = [r for r in runs if r.status not in RUN_DONE]
        if status in FINISHED and paused is not None and paused():
            time.sleep(poll_seconds)
            continue
        if status in FINISHED and not active:
            ordered = sorted(reported.values(), key=lambda r: r.run_id)
            return BackfillOutcome(backfill_id or run_id or "", status, ordered)
        if backfill_id is not None and supervisor is not None and ended and not active:
            supervisor.kick()
        time.sleep(poll_seconds)
