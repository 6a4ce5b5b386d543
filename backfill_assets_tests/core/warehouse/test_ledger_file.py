"""A ledger lost or damaged after two published releases is refused everywhere.

Two releases are published ONCE for the module, into a ledger of its own (a fresh file:
no free pages from other tests, so garbage in its middle lands in live data); then each
case damages a copy of that ledger (and of its marker) as an operator or a failing disk
would: deleted, truncated to half, a stale ``-wal`` beside it, a stale hot ``-journal``
beside it, 4 kB of garbage in its middle. For each: the engine, a publish step, the
sensor and the CLI's commands refuse in one line naming the file (exit 2 for the CLI),
nothing is published, nothing published changes, the file is left as it was and no empty
ledger is created where it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets import settings
from backfill_assets.core.names import LAYERS
from backfill_assets.core.warehouse import audit, database, ledger_file, publisher
from backfill_assets.core.warehouse.tables import partition_locations
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.sensors.reconciliation import ledger_refusal
from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import cli_env, cli_together
from backfill_assets_tests.helpers.releases import empty_warehouse, execute_release

START = "2026-11-20T00"
TABLES = publisher.published_tables(list(LAYERS.values()))
AUDIT_TABLES = ("publications", "shadow_partitions", "check_results", "release_reads")


@dataclasses.dataclass
class Published:
    base: Path
    backups: Path
    ledger: Path  # the module's ledger after both releases (pristine)
    after_first: Path  # a copy of it after the first release
    instance: dg.DagsterInstance
    defs: dg.Definitions
    first_release: str
    state: dict[str, dict[str, str]]  # table -> hour -> location, after both releases


def published_now(spark) -> dict[str, dict[str, str]]:
    return {table: partition_locations(spark, table) for table in TABLES}


@pytest.fixture(scope="module")
def published(spark, base_settings, tmp_path_factory) -> Iterator[Published]:
    empty_warehouse(spark, base_settings)  # as `warehouse`, once for the module
    base = tmp_path_factory.mktemp("ledger_file")
    backups = base / "backups"
    generate_backups(backups, start=START, hours=4, clients=2, users_per_client=25, seed=11)
    ledger = base / "ledger" / settings.LEDGER_FILE
    (base / "home").mkdir()
    with (
        pytest.MonkeyPatch.context() as patch,
        dg.DagsterInstance.local_temp(str(base / "home")) as instance,
    ):
        patch.setenv(settings.LEDGER_URL_ENV, f"sqlite:///{ledger}")
        defs = build_definitions(dataclasses.replace(base_settings, backup_root=str(backups)))
        first = execute_release(defs, instance, "2026-11-20T00", "2026-11-20T01", downstream=False)
        assert first.success, first.failures
        after_first = base / "after_first.sqlite"
        shutil.copy(ledger, after_first)
        second = execute_release(defs, instance, "2026-11-20T02", "2026-11-20T03", downstream=False)
        assert second.success, second.failures
        state = published_now(spark)
        assert sorted(state["raw.payloads"]) == [f"2026-11-20T0{h}" for h in range(4)]
        assert not Path(f"{ledger}-wal").exists()  # every connection closed: one file
        yield Published(base, backups, ledger, after_first, instance, defs, first.release_id, state)


def stale_wal(published: Published, case: Path) -> None:
    """A ``-wal`` written on the ledger as it was after the first release, left beside it."""
    scratch = case.parent / f"{case.name}-scratch"
    scratch.mkdir()
    old = scratch / "old.sqlite"
    shutil.copy(published.after_first, old)
    connection = sqlite3.connect(old, isolation_level=None)
    connection.execute("PRAGMA wal_autocheckpoint=0")
    for table in AUDIT_TABLES:
        connection.execute(f"UPDATE {table} SET _row = _row + 100000")
    shutil.copy(f"{old}-wal", case / f"{settings.LEDGER_FILE}-wal")
    connection.close()


JOURNAL_WRITER = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("PRAGMA journal_mode=DELETE")
connection.execute("PRAGMA cache_size=1")  # spills: the journal is synced, pages written
connection.execute("BEGIN IMMEDIATE")
for table in sys.argv[2:]:
    connection.execute(f"UPDATE {table} SET _row = _row + 100000")
print("ready", flush=True)
sys.stdin.read()  # until SIGKILLed, its transaction open
"""


