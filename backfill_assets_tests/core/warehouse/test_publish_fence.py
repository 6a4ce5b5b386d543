"""The publish fence between real processes: a second holder of a layer waits, or fails
naming the layer; two publishers of a layer at once never interleave in the ledger.

Processes synchronise through their pipes (a holder says "fenced" and waits for a line on
stdin; publishers start on one line each), never through sleeps.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backfill_assets.core.warehouse import audit, publisher
from backfill_assets_tests.helpers.fence import HOLDER, PUBLISHER, WAITER
from backfill_assets_tests.helpers.processes import start_python


@pytest.fixture
def holder(tmp_path: Path, monkeypatch) -> Iterator[tuple[subprocess.Popen, str]]:
    """A process holding the publish fence of layer raw, until told to release it."""
    monkeypatch.delenv("BACKFILL_LEDGER_URL", raising=False)
    warehouse = str(tmp_path / "data" / "warehouse")
    process = start_python(HOLDER, warehouse, stdin=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline().strip() == "fenced"
    yield process, warehouse
    if process.poll() is None:
        process.kill()
    process.wait()


def test_a_second_holder_fails_after_the_timeout_naming_the_layer(holder) -> None:
    _, warehouse = holder
    waiter = start_python(WAITER, warehouse, "0.3")
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode != 0 and out == ""
    assert "FenceTimeout: layer 'raw' is being published or rolled back by another run" in err
    assert "BACKFILL_LOCK_TIMEOUT_SECONDS" in err


def test_a_second_holder_goes_on_once_the_first_releases(holder) -> None:
    process, warehouse = holder
    waiter = start_python(WAITER, warehouse, "120")
    process.stdin.write("release\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "released"
    out, err = waiter.communicate(timeout=60)
    assert (out.strip(), waiter.returncode) == ("fenced", 0), err


def test_a_killed_holder_leaves_no_stale_fence(holder) -> None:
    process, warehouse = holder
    process.send_signal(signal.SIGKILL)
    process.wait()
    waiter = start_python(WAITER, warehouse, "30")
    out, err = waiter.communicate(timeout=60)
    assert (out.strip(), waiter.returncode) == ("fenced", 0), err


def test_publish_and_rollback_take_the_fence_before_touching_the_warehouse(
    holder, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, warehouse = holder
    monkeypatch.setenv("BACKFILL_LOCK_TIMEOUT_SECONDS", "0.2")
    layer = publisher.Layer("raw", "shadow.raw_payloads", (), (), "raw-1")
    with pytest.raises(RuntimeError, match="layer 'raw' is being published or rolled back"):
        publisher.publish_release(
            None, warehouse, "release-B", [layer], run_id="run-B", manifest={}
        )
    with pytest.raises(RuntimeError, match="layer 'raw' is being published or rolled back"):
        publisher.rollback_release(
            None, warehouse, [layer], release_id="release-A", run_id="run-C", manifest={}
        )


def test_two_publishers_of_a_layer_at_once_never_interleave_in_the_ledger(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("BACKFILL_LEDGER_URL", raising=False)
    warehouse = str(tmp_path / "data" / "warehouse")
    runs = [start_python(PUBLISHER, warehouse, name, "25", stdin=subprocess.PIPE) for name in "AB"]
    for run in runs:  # both start at once
        run.stdin.write("go\n")
        run.stdin.flush()
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert (out.strip(), run.returncode) == ("done", 0), err

    events = audit.rows(warehouse, audit.PUBLICATIONS)  # in the order they were recorded
    assert len(events) == 2 * 25 * 4
    for start in range(0, len(events), 4):  # prepare x2 then commit x2 of one transaction
        one = events[start : start + 4]
        assert [e["phase"] for e in one] == ["prepare"] * 2 + ["commit"] * 2
        assert len({e["txn_id"] for e in one}) == 1, one
