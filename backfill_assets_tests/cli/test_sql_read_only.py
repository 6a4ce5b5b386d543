"""``backfill-assets sql`` is read-only by construction (issue 9, items 1 and 8).

The attacks of the issue are replayed against a real published raw table and the real
ledger; nothing they name may change: rows, partition locations, files and their modes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from backfill_assets.cli.main import CommandError, main
from backfill_assets.cli.sql import _calls_java, check_read_only, first_keyword
from backfill_assets.core.warehouse import audit
from backfill_assets.core.warehouse.audit import PUBLICATIONS
from backfill_assets.core.warehouse.tables import partition_locations

FIRST, LAST = "2026-11-20T00", "2026-11-20T01"


def _files(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root``: relative path -> (sha256, mode)."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _state(spark, warehouse_dir: str) -> dict:
    spark.catalog.refreshTable("raw.payloads")
    return {
        "payloads": sorted(
            tuple(r) for r in spark.table("raw.payloads").select("hour", "payload_id").collect()
        ),
        "ledger": sorted(
            tuple(str(v) for v in r.values()) for r in audit.rows(warehouse_dir, PUBLICATIONS)
        ),
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
    spark,
    make_backups,
    run_release,
    base_settings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATA_ROOT", base_settings.data_root)  # `sql` reads this ledger
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
        "qualified_reflect_chmod_published": (
            "SELECT system.builtin.REFLECT('org.apache.hadoop.fs.FileUtil', 'chmod', "
            f"'{location}', '000')",
            "system.builtin.REFLECT()",
        ),
        "read_published_files_directly": (
            f"SELECT * FROM parquet.`{location}`",
            "reading files directly",
        ),
    }

    for name, (statement, what) in attacks.items():
        assert main(["sql", statement]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, (name, err)
        assert err.startswith("backfill-assets sql: refused, nothing was run: "), (name, err)
        # no query at all is refused before Spark starts, naming its first keyword; Spark's
        # parser refuses it too (the check behind it), naming what it would do
        early = f"a statement starting with {first_keyword(statement)!r} is not a query"
        assert (what in err or early in err) and "read-only" in err, (name, err)
        with pytest.raises(CommandError, match=r"refused|not one valid statement"):
            check_read_only(spark, statement)
    assert _state(spark, base_settings.warehouse_dir) == published

    # Queries and metadata reads still run.
    for statement in (
        "WITH h AS (SELECT hour, count(*) AS n FROM raw.payloads GROUP BY hour) "
        "SELECT * FROM h WHERE n > (SELECT 0) ORDER BY hour",
        "SELECT phase, count(*) FROM audit.publications GROUP BY phase",
        "SELECT count(*) FROM spark_catalog.raw.payloads",
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


def _refused(capsys: pytest.CaptureFixture[str], name: str, statement: str, what: str) -> None:
    assert main(["sql", statement]) == 2, name
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, (name, err)
    assert err.startswith("backfill-assets sql: refused, nothing was run: "), (name, err)
    assert what in err and "read-only" in err, (name, err)
    assert captured.out == "", (name, captured.out)


def test_reflection_under_any_name_is_refused_and_changes_nothing(
    spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spark resolves qualified, upper-case and back-quoted names (and IDENTIFIER()) to
    the same reflect/java_method/try_reflect: each would make ``victim`` unreadable or
    set a JVM system property."""
    victim = tmp_path / "victim"
    victim.write_text("data")
    victim.chmod(0o644)
    chmod = f"'org.apache.hadoop.fs.FileUtil', 'chmod', '{victim}', '000'"
    prop = "'java.lang.System', 'setProperty', 'backfill.sql.attack', 'forged'"
    attacks = {
        "builtin_reflect": (f"SELECT builtin.reflect({chmod})", "builtin.reflect()"),
        "system_builtin_reflect": (
            f"SELECT system.builtin.reflect({chmod})",
            "system.builtin.reflect()",
        ),
        "system_builtin_java_method": (
            f"SELECT system.builtin.java_method({prop})",
            "system.builtin.java_method()",
        ),
        "upper_case": (f"SELECT REFLECT({chmod})", "REFLECT()"),
        "mixed_case_qualified": (f"SELECT Builtin.Reflect({chmod})", "Builtin.Reflect()"),
        "back_quoted": (
            f"SELECT `system`.`builtin`.`TRY_REFLECT`({chmod})",
            "system.builtin.TRY_REFLECT()",
        ),
        "in_a_lambda": (
            f"SELECT transform(array(1), x -> BUILTIN.JAVA_METHOD({prop}))",
            "BUILTIN.JAVA_METHOD()",
        ),
        "in_a_subquery_filter": (
            f"SELECT 1 WHERE EXISTS (SELECT System.Builtin.Java_Method({prop}))",
            "System.Builtin.Java_Method()",
        ),
        "explained": (f"EXPLAIN SELECT builtin.reflect({chmod})", "builtin.reflect()"),
        "identifier_literal": (f"SELECT IDENTIFIER('reflect')({chmod})", "IDENTIFIER()"),
        "identifier_expression": (
            f"SELECT IDENTIFIER('system.builtin.' || 'java_' || 'method')({prop})",
            "IDENTIFIER()",
        ),
    }

    for name, (statement, what) in attacks.items():
        _refused(capsys, name, statement, what)
    assert victim.stat().st_mode & 0o777 == 0o644 and victim.read_text() == "data"
    assert spark.sparkContext._jvm.java.lang.System.getProperty("backfill.sql.attack") is None

    # What Spark resolved is checked as well, before a query runs: the analysed plan of a
    # reflection call (analysing it runs nothing) is caught whatever its name was.
    gateway = spark.sparkContext._gateway
    analysed = spark.sql("SELECT upper(java_method('java.lang.String', 'valueOf', 1)) AS v")
    assert _calls_java(analysed._jdf.queryExecution().analyzed(), gateway)
    assert not _calls_java(
        spark.sql("SELECT upper('a') AS v")._jdf.queryExecution().analyzed(), gateway
    )


