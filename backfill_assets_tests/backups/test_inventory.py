"""Folders that follow no name of the contract are reported, never ignored (issue 9 item 8).

An ``hour=24`` (or ``hour=7``, ``hour=ab``) folder beside a date's hours, or a
``date=2026-13-01`` folder in ``raw/``, holds lines that no hour reads: the inventory names
it as a problem of every hour it could belong to, so the raw reconciliation check holds
those hours back, the raw read logs it, and reconciliation reports it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_backup_folder, zst

from backfill_assets.backups.inventory import take_inventory
from backfill_assets.checks.raw import reconcile as check_reconcile
from backfill_assets.cli.main import main
from backfill_assets.partitions import hour_range
from backfill_assets.resources.backup_store import LocalBackupStore
from backfill_assets.sensors.findings import BACKUP_PROBLEM, MISSING_HOUR

DAY = "2026-11-20"
LINE = json.dumps({"payload_id": "p"})


def _stray(root: Path, rel: str) -> None:
    folder = root / "raw" / rel / "client_id=1"
    folder.mkdir(parents=True)
    (folder / "part-00000.jsonl.zst").write_bytes(zst([LINE]))


@pytest.mark.parametrize(
    "rel", [f"date={DAY}/hour=24", f"date={DAY}/hour=7", f"date={DAY}/hour=ab"]
)
def test_a_stray_hour_folder_is_a_problem_of_every_hour_of_its_date(
    tmp_path: Path, rel: str
) -> None:
    write_backup_folder(tmp_path, f"{DAY}T00", 1, {"part-00000.jsonl.zst": zst([LINE])})
    write_backup_folder(tmp_path, "2026-11-21T00", 1, {"part-00000.jsonl.zst": zst([LINE])})
    _stray(tmp_path, rel)
    hours = [f"{DAY}T00", f"{DAY}T07", "2026-11-21T00"]

    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), hours)

    expected = f"raw/{rel}: not an hour folder (expected hour=00..hour=23)"
    for hour in hours[:2]:
        assert [p for p in inventory[hour].stray if p.startswith(expected)], hour
        assert any(p.startswith(expected) for p in inventory[hour].all_problems)
    assert inventory["2026-11-21T00"].stray == []
    assert "rename it to the contract's layout or remove it" in inventory[hours[0]].stray[0]


def test_a_stray_date_folder_is_a_problem_of_every_hour(tmp_path: Path) -> None:
    write_backup_folder(tmp_path, f"{DAY}T00", 1, {"part-00000.jsonl.zst": zst([LINE])})
    _stray(tmp_path, "date=2026-13-01/hour=00")
    (tmp_path / "raw" / "notes.txt").write_text("x")

    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), [f"{DAY}T00"])

    assert [p.split(":")[0] for p in inventory[f"{DAY}T00"].stray] == [
        "raw/date=2026-13-01",
        "raw/notes.txt",
    ]


def test_the_raw_check_holds_back_the_hours_even_when_missing_hours_are_allowed(
    tmp_path: Path,
) -> None:
    write_backup_folder(tmp_path, f"{DAY}T00", 1, {"part-00000.jsonl.zst": zst([LINE])})
    _stray(tmp_path, f"date={DAY}/hour=24")
    hours = [f"{DAY}T00", f"{DAY}T01"]
    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), hours)

    failing = check_reconcile(inventory, {(f"{DAY}T00", 1): (1, 0)}, allowed_missing={hours[1]})

    assert set(failing) == set(hours)
    assert all(f"raw/date={DAY}/hour=24: not an hour folder" in failing[h] for h in hours)


def test_reconcile_reports_the_stray_folder_instead_of_ignoring_it(
    make_backups, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    backups = make_backups(hours=2)
    _stray(backups, f"date={DAY}/hour=24")
    (backups / "raw" / "date=2026-11-21").mkdir()  # an empty date: no stray, no hour
    for name, value in (
        ("BACKUP_ROOT", backups),
        ("DATA_ROOT", tmp_path / "data"),
        ("DAGSTER_HOME", tmp_path / "dagster_home"),
    ):
        monkeypatch.setenv(name, str(value))
    window = hour_range(f"{DAY}T00", f"{DAY}T03")

    main(["reconcile", "--from", window[0], "--to", window[-1], "--format", "json"])

    found = json.loads(capsys.readouterr().out)["findings"]
    by_hour = {f["hour"]: f for f in found}
    assert set(by_hour) == set(window)
    for hour in window:  # the folder's lines could be any hour's of the date
        assert by_hour[hour]["kind"] == BACKUP_PROBLEM, hour
        assert f"raw/date={DAY}/hour=24: not an hour folder" in by_hour[hour]["detail"]
        assert not by_hour[hour]["actionable"]
    assert MISSING_HOUR not in {f["kind"] for f in found}
