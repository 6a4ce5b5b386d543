"""The CLI submits real Dagster asset backfills and runs Dagster's daemon meanwhile.

Three `backfill-assets backfill` processes start against one instance and one embedded
metastore: two of them overlap (hour 01) and start a second apart, so exactly one of them
proceeds and the other is refused at launch in one line naming it (exit 2); the third
(another hour, a dry run) queues behind the winner in the instance's run queue (one run at
a time locally). A reconciliation tick while they are in flight submits nothing for the
hours they hold and says so. No process hits the embedded metastore's one-JVM limit.
"""

import itertools
import time
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core import tags
from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.publish import PUBLISH
from backfill_assets.defs.sensors.reconciliation import SENSOR_NAME
from backfill_assets.release.holds import HELD_BY, in_flight
from backfill_assets.release.instance import get_instance
from backfill_assets_tests.helpers.processes import (
    cli,
    kill_group_if_running,
    operator_tree,
    processes_with,
    start_cli,
)

pytestmark = pytest.mark.slow

DEADLINE_SECONDS = 300


def releases_with(instance: dg.DagsterInstance, reasons: set[str]) -> dict[str, str]:
    """reason -> backfill id of the backfills launched with those reasons (so far)."""
    return {
        b.tags.get(tags.REASON, ""): b.backfill_id
        for b in instance.get_backfills()
        if b.tags.get(tags.REASON) in reasons
    }


