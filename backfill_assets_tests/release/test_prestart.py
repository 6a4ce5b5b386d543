"""Console scripts started before their arguments (``release.prestart``)."""

import os
import signal
import subprocess
import sys
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


def test_a_cancelled_process_is_gone():
    ahead = _ahead()
    ahead.cancel()
    assert ahead.process.returncode == -signal.SIGKILL  # killed, not run to its end


def test_completed_gives_the_same_result_in_a_prestarted_process_as_in_a_new_one():
    command = [str(Path(sys.executable).with_name("backfill-assets")), "no-such-command"]
    results = [completed(command, os.environ), completed(command, os.environ, _ahead())]
    assert [r.returncode for r in results] == [2, 2]
    assert results[0].stderr.splitlines()[-1] == results[1].stderr.splitlines()[-1]