def stale_journal(published: Published, case: Path) -> None:
    """A hot rollback journal of the ledger as it was after the first release (its writer
    SIGKILLed mid-transaction), left beside the ledger."""
    scratch = case.parent / f"{case.name}-scratch"
    scratch.mkdir()
    old = scratch / "old.sqlite"
    shutil.copy(published.after_first, old)
    writer = subprocess.Popen(
        [sys.executable, "-c", JOURNAL_WRITER, str(old), *AUDIT_TABLES],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "ready"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait()
    journal = Path(f"{old}-journal")
    assert journal.stat().st_size > 0
    shutil.copy(journal, case / f"{settings.LEDGER_FILE}-journal")


def truncated(_published: Published, case: Path) -> None:
    db = case / settings.LEDGER_FILE
    os.truncate(db, db.stat().st_size // 2)


def garbage(_published: Published, case: Path) -> None:
    db = case / settings.LEDGER_FILE
    with db.open("r+b") as file:
        file.seek(db.stat().st_size // 2)
        file.write(os.urandom(4096))


def deleted(_published: Published, case: Path) -> None:
    (case / settings.LEDGER_FILE).unlink()


DAMAGES: dict[str, Callable[[Published, Path], None]] = {
    "deleted": deleted,
    "truncated": truncated,
    "stale_wal": stale_wal,
    "stale_journal": stale_journal,
    "garbage": garbage,
}


def files_of(folder: Path) -> dict[str, str]:
    """Digest of each file of ``folder``, but the empty ``-wal`` and the ``-shm`` index a
    read-only SQLite connection creates beside a WAL database: they hold none of its data."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if not p.name.endswith("-shm") and not (p.name.endswith("-wal") and not p.stat().st_size)
    }


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_lost_or_damaged_ledger_is_refused_everywhere(
    spark, published: Published, tmp_path: Path, monkeypatch, damage: str
) -> None:
    case = tmp_path / "ledger"
    case.mkdir()
    shutil.copy(published.ledger, case)
    marker = ledger_file.marker_of(published.ledger)
    assert marker.exists()  # the releases recorded their newest publication beside it
    shutil.copy(marker, case)
    DAMAGES[damage](published, case)
    db = case / settings.LEDGER_FILE
    before = files_of(case)
    monkeypatch.setenv(settings.LEDGER_URL_ENV, f"sqlite:///{db}")
    warehouse_dir = audit.warehouse_of(spark)

    def refused(message: str) -> None:
        assert "\n" not in message, message
        assert f"ledger database {db} " in message, message
        assert "restore it" in message, message

    # the engine: nothing opens the file read-write, nothing reads a row from it
    with pytest.raises(database.LedgerDamaged) as error:
        audit.rows(warehouse_dir, audit.PUBLICATIONS)
    refused(str(error.value))
    # the sensor requests nothing
    refused(ledger_refusal(settings.Settings.from_env()) or "")
    # a publish step: the first release published again from its candidates
    again = execute_release(
        published.defs, published.instance, START, START, publish_only=published.first_release
    )
    assert not again.success
    refused(" ".join(again.failures))
    # the commands, each in one line naming the file, before anything starts
    env = cli_env(tmp_path, published.backups, **{settings.LEDGER_URL_ENV: f"sqlite:///{db}"})
    commands = [
        ["verify"],
        ["vacuum", "--dry-run"],
        ["backfill", "--from", START, "--to", START, "--reason", "r", "--requested-by", "t"],
        ["rollback", "--backfill", published.first_release, "--no-wait"],
        ["reconcile", "--source", "ledger"],
    ]
    for args, done in zip(commands, cli_together(env, *commands), strict=True):
        assert done.returncode == 2, (args, done.output[-3000:])
        line = done.stderr.strip()
        refused(line)
        assert line.startswith(f"backfill-assets {args[0]}: ledger database {db} "), line
        assert "Traceback" not in done.output
    # nothing published, nothing published changed, the files as they were, none created
    assert published_now(spark) == published.state
    assert files_of(case) == before
    assert db.exists() == (damage != "deleted")
