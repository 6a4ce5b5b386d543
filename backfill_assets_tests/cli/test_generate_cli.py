"""``backfill-assets generate`` and ``backfill-assets land`` through the real entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from backfill_assets.backups.contract import MANIFEST_NAME
from backfill_assets.cli.main import main

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


def test_generate_defaults_to_the_configured_backup_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BACKUP_ROOT", str(tmp_path / "configured"))
    assert main(["generate", *SMALL, "--no-truth"]) == 0
    assert "backup root:" in capsys.readouterr().out
    assert any((tmp_path / "configured" / "raw").iterdir())
    assert not (tmp_path / "configured" / "_truth").exists()


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
