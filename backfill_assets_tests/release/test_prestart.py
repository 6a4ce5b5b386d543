"""Console scripts started before their arguments (``release.prestart``)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from backfill_assets.release.prestart import Prestarted, completed


def _ahead() -> Prestarted:
    """The project's own console script, started ahead, its output captured."""
    return Prestarted(
        "backfill-assets", env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def test_a_prestarted_script_runs_with_the_arguments_it_is_given_later():
    process = _ahead().start(["backfill", "--help"])
    stdout, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    assert b"--from" in stdout  # the backfill command's own help


def test_a_failing_script_passes_its_exit_status_on():
    process = _ahead().start(["no-such-command"])
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2  # argparse's usage error
    assert b"no-such-command" in stderr


def test_a_process_whose_command_died_exits_without_running_the_script():
    """Its command gone (SIGKILLed), its standard input ends before any arguments came."""
    ahead = _ahead()
    stdout, _ = ahead.process.communicate(timeout=120)  # closes its input: end of input
    assert ahead.process.returncode == 0
    assert stdout == b""  # no usage printed: the script never ran


def test_a_process_kept_open_runs_the_script_again_for_each_line_with_the_last_status():
    """Restarted at once, while it still imports: the interrupt does not end the process,
    both runs happen, one after the other, and it exits with the second's status."""
    ahead = _ahead()
    process = ahead.start(["backfill", "--help"], again=True)
    ahead.restart(["no-such-command"])
    ahead.end()
    stdout, stderr = process.communicate(timeout=120)
    assert b"--from" in stdout  # the first run's help
    assert b"no-such-command" in stderr
    assert process.returncode == 2


def test_a_cancelled_process_is_gone():
    ahead = _ahead()
    ahead.cancel()
    assert ahead.process.returncode == -signal.SIGKILL  # killed, not run to its end


def test_completed_gives_the_same_result_in_a_prestarted_process_as_in_a_new_one():
    command = [str(Path(sys.executable).with_name("backfill-assets")), "no-such-command"]
    results = [completed(command, os.environ), completed(command, os.environ, _ahead())]
    assert [r.returncode for r in results] == [2, 2]
    assert results[0].stderr.splitlines()[-1] == results[1].stderr.splitlines()[-1]


def _new_heartbeat(home: Path, seen: set[str], process: subprocess.Popen) -> str:
    """The id of a daemon of ``home``'s instance not in ``seen``, once its heartbeat is
    stored (polled; fails if ``process`` ends first)."""
    import dagster as dg

    deadline = time.monotonic() + 120
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while time.monotonic() < deadline:
            assert process.poll() is None, (home / "daemon.log").read_text()[-3000:]
            ids = {b.daemon_id for b in instance.get_daemon_heartbeats().values()} - seen
            if ids:
                return ids.pop()
            time.sleep(0.2)
    raise AssertionError(f"no new daemon heartbeat in 120 s: {(home / 'daemon.log').read_text()}")


def test_a_restarted_daemon_runs_again_in_its_process_and_exits_at_the_end_of_its_input(
    tmp_path: Path,
):
    """``dagster-daemon run`` (an instance of its own, an empty workspace) started ahead and
    kept open: ``restart`` stops its threads and starts them again in the same process
    (a daemon of a new id beats), and the end of its input lets it exit once stopped."""
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (tmp_path / "workspace.yaml").write_text("load_from: []\n")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    args = ["run", "-w", str(tmp_path / "workspace.yaml")]
    with open(tmp_path / "daemon.log", "wb") as log:
        ahead = Prestarted("dagster-daemon", env=env, stdout=log, stderr=subprocess.STDOUT)
    process = ahead.start(args, again=True)
    try:
        first = _new_heartbeat(tmp_path, set(), process)
        ahead.restart(args)
        second = _new_heartbeat(tmp_path, {first}, process)
        assert second != first and process.poll() is None  # the same process runs on
        ahead.end()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert (tmp_path / "daemon.log").read_text().count("Daemon threads shut down") == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
