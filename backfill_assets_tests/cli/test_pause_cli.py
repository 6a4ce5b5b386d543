"""`backfill-assets pause --backfill ID`, then `resume`: a running release stops starting runs.

A real release of a tree's four hours in runs of two hours (the CLI's, with its daemon): the
raw layer is two runs, the first held as it starts building (a fault point that lets it go
on when the test says), the second queued behind it (one run at a time locally). `pause`
from another process: the held run is let go and finishes; the daemon goes on iterating and
the queue goes on dequeuing, yet no run of the release starts; the release's hours stay held
(a release of them is refused, the reconciliation sensor skips them). `resume`: the release
goes on from where it stopped (the raw hours built are not rebuilt), and publishes once, in
one ledger transaction, what the independent referee expects."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core import faults, tags
from backfill_assets.core.warehouse import audit
from backfill_assets.release import pause
from backfill_assets.release.instance import get_instance
from backfill_assets.release.keys import table_key
from backfill_assets_tests.helpers.processes import (
    CHUNKS_OF_TWO_HOURS,
    SENSOR_TICK,
    cli,
    cli_at_fault,
    operator_tree,
)
from backfill_assets_tests.helpers.releases import published_once_and_right

pytestmark = [pytest.mark.slow, pytest.mark.independent]

FIRST, LAST = "2026-11-20T00", "2026-11-20T03"
TREE = {"2026-11-20T00", "2026-11-20T01", "2026-11-20T02", "2026-11-20T03"}
DEADLINE_SECONDS = 600
DAEMON_BEATS = ("BACKFILL", "QUEUED_RUN_COORDINATOR")  # the daemons that would start a run
RAW = table_key("shadow.raw_payloads")

# One evaluation of the reconciliation sensor (as a tick does), in the operator's
# environment: its skip line, and the backfills of the instance after it.
TICK = (
    SENSOR_TICK
    + """
    backfills = [b.backfill_id for b in instance.get_backfills()]
    json.dump({"skip": result.skip_reason.skip_message, "backfills": backfills}, sys.stdout)
"""
)


def wait_until(condition, what: str, timeout: float = DEADLINE_SECONDS):
    """Poll ``condition`` until it returns something true; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def release_runs(instance: dg.DagsterInstance, release: str) -> list[dg.DagsterRun]:
    return list(instance.get_runs(filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: release})))


def wait_for_daemon_iterations(instance: dg.DagsterInstance, since: float, count: int = 2):
    """Until the backfill daemon and the run queue's daemon have each sent ``count``
    heartbeats after ``since`` (each beat follows iterations of theirs)."""
    seen: dict[str, set[float]] = {name: set() for name in DAEMON_BEATS}

    def beaten() -> bool:
        for name, beat in instance.get_daemon_heartbeats().items():
            if name in seen and beat.timestamp > since:
                seen[name].add(beat.timestamp)
        return all(len(beats) >= count for beats in seen.values())

    wait_until(beaten, f"{count} heartbeats of {DAEMON_BEATS}", timeout=180)


