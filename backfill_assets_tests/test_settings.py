"""Every variable is read in settings.py, when needed: a bad value is one line naming the
variable and the form it expects, exit 2, whatever the command; ``--help`` needs none."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets import settings
from backfill_assets.cli.main import main
from backfill_assets.settings import PROJECT_ROOT, SettingsError

BIN = Path(sys.executable).parent / "backfill-assets"

BAD = [
    ("BACKFILL_PARTITIONS_START", "2026-11-20", "expected an hour YYYY-MM-DDTHH"),
    ("BACKFILL_PARTITIONS_END", "tomorrow", "expected an hour YYYY-MM-DDTHH"),
    ("BACKFILL_PARTITIONS_END", "2025-01-01T00", "must be after BACKFILL_PARTITIONS_START"),
    ("BACKFILL_MAX_RANGE_HOURS", "lots", "is not a whole number"),
    ("BACKFILL_MAX_RANGE_HOURS", "0", "must be at least 1"),
    ("BACKFILL_GATE_MAX_DECREASE", "lots", "expected a share such as 0.2"),
    ("BACKFILL_GATE_MAX_INCREASE", "-1", "expected 0 or more"),
    ("BACKFILL_GATE_MAX_REMOVED", "2", "expected 0..1"),
    ("BACKFILL_RECONCILE_WINDOW_HOURS", "a week", "is not a whole number"),
    ("BACKFILL_MAX_HOURS_PER_TICK", "0", "must be at least 1"),
    ("BACKFILL_RECONCILE_SENSOR", "maybe", "expected on or off"),
    ("BACKFILL_VACUUM_SCHEDULE", "daily", "expected on or off"),
    ("BACKFILL_LOCK_TIMEOUT_SECONDS", "forever", "is not a number of seconds"),
    ("BACKFILL_MAX_LINE_BYTES", "12", "must be at least 1024 bytes"),
    ("BACKFILL_MAX_PART_EXPANDED_BYTES", "half a gig", "is not a whole number of bytes"),
    ("BACKFILL_MAX_MANIFEST_BYTES", "0", "must be at least 1024 bytes"),
    ("BACKFILL_RECONCILE_INTERVAL_SECONDS", "0", "must be at least 1"),
    ("BACKFILL_RECONCILE_GRACE_HOURS", "-1", "must be at least 0"),
    ("BACKFILL_HOURS_PER_RUN", "a day", "is not a whole number"),
    ("BACKFILL_MAX_CORE_HOURS", "lots", "expected a number of core-hours such as 24"),
    ("BACKFILL_MAX_CORE_HOURS", "-3", "expected a number of core-hours such as 24"),
    ("BACKFILL_PROGRESS_SECONDS", "0", "must be at least 1 seconds"),
    ("BACKFILL_PROGRESS_SECONDS", "often", "is not a whole number of seconds"),
    ("BACKFILL_SHORT_RUN_BYTES", "16M", "is not a whole number of bytes"),
    ("BACKFILL_ENV", "staging", "is not one of local, production"),
]


def test_every_variable_is_read_in_settings_only():
    """``os.environ`` appears elsewhere only where a child process's environment is set."""
    readers = []
    for path in sorted((PROJECT_ROOT / "backfill_assets").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#")[0]
            if ("os.environ" in code or "getenv" in code) and path.name != "settings.py":
                readers.append(f"{path.relative_to(PROJECT_ROOT)}:{number}: {line.strip()}")
    setters = ("os.environ[", "os.environ.setdefault(", "dict(os.environ")
    assert [r for r in readers if not any(s in r for s in setters)] == []


@pytest.mark.parametrize(("name", "value", "expected"), BAD)
def test_a_bad_value_is_named_by_the_reader(name: str, value: str, expected: str):
    with pytest.raises(SettingsError, match=name) as raised:
        settings.check_environment({name: value})
    assert expected in str(raised.value) and "\n" not in str(raised.value)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN), *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )


def _assert_named_in_one_line(stderr: str, name: str, expected: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"backfill-assets reconcile: {name}")
    assert expected in lines[0]


@pytest.mark.parametrize(("name", "value", "expected"), BAD)
def test_a_command_names_a_bad_value_in_one_line_and_exits_2(
    name: str,
    value: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    """Before anything starts (no DAGSTER_HOME created); ``--help`` still works. Through
    ``main``, the function the ``backfill-assets`` script runs; the installed script itself,
    as a process of its own: test_the_installed_command_names_a_bad_value_and_still_helps."""
    home = tmp_path / "never-created"
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert main(["reconcile", "--source", "ledger"]) == 2
    _assert_named_in_one_line(capsys.readouterr().err, name, expected)
    assert not home.exists()
    for help_args in (["--help"], ["backfill", "--help"]):
        with pytest.raises(SystemExit) as shown:
            main(help_args)
        assert shown.value.code == 0
        assert capsys.readouterr().out.startswith("usage: backfill-assets")


# One bad value of each shape: an hour, two variables at odds, a number, a word.
SHAPES = {
    ("BACKFILL_PARTITIONS_START", "2026-11-20"),
    ("BACKFILL_PARTITIONS_END", "2025-01-01T00"),
    ("BACKFILL_MAX_RANGE_HOURS", "0"),
    ("BACKFILL_RECONCILE_SENSOR", "maybe"),
}
IN_A_PROCESS = [bad for bad in BAD if bad[:2] in SHAPES]


@pytest.mark.parametrize(("name", "value", "expected"), IN_A_PROCESS)
def test_the_installed_command_names_a_bad_value_and_still_helps(
    name: str, value: str, expected: str, tmp_path: Path
):
    env = {name: value, "DAGSTER_HOME": str(tmp_path / "never-created")}
    result = _cli("reconcile", "--source", "ledger", env=env)
    assert result.returncode == 2, result.stderr
    _assert_named_in_one_line(result.stderr, name, expected)
    assert not (tmp_path / "never-created").exists()
    for help_args in (["--help"], ["backfill", "--help"]):
        shown = _cli(*help_args, env=env)
        assert shown.returncode == 0 and shown.stdout.startswith("usage: backfill-assets")
