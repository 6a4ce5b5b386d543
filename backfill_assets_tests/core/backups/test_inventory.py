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

from backfill_assets.cli.main import main
from backfill_assets.core.backups.inventory import take_inventory
from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.core.hours import hour_range
from backfill_assets.core.reconcile.findings import BACKUP_PROBLEM, MISSING_HOUR
from backfill_assets.defs.checks.raw import reconcile as check_reconcile
from backfill_assets_tests.helpers.backups import write_backup_folder, zst

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


# A name of the contract is ASCII digits and nothing after it: ``\d`` took ``hour=٠٣`` for
# ``hour=03`` and ``$`` a name ending in a newline, so such folders were read by no hour
# and named by none.
@pytest.mark.parametrize("rel", [f"date={DAY}/hour=٠٣", f"date={DAY}/hour=03\n"])
def test_an_hour_folder_in_other_digits_or_with_a_newline_is_stray(
    tmp_path: Path, rel: str
) -> None:
    write_backup_folder(tmp_path, f"{DAY}T03", 1, {"part-00000.jsonl.zst": zst([LINE])})
    _stray(tmp_path, rel)

    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), [f"{DAY}T03"])

    assert [p.split(": ")[0] for p in inventory[f"{DAY}T03"].stray] == [f"raw/{rel}"]


@pytest.mark.parametrize("name", ["date=2026-11-20\n", "date=٢٠٢٦-١١-٢٠"])
def test_a_date_folder_in_other_digits_or_with_a_newline_is_stray(
    tmp_path: Path, name: str
) -> None:
    write_backup_folder(tmp_path, f"{DAY}T00", 1, {"part-00000.jsonl.zst": zst([LINE])})
    _stray(tmp_path, f"{name}/hour=00")

    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), [f"{DAY}T00"])

    assert [p.split(": ")[0] for p in inventory[f"{DAY}T00"].stray] == [f"raw/{name}"]


@pytest.mark.parametrize("entry", ["client_id=٧", "client_id=007", "client_id=7\n", "client_id="])
def test_a_client_folder_not_in_canonical_digits_is_a_problem_of_its_hour(
    tmp_path: Path, entry: str
) -> None:
    write_backup_folder(tmp_path, f"{DAY}T03", 1, {"part-00000.jsonl.zst": zst([LINE])})
    folder = tmp_path / "raw" / f"date={DAY}" / "hour=03" / entry
    folder.mkdir()
    (folder / "part-00000.jsonl.zst").write_bytes(zst([LINE]))
    hour = f"{DAY}T03"
    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), [hour])[hour]

    assert [f.client_id for f in inventory.folders] == [1]  # never read as client 7
    expected = f"raw/date={DAY}/hour=03/{entry}: unexpected entry (not client_id=<int>"
    assert [p for p in inventory.all_problems if p.startswith(expected)]
    failing = check_reconcile({hour: inventory}, {(hour, 1): (1, 0)}, allowed_missing=set())
    assert expected in failing[hour]


@pytest.mark.parametrize("name", ["part-0000٠.jsonl.zst", "part-00000.jsonl.zst\n"])
def test_a_part_file_name_in_other_digits_or_with_a_newline_is_unexpected(
    tmp_path: Path, name: str
) -> None:
    folder = write_backup_folder(tmp_path, f"{DAY}T03", 1, {name: zst([LINE])})
    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), [f"{DAY}T03"])

    (only,) = inventory[f"{DAY}T03"].folders
    assert only.files == ()
    rel = f"raw/date={DAY}/hour=03/client_id=1"
    assert f"{rel}/{name}: unexpected file in backup folder" in only.problems
    assert f"{rel}/{name}: listed in the manifest but missing" in only.problems
    assert folder.is_dir()


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "_MANIFEST.json").read_text())


def _rewrite_manifest(folder: Path, **changes: object) -> None:
    body = _manifest(folder) | changes
    (folder / "_MANIFEST.json").write_text(json.dumps(body))


def test_a_file_listed_twice_in_the_manifest_is_a_problem_and_listed_once(tmp_path: Path) -> None:
    hour = f"{DAY}T03"
    folder = write_backup_folder(tmp_path, hour, 1, {"part-00000.jsonl.zst": zst([LINE])})
    body = _manifest(folder)
    _rewrite_manifest(folder, files=body["files"] * 2, records=2)

    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), [hour])[hour]

    (only,) = inventory.folders
    assert [f.name for f in only.files] == ["part-00000.jsonl.zst"]
    rel = f"raw/date={DAY}/hour=03/client_id=1"
    problem = f"{rel}/part-00000.jsonl.zst: listed more than once in the manifest"
    assert [p for p in only.problems if p.startswith(problem)]
    # the one file's line is read once: the hour's reconciliation fails with that reason
    failing = check_reconcile({hour: inventory}, {(hour, 1): (1, 0)}, allowed_missing=set())
    assert problem in failing[hour]


