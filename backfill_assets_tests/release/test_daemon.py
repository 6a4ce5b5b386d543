"""The daemon and code server a command starts (``release.daemon.DaemonSupervisor``)."""

import logging
import re
import signal
from pathlib import Path

import pytest

from backfill_assets.release.daemon import DaemonSupervisor
from backfill_assets.release.instance import get_instance
from backfill_assets.settings import Settings


def _ignored(pid: int) -> int:
    """The signals process ``pid`` ignores (its ``SigIgn`` mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"SigIgn:\s*([0-9a-f]+)", status).group(1), 16)


def test_the_code_server_stops_at_once_when_the_command_ignores_interrupts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """A command started with SIGINT ignored (a shell's background job, ``nohup``) passes
    that on to what it starts, and Dagster's code server answers SIGTERM with SIGINT's
    handler: it ignored the stop, and every such command waited 30 s for it before
    killing it. The supervisor starts its processes with the default handlers."""
    settings = Settings.from_env(
        {"DATA_ROOT": str(tmp_path / "data"), "DAGSTER_HOME": str(tmp_path / "home")}
    )
    monkeypatch.setenv("DAGSTER_HOME", settings.dagster_home)
    instance = get_instance(settings)
    supervisor = DaemonSupervisor(settings, instance, tmp_path / "daemon.log")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job starts
    try:
        supervisor.prepare()
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        supervisor.workspace()  # the code server serves
        assert not _ignored(supervisor.code_server.pid) & (1 << (signal.SIGINT - 1))
    finally:
        with caplog.at_level(logging.WARNING, logger="backfill_assets.release.daemon"):
            supervisor.close()
    assert "still alive" not in caplog.text  # stopped by SIGTERM, not killed after 30 s
