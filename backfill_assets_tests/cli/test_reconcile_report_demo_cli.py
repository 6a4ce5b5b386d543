"""Operator errors of ``reconcile``, ``report`` and ``demo``: a clear message, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from backfill_assets.cli.main import main


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, sub in (
        ("BACKUP_ROOT", "backups"),
        ("DATA_ROOT", "data"),
        ("DAGSTER_HOME", "dagster_home"),
    ):
        monkeypatch.setenv(name, str(tmp_path / sub))
    return tmp_path


def test_reconcile_needs_backups_and_a_whole_range(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (env / "backups" / "raw").mkdir(parents=True)  # a tree without hours (see test_preflight)
    assert main(["reconcile"]) == 2
    assert f"no hour folders under {env / 'backups'}/raw" in capsys.readouterr().err
    assert main(["reconcile", "--from", "2026-11-20T00"]) == 2
    assert "give both --from and --to" in capsys.readouterr().err
    assert main(["reconcile", "--from", "2026-11-20T05", "--to", "2026-11-20T01"]) == 2
    assert "empty range" in capsys.readouterr().err


def test_reconcile_names_a_bad_setting(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (env / "backups" / "raw").mkdir(parents=True)
    monkeypatch.setenv("BACKFILL_MAX_HOURS_PER_TICK", "lots")
    assert main(["reconcile"]) == 2
    assert "BACKFILL_MAX_HOURS_PER_TICK='lots' is not a whole number" in capsys.readouterr().err


def test_report_of_an_unknown_run_or_backfill(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--run", "no-such-run"]) == 2
    assert "no run 'no-such-run' in the Dagster instance" in capsys.readouterr().err
    assert main(["report", "--backfill", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no release 'nope': no run tagged dagster/backfill or backfill_assets/release" in err
    with pytest.raises(SystemExit):
        main(["report"])  # one of --run / --backfill is required


def test_the_demo_never_touches_a_backup_tree_it_did_not_generate(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = env / "backups" / "raw" / "date=2026-11-20" / "hour=00" / "client_id=1"
    real.mkdir(parents=True)
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "holds a backup tree that the generator did not write" in err
    assert real.exists()
    monkeypatch.setenv("BACKUP_ROOT", "s3://bucket/backups")
    assert main(["demo"]) == 2
    assert "BACKUP_ROOT=s3://bucket/backups is not a local path" in capsys.readouterr().err