def test_direct_file_queries_are_refused(
    spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``format`.`path`` reads any file the process can read, whatever the format."""
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET\n")
    data = spark.createDataFrame([("SECRET",)], "s string")
    for fmt in ("parquet", "json", "csv", "orc"):
        data.write.format(fmt).save(str(tmp_path / fmt))
    what = "reading files directly"
    attacks = {
        "text": f"SELECT * FROM text.`{secret}`",
        "upper_case": f"SELECT * FROM TEXT.`{secret}`",
        "binary_file": f"SELECT * FROM binaryFile.`{secret}`",
        "class_name": "SELECT * FROM "
        f"`org.apache.spark.sql.execution.datasources.text.TextFileFormat`.`{secret}`",
        "xml": f"SELECT * FROM xml.`{secret}`",
        "avro_not_deployed": f"SELECT * FROM avro.`{secret}`",
        "delta_not_deployed": f"SELECT * FROM delta.`{tmp_path}`",
        "noop": f"SELECT * FROM noop.`{secret}`",  # a source Spark knows, not in our list
        **{
            fmt: f"SELECT * FROM {fmt}.`{tmp_path / fmt}`"
            for fmt in ("parquet", "json", "csv", "orc")
        },
        "identifier": f"SELECT * FROM IDENTIFIER('text.`{secret}`')",
        "in_a_cte": f"WITH s AS (SELECT * FROM text.`{secret}`) SELECT * FROM s",
        "in_a_subquery": f"SELECT 1 WHERE 'x' IN (SELECT value FROM Text.`{secret}`)",
        "in_a_join": f"SELECT * FROM range(1) JOIN csv.`{tmp_path / 'csv'}` ON true",
        "explained": f"EXPLAIN SELECT * FROM text.`{secret}`",
        "described": f"DESCRIBE TABLE text.`{secret}`",
    }
    for name, statement in attacks.items():
        _refused(capsys, name, statement, what)
    _refused(capsys, "message", f"SELECT * FROM text.`{secret}`", "query the tables")


def test_tables_and_names_like_a_format_or_a_denied_function_still_run(
    spark, capsys: pytest.CaptureFixture[str]
) -> None:
    # The published tables pass the check (it only parses: no table needs to exist).
    for statement in (
        "SELECT * FROM raw.payloads",
        "SELECT * FROM audit.publications ORDER BY recorded_at",
        "SELECT * FROM aggregated.sessions",
        "SELECT * FROM spark_catalog.aggregated.sessions",
        "SELECT s.* FROM aggregated.sessions AS s JOIN raw.payloads AS p ON true",
        "DESCRIBE aggregated.sessions",
        "SHOW TABLES IN aggregated",
    ):
        check_read_only(spark, statement)
    before = spark.conf.get("spark.sql.runSQLOnFiles")
    statement = (
        "SELECT reflect, text.parquet AS parquet, upper(text.text) AS up "
        "FROM (SELECT 'r' AS reflect, 'p' AS parquet, 't' AS text) AS text"
    )
    assert main(["sql", statement, "--format", "jsonl"]) == 0
    assert [json.loads(x) for x in capsys.readouterr().out.splitlines()] == [
        {"reflect": "r", "parquet": "p", "up": "T"}
    ]
    assert spark.conf.get("spark.sql.runSQLOnFiles") == before  # restored after the run


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE raw.payloads",
        "  -- a comment\n/* and another */ insert into raw.payloads select * from raw.payloads",
        "SET spark.sql.warehouse.dir=/tmp",
        "CACHE TABLE raw.payloads",
        "",
    ],
)
def test_a_statement_that_is_no_query_is_refused_before_spark_starts(
    statement, capsys, monkeypatch, tmp_path
):
    """Refused in one line without a Spark session: this test has no ``spark`` fixture, so
    a session started in this process fails it (``_no_second_spark_session``)."""
    for name in ("DAGSTER_HOME", "DATA_ROOT", "BACKUP_ROOT"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    assert main(["sql", statement]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refused, nothing was run" in err, err
    assert "is not a query" in err
