"""The publish lock in the shared database: processes on any machine fence each other.

With ``DATA_ROOT`` on object storage the lock is a PostgreSQL advisory lock in Dagster's
database (``DAGSTER_POSTGRES_URL``): a second publisher waits naming the holder, fails
after its timeout naming it, and a killed holder leaves nothing behind. Processes
synchronise through their pipes, never through sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

WAREHOUSE = "s3://warehouse-bucket/data/warehouse"

HOLDER = """
import sys
from backfill_assets.publishing.lock import publish_lock
with publish_lock(sys.argv[1], "raw", holder="run-A") as where:
    print("locked", where, flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""

WAITER = """
import sys
from backfill_assets.publishing.lock import publish_lock
with publish_lock(sys.argv[1], "raw", holder="run-B", timeout=float(sys.argv[2]),
                  on_wait=lambda message: print("WAIT", message, flush=True)):
    print("locked", flush=True)
"""


@pytest.fixture
def database_env(postgres_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "BACKFILL_PUBLISH_LOCK_URL"}
    env["DAGSTER_POSTGRES_URL"] = f"{postgres_url}/dagster"
    return env


def _python(code: str, env: dict[str, str], *args: str, stdin=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.fixture
def holder(database_env: dict[str, str]) -> Iterator[subprocess.Popen]:
    process = _python(HOLDER, database_env, WAREHOUSE, stdin=subprocess.PIPE)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line == "locked backfill_assets/publish/raw", process.stderr.read()
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def test_second_publisher_fails_after_timeout_naming_the_holder(holder, database_env) -> None:
    waiter = _python(WAITER, database_env, WAREHOUSE, "0.5")
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode != 0
    assert out.startswith("WAIT waiting for the publish lock of layer 'raw' held by run run-A")
    assert f"(pid {holder.pid} on " in out
    assert "PublishLockTimeout: layer 'raw' is being published by run run-A" in err
    assert "database lock 'backfill_assets/publish/raw'" in err


def test_second_publisher_waits_until_the_first_releases(holder, database_env) -> None:
    waiter = _python(WAITER, database_env, WAREHOUSE, "120")
    assert waiter.stdout is not None
    assert waiter.stdout.readline().startswith("WAIT ")  # blocked on the database lock
    assert waiter.poll() is None
    holder.stdin.write("release\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "released"
    out, _ = waiter.communicate(timeout=60)
    assert out.strip() == "locked" and waiter.returncode == 0


def test_a_killed_holder_leaves_no_stale_lock(holder, database_env) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    waiter = _python(WAITER, database_env, WAREHOUSE, "30")
    out, err = waiter.communicate(timeout=60)
    assert (out.strip(), waiter.returncode) == ("locked", 0), err
