"""Console scripts started before their arguments (``release.prestart``)."""

import os
import subprocess

from backfill_assets.release.prestart import Prestarted


def test_a_prestarted_script_runs_with_the_arguments_it_is_given_later():
    ahead = Prestarted(
        "backfill-assets", env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process = ahead.start(["backfill", "--help"])
    stdout, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    assert b"--from" in stdout  # the backfill command's own help


def test_a_failing_script_passes_its_exit_status_on():
    ahead = Prestarted(
        "backfill-assets", env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process = ahead.start(["no-such-command"])
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2  # argparse's usage error
    assert b"no-such-command" in stderr


def test_a_discarded_process_exits_without_running_the_script():
    ahead = Prestarted(
        "backfill-assets", env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    ahead.discard()
    assert ahead.process.returncode == 0
    assert ahead.process.stdout.read() == b""  # no usage printed: the script never ran
