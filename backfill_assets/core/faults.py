"""Named crash points for fault-injection tests (no effect unless the environment asks).

With ``BACKFILL_ASSETS_PAUSE_AT=<name>`` and ``BACKFILL_ASSETS_PAUSE_FIFO=<fifo>``, the
process that reaches checkpoint ``<name>`` writes the name into the FIFO (which blocks until
the test reads it) and then waits until it is killed. Tests use this to SIGKILL a real run
at an exact point without sleeping. When the FIFO ``<fifo>.go`` exists too, the process
waits instead until the test writes into that one, and goes on (a run held at a point, then
let finish).
"""

from __future__ import annotations

import threading
from pathlib import Path

from backfill_assets.settings import pause_at, pause_fifo

SHADOW_WRITE = "shadow.write"  # inside the Spark job that writes a shadow table
PUBLISH_SWAP = "publish.swap"  # after the first partition's pointer swap, before the rest
SESSIONS_BUILD = "sessions.build"  # at the start of the session layer's build step
RAW_BUILD = "raw.build"  # "raw.build.<first hour>": the raw build of the run from that hour


def armed(name: str) -> bool:
    """Whether this process was asked to stop at checkpoint ``name``."""
    return pause_at() == name


def checkpoint(name: str) -> None:
    if pause_at() != name:
        return
    with open(pause_fifo(), "w") as fifo:
        fifo.write(name)
    go = Path(f"{pause_fifo()}.go")
    if go.is_fifo():
        with open(go) as signal:  # until the test writes: then go on
            signal.read(1)
        return
    threading.Event().wait()  # until SIGKILL
