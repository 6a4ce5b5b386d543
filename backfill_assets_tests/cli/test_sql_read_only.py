"""``backfill-assets sql`` is read-only by construction (issue 9, items 1 and 8).

The attacks of the issue are replayed against a real published raw table and the real
ledger; nothing they name may change: rows, partition locations, files and their modes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from backfill_assets.cli.main import main
from backfill_assets.publishing.audit import PUBLICATIONS
from backfill_assets.publishing.tables import partition_locations

FIRST, LAST = "2026-11-20T00", "2026-11-20T01"


def _files(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root``: relative path -> (sha256, mode)."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _state(spark, warehouse_dir: str) -> dict:
    for table in ("raw.payloads", PUBLICATIONS):
        spark.catalog.refreshTable(table)
    return {
        "payloads": sorted(
            tuple(r) for r in spark.table("raw.payloads").select("hour", "payload_id").collect()
        ),
        "ledger": sorted(tuple(str(v) for v in r) for r in spark.table(PUBLICATIONS).collect()),
        "locations": partition_locations(spark, "raw.payloads"),
        "files": _files(Path(warehouse_dir)),
    }


ATTACKS = {
    "insert_into_ledger_behind_with": (
        "WITH x AS (SELECT 1) INSERT INTO audit.publications SELECT 'forged', 'raw.payloads', "
        "'2026-11-20T00', 'commit', 'publish', 'r', 'v', NULL, NULL, 0, NULL, NULL, NULL, "
        "'forged', NULL, NULL, NULL, current_timestamp() FROM x",
        "InsertIntoStatement",
    ),
    "insert_overwrite_published_hour_behind_with": (
        "WITH x AS (SELECT 1) INSERT OVERWRITE TABLE raw.payloads PARTITION "
        "(hour='2026-11-20T00') SELECT * EXCEPT (hour) FROM raw.payloads WHERE false",
        "InsertIntoStatement",
    ),
    "from_first_insert": ("FROM raw.payloads INSERT INTO raw.payloads SELECT *", "InsertInto"),
    "insert_overwrite_directory": (
        "INSERT OVERWRITE DIRECTORY '/tmp/backfill-sql-attack' SELECT 1",
        "InsertIntoDir",
    ),
    "drop_partition": (
        "ALTER TABLE raw.payloads DROP PARTITION (hour='2026-11-20T00')",
        "DropPartitions",
    ),
    "set_location": (
        "ALTER TABLE raw.payloads PARTITION (hour='2026-11-20T00') SET LOCATION '/tmp'",
        "SetTableLocation",
    ),
    "explain_of_a_write": (
        "EXPLAIN WITH x AS (SELECT 1) INSERT INTO audit.publications SELECT * FROM x",
        "InsertIntoStatement",
    ),
    "sql_script": ("BEGIN DROP TABLE audit.publications; END", "CompoundBody"),
    "reflect_chmod": (
        "SELECT reflect('org.apache.hadoop.fs.FileUtil', 'chmod', location, '000') "
        "FROM (SELECT '/tmp' AS location)",
        "reflect()",
    ),
    "set_conf": ("SET spark.sql.warehouse.dir=/tmp", "SetCommand"),
}


def test_writes_hidden_in_a_query_are_refused_and_change_nothing(
    spark, make_backups, run_release, base_settings, capsys: pytest.CaptureFixture[str]
) -> None:
    release = run_release(make_backups(hours=2), FIRST, LAST, downstream=False)
    assert release.success, release.failures
    capsys.readouterr()  # the run's log
    published = _state(spark, base_settings.warehouse_dir)
    assert published["payloads"] and published["ledger"] and all(published["locations"].values())
    location = published["locations"][FIRST].removeprefix("file:")
    attacks = {
        **ATTACKS,
        # would make a published partition's files unreadable
        "reflect_chmod_published": (
            f"SELECT reflect('org.apache.hadoop.fs.FileUtil', 'chmod', '{location}', '000')",
            "reflect()",
        ),
    }

    for name, (statement, what) in attacks.items():
        assert main(["sql", statement]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, (name, err)
        assert err.startswith("backfill-assets sql: refused, nothing was run: "), (name, err)
        assert what in err and "read-only" in err, (name, err)
    assert _state(spark, base_settings.warehouse_dir) == published

    # Queries and metadata reads still run.
    for statement in (
        "WITH h AS (SELECT hour, count(*) AS n FROM raw.payloads GROUP BY hour) "
        "SELECT * FROM h WHERE n > (SELECT 0) ORDER BY hour",
        "SELECT phase, count(*) FROM audit.publications GROUP BY phase",
        "SHOW TABLES IN raw",
        "DESCRIBE raw.payloads",
        "EXPLAIN SELECT * FROM raw.payloads",
    ):
        assert main(["sql", statement, "--format", "csv"]) == 0, statement
    out = capsys.readouterr().out
    assert "payloads" in out and "commit" in out and FIRST in out


def test_one_statement_with_a_semicolon_in_a_literal_is_accepted_two_are_refused(
    spark, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sql", "SELECT ';' AS s, 'a;b' AS t;", "--format", "jsonl"]) == 0
    assert [json.loads(x) for x in capsys.readouterr().out.splitlines()] == [{"s": ";", "t": "a;b"}]
    assert main(["sql", "SELECT 1; SELECT 2"]) == 2
    err = capsys.readouterr().err
    assert "not one valid statement" in err and "exactly one read-only statement" in err
