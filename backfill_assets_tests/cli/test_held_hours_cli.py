"""One release per hour at a time, through real Dagster backfills and runs:

- a run launched as one run over a range (the UI's *Materialize*) and left queued, with no
  daemon to start it, holds its hours: a ``backfill`` over them is refused in one line
  (exit 2) that says none of its runs has started and names the command that clears it;
  ``cancel`` with the run's id stops it, and the hours are free again;
- a release launched from the UI (the launch dialog's request, no check of ours before
  Dagster creates the backfill) over hours an earlier release holds is refused at its first
  step by Dagster's daemon, in one line naming that release; the earlier one publishes.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core import tags
from backfill_assets.definitions import build_definitions
from backfill_assets.release import keys, launch
from backfill_assets.release.holds import HELD_BY, in_flight
from backfill_assets.release.instance import prepare_dagster_home
from backfill_assets.settings import Settings
from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import cli, cli_env, shared_daemon

pytestmark = pytest.mark.slow

RAW = ["--layers", "raw", "--no-downstream"]


def queue_single_run(settings: Settings, first: str, last: str) -> str:
    """One run of the raw shadows over ``first..last`` (the UI's *Materialize* of a range
    as a single run), submitted to the run queue; its id."""
    defs = build_definitions(settings)
    params = {
        "selector": {
            "repositoryLocationName": launch.LOCATION,
            "repositoryName": launch.REPOSITORY,
            "jobName": "__ASSET_JOB",
            "assetSelection": [{"path": list(k.path)} for k in keys.layer_keys(defs, "raw")],
        },
        "runConfigData": {},
        "executionMetadata": {
            "tags": [
                {"key": "dagster/asset_partition_range_start", "value": first},
                {"key": "dagster/asset_partition_range_end", "value": last},
                {"key": tags.MODE, "value": "dry_run"},
            ]
        },
    }
    data = launch.graphql(settings, launch._RUN, {"params": params})
    return launch.mutation_outcome(data["launchRun"], "LaunchRunSuccess")["run"]["runId"]


def test_a_queued_run_holds_until_cancelled_and_a_ui_release_is_refused_at_its_first_step(
    tmp_path: Path, driver_jvm: dict[str, str]
):
    backups = tmp_path / "backups"
    generate_backups(
        backups, start="2026-11-20T00", hours=4, clients=2, users_per_client=10, seed=3, workers=1
    )
    env = {**cli_env(tmp_path, backups), **driver_jvm}  # the runs in the worker's warm JVM
    settings = Settings.from_env(env)
    prepare_dagster_home(settings)

    # a single run left queued (no daemon serves the instance): it holds 00..01
    queued = queue_single_run(settings, "2026-11-20T00", "2026-11-20T01")
    refused = cli(env, "backfill", "--from", "2026-11-20T01", "--to", "2026-11-20T02", *RAW)
    assert refused.returncode == 2, refused.output[-4000:]
    [line] = refused.stderr.strip().splitlines()[-1:]
    assert f"{HELD_BY} in flight: release {queued}" in line, line
    assert "holds 2026-11-20T01, queued: none of its runs has started" in line, line
    assert f"`backfill-assets cancel --backfill {queued}`" in line, line
    cancel = cli(env, "cancel", "--backfill", queued, "--by", "alice", "--reason", "stale")
    assert cancel.returncode == 0, cancel.output[-4000:]
    assert f"release {queued} cancelled by alice" in cancel.stdout

    # the hours are free: an operator's release, then a UI launch over one of its hours
    first = cli(env, "backfill", "--from", "2026-11-20T00", "--to", "2026-11-20T01", *RAW,
                "--reason", "operator", "--no-wait")  # fmt: skip
    assert first.returncode == 0, first.output[-4000:]
    with shared_daemon(env, tmp_path / "logs") as instance:
        assert instance.get_run_by_id(queued).status == dg.DagsterRunStatus.CANCELED
        [operator] = [r.release_id for r in in_flight(instance)]
        defs = build_definitions(settings)
        ui = launch.submit_backfill(
            settings,
            keys.release_selection(defs, ["raw"]),
            ["2026-11-20T01", "2026-11-20T02"],
            launch.request_tags(dry_run=False, reason="from the UI"),
            title="from the UI",
        )
        outcomes = {
            release: launch.follow(instance, backfill_id=release, poll_seconds=0.5)
            for release in (operator, ui)
        }
        published = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["raw", "raw_payloads"])), limit=10
        ).records
    assert outcomes[operator].success, outcomes[operator]
    refusal = outcomes[ui]
    assert refusal.status in ("COMPLETED_FAILED", "FAILED"), refusal
    [run] = refusal.runs  # its first step refused: nothing after it ran
    [failure] = run.failures
    assert failure.startswith(f"raw_shadow: release {ui} refused: {HELD_BY} in flight: ")
    assert f"release {operator} " in failure and "holds 2026-11-20T01" in failure, failure
    assert "\n" not in failure
    assert {r.partition_key for r in published} == {"2026-11-20T00", "2026-11-20T01"}
