"""Kill a real backfill process (SIGKILL) in the shadow write and in the publish swap.

Each run is a real `backfill-assets` process with its own Spark, metastore and Dagster
instance; the test reaches the exact crash point through a FIFO (no sleeps), kills the
whole process group, then inspects the warehouse from another process.
"""

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets import faults
from backfill_assets.generator import generate_backups
from backfill_assets.reporting.expected import raw_rows

pytestmark = pytest.mark.slow

FIRST, LAST = "2026-11-20T00", "2026-11-20T03"
BIN = Path(sys.executable).parent / "backfill-assets"
INSPECT = """
import json, sys
from backfill_assets.layers.raw import LAYER
from backfill_assets.publishing import publisher
from backfill_assets.resources.spark import spark_session
from backfill_assets.settings import Settings
spark = spark_session(Settings.from_env())
rows = spark.sql(
    "SELECT hour, regexp_extract(input_file_name(), 'version=([^/]+)/', 1) AS version, "
    "count(*) AS n FROM raw.payloads GROUP BY 1, 2").collect()
pending = spark.sql(
    "SELECT count(*) FROM audit.publications p WHERE phase = 'prepare' AND event_id NOT IN "
    "(SELECT event_id FROM audit.publications WHERE phase <> 'prepare')").first()[0]
print(json.dumps({
    "versions": sorted([r.hour, r.version, r.n] for r in rows),
    "verify": publisher.verify(spark, [t for _, t in LAYER.pairs]),
    "pending": pending,
}))
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    generate_backups(
        tmp_path / "backups",
        start=FIRST,
        hours=4,
        clients=2,
        users_per_client=20,
        seed=5,
        workers=1,
    )
    return {
        **os.environ,
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }


def backfill(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN), "backfill", "--from", FIRST, "--to", LAST, "--layers", "raw"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def inspect(env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", INSPECT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def killed_at(env: dict[str, str], point: str, tmp_path: Path) -> str:
    """Start a backfill, wait until it reaches ``point``, SIGKILL its process group.

    Returns the killed run's id (its shadow version), read from the Dagster instance."""
    fifo = tmp_path / f"{point}.fifo"
    os.mkfifo(fifo)
    process = subprocess.Popen(
        [str(BIN), "backfill", "--from", FIRST, "--to", LAST, "--layers", "raw"],
        env={**env, "BACKFILL_ASSETS_PAUSE_AT": point, "BACKFILL_ASSETS_PAUSE_FIFO": str(fifo)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with open(fifo) as reader:  # blocks until the process reaches the checkpoint
            assert reader.read() == point
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    with dg.DagsterInstance.local_temp(env["DAGSTER_HOME"]) as instance:  # the CLI's instance
        return instance.get_runs(limit=1)[0].run_id


def test_killed_runs_leave_old_or_complete_new_versions_and_rerun_converges(env, tmp_path):
    # rows per folder hour (the folder, not received_at, decides a payload's hour)
    rows_per_hour = {h: rows for h, (rows, _) in raw_rows(Path(env["BACKUP_ROOT"])).items()}
    first = backfill(env)
    assert first.returncode == 0, first.stdout + first.stderr
    old_version = re.search(r"\] raw .* run ([0-9a-f-]{36})", first.stdout).group(1)

    shadow_killed = killed_at(env, faults.SHADOW_WRITE, tmp_path)
    publish_killed = killed_at(env, faults.PUBLISH_SWAP, tmp_path)
    state = inspect(env)  # after both kills
    assert state["verify"] == []  # the ledger explains every partition's location
    assert state["pending"] > 0  # a publish was interrupted between prepare and commit
    per_hour: dict[str, list] = {}
    for hour, version, n in state["versions"]:
        per_hour.setdefault(hour, []).append((version, n))
    assert sorted(per_hour) == sorted(rows_per_hour)
    for hour, versions in per_hour.items():
        # exactly one complete version per hour: the old one, or the new one
        assert len(versions) == 1 and versions[0][1] == rows_per_hour[hour]
    versions = Counter(v[0][0] for v in per_hour.values())
    assert shadow_killed not in versions  # the run killed in its shadow write published nothing
    assert versions == {old_version: 3, publish_killed: 1}  # killed right after the first swap

    rerun = backfill(env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    converged = inspect(env)
    assert converged["verify"] == [] and converged["pending"] == 0
    assert {h: n for h, _, n in converged["versions"]} == rows_per_hour
    assert len({v for _, v, _ in converged["versions"]}) == 1  # one new complete version
