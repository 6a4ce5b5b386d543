"""A release whose run was killed goes on: `backfill-assets resume --backfill ID`, and the
mutation the UI's *Re-execute from failure* sends.

A real release (the CLI's ``backfill``, with its daemon, partitions up to now as shipped)
of a tree's 12 hours, built in runs of 4 hours per layer (``BACKFILL_HOURS_PER_RUN=4``):
three chunks of raw and transformed, the sessions' hours in chunks of their own. The raw
run of the second chunk is SIGKILLed as it builds (held at a fault checkpoint): the release
ends failed and publishes nothing. It then goes on, once through the CLI's ``resume``, once
through a real ``dagster-webserver`` receiving the UI's mutation with ``dagster-daemon``
running it (``dagster dev``'s pair). Either way only the killed chunk's raw and transformed
hours are built again (the runs of the other chunks are not repeated: read from the
instance), with the sessions that needed them, and the release publishes all 12 hours
once, in one ledger transaction, its rows equal to what a clean release publishes (the
independent referee, ``backfill_assets_dev.expected``, which the fidelity tests hold every
release to).

The killed release is made once for the module (seven runs); each test goes on from a copy
of the tree as the kill left it (backups, warehouse, metastore, ledger and Dagster home),
put back at the same path, where every location recorded in it still points."""

import json
import os
import shutil
import signal
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core import faults, tags
from backfill_assets.core.hours import hour_range
from backfill_assets.core.warehouse import audit
from backfill_assets.release import launch
from backfill_assets.release.instance import get_instance
from backfill_assets.release.keys import table_key
from backfill_assets.settings import Settings
from backfill_assets_dev.stack.servers import Processes
from backfill_assets_tests.helpers.processes import (
    cli,
    cli_at_fault,
    operator_tree,
    processes_with,
    shared_daemon,
    start_webserver,
)
from backfill_assets_tests.helpers.releases import published_once_and_right

pytestmark = pytest.mark.slow

FIRST, LAST = "2026-11-20T00", "2026-11-20T11"  # the tree's 12 hours
TREE = set(hour_range(FIRST, LAST))
CHUNK_HOURS = 4
CHUNKS = [
    hour_range(f"2026-11-20T{h:02d}", f"2026-11-20T{h + CHUNK_HOURS - 1:02d}")
    for h in range(0, len(TREE), CHUNK_HOURS)
]
CHUNKED = {"BACKFILL_HOURS_PER_RUN": str(CHUNK_HOURS)}
DEADLINE_SECONDS = 900
RUN_WORKER = "spawn_main"  # a run's process: the code server starts it by multiprocessing
RAW = table_key("shadow.raw_payloads")
RECEIVED_SHADOWS = {RAW, table_key("shadow.transformed_payloads")}

# What the UI's *Re-execute* dialog sends for a backfill ("from failure").
UI_REEXECUTE = """
mutation reexecutePartitionBackfill($reexecutionParams: ReexecutionParams) {
  reexecutePartitionBackfill(reexecutionParams: $reexecutionParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on UnauthorizedError { message }
  }
}"""


REASON = "killed in its second chunk"
NOT_DATA = shutil.ignore_patterns("*.fifo")  # the fault point's pipe: nothing to copy


@dataclass
class Killed:
    env: dict[str, str]
    settings: Settings
    instance: dg.DagsterInstance
    release: str
    first: list[dg.DagsterRun]  # the runs of the release's backfill


@dataclass(frozen=True)
class KilledTree:
    """The tree of a killed release (``tree``) and a copy of it as the kill left it."""

    tree: Path
    as_killed: Path
    env: dict[str, str]
    settings: Settings


def killed_in_its_second_chunk(
    tmp_path: Path, monkeypatch, reason: str, driver_jvm: dict[str, str]
) -> Killed:
    env, settings = operator_tree(tmp_path, monkeypatch, hours=len(TREE), users_per_client=30)
    env.update({**CHUNKED, **driver_jvm})  # the runs in the worker's warm JVM
    fifo = tmp_path / "pause.fifo"
    command = ["backfill", "--from", FIRST, "--to", LAST, "--reason", reason]
    with cli_at_fault(command, env, fifo, f"{faults.RAW_BUILD}.{CHUNKS[1][0]}") as first:
        # one run at a time (the local run queue): the one held there
        found = processes_with(f"BACKFILL_ASSETS_PAUSE_FIFO={fifo}")
        held = [pid for pid, described in found.items() if RUN_WORKER in described]
        assert len(held) == 1, found
        os.kill(held[0], signal.SIGKILL)
        assert first.wait(timeout=DEADLINE_SECONDS) == 1
        output = first.stdout.read()
    assert "failed" in output.lower(), output

    instance = get_instance(settings)
    [release] = [
        b.backfill_id for b in instance.get_backfills() if b.tags.get(tags.REASON) == reason
    ]
    assert not audit.rows(settings.warehouse_dir, audit.PUBLICATIONS)  # nothing published
    ran = instance.get_runs(filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: release}))
    raw_runs = [r for r in ran if RAW in (r.asset_selection or ())]
    assert sorted(tuple(tags.partition_range(r.tags)) for r in raw_runs) == [
        tuple(chunk) for chunk in CHUNKS
    ]
    [killed] = [r for r in raw_runs if r.status != dg.DagsterRunStatus.SUCCESS]
    assert tags.partition_range(killed.tags) == CHUNKS[1]
    return Killed(env, settings, instance, release, ran)


