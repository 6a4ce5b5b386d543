"""The daemon and code server a command starts (``release.daemon.DaemonSupervisor``)."""

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets.release.daemon import DaemonSupervisor, _group_alive
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


def test_a_group_whose_members_have_all_exited_is_gone_before_they_are_reaped():
    """A run's Spark JVM outlives its parent by an instant and then waits, a zombie, for
    init to reap it: up to seconds that every command waited for at its end. A group of
    zombies holds nothing: it is gone."""
    leader = subprocess.Popen(
        [sys.executable, "-c", "import os, signal\nif os.fork() == 0: os._exit(0)\nsignal.pause()"],
        start_new_session=True,
    )
    try:
        assert _group_alive(leader.pid)  # the leader sleeps; its child is a zombie
    finally:
        leader.kill()
    os.waitid(os.P_PID, leader.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
    try:
        state = Path(f"/proc/{leader.pid}/stat").read_text().rpartition(")")[2].split()[0]
        assert state == "Z"
        assert not _group_alive(leader.pid)
    finally:
        leader.wait()