def test_a_paused_release_starts_no_run_holds_its_hours_and_publishes_once_when_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, driver_jvm: dict[str, str]
):
    env, settings = operator_tree(tmp_path, monkeypatch)
    env.update({**CHUNKS_OF_TWO_HOURS, **driver_jvm})  # the runs in the worker's warm JVM
    fifo = tmp_path / "pause.fifo"
    go = tmp_path / "pause.fifo.go"  # the held run goes on when the test writes into it
    os.mkfifo(go)
    command = ["backfill", "--from", FIRST, "--to", LAST, "--reason", "to pause"]
    first_chunk = f"{faults.RAW_BUILD}.{FIRST}"
    with cli_at_fault(command, env, fifo, first_chunk) as following:
        instance = get_instance(settings)
        [release] = [
            b.backfill_id for b in instance.get_backfills() if b.tags.get(tags.REASON) == "to pause"
        ]
        paused = cli(env, "pause", "--backfill", release, "--reason", "INC-56 hold", "--by", "ops")
        assert paused.returncode == 0, paused.output
        assert f"paused release {release}" in paused.output
        assert "by ops" in paused.output and "INC-56 hold" in paused.output

        [held] = [r for r in release_runs(instance, release) if r.status.value == "STARTED"]
        with open(go, "w") as signal:  # the held run goes on and finishes
            signal.write("go")
        wait_until(
            lambda: instance.get_run_by_id(held.run_id).status == dg.DagsterRunStatus.SUCCESS,
            "the run held at the fault point to finish",
        )
        ended = instance.get_run_stats(held.run_id).end_time
        wait_for_daemon_iterations(instance, ended)

        # no run of the release started while paused: the other raw chunk waits, held
        runs = release_runs(instance, release)
        assert [r.run_id for r in runs if r.status != dg.DagsterRunStatus.QUEUED] == [held.run_id]
        [queued] = [r for r in runs if r.run_id != held.run_id]
        assert queued.tags.get(tags.PAUSED) == "true"
        assert tags.partition_range(queued.tags) == ["2026-11-20T02", "2026-11-20T03"]
        assert instance.get_backfill(release).status.value == pause.PAUSED_STATUS
        assert following.poll() is None  # the command follows the paused release on

        # its hours stay held: a release of the hours its finished run built (only those:
        # no queued or running run holds them) is refused
        raw_only = ["--layers", "raw", "--no-downstream", "--dry-run", "--no-wait"]
        again = cli(env, "backfill", "--from", FIRST, "--to", "2026-11-20T01", *raw_only)
        assert again.returncode == 2, again.output
        assert f"held by release in flight: release {release}" in again.output
        assert "paused by ops" in again.output
        # and the reconciliation sensor (its hours are all unpublished) requests none of them
        tick = subprocess.run(
            [sys.executable, "-c", TICK], env=env, capture_output=True, text=True, timeout=300
        )
        assert tick.returncode == 0, tick.stderr[-3000:]
        result = json.loads(tick.stdout)
        assert "submitted release(s)" not in result["skip"], result
        assert release in result["skip"] and result["backfills"] == [release], result
        assert not audit.rows(settings.warehouse_dir, audit.PUBLICATIONS)
        report = cli(env, "report", "--backfill", release, "--no-diff", "--out", str(tmp_path))
        assert report.returncode == 0, report.output
        assert "paused by ops at " in report.stdout and "(INC-56 hold)" in report.stdout

        resumed = cli(env, "resume", "--backfill", release, "--by", "ops")
        assert resumed.returncode == 0, resumed.output
        assert f"resumed release {release}" in resumed.output
        assert following.wait(timeout=DEADLINE_SECONDS) == 0
        output = following.stdout.read()
    assert f"release {release} paused by ops" in output, output

    runs = release_runs(instance, release)
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    raw_runs = [r for r in runs if RAW in (r.asset_selection or ())]
    assert sorted(r.run_id for r in raw_runs) == sorted([held.run_id, queued.run_id])  # no rerun
    assert not [b for b in instance.get_backfills() if b.backfill_id != release]
    assert published_once_and_right(settings, release) == TREE
    assert pause.is_paused(instance, release) is None


def test_a_paused_release_is_cancelled_and_only_a_running_release_pauses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A release submitted without a daemon (it stays requested, no run) is paused, holds
    its hours, then `cancel` ends it as it ends a running one: no run, nothing published,
    the cancellation recorded; a cancelled or paused release is not paused again."""
    env, settings = operator_tree(tmp_path, monkeypatch)
    raw_only = ["--layers", "raw", "--no-downstream", "--no-wait"]
    submitted = cli(env, "backfill", "--from", FIRST, "--to", "2026-11-20T01", *raw_only)
    assert submitted.returncode == 0, submitted.output
    instance = get_instance(settings)
    [release] = [b.backfill_id for b in instance.get_backfills()]

    paused = cli(env, "pause", "--backfill", release, "--by", "alice", "--reason", "wait")
    assert paused.returncode == 0, paused.output
    assert "0 running run(s) finish, 0 queued run(s) held" in paused.output
    again = cli(env, "pause", "--backfill", release)
    assert again.returncode == 2 and f"release {release} is already paused" in again.output
    held = cli(env, "backfill", "--from", "2026-11-20T01", "--to", "2026-11-20T01", *raw_only)
    assert held.returncode == 2 and "paused by alice" in held.output, held.output

    cancel = cli(env, "cancel", "--backfill", release, "--by", "alice", "--reason", "not needed")
    assert cancel.returncode == 0, cancel.output
    assert f"release {release} cancelled by alice" in cancel.output
    assert instance.get_backfill(release).status.value == "CANCELED"
    assert not release_runs(instance, release)
    assert pause.records(instance)[release].state == pause.CANCELLED
    assert not audit.rows(settings.warehouse_dir, audit.PUBLICATIONS)
    [row] = audit.rows(settings.warehouse_dir, audit.CANCELLATIONS)
    assert (row["release_id"], row["reason"]) == (release, "not needed")
    ended = cli(env, "pause", "--backfill", release)
    assert ended.returncode == 2 and "is canceled, not running" in ended.output, ended.output
