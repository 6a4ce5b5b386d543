"""``backfill-assets generate`` and ``backfill-assets land`` through the real entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from backfill_assets.cli.main import main
from backfill_assets.core.backups.contract import MANIFEST_NAME

SMALL = ["--hours", "2", "--clients", "2", "--users-per-client", "10", "--seed", "3"]


def test_generate_then_land(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["generate", "--out", str(tmp_path), *SMALL, "--hold-back", "2026-11-20T01/2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Generated 2 hour(s) from 2026-11-20T00 for 2 client(s) x 10 users (seed 3)" in out
    assert "1 folder(s) held back" in out
    rel = "raw/date=2026-11-20/hour=01/client_id=2"
    assert (tmp_path / "_held_back" / rel / MANIFEST_NAME).exists()
    assert (tmp_path / "_truth" / "sessions.jsonl.zst").exists()

    assert main(["land", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"landed {rel}" in out
    assert (tmp_path / rel / MANIFEST_NAME).exists()
    assert main(["land", "--root", str(tmp_path)]) == 0
    assert "nothing held back" in capsys.readouterr().out


def test_generate_writes_into_backup_root_only_when_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 9 item 6: without --out, generate wrote into BACKUP_ROOT (real backups)."""
    configured = tmp_path / "configured"
    monkeypatch.setenv("BACKUP_ROOT", str(configured))
    for argv in (["generate", *SMALL], ["land"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert "one of the arguments" in capsys.readouterr().err
    assert not configured.exists()

    assert main(["generate", *SMALL, "--no-truth", "--into-backup-root"]) == 0
    assert f"backup root: {configured}" in capsys.readouterr().out
    assert any((configured / "raw").iterdir())
    assert not (configured / "_truth").exists()
    assert main(["land", "--into-backup-root"]) == 0
    assert "nothing held back" in capsys.readouterr().out


def test_force_refuses_a_foreign_tree_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "raw" / "date=2026-11-20" / "hour=00" / "client_id=1"
    folder.mkdir(parents=True)
    (folder / MANIFEST_NAME).write_text("{}")
    assert main(["generate", "--out", str(tmp_path), *SMALL, "--force"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "was not written by the generator" in err and "nothing was deleted" in err
    assert (folder / MANIFEST_NAME).read_text() == "{}"


def test_a_rate_outside_0_1_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--out", str(tmp_path), "--malformed-rate", "1.5"])
    assert exit_info.value.code == 2
    assert "--malformed-rate: 1.5 is not between 0 and 1" in capsys.readouterr().err
    assert not (tmp_path / "raw").exists()


def test_a_bad_start_hour_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--start", "2026-11-20 03:00"])
    assert exit_info.value.code == 2
    assert "expected YYYY-MM-DDTHH" in capsys.readouterr().err


def test_an_existing_tree_is_refused_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "--out", str(tmp_path), *SMALL]) == 0
    capsys.readouterr()
    assert main(["generate", "--out", str(tmp_path), *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.startswith("backfill-assets generate: ")
    assert str(tmp_path / "raw") in err and "--force" in err
    assert main(["generate", "--out", str(tmp_path), *SMALL, "--force"]) == 0


def test_a_bad_hold_back_spec_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["generate", "--out", str(tmp_path), *SMALL, "--hold-back", "2026-11-25T00"])
    assert code == 2
    assert "outside the generated range 2026-11-20T00..2026-11-20T01" in capsys.readouterr().err
