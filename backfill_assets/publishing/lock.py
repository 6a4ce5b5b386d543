"""Publish locks: two runs never swap the pointers of the same layer at the same time.

``publisher.publish`` and ``publisher.rollback`` (decorated with ``holding_publish_lock``)
run inside ``publish_lock(warehouse_dir, layer, holder=run_id)``. Locally (embedded
metastore, one machine) the lock is an exclusive ``fcntl.flock`` on
``<DATA_ROOT>/locks/publish-<layer>.lock``: the kernel releases it when the holder exits,
even after ``kill -9``, so a crashed run never leaves a stale lock. The file holds the
holder's run id, pid, host and start time, so a second run that waits names whom it waits
for, and fails after ``BACKFILL_LOCK_TIMEOUT_SECONDS`` (default 900) with a message naming
the layer and the holder's run id.

The lock is per layer, not per partition: publishing is a few metastore operations, so
waiting for the other run's swap costs seconds, and a coarse lock cannot deadlock. It is not
re-entrant: code holding it must not take it again (the second take would time out naming
its own run).

Production equivalent: with ``DATA_ROOT`` on object storage and runs in separate pods a
file lock means nothing. There, (1) the run coordinator's tag concurrency limit
(``deploy/dagster.production.yaml``: one run per value of ``backfill_assets/layer``) keeps
two runs of a layer from running at all, and (2) the same critical section takes a lock in
the shared database, e.g. a PostgreSQL advisory lock on the Hive metastore's database:
``SELECT pg_advisory_lock(hashtext('backfill_assets/publish/<layer>'))`` (released with
the session, so also crash-safe), or a Dagster concurrency pool on the publish step. For a
``DATA_ROOT`` that is a URI this module therefore takes no lock and says so in the log.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from backfill_assets.settings import is_uri

log = logging.getLogger(__name__)

# The Dagster concurrency pool of the publish step (``release/publish``) and rollbacks: the
# instance limits it to one at a time (deploy/dagster*.yaml), on every machine.
PUBLISH_POOL = "publish"

TIMEOUT_ENV = "BACKFILL_LOCK_TIMEOUT_SECONDS"
DEFAULT_TIMEOUT_SECONDS = 900.0
POLL_SECONDS = 0.2
T = TypeVar("T")
_LAYER = re.compile(r"^[a-z][a-z0-9_]{0,63}$")  # as tables.identifier (kept import-light)


class PublishLockTimeout(RuntimeError):
    """Another run held the layer's publish lock for longer than the timeout."""


def locks_dir(warehouse_dir: str) -> Path:
    """``<DATA_ROOT>/locks`` for the warehouse ``<DATA_ROOT>/warehouse`` (see settings)."""
    local = warehouse_dir.removeprefix("file://").removeprefix("file:")
    if not local.startswith("/"):
        raise ValueError(f"publish locks need a local warehouse path, got {warehouse_dir!r}")
    return Path(local).parent / "locks"


def lock_path(warehouse_dir: str, layer: str) -> Path:
    if not _LAYER.match(layer):
        raise ValueError(f"invalid layer name {layer!r} for a lock file")
    return locks_dir(warehouse_dir) / f"publish-{layer}.lock"


def default_timeout() -> float:
    """``BACKFILL_LOCK_TIMEOUT_SECONDS`` (seconds a publish waits for another one)."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if value < 0:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} must be zero or more")
    return value


def read_holder(path: Path) -> dict:
    """What the lock file says about its holder ({} if unreadable or being rewritten)."""
    try:
        value = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def describe_holder(holder: dict) -> str:
    if not holder:
        return "an unknown holder"
    return (
        f"run {holder.get('holder', '?')} (pid {holder.get('pid', '?')} on "
        f"{holder.get('host', '?')}, since {holder.get('since', '?')})"
    )


@contextmanager
def publish_lock(
    warehouse_dir: str,
    layer: str,
    holder: str,
    *,
    timeout: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[Path | None]:
    """Hold the exclusive publish lock of ``layer`` for the body of the ``with``.

    Waits up to ``timeout`` seconds (default ``BACKFILL_LOCK_TIMEOUT_SECONDS``) while
    another process holds it, calling ``on_wait(message)`` once when it starts waiting,
    then raises ``PublishLockTimeout`` naming the layer and the holder's run id.
    """
    if is_uri(warehouse_dir):
        log.info(
            "publish lock of %s: DATA_ROOT is %s, no local lock taken (production "
            "serializes publishes per layer through the run queue)",
            layer,
            warehouse_dir,
        )
        yield None
        return
    path = lock_path(warehouse_dir, layer)
    limit = default_timeout() if timeout is None else timeout
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        started = time.monotonic()
        announced = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                other = describe_holder(read_holder(path))
                if waited >= limit:
                    raise PublishLockTimeout(
                        f"layer {layer!r} is being published by {other}; gave up after "
                        f"waiting {waited:.0f}s for {path}. Two backfills of the same layer "
                        f"never publish at once: let that run finish (see it in the Dagster "
                        f"UI), then retry; {TIMEOUT_ENV} sets how long to wait."
                    ) from None
                if not announced:
                    announced = True
                    message = f"waiting for the publish lock of layer {layer!r} held by {other}"
                    log.warning(message)
                    if on_wait:
                        on_wait(message)
                time.sleep(POLL_SECONDS)
        since = datetime.now(UTC).isoformat(timespec="seconds")
        info = {
            "holder": holder,
            "layer": layer,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": since,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        try:
            yield path
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def holding_publish_lock(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorate ``fn(spark, warehouse_dir, layer, ..., run_id=...)`` (``publisher.publish``,
    ``publisher.rollback``) to run inside the layer's publish lock, held by ``run_id``."""

    @functools.wraps(fn)
    def locked(
        spark: Any, warehouse_dir: str, layer: Any, *args: Any, run_id: str, **kwargs: Any
    ) -> T:
        with publish_lock(warehouse_dir, layer.name, holder=run_id):
            return fn(spark, warehouse_dir, layer, *args, run_id=run_id, **kwargs)

    return locked
