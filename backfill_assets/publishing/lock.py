"""Publish locks: two runs never swap the pointers of the same layer at the same time.

``publisher.publish_release`` and ``publisher.rollback_release`` (through ``release_locks``)
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

Across machines (runs in separate pods, ``DATA_ROOT`` on object storage) a file lock
means nothing, so when a shared database is configured the same critical section takes a
PostgreSQL advisory lock there instead: ``pg_try_advisory_lock(hashtext(
'backfill_assets/publish/<layer>'))`` on a connection held for the body, released with the
session, so a crashed holder never leaves it behind. The database is
``BACKFILL_PUBLISH_LOCK_URL``, else Dagster's own (``DAGSTER_POSTGRES_URL``), which every run
pod has; the holder's run id, pid, host and start time are kept in
``backfill_publish_locks`` so a waiter names whom it waits for, as locally. A ``DATA_ROOT``
that is a URI with no such database is refused (no silent unfenced publish).

On top of that, Dagster fences the publish steps themselves: they run in the concurrency
pool ``PUBLISH_POOL`` whose limit is 1 in ``deploy/dagster.yaml`` and
``deploy/dagster.production.yaml`` (``concurrency: pools: default_limit: 1``, op
granularity), so a second run's publish step waits in Dagster before it starts Spark work.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from backfill_assets.settings import is_uri

log = logging.getLogger(__name__)

# The Dagster concurrency pool of every publish step (limit 1 in the instance configs).
PUBLISH_POOL = "publish"
LOCK_URL_ENV = "BACKFILL_PUBLISH_LOCK_URL"
DAGSTER_POSTGRES_URL_ENV = "DAGSTER_POSTGRES_URL"
LOCK_TABLE = "backfill_publish_locks"
TIMEOUT_ENV = "BACKFILL_LOCK_TIMEOUT_SECONDS"
DEFAULT_TIMEOUT_SECONDS = 900.0
POLL_SECONDS = 0.2
T = TypeVar("T")
_LAYER = re.compile(r"^[a-z][a-z0-9_]{0,63}$")  # as tables.identifier (kept import-light)


class PublishLockTimeout(RuntimeError):
    """Another run held the layer's publish lock for longer than the timeout."""


class PublishLockUnavailable(RuntimeError):
    """No lock can fence this publish (a URI ``DATA_ROOT`` and no shared database)."""


def lock_database_url(env: dict[str, str] | None = None) -> str | None:
    """The PostgreSQL database holding publish locks, if one is configured."""
    env = dict(os.environ) if env is None else env
    return env.get(LOCK_URL_ENV) or env.get(DAGSTER_POSTGRES_URL_ENV) or None


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg2://``) as libpq takes it (``postgresql://``)."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


def locks_dir(warehouse_dir: str) -> Path:
    """``<DATA_ROOT>/locks`` for the warehouse ``<DATA_ROOT>/warehouse`` (see settings)."""
    local = warehouse_dir.removeprefix("file://").removeprefix("file:")
    if not local.startswith("/"):
        raise ValueError(f"publish locks need a local warehouse path, got {warehouse_dir!r}")
    return Path(local).parent / "locks"


def lock_path(warehouse_dir: str, layer: str, kind: str = "publish") -> Path:
    if not _LAYER.match(layer):
        raise ValueError(f"invalid layer name {layer!r} for a lock file")
    return locks_dir(warehouse_dir) / f"{kind}-{layer}.lock"


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


def _wait_for(
    what: tuple[str, str],
    try_acquire: Callable[[], bool],
    holder_info: Callable[[], dict],
    where: str,
    limit: float,
    on_wait: Callable[[str], None] | None,
) -> None:
    """Poll ``try_acquire`` until it succeeds; name the holder once; time out naming it."""
    started = time.monotonic()
    announced = False
    while not try_acquire():
        waited = time.monotonic() - started
        other = describe_holder(holder_info())
        if waited >= limit:
            raise PublishLockTimeout(
                f"{what[1]} by {other}; gave up after "
                f"waiting {waited:.0f}s for {where}. Two backfills of the same layer "
                f"never publish at once: let that run finish (see it in the Dagster "
                f"UI), then retry; {TIMEOUT_ENV} sets how long to wait."
            )
        if not announced:
            announced = True
            message = f"waiting for the {what[0]} held by {other}"
            log.warning(message)
            if on_wait:
                on_wait(message)
        time.sleep(POLL_SECONDS)


def _what(kind: str, name: str) -> tuple[str, str]:
    """(the lock, what its holder does), for messages."""
    if kind == "publish":
        return f"publish lock of layer {name!r}", f"layer {name!r} is being published"
    return f"{kind} lock of {name!r}", f"{name!r} is being written ({kind})"