def test_a_manifest_digest_in_upper_case_is_the_files_digest(tmp_path: Path) -> None:
    hour = f"{DAY}T03"
    folder = write_backup_folder(tmp_path, hour, 1, {"part-00000.jsonl.zst": zst([LINE])})
    body = _manifest(folder)
    digest = body["files"][0]["sha256"]
    _rewrite_manifest(folder, files=[body["files"][0] | {"sha256": digest.upper()}])

    (only,) = take_inventory(LocalBackupStore(root=str(tmp_path)), [hour])[hour].folders

    assert only.problems == ()
    assert [f.sha256 for f in only.files] == [digest]


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        # nested 100,000 arrays deep: past Python's JSON parser (RecursionError)
        ('{"client_id": 1, "deep": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deep"),
        # a size beyond any float: JSON's 1e400 parses as infinity
        ('__BODY__"bytes": 1e400}', "bytes must be an integer from 0 to"),
        # more records than a 64-bit count (and than a file of the limit has lines)
        ('__BODY__"records": 1000000000000000000000000000000}', "records must be an integer"),
    ],
    ids=["nested-100000-deep", "bytes-1e400", "records-1e30"],
)
def test_a_hostile_manifest_holds_back_its_folder_in_one_line(
    tmp_path: Path, text: str, detail: str
) -> None:
    """Depth, numbers and counts of a manifest are bounded like its files: the folder's
    hour is refused in one line naming the manifest, never an exception of the command."""
    hour = f"{DAY}T03"
    folder = write_backup_folder(tmp_path, hour, 1, {"part-00000.jsonl.zst": zst([LINE])})
    body = _manifest(folder)
    if text.startswith("__BODY__"):  # the real manifest with one value replaced
        key = text.split('"')[1]
        target = body["files"][0] if key == "bytes" else body
        target[key] = "__HOSTILE__"
        value = text.split(": ", 1)[1].rstrip("}")
        text = json.dumps(body).replace('"__HOSTILE__"', value)
    (folder / "_MANIFEST.json").write_text(text)

    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), [hour])[hour]

    (only,) = inventory.folders
    assert only.files == ()
    rel = f"raw/date={DAY}/hour=03/client_id=1"
    (problem,) = only.problems
    assert problem.startswith(f"{rel}/_MANIFEST.json: ") and detail in problem, problem
    assert len(problem) < 300 and "\n" not in problem
    failing = check_reconcile({hour: inventory}, {(hour, 1): (1, 0)}, allowed_missing=set())
    assert problem in failing[hour]


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"records": 1.0}, "records must be an integer from 0 to"),
        ({"records": 12.9}, "records must be an integer from 0 to"),
        ({"records": "1"}, "records must be an integer from 0 to"),
        ({"records": True}, "records must be an integer from 0 to"),
        ({"records": -1}, "records must be an integer from 0 to"),
        ({"file": {"records": "1"}}, "records must be an integer from 0 to"),
        ({"file": {"records": False}}, "records must be an integer from 0 to"),
        ({"file": {"sha256": "abc"}}, "is not 64 hex digits"),
        ({"file": {"sha256": "g" * 64}}, "is not 64 hex digits"),
        ({"file": {"sha256": None}}, "is not 64 hex digits"),
    ],
)
def test_a_malformed_manifest_value_is_a_problem_naming_the_folder(
    tmp_path: Path, change: dict, detail: str
) -> None:
    hour = f"{DAY}T03"
    folder = write_backup_folder(tmp_path, hour, 1, {"part-00000.jsonl.zst": zst([LINE])})
    body = _manifest(folder)
    if "file" in change:
        _rewrite_manifest(folder, files=[body["files"][0] | change["file"]])
    else:
        _rewrite_manifest(folder, **change)

    inventory = take_inventory(LocalBackupStore(root=str(tmp_path)), [hour])[hour]

    (only,) = inventory.folders
    assert (only.records, only.files) == (None, ())
    rel = f"raw/date={DAY}/hour=03/client_id=1"
    (problem,) = only.problems
    assert problem.startswith(f"{rel}/_MANIFEST.json: malformed manifest") and detail in problem
    failing = check_reconcile({hour: inventory}, {(hour, 1): (1, 0)}, allowed_missing=set())
    assert problem in failing[hour]
