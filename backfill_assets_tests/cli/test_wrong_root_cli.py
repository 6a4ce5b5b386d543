"""A wrong ``BACKUP_ROOT`` through real Dagster backfills (the CLI, its daemon, the run
worker's Spark): after a release from a 2-client tree, a backfill from
another source's tree of the same hours with one client fewer, from a tree whose ``raw/``
is empty, and from an empty folder publish nothing: the first two are held back in lines
naming each hour (and the vanished client), the last is refused in one line before
anything runs (``approve`` of such an hour: the in-process gate tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import cli

pytestmark = pytest.mark.slow

HOURS = ("2026-11-20T00", "2026-11-20T01")
RAW_ONLY = ["--layers", "raw", "--no-downstream"]


def backfill(env: dict[str, str], root: Path, *args: str) -> subprocess.CompletedProcess:
    return cli({**env, "BACKUP_ROOT": str(root)}, *args, timeout=1200)


def test_a_backfill_from_a_tree_with_a_client_fewer_is_held_back_naming_the_client(
    tmp_path: Path, driver_jvm: dict[str, str]
):
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    options = {"start": HOURS[0], "hours": 2, "users_per_client": 25, "workers": 1}
    generate_backups(right, clients=2, seed=11, **options)
    generate_backups(wrong, clients=1, seed=5, **options)
    shell = {
        **os.environ,
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "BACKFILL_RECONCILE_SENSOR": "off",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    # the commands' runs and reads in the worker's warm JVM
    _held_back_and_refused({**shell, **driver_jvm}, tmp_path, right, wrong)


def _held_back_and_refused(env: dict[str, str], tmp_path: Path, right: Path, wrong: Path):
    span = ["--from", HOURS[0], "--to", HOURS[-1], *RAW_ONLY]
    # each command runs the daemon itself, with its BACKUP_ROOT: the code location's and
    # the runs' (one daemon for the module would read one tree for all)
    first = backfill(env, right, "backfill", *span, "--reason", "first")
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    before = _per_client(tmp_path / "data", env)
    assert {c for _, c in before} == {1, 2}

    mistaken = backfill(env, wrong, "backfill", *span, "--reason", "wrong root")
    (empty_raw := tmp_path / "empty-raw" / "raw").mkdir(parents=True)
    emptied = backfill(env, empty_raw.parent, "backfill", *span, "--reason", "empty raw")
    (empty := tmp_path / "empty").mkdir()
    nothing = backfill(env, empty, "backfill", *span, "--reason", "empty folder")
    output = mistaken.stdout + mistaken.stderr
    assert mistaken.returncode != 0, output[-4000:]
    held = [line for line in output.splitlines() if "held back" in line]
    for hour in HOURS:
        assert any(
            f"raw {hour}: client 2 rows " in line and "every row of the client removed" in line
            for line in held
        ), output[-4000:]
    assert "approve --backfill " in output  # what a person does if the change is right

    output = emptied.stdout + emptied.stderr
    assert emptied.returncode == 1, output[-4000:]
    held = [line for line in output.splitlines() if "held back" in line]
    for hour in HOURS:
        assert any(f"raw {hour}" in line for line in held), output[-4000:]
    assert "Traceback" not in output and "Py4J" not in output, output[-4000:]

    assert nothing.returncode == 2, nothing.stdout + nothing.stderr
    [line] = nothing.stderr.strip().splitlines()
    assert f"BACKUP_ROOT={empty} has no raw/ folder" in line, line
    assert _per_client(tmp_path / "data", env) == before  # nothing published


def _per_client(data: Path, env: dict[str, str]) -> dict[tuple[str, int], int]:
    """(hour, client) -> published raw rows, read in a Spark session of its own (the
    metastore serves one process at a time)."""
    code = """
import json
from backfill_assets.core.spark.session import spark_session
from backfill_assets.settings import Settings

spark = spark_session(Settings.from_env())
rows = spark.table("raw.payloads").groupBy("hour", "client_id").count().collect()
print(json.dumps([[r["hour"], r["client_id"], r["count"]] for r in rows]))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    return {(h, c): n for h, c, n in json.loads(out.strip().splitlines()[-1])}