def test_overlapping_cli_backfills_one_proceeds_the_other_is_refused_and_the_sensor_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    env, settings = operator_tree(tmp_path, monkeypatch)
    env["BACKFILL_PROGRESS_SECONDS"] = "1"  # a progress line every second while following
    hours = ["--layers", "raw", "--no-downstream"]
    first = ["--from", "2026-11-20T00", "--to", "2026-11-20T01", "--layers", "raw,transformed"]
    commands = {  # two layers chained in one backfill that publishes; a raw-only dry run
        "first": ["backfill", *first, "--no-downstream", "--reason", "first"],
        "dry": [
            "backfill",
            "--from",
            "2026-11-20T03",
            "--to",
            "2026-11-20T03",
            *hours,
            "--dry-run",
            "--reason",
            "dry",
        ],
        "second": [
            "backfill",
            "--from",
            "2026-11-20T01",
            "--to",
            "2026-11-20T02",
            *hours,
            "--reason",
            "second",
        ],
    }
    processes = {}
    try:
        processes["first"] = start_cli(commands["first"], env)
        processes["dry"] = start_cli(commands["dry"], env)
        time.sleep(1)  # the operator's second command, a second later (not a synchronization)
        processes["second"] = start_cli(commands["second"], env)
        instance = get_instance(settings)
        # the loser of the two overlapping releases exits at launch, the winner is in flight
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not any(processes[n].poll() is not None for n in ("first", "second")):
            assert time.monotonic() < deadline, "neither overlapping release settled"
            time.sleep(0.2)
        loser = next(n for n in ("first", "second") if processes[n].poll() is not None)
        winner = "second" if loser == "first" else "first"
        loser_output = processes[loser].communicate()[0]
        while len(launched := releases_with(instance, {winner, "dry"})) < 2:
            assert time.monotonic() < deadline, "the releases were never submitted"
            time.sleep(0.2)
        held = {r.release_id: r.hours for r in in_flight(instance)}
        assert launched[winner] in held, "the winner finished before the sensor's tick"
        # a reconciliation tick now: every damaged hour's release would touch a held hour
        defs = build_definitions(settings)
        context = dg.build_sensor_context(
            instance=instance,
            definitions=defs,
            resources={"backups": LocalBackupStore(root=env["BACKUP_ROOT"])},
        )
        before = {b.backfill_id for b in instance.get_backfills()}
        tick = defs.resolve_sensor_def(SENSOR_NAME)(context).skip_reason.skip_message
        outputs = {n: p.communicate(timeout=1500)[0] for n, p in processes.items() if n != loser}
    finally:
        for p in processes.values():
            kill_group_if_running(p)
    # the refused one: exit 2, one line naming the release that holds its hours
    assert processes[loser].returncode == 2, loser_output[-4000:]
    refusal = loser_output.strip().splitlines()[-1]
    assert f"refused: {HELD_BY} in flight: release {launched[winner]}" in refusal, refusal
    assert "2026-11-20T01" in refusal
    # the sensor submitted nothing and said why
    assert {b.backfill_id for b in instance.get_backfills() if b.backfill_id not in before} == set()
    assert f"{HELD_BY}(s) " in tick and launched[winner] in tick, tick
    for name in (winner, "dry"):
        assert processes[name].returncode == 0, outputs[name][-4000:]
        assert "Derby" not in outputs[name]
        assert "SessionHiveMetaStoreClient" not in outputs[name]
        assert "estimate: " in outputs[name]  # printed before launching (nothing measured)
        assert launched[name] in outputs[name]  # the CLI named its backfill
        progress = [x for x in outputs[name].splitlines() if x.startswith("progress: ")]
        assert progress and "run(s) done of" in progress[-1], outputs[name][-4000:]
    # the dry run queued behind the winner: several lines, the last with its hour built
    # and checked; the report gives the same figures
    dry_lines = [x for x in outputs["dry"].splitlines() if x.startswith("progress: ")]
    assert (
        len(dry_lines) >= 2
        and "raw 1/1 h built, 1/1 checked; 1 run(s) done of 1 requested so far" in (dry_lines[-1])
    ), outputs["dry"][-4000:]
    shown = cli(env, "report", "--backfill", launched["dry"], "--no-diff")
    assert shown.returncode == 0, shown.output[-3000:]
    assert (
        "progress: raw 1/1 h built, 1/1 checked; 1 run(s) done of 1 requested so far in "
        in shown.stdout
    )
    assert shown.stdout.split("progress: ")[1].splitlines()[0].endswith("; finished")
    backfills = {b.backfill_id: b for b in instance.get_backfills()}
    runs = {
        name: instance.get_runs(filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: bid}))
        for name, bid in launched.items()
    }
    for name, bid in launched.items():
        assert backfills[bid].status.value in ("COMPLETED", "COMPLETED_SUCCESS")
        assert runs[name] and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs[name])
    # the loser built and published nothing: its backfill (if it got one) was cancelled
    # before a run of it started, or its first step refused at once
    lost = [b.backfill_id for b in backfills.values() if b.tags.get(tags.REASON) == loser]
    for bid in lost:
        assert backfills[bid].status.value in ("CANCELED", "COMPLETED_FAILED", "FAILED")
        for run in instance.get_runs(filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: bid})):
            assert run.status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE)
            assert PUBLISH not in (run.asset_selection or ())
    # the publishing release built its layers in one run, then ran its publish step (over
    # the session hours: not those of its layers, so in a run of its own). Either may win
    # on a busy machine: the first builds raw and transformed, the second raw only.
    built = {"first": ["raw_payloads", "raw_quarantine", "transformed_payloads"]}
    built["second"] = built["first"][:2]
    selected = sorted(sorted(k.to_user_string() for k in r.asset_selection) for r in runs[winner])
    assert selected == [["release/publish"], [f"shadow/{t}_candidate" for t in built[winner]]]
    assert backfills[launched["dry"]].tags.get(tags.MODE) == "dry_run"
    # built and checked, nothing published
    assert all(PUBLISH not in r.asset_selection for r in runs["dry"])
    # the queue ran one run at a time: no two runs of the instance overlapped
    spans = sorted(
        (instance.get_run_stats(r.run_id).start_time, instance.get_run_stats(r.run_id).end_time)
        for rs in runs.values()
        for r in rs
    )
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    # the daemons (and code servers) the commands started are gone with them
    assert processes_with(f"DAGSTER_HOME={tmp_path / 'home'}") == {}