def _holder_info(holder: str, layer: str) -> dict:
    return {
        "holder": holder,
        "layer": layer,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
    }


@contextmanager
def publish_lock(
    warehouse_dir: str,
    layer: str,
    holder: str,
    *,
    timeout: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    kind: str = "publish",
) -> Iterator[Path | str]:
    """Hold the exclusive publish lock of ``layer`` for the body of the ``with``.

    Waits up to ``timeout`` seconds (default ``BACKFILL_LOCK_TIMEOUT_SECONDS``) while
    another process holds it, calling ``on_wait(message)`` once when it starts waiting,
    then raises ``PublishLockTimeout`` naming the layer and the holder's run id. Yields
    where the lock lives (the lock file, or the database lock's key).
    """
    if not _LAYER.match(layer):
        raise ValueError(f"invalid layer name {layer!r} for a lock")
    limit = default_timeout() if timeout is None else timeout
    url = lock_database_url()
    if url:
        with database_lock(url, layer, holder, limit, on_wait, kind=kind) as key:
            yield key
        return
    if is_uri(warehouse_dir):
        raise PublishLockUnavailable(
            f"cannot fence the publish of layer {layer!r}: DATA_ROOT is {warehouse_dir!r} "
            f"(object storage, shared by many machines) and no database for the publish lock "
            f"is configured; set {LOCK_URL_ENV} or {DAGSTER_POSTGRES_URL_ENV} "
            f"(postgresql+psycopg2://...)"
        )
    with file_lock(warehouse_dir, layer, holder, limit, on_wait, kind=kind) as path:
        yield path


@contextmanager
def file_lock(
    warehouse_dir: str,
    layer: str,
    holder: str,
    limit: float,
    on_wait: Callable[[str], None] | None = None,
    *,
    kind: str = "publish",
) -> Iterator[Path]:
    """``fcntl.flock`` on ``<DATA_ROOT>/locks/<kind>-<layer>.lock`` (one machine)."""
    path = lock_path(warehouse_dir, layer, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def try_acquire() -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    try:
        _wait_for(
            _what(kind, layer), try_acquire, lambda: read_holder(path), str(path), limit, on_wait
        )
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder_info(holder, layer)).encode(), 0)
        try:
            yield path
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def database_lock(
    url: str,
    layer: str,
    holder: str,
    limit: float,
    on_wait: Callable[[str], None] | None = None,
    *,
    kind: str = "publish",
) -> Iterator[str]:
    """A PostgreSQL session advisory lock per layer (every machine sharing the database)."""
    import psycopg2

    key = f"backfill_assets/{kind}/{layer}"
    conn = psycopg2.connect(libpq_url(url), application_name=f"backfill_assets {kind} {layer}")
    try:
        with conn, conn.cursor() as cur:  # one transaction: DDL serialized by a lock
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('backfill_assets/publish/ddl'))")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {LOCK_TABLE} (layer text PRIMARY KEY, "
                "holder text, pid integer, host text, since text, backend_pid integer)"
            )
        conn.autocommit = True
        cur = conn.cursor()

        def try_acquire() -> bool:
            cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,))
            return bool(cur.fetchone()[0])

        def holder_info() -> dict:
            cur.execute(
                f"SELECT holder, layer, pid, host, since FROM {LOCK_TABLE} WHERE layer = %s",
                (key,),
            )
            row = cur.fetchone()
            names = ("holder", "layer", "pid", "host", "since")
            return dict(zip(names, row, strict=True)) if row else {}

        _wait_for(
            _what(kind, layer), try_acquire, holder_info, f"database lock {key!r}", limit, on_wait
        )
        info = _holder_info(holder, layer)
        cur.execute(
            f"INSERT INTO {LOCK_TABLE} (layer, holder, pid, host, since, backend_pid) "
            "VALUES (%s, %s, %s, %s, %s, pg_backend_pid()) ON CONFLICT (layer) DO UPDATE SET "
            "holder = EXCLUDED.holder, pid = EXCLUDED.pid, host = EXCLUDED.host, "
            "since = EXCLUDED.since, backend_pid = EXCLUDED.backend_pid",
            (key, info["holder"], info["pid"], info["host"], info["since"]),
        )
        try:
            yield key
        finally:
            cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
    finally:
        conn.close()


@contextmanager
def release_locks(warehouse_dir: str, layers: Iterable[str], holder: str) -> Iterator[None]:
    """Hold the publish locks of every layer a release publishes or rolls back, taken in
    one fixed order (so two releases can never deadlock), released together."""
    with ExitStack() as stack:
        for layer in sorted(set(layers)):
            stack.enter_context(publish_lock(warehouse_dir, layer, holder=holder))
        yield
