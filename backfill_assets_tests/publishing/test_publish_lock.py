"""The publish lock between real processes: the second waits, or fails naming the holder.

Processes synchronise through their pipes (the holder says "locked" and waits for a line on
stdin; a waiter says "WAIT ..." when it starts waiting), never through sleeps.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backfill_assets.publishing import publisher
from backfill_assets.publishing.lock import PublishLockTimeout, lock_path

HOLDER = """
import sys
from backfill_assets.publishing.lock import publish_lock
with publish_lock(sys.argv[1], "raw", holder="run-A"):
    print("locked", flush=True)
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


def _python(code: str, *args: str, stdin: int | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """A process holding the publish lock of layer raw as run-A, until told to release."""
    warehouse = str(tmp_path / "data" / "warehouse")
    process = _python(HOLDER, warehouse, stdin=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline().strip() == "locked"
    yield process, warehouse
    if process.poll() is None:
        process.kill()
    process.wait()


def test_a_second_publisher_fails_after_the_timeout_naming_layer_and_holder(holder) -> None:
    _, warehouse = holder
    waiter = _python(WAITER, warehouse, "0.3")
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode != 0
    assert out.startswith("WAIT waiting for the publish lock of layer 'raw' held by run run-A")
    assert "PublishLockTimeout: layer 'raw' is being published by run run-A (pid " in err
    assert "BACKFILL_LOCK_TIMEOUT_SECONDS" in err
    assert lock_path(warehouse, "raw") == Path(warehouse).parent / "locks" / "publish-raw.lock"


def test_a_second_publisher_waits_until_the_first_releases(holder) -> None:
    process, warehouse = holder
    waiter = _python(WAITER, warehouse, "120")
    assert waiter.stdout is not None
    assert waiter.stdout.readline().startswith("WAIT ")  # it is blocked on the lock now
    assert waiter.poll() is None
    process.stdin.write("release\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "released"
    out, _ = waiter.communicate(timeout=60)
    assert out.strip() == "locked" and waiter.returncode == 0


def test_a_killed_holder_leaves_no_stale_lock(holder) -> None:
    process, warehouse = holder
    process.send_signal(signal.SIGKILL)
    process.wait()
    waiter = _python(WAITER, warehouse, "30")
    out, err = waiter.communicate(timeout=60)
    assert (out.strip(), waiter.returncode) == ("locked", 0), err


def test_publish_and_rollback_take_the_lock_before_touching_the_warehouse(
    holder, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, warehouse = holder
    monkeypatch.setenv("BACKFILL_LOCK_TIMEOUT_SECONDS", "0.2")
    layer = publisher.Layer("raw", "shadow.raw_payloads", (), (), "raw-1")
    with pytest.raises(PublishLockTimeout, match="layer 'raw' is being published by run run-A"):
        publisher.publish_release(
            None, warehouse, "release-B", [layer], run_id="run-B", manifest={}
        )
    with pytest.raises(PublishLockTimeout, match="run run-A"):
        publisher.rollback_release(
            None, warehouse, [layer], release_id="release-A", run_id="run-C", manifest={}
        )
