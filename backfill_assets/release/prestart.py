"""Dagster's console scripts started before their arguments are known.

A ``dagster-daemon`` or ``dagster-graphql`` process spends 1.4-2.2 s importing Dagster
before it does anything. A command knows well before it needs one that it will (the
daemon once the release is submitted and at each run's end; the GraphQL call once the code
server serves), so it starts the process early: it imports the script's module (through
the installed console-script entry point, exactly what the executable runs) and waits for
one line on its standard input, the script's arguments as JSON; then it runs the script
with them. End of input before that line (the command died): it exits 0 having done
nothing.

A process whose input stays open runs the script again for each further line, once the
run before has ended: the daemon a command restarts at each run's end (``restart``: an
interrupt, which Dagster's daemon answers by stopping its threads, then the next line)
imports Dagster once per command, not once per restart. It exits at the end of its input,
with the status of the last run.

Run as ``python -m backfill_assets.release.prestart SCRIPT``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any


def _ignoring_interrupts(preexec_fn: Callable[[], None] | None) -> None:  # pragma: no cover
    """In the child before exec: ``preexec_fn``, then SIGINT ignored, so that the process
    starts ignoring it (``_run`` handles it during a run)."""
    if preexec_fn is not None:
        preexec_fn()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Prestarted:
    """A console script's process, its module imported, waiting for its arguments.

    ``env``, the output streams and ``preexec_fn`` are the process's, fixed when it is
    started; ``start`` gives it its arguments, ``restart`` runs it again with others."""

    def __init__(
        self,
        script: str,
        *,
        env: Mapping[str, str],
        stdout: IO[Any] | int | None = None,
        stderr: IO[Any] | int | None = None,
        preexec_fn: Callable[[], None] | None = None,
    ):
        self.script = script
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, script],
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=stderr,
            preexec_fn=functools.partial(_ignoring_interrupts, preexec_fn),
        )

    def start(self, args: Sequence[str], *, again: bool = False) -> subprocess.Popen:
        """Run the script with ``args`` (its output goes where it was set to go). With
        ``again``, its input stays open for ``restart`` (``end`` closes it)."""
        self._send(args)
        if not again:
            self.end()
        return self.process

    def restart(self, args: Sequence[str]) -> None:
        """Stop the script's run (SIGINT, as Ctrl-C) and run it again with ``args`` once it
        has returned: in this process, its imports done."""
        self.process.send_signal(signal.SIGINT)
        self._send(args)

    def end(self) -> None:
        """No run after the current one: the process exits when it returns."""
        if self.process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
            self.process.stdin = None  # closed: ``communicate``/``wait`` must not touch it

    def _send(self, args: Sequence[str]) -> None:
        assert self.process.stdin is not None, "its input is closed: it runs no more"
        self.process.stdin.write(json.dumps(list(args)).encode() + b"\n")
        self.process.stdin.flush()

    def cancel(self) -> None:
        """Not needed after all: killed (it has run nothing; waiting for its imports to end
        so that it could read end of input would cost up to 2 s)."""
        self.process.kill()
        self.process.wait()


def completed(
    command: Sequence[str], env: Mapping[str, str], prestarted: Prestarted | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` (a console script and its arguments) run to its end, its output captured
    as text: in ``prestarted``'s process when given (started for the same script), else in
    a new one."""
    if prestarted is None:
        return subprocess.run(
            list(command), capture_output=True, text=True, env=dict(env), check=False
        )
    process = prestarted.start(command[1:])
    stdout, stderr = (b.decode(errors="replace") for b in process.communicate())
    return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)


def _run(script: str, run: Callable[[], Any], args: list[str]) -> int:
    """``run`` (a console script's entry point) as ``script args``: its exit status. An
    interrupt stops the run only (outside runs this process ignores it: a restart's
    interrupt never ends the process, whenever it comes); SIGTERM's handling is reset
    after it (a script may have made it an interrupt), so that SIGTERM ends the process."""
    sys.argv = [script, *args]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = run()
    except SystemExit as exit_:  # click and argparse end so, also on success
        code = exit_.code
        result = code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:  # stopped before the script set up its own handling
        result = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return result if isinstance(result, int) else 0


def main(argv: Sequence[str] | None = None) -> int:
    (script,) = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # until a run: ``_run``
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name=script)
    run = entry.load()  # the import this process exists to do ahead of time
    commands = os.fdopen(os.dup(0), "rb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the script's own standard input: nothing, as a daemon's
    os.close(devnull)
    status = 0
    while line := commands.readline():
        status = _run(script, run, json.loads(line))
    return status


if __name__ == "__main__":
    sys.exit(main())
