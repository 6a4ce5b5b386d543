"""`backfill-assets resume --backfill ID` goes on with a release whose run was killed.

A real release of a tree's four hours (the CLI's, with its daemon) is two runs: raw and transformed,
then the sessions with the publish. The sessions' run process is SIGKILLed as it starts
building (held there by a fault checkpoint): the release ends failed and publishes nothing.
`resume` re-executes it from failure (Dagster's re-execution, as the UI's *Re-execute*):
only the session layer and the publish run again, on the raw and transformed candidates
the first run built and checked; the release publishes once, in one ledger transaction,
and what it published equals what the rule gives from the backups (an independent
referee, ``backfill_assets_dev.expected``)."""

import os
import signal
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core import faults, tags
from backfill_assets.core.warehouse import audit
from backfill_assets.release.instance import get_instance
from backfill_assets.release.keys import table_key
from backfill_assets_tests.helpers.processes import (
    CHUNKS_OF_TWO_HOURS,
    cli,
    cli_at_fault,
    operator_tree,
    processes_with,
)
from backfill_assets_tests.helpers.releases import published_once_and_right

pytestmark = pytest.mark.slow

FIRST, LAST = "2026-11-20T00", "2026-11-20T03"  # every hour of the tree: nothing unpublished
TREE = ("2026-11-20T00", "2026-11-20T01", "2026-11-20T02", "2026-11-20T03")
DEADLINE_SECONDS = 600
RUN_WORKER = "spawn_main"  # a run's process: the code server starts it by multiprocessing
RECEIVED_SHADOWS = {table_key(t) for t in ("shadow.raw_payloads", "shadow.transformed_payloads")}


def test_a_killed_release_resumes_building_only_what_it_lacked_and_publishes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    env, settings = operator_tree(tmp_path, monkeypatch)
    fifo = tmp_path / "pause.fifo"
    command = ["backfill", "--from", FIRST, "--to", LAST, "--reason", "to resume"]
    with cli_at_fault(command, env, fifo, faults.SESSIONS_BUILD) as first:
        # the run's process: started by the code server (multiprocessing's spawn), paused as
        # the session layer starts building
        found = processes_with(f"BACKFILL_ASSETS_PAUSE_FIFO={fifo}")
        runs = [pid for pid, described in found.items() if RUN_WORKER in described]
        assert len(runs) == 1, found
        os.kill(runs[0], signal.SIGKILL)
        assert first.wait(timeout=DEADLINE_SECONDS) == 1
        output = first.stdout.read()
    assert "failed" in output.lower(), output

    instance = get_instance(settings)
    [release] = [
        b.backfill_id for b in instance.get_backfills() if b.tags.get(tags.REASON) == "to resume"
    ]
    assert not audit.rows(settings.warehouse_dir, audit.PUBLICATIONS)  # nothing published
    built = instance.get_runs(filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: release}))
    assert sorted(r.status.value for r in built) == ["FAILURE", "SUCCESS"]

    resumed = cli(env, "resume", "--backfill", release, timeout=DEADLINE_SECONDS)
    assert resumed.returncode == 0, resumed.output
    assert f"resumed release {release}" in resumed.output
    assert f"report: backfill-assets report --backfill {release}" in resumed.output

    # only what the release lacked ran again: no raw or transformed step
    [child] = [b for b in instance.get_backfills() if b.tags.get(tags.ROOT_BACKFILL) == release]
    again = instance.get_runs(
        filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: child.backfill_id})
    )
    assert again and all(r.status == dg.DagsterRunStatus.SUCCESS for r in again)
    assert not [k for r in again for k in (r.asset_selection or ()) if k in RECEIVED_SHADOWS]
    assert all(tags.release_id(r.tags, r.run_id) == release for r in again)

    assert published_once_and_right(settings, release) == set(TREE)
    report = cli(env, "report", "--backfill", release)
    assert report.returncode == 0, report.output


def test_a_chunked_release_resumes_only_its_killed_chunk_and_publishes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Runs of ``BACKFILL_HOURS_PER_RUN=2`` hours: the tree's four hours are two chunks per
    layer. The raw run of the second chunk is SIGKILLed as it starts building: the first
    chunk's runs are done or go on, the release publishes nothing. ``resume`` builds the
    killed chunk's hours only (the other chunk's raw run is not repeated) and publishes the
    whole release once."""
    env, settings = operator_tree(tmp_path, monkeypatch)
    env.update(CHUNKS_OF_TWO_HOURS)
    fifo = tmp_path / "pause.fifo"
    command = ["backfill", "--from", FIRST, "--to", LAST, "--reason", "in chunks"]
    second_chunk = f"{faults.RAW_BUILD}.2026-11-20T02"
    with cli_at_fault(command, env, fifo, second_chunk) as first:
        found = processes_with(f"BACKFILL_ASSETS_PAUSE_FIFO={fifo}")
        paused = [pid for pid, described in found.items() if RUN_WORKER in described]
        assert len(paused) == 1, found
        os.kill(paused[0], signal.SIGKILL)
        assert first.wait(timeout=DEADLINE_SECONDS) == 1
    instance = get_instance(settings)
    [release] = [
        b.backfill_id for b in instance.get_backfills() if b.tags.get(tags.REASON) == "in chunks"
    ]
    assert not audit.rows(settings.warehouse_dir, audit.PUBLICATIONS)
    raw_key = table_key("shadow.raw_payloads")
    ran = instance.get_runs(filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: release}))
    raw_runs = [r for r in ran if raw_key in (r.asset_selection or ())]
    assert len(raw_runs) == 2  # two chunks
    [killed] = [r for r in raw_runs if r.status != dg.DagsterRunStatus.SUCCESS]

    resumed = cli(env, "resume", "--backfill", release, timeout=DEADLINE_SECONDS)
    assert resumed.returncode == 0, resumed.output

    [child] = [b for b in instance.get_backfills() if b.tags.get(tags.ROOT_BACKFILL) == release]
    again = instance.get_runs(
        filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: child.backfill_id})
    )
    rebuilt = {
        hour
        for r in again
        if raw_key in (r.asset_selection or ())
        for hour in tags.partition_range(r.tags)
    }
    assert (
        rebuilt
        == set(tags.partition_range(killed.tags))
        == {
            "2026-11-20T02",
            "2026-11-20T03",
        }
    )  # the killed chunk only
    assert published_once_and_right(settings, release) == set(TREE)
