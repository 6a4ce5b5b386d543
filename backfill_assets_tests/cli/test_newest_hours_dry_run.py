"""The newest hours of a tree through a dry run and its `publish`, as an operator repairs
them with the partitions as shipped (up to now): real `backfill-assets backfill --dry-run`
and `backfill-assets publish` commands, each a real Dagster backfill run by the daemon.

The dry run publishes nothing; its publish gives every raw and transformed hour, and the
session hours whose window reaches past the newest backup hour the same *provisional*
treatment as a direct backfill (test_newest_hours.py): built from what exists, published,
marked so in the metadata and the report.
"""

from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core.hours import hours_between
from backfill_assets.release.keys import table_key
from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import cli, cli_env
from backfill_assets_tests.helpers.releases import backfill_id_of, latest, provisional

pytestmark = pytest.mark.slow

FIRST, NEWEST = "2026-11-20T00", "2026-11-20T03"


def test_a_dry_run_of_the_newest_hours_and_its_publish_mark_the_sessions_past_the_data(
    tmp_path: Path, driver_jvm: dict[str, str]
):
    backups, home = tmp_path / "backups", tmp_path / "home"
    generate_backups(
        backups, start=FIRST, hours=4, clients=2, users_per_client=10, seed=5, workers=1
    )
    # partitions up to now, downstream included; the runs in the worker's warm JVM
    env = {**cli_env(tmp_path, backups), **driver_jvm}
    hours = hours_between(FIRST, NEWEST)
    dry = cli(env, "backfill", "--from", FIRST, "--to", NEWEST, "--dry-run", "--reason", "INC-9")
    assert dry.returncode == 0, dry.output[-4000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert latest(instance, table_key("raw.payloads"), hours) == {}  # built, not published
    dry_id = backfill_id_of(dry)

    published = cli(env, "publish", "--backfill", dry_id, "--reason", "INC-9 checked")
    assert published.returncode == 0, published.output[-4000:]
    session_hours = hours_between("2026-11-19T21", "2026-11-20T06")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for table in ("raw.payloads", "transformed.payloads"):
            assert sorted(latest(instance, table_key(table), hours)) == hours, table
        notes = provisional(instance, session_hours)
    assert sorted(notes) == session_hours  # every session hour published
    # a window that reaches past 03 (hours 01..06) had no data there yet
    assert {h for h, note in notes.items() if note} == set(session_hours[4:]), notes
    assert "2026-11-20T04" in notes["2026-11-20T01"]
    report = cli(env, "report", "--backfill", dry_id)
    assert report.returncode == 0, report.output[-2000:]
    assert "provisional: aggregated 2026-11-20T01..2026-11-20T06" in report.stdout, report.stdout