@pytest.fixture(scope="module")
def killed_tree(
    tmp_path_factory: pytest.TempPathFactory, driver_jvm: dict[str, str]
) -> Iterator[KilledTree]:
    base = tmp_path_factory.mktemp("resume")
    tree, as_killed = base / "tree", base / "as_killed"
    with pytest.MonkeyPatch.context() as monkeypatch:
        killed = killed_in_its_second_chunk(tree, monkeypatch, REASON, driver_jvm)
        killed.instance.dispose()  # its SQLite files are copied closed
        shutil.copytree(tree, as_killed, symlinks=True, ignore=NOT_DATA)
        yield KilledTree(tree, as_killed, killed.env, killed.settings)


@pytest.fixture
def killed(killed_tree: KilledTree, monkeypatch: pytest.MonkeyPatch) -> Iterator[Killed]:
    """The killed release's tree, as the kill left it, at its own path."""
    shutil.rmtree(killed_tree.tree)
    shutil.copytree(killed_tree.as_killed, killed_tree.tree, symlinks=True, ignore=NOT_DATA)
    for key in ("BACKUP_ROOT", "DATA_ROOT", "DAGSTER_HOME"):
        monkeypatch.setenv(key, killed_tree.env[key])
    settings = killed_tree.settings
    with get_instance(settings) as instance:
        [release] = [
            b.backfill_id for b in instance.get_backfills() if b.tags.get(tags.REASON) == REASON
        ]
        first = instance.get_runs(filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: release}))
        yield Killed(killed_tree.env, settings, instance, release, first)


def materialized(runs: list[dg.DagsterRun]) -> set[tuple[dg.AssetKey, str]]:
    """(asset, hour) of every partition the successful ``runs`` built."""
    return {
        (key, hour)
        for run in runs
        if run.status == dg.DagsterRunStatus.SUCCESS
        for key in (run.asset_selection or ())
        for hour in tags.partition_range(run.tags)
    }


def assert_built_only_what_it_lacked(killed: Killed) -> None:
    """The release's second backfill (Dagster's re-execution, tagged with the release)
    built the killed chunk's raw and transformed hours and nothing the first built."""
    instance = killed.instance
    [child] = [
        b for b in instance.get_backfills() if b.tags.get(tags.ROOT_BACKFILL) == killed.release
    ]
    assert child.status.value == "COMPLETED_SUCCESS"
    again = instance.get_runs(
        filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: child.backfill_id})
    )
    assert again and all(r.status == dg.DagsterRunStatus.SUCCESS for r in again)
    assert all(tags.release_id(r.tags, r.run_id) == killed.release for r in again)
    rebuilt = materialized(again)
    assert {(k, h) for k, h in rebuilt if k in RECEIVED_SHADOWS} == {
        (k, h) for k in RECEIVED_SHADOWS for h in CHUNKS[1]
    }  # the killed chunk only
    assert not rebuilt & materialized(killed.first)  # no other chunk's run repeated


def test_resume_builds_only_the_killed_chunk_and_publishes_the_release_once(killed: Killed):
    release = killed.release

    resumed = cli(killed.env, "resume", "--backfill", release, timeout=DEADLINE_SECONDS)
    assert resumed.returncode == 0, resumed.output
    assert f"resumed release {release}" in resumed.output
    assert f"report: backfill-assets report --backfill {release}" in resumed.output

    assert_built_only_what_it_lacked(killed)
    assert published_once_and_right(killed.settings, release) == TREE
    report = cli(killed.env, "report", "--backfill", release)
    assert report.returncode == 0, report.output


def ui_reexecute(url: str, backfill_id: str) -> str:
    """POST the UI's *Re-execute from failure* mutation; the new backfill's id."""
    variables = {"reexecutionParams": {"parentRunId": backfill_id, "strategy": "FROM_FAILURE"}}
    body = json.dumps({"query": UI_REEXECUTE, "variables": variables}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        outcome = json.load(response)["data"]["reexecutePartitionBackfill"]
    assert outcome["__typename"] == "LaunchBackfillSuccess", outcome
    return outcome["backfillId"]


def test_the_uis_reexecute_from_failure_builds_only_the_killed_chunk_and_publishes_once(
    killed: Killed, tmp_path: Path
):
    env = launch.settings_env(killed.settings, killed.env)
    processes = Processes()
    with shared_daemon(killed.env, tmp_path) as instance:
        try:
            web, url = start_webserver(processes, env, tmp_path / "webserver.log")
            child = ui_reexecute(url, killed.release)

            def ended() -> bool:
                backfill = instance.get_backfill(child)
                return backfill is not None and backfill.status.value != "REQUESTED"

            processes.wait_until(
                web, ended, what="the re-executed backfill", timeout=DEADLINE_SECONDS, poll=2
            )
        finally:
            processes.stop_all()

    assert_built_only_what_it_lacked(killed)
    assert published_once_and_right(killed.settings, killed.release) == TREE
