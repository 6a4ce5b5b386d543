"""Operator mistakes on the command line fail at once with one line, before anything runs."""

import pytest

from backfill_assets.cli.main import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--layers", ""], "unknown layer(s) ''"),
        (["--layers", "raw,bogus"], "unknown layer(s) 'bogus'"),
        (["--to", "2026-11-20T24"], "invalid hour '2026-11-20T24'"),
        (["--from", "2026-11-21T00"], "is before"),
    ],
)
def test_bad_arguments_are_refused_with_one_line(argv, message, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "never-created"))
    args = {"--from": "2026-11-20T00", "--to": "2026-11-20T05"}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        args[flag] = value
    code = main(["backfill", *[x for pair in args.items() for x in pair]])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "never-created").exists()  # refused before touching anything


def test_a_range_over_the_cap_is_refused_before_anything_runs(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "never-created"))
    monkeypatch.setenv("BACKFILL_MAX_RANGE_HOURS", "48")
    code = main(["backfill", "--from", "2026-01-01T00", "--to", "2026-11-01T00", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "7,297 hours, more than the cap of 48" in err and "BACKFILL_MAX_RANGE_HOURS" in err
    assert not (tmp_path / "never-created").exists()
    # the cap is per command too
    assert main(["backfill", "--from", "2026-11-01T00", "--to", "2026-11-03T00",
                 "--max-hours", "24"]) == 2  # fmt: skip
    assert "49 hours, more than the cap of 24" in capsys.readouterr().err


@pytest.mark.parametrize("cap", ["0", "-3"])
def test_a_cap_below_one_hour_refuses_every_range(cap, capsys, monkeypatch, tmp_path):
    """``--max-hours 0`` is not "the default": it refuses the range, before anything runs."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "never-created"))
    code = main(["backfill", "--from", "2026-11-20T00", "--to", "2026-11-20T00",
                 "--max-hours", cap])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"--max-hours {cap}" in err and "at least 1" in err
    assert not (tmp_path / "never-created").exists()


def test_a_range_past_the_newest_partition_is_refused_before_anything_runs(
    capsys, monkeypatch, tmp_path
):
    """With the partitions up to now (no BACKFILL_PARTITIONS_END), a range ending after the
    newest complete hour is refused in one line, naming the newest partition."""
    from datetime import UTC, datetime, timedelta

    from backfill_assets.core.hours import hour_key, newest_partition
    from backfill_assets.settings import partition_span

    if partition_span()[1] is not None:
        pytest.skip("the suite's partitions end at a fixed hour")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "never-created"))
    newest = newest_partition()
    future = hour_key(datetime.now(UTC) + timedelta(hours=30))
    code = main(["backfill", "--from", newest, "--to", future])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"hour {future} is not a partition yet" in err and "newest complete hour" in err
    assert not (tmp_path / "never-created").exists()


@pytest.mark.parametrize("flag", ["--max-age-days", "--rollback-depth"])
def test_vacuum_refuses_negative_limits(flag, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "never-created"))
    assert main(["vacuum", flag, "-1"]) == 2
    assert "must not be negative" in capsys.readouterr().err
    assert not (tmp_path / "never-created").exists()


def test_vacuum_arguments_are_a_valid_config_of_the_vacuum_job(base_settings):
    import argparse

    import dagster as dg

    from backfill_assets.cli.vacuum import register, vacuum_config
    from backfill_assets.definitions import build_definitions
    from backfill_assets.defs.jobs.vacuum import VACUUM_JOB, VACUUM_OP

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["vacuum", "--dry-run", "--rollback-depth", "0"])
    config = vacuum_config(args)
    assert config["dry_run"] is True and config["rollback_depth"] == 0
    job = build_definitions(base_settings).resolve_job_def(VACUUM_JOB)
    assert dg.validate_run_config(job, {"ops": {VACUUM_OP: {"config": config}}})


BACKWARDS = "2026-11-20T05..2026-11-20T01"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["approve", "--backfill", "x;drop", "--reason", "ok"], "invalid release id"),
        (["approve", "--backfill", "b1", "--reason", " "], "--reason must say why"),
        (["approve", "--backfill", "b1", "--reason", "ok", "--hours", "2026-11-20T99"], "invalid"),
        (["approve", "--backfill", "b1", "--reason", "ok", "--hours", BACKWARDS], "is before"),
        (["erase", "--client", "-1", "--user", "u", "--reason", "r"], "must not be negative"),
        (["erase", "--client", "1", "--user", " ", "--reason", "r"], "--user must not be empty"),
    ],
)  # fmt: skip
def test_approve_and_erase_refuse_bad_arguments(argv, message, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "never-created"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "never-created").exists()


def test_approve_builds_the_publish_config_of_an_approval():
    import argparse

    from backfill_assets.cli.backfill import validate_approve

    config = validate_approve(
        argparse.Namespace(
            release="b1",
            hours="2026-11-20T01, 2026-11-20T03..2026-11-20T04",
            reason=" fixed export ",
            requested_by="alice",
        )
    )
    assert config == {
        "release_id": "b1",
        "approve": True,
        "approve_hours": ["2026-11-20T01", "2026-11-20T03", "2026-11-20T04"],
        "approval_reason": "fixed export",
        "approved_by": "alice",
    }


@pytest.mark.parametrize(
    ("command", "flag", "limit"),
    [
        (["backfill", "--from", "2026-11-20T00", "--to", "2026-11-20T05"], "--ticket", "100"),
        (["backfill", "--from", "2026-11-20T00", "--to", "2026-11-20T05"], "--reason", "500"),
        (["backfill", "--from", "2026-11-20T00", "--to", "2026-11-20T05"], "--requested-by",
         "100"),
        (["approve", "--backfill", "rel-1", "--reason", "ok"], "--by", "100"),
        (["publish", "--backfill", "rel-1"], "--ticket", "100"),
    ],
)  # fmt: skip
def test_operator_text_past_its_limit_is_refused_in_one_line_before_submission(
    command, flag, limit, capsys, monkeypatch, tmp_path
):
    """A 100 kB ticket (or reason, requester) is refused before Dagster is asked anything."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "never-created"))
    code = main([*command, flag, "INC-1\n" + "x" * 100_000])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err[:500]
    assert f"{flag} is 100,006 characters, more than the limit of {limit}" in err
    assert len(err) < 400
    assert not (tmp_path / "never-created").exists()


@pytest.mark.parametrize("wait", [[], ["--no-wait"]])
def test_rolling_back_a_release_the_ledger_never_published_is_refused(
    wait, capsys, monkeypatch, tmp_path
):
    """``rollback --backfill ID`` of an id with no committed publication (unknown, or a dry
    run) exits 2 in one line naming it, and submits nothing."""
    import dagster as dg

    for name in ("DAGSTER_HOME", "DATA_ROOT", "BACKUP_ROOT"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    (tmp_path / "backup_root").mkdir()
    code = main(["rollback", "--backfill", "zzzzzzzz", *wait])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "release zzzzzzzz has no publication in the ledger" in err
    code = main(["rollback", "--hour", "2026-11-20T03", "--layer", "transformed", *wait])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "nothing of the transformed layer was ever published at 2026-11-20T03" in err
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert instance.get_runs() == []  # nothing submitted
