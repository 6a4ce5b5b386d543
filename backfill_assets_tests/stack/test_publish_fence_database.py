"""The publish fence in a PostgreSQL ledger database: processes on any machine fence each
other (a session advisory lock per layer). A second holder fails after its timeout naming
the layer, a killed holder leaves nothing behind, and two publishers of a layer never
interleave in the ledger. Processes synchronise through their pipes, never through sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from backfill_assets.core.warehouse import audit
from backfill_assets_tests.helpers.fence import HOLDER, PUBLISHER, WAITER
from backfill_assets_tests.helpers.processes import start_python

# Holds no Parquet audit tables to import: the fence and ledger are in the database alone.
WAREHOUSE = "/nonexistent/backfill-assets-fence-test/warehouse"


@pytest.fixture
def database_env(postgres_url: str) -> dict[str, str]:
    return {**os.environ, "BACKFILL_LEDGER_URL": f"{postgres_url}/ledger"}


@pytest.fixture
def holder(database_env: dict[str, str]) -> Iterator[subprocess.Popen]:
    process = start_python(HOLDER, WAREHOUSE, env=database_env, stdin=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "fenced", process.stderr.read()
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def test_a_second_holder_fails_after_the_timeout_naming_the_layer(holder, database_env) -> None:
    waiter = start_python(WAITER, WAREHOUSE, "0.5", env=database_env)
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode != 0 and out == ""
    assert "FenceTimeout: layer 'raw' is being published or rolled back by another run" in err


def test_a_killed_holder_leaves_no_stale_fence(holder, database_env) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    waiter = start_python(WAITER, WAREHOUSE, "30", env=database_env)
    out, err = waiter.communicate(timeout=60)
    assert (out.strip(), waiter.returncode) == ("fenced", 0), err


def test_two_publishers_of_a_layer_never_interleave(database_env, monkeypatch) -> None:
    names = [f"{side}-{uuid.uuid4().hex[:8]}" for side in "AB"]
    runs = [
        start_python(PUBLISHER, WAREHOUSE, name, "20", env=database_env, stdin=subprocess.PIPE)
        for name in names
    ]
    for run in runs:
        run.stdin.write("go\n")
        run.stdin.flush()
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert (out.strip(), run.returncode) == ("done", 0), err
    monkeypatch.setenv("BACKFILL_LEDGER_URL", database_env["BACKFILL_LEDGER_URL"])
    events = audit.rows(WAREHOUSE, audit.PUBLICATIONS, {"run_id": names})
    assert len(events) == 2 * 20 * 4
    for start in range(0, len(events), 4):
        one = events[start : start + 4]
        assert [e["phase"] for e in one] == ["prepare"] * 2 + ["commit"] * 2
        assert len({e["txn_id"] for e in one}) == 1, one
