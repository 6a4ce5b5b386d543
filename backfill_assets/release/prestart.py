"""Dagster's console scripts started before their arguments are known.

A ``dagster-daemon`` or ``dagster-graphql`` process spends 1.4-2.2 s importing Dagster
before it does anything. A command knows well before it needs one that it will (the
daemon once the release is submitted and at each run's end; the GraphQL call once the code
server serves), so it starts the process early: it imports the script's module (through
the installed console-script entry point, exactly what the executable runs) and waits for
one line on its standard input, the script's arguments as JSON; then it runs the script
with them. End of input before that line (the command died): it exits 0 having done
nothing.

Run as ``python -m backfill_assets.release.prestart SCRIPT``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any


class Prestarted:
    """A console script's process, its module imported, waiting for its arguments.

    ``env``, the output streams and ``preexec_fn`` are the process's, fixed when it is
    started; ``start`` gives it its arguments, once."""

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
            preexec_fn=preexec_fn,
        )

    def start(self, args: Sequence[str]) -> subprocess.Popen:
        """Run the script with ``args`` (its output goes where it was set to go)."""
        assert self.process.stdin is not None
        with self.process.stdin:
            self.process.stdin.write(json.dumps(list(args)).encode() + b"\n")
        self.process.stdin = None  # closed: ``communicate``/``wait`` must not touch it
        return self.process

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


def main(argv: Sequence[str] | None = None) -> int:
    (script,) = sys.argv[1:] if argv is None else argv
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name=script)
    run = entry.load()  # the import this process exists to do ahead of time
    line = sys.stdin.buffer.readline()
    if not line:
        return 0
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the script's own standard input: nothing, as a daemon's
    os.close(devnull)
    sys.argv = [script, *json.loads(line)]
    result = run()
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
