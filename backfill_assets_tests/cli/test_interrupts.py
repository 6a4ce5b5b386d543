"""An interrupt that lands in a finalizer still unwinds the command (a real process, a real
signal): Python swallows an exception a ``__del__`` raises, so without ``Interrupts`` the
process below waits for ever after its SIGTERM (the hang of a ``backfill`` command that
followed its release on after ``kill PID``)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from backfill_assets.cli.interrupts import exit_status

# A command whose interrupt lands in a finalizer: an object's ``__del__`` blocks until the
# signal comes, then the command waits for ever unless the interrupt is raised again.
CHILD = """
import os, select, signal, sys
from backfill_assets.cli.interrupts import Interrupts, exit_status

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal


class Finalized:
    def __del__(self):
        os.write(1, b"in a finalizer\\n")
        select.select([], [], [])  # until the signal


with Interrupts():
    try:
        Finalized()  # dropped at once: its __del__ runs now
        os.write(1, b"waiting\\n")
        select.select([], [], [])  # the command's wait
    except KeyboardInterrupt as exc:
        os.write(1, b"unwound\\n")
        sys.exit(exit_status(exc))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_a_finalizer_swallowed_is_raised_again_in_the_command(signum):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "in a finalizer\n"
        child.send_signal(signum)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
        child.wait()
    assert out.splitlines() == ["waiting", "unwound"], out + err
    assert child.returncode == 128 + signum, err
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_the_exit_status_names_the_signal():
    assert exit_status(KeyboardInterrupt("SIGTERM")) == 143
    assert exit_status(KeyboardInterrupt()) == 130
