"""Ctrl-C and SIGTERM unwind a command, however the interrupt lands.

SIGTERM raises ``KeyboardInterrupt`` as SIGINT does, so every ``with`` of the command
unwinds: the daemon and code server it started (and the runs they ran) are stopped before
it exits, and a command following a release says what it left behind.

Python runs a signal's handler in whatever code the main thread is executing. When that is
a finalizer (an object's ``__del__``, a weakref callback, a generator closed by the garbage
collector), the handler's ``KeyboardInterrupt`` cannot propagate: Python prints it as
"Exception ignored in ..." and carries on, and a command following a release waited on,
its interrupt lost. ``Interrupts`` takes such an interrupt from ``sys.unraisablehook`` and
raises it again a moment later (SIGALRM), in the command's own code.
"""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType, TracebackType
from typing import Any

log = logging.getLogger(__name__)

TERMINATED = "SIGTERM"  # the message of the KeyboardInterrupt SIGTERM raises
AGAIN_SECONDS = 0.1  # until a swallowed interrupt is raised again: out of its finalizer


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """The status a shell gives a process the interrupt's signal ended: 143 or 130."""
    return 128 + (signal.SIGTERM if str(interrupt) == TERMINATED else signal.SIGINT)


class Interrupts:
    """Within ``with Interrupts():`` (the main thread), SIGTERM raises
    ``KeyboardInterrupt(TERMINATED)``, and an interrupt a finalizer swallowed is raised
    again; the handlers before are restored at its end."""

    def __init__(self) -> None:
        self._again: tuple[Any, ...] = ()
        self._before: tuple[Any, Any, Any] | None = None

    def __enter__(self) -> Interrupts:
        self._before = (
            signal.signal(signal.SIGTERM, self._terminate),
            signal.signal(signal.SIGALRM, self._raise_again),
            sys.unraisablehook,
        )
        sys.unraisablehook = self._unraisable
        return self

    def __exit__(
        self, kind: type | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        assert self._before is not None
        term, alarm, sys.unraisablehook = self._before
        signal.signal(signal.SIGTERM, term)
        signal.signal(signal.SIGALRM, alarm)

    def _terminate(self, signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(TERMINATED)

    def _raise_again(self, signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(*self._again)

    def _unraisable(self, unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            assert self._before is not None
            self._before[2](unraisable)
            return
        log.debug("an interrupt landed in a finalizer (%s): raised again", unraisable.object)
        self._again = unraisable.exc_value.args
        while True:
            try:
                signal.setitimer(signal.ITIMER_REAL, AGAIN_SECONDS)
                return
            except KeyboardInterrupt:  # it came already, in this hook: once more
                continue
