"""``backfill-assets sql``: query the published tables and the ledger (read-only).

Read-only by construction: the statement is parsed by Spark's own parser and run only if
every node of its plan (children, CTE definitions, subqueries, the plan an ``EXPLAIN``
explains) is on an allow-list of query operators or of metadata reads (``SHOW``,
``DESCRIBE``). Anything else (an ``INSERT`` hidden behind a ``WITH``, DDL, ``SET``,
``CACHE``, a SQL script, two statements) is refused before Spark runs anything, and so
are the functions that call arbitrary Java methods (``reflect``, ``java_method``, however
qualified or cased, e.g. ``system.builtin.REFLECT``), a function or column named through
``IDENTIFIER()``, and direct file queries (``SELECT * FROM text.`/etc/hostname```: a
table name whose namespace is a data source reads any file the process can read).

Two more checks when the statement runs: Spark's own direct file queries are switched off
(``spark.sql.runSQLOnFiles``), and a query whose analysed plan calls a Java method by
reflection is refused before it runs, whatever name the call was written with.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from typing import TYPE_CHECKING, Any

from backfill_assets.cli.main import CommandError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMATS = ("table", "csv", "jsonl")
_CATALYST = "org.apache.spark.sql.catalyst."
_LOGICAL_PLAN = f"{_CATALYST}plans.logical.LogicalPlan"
# Logical-plan operators of a query, as Spark's parser produces them (unresolved).
QUERY_NODES = frozenset(
    {
        "Aggregate",
        "CTERelationRef",
        "CurrentNamespace$",
        "Deduplicate",
        "Distinct",
        "Except",
        "Expand",
        "Filter",
        "Generate",
        "GlobalLimit",
        "Intersect",
        "Join",
        "LateralJoin",
        "LimitAll",
        "LocalLimit",
        "LocalRelation",
        "Offset",
        "OneRowRelation",
        "PipeOperator",
        "Pivot",
        "Project",
        "Range",
        "RebalancePartitions",
        "Repartition",
        "RepartitionByExpression",
        "Sample",
        "Sort",
        "SubqueryAlias",
        "Tail",
        "Union",
        "Unpivot",
        "UnresolvedHaving",
        "UnresolvedHint",
        "UnresolvedInlineTable",
        "UnresolvedNamespace",
        "UnresolvedRelation",
        "UnresolvedSubqueryColumnAliases",
        "UnresolvedTVFAliases",
        "UnresolvedTable",
        "UnresolvedTableOrView",
        "UnresolvedTableValuedFunction",
        "UnresolvedFunctionName",
        "UnresolvedWith",
        "Window",
        "WithWindowDefinition",
    }
)
# Metadata reads: they only list or describe what the catalog holds.
METADATA_NODES = frozenset(
    {
        "DescribeColumn",
        "DescribeFunction",
        "DescribeNamespace",
        "DescribeRelation",
        "ShowColumns",
        "ShowCreateTable",
        "ShowFunctions",
        "ShowNamespaces",
        "ShowPartitions",
        "ShowTableProperties",
        "ShowTables",
        "ShowTablesExtended",
        "ShowViews",
    }
)
# Commands whose class lives outside catalyst but that only read.
_READ_COMMANDS = frozenset(
    {
        "org.apache.spark.sql.execution.command.ShowNamespacesCommand",
        "org.apache.spark.sql.execution.command.ExplainCommand",
    }
)
# Functions that call any static Java method (e.g. Hadoop's FileUtil.chmod on a path),
# matched on the last part of the name, lower-cased: Spark resolves ``builtin.reflect``,
# ``system.builtin.REFLECT`` and ``reflect`` to the same function. (An allow-list of the
# ~500 built-in functions would change with every Spark release; these three are the
# built-ins that reach arbitrary Java code.)
DENIED_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect"})
# Their resolved expressions (``try_reflect`` wraps ``CallMethodViaReflection``).
_REFLECTION = f"{_CATALYST}expressions.CallMethodViaReflection"
# Parsed plan nodes that name a table: ``format`.`path`` there is a direct file query.
_TABLE_NAMES = frozenset({"UnresolvedRelation", "UnresolvedTable", "UnresolvedTableOrView"})
# Data sources a direct file query may name (Spark's short names, lower-cased), whether or
# not their package is deployed here; any other name Spark resolves to a data source (a
# class name included) is refused too, see ``_is_data_source``.
DATA_SOURCES = frozenset(
    {
        "avro",
        "binaryfile",
        "csv",
        "delta",
        "hive",
        "hudi",
        "iceberg",
        "image",
        "jdbc",
        "json",
        "kafka",
        "libsvm",
        "orc",
        "parquet",
        "protobuf",
        "text",
        "xml",
    }
)
_RUN_SQL_ON_FILES = "spark.sql.runSQLOnFiles"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sql",
        help="run a read-only Spark SQL query on the tables and the ledger",
        description="Examples: SELECT hour, count(*) FROM raw.payloads GROUP BY hour; "
        "SELECT * FROM audit.publications ORDER BY recorded_at. One statement; queries, "
        "SHOW, DESCRIBE and EXPLAIN only (anything that writes is refused before it runs).",
    )
    p.add_argument("query", help="one SELECT / WITH / SHOW / DESCRIBE / EXPLAIN statement")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(handler=run)


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _functions(expression: Any) -> list[str]:
    """Names, as written, of the (unresolved) functions called anywhere in ``expression``;
    ``IDENTIFIER()`` for a name given by an ``IDENTIFIER(...)`` clause."""
    names = []
    simple = expression.getClass().getSimpleName()
    if simple == "UnresolvedFunction":
        names.append(".".join(str(part) for part in _seq(expression.nameParts())))
    elif simple == "ExpressionWithUnresolvedIdentifier":
        names.append("IDENTIFIER()")
    for child in _seq(expression.children()):
        names.extend(_functions(child))
    return names


def _is_data_source(name: str, spark: SparkSession) -> bool:
    """Whether Spark would read ``name`.`path`` as a file of data source ``name``."""
    if name.lower() in DATA_SOURCES or "." in name:  # a short name or a class name
        return True
    jvm = spark.sparkContext._jvm
    data_source = jvm.org.apache.spark.sql.execution.datasources.DataSource
    try:
        data_source.lookupDataSource(name, spark._jsparkSession.sessionState().conf())
    except Exception as exc:  # anything but "not found" counts as a data source
        return "[DATA_SOURCE_NOT_FOUND]" not in str(exc)
    return True


def _refusal(plan: Any, spark: SparkSession) -> str | None:
    """Why ``plan`` (a parsed logical plan, a py4j object) is not read-only, or None."""
    from py4j.java_gateway import is_instance_of

    cls = plan.getClass()
    name, simple = cls.getName(), cls.getSimpleName()
    if name in _READ_COMMANDS:
        if simple == "ExplainCommand":
            return _refusal(plan.logicalPlan(), spark)
    elif not (name.startswith(_CATALYST) and simple in QUERY_NODES | METADATA_NODES):
        return f"{simple.rstrip('$')} is not a read-only query"
    if simple in _TABLE_NAMES:
        parts = [str(part) for part in _seq(plan.multipartIdentifier())]
        if len(parts) == 2 and _is_data_source(parts[0], spark):
            return (
                f"reading files directly ({parts[0]}.`{parts[1]}`) is not allowed: query the tables"
            )
    for expression in _seq(plan.expressions()):
        for function in _functions(expression):
            if function == "IDENTIFIER()":
                return "IDENTIFIER() in an expression is not allowed: name the column or function"
            if function.rsplit(".", 1)[-1].lower() in DENIED_FUNCTIONS:
                return f"function {function}() calls arbitrary Java code"
    for getter in ("children", "innerChildren", "subqueries"):
        for child in _seq(getattr(plan, getter)()):
            if not is_instance_of(spark.sparkContext._gateway, child, _LOGICAL_PLAN):
                continue  # an inner child that is not a plan (e.g. a schema)
            reason = _refusal(child, spark)
            if reason:
                return reason
    return None


def _calls_java(node: Any, gateway: Any) -> bool:
    """Whether an analysed plan or expression (py4j) calls a Java method by reflection:
    the check on what Spark resolved, whatever the statement named."""
    from py4j.java_gateway import is_instance_of

    if is_instance_of(gateway, node, _REFLECTION):
        return True
    nodes = _seq(node.children())
    if is_instance_of(gateway, node, _LOGICAL_PLAN):
        nodes += _seq(node.expressions()) + _seq(node.subqueries())
        nodes += [
            c for c in _seq(node.innerChildren()) if is_instance_of(gateway, c, _LOGICAL_PLAN)
        ]
    return any(_calls_java(child, gateway) for child in nodes)


def _refuse(reason: str) -> CommandError:
    return CommandError(
        f"refused, nothing was run: {reason}. `sql` is read-only (one SELECT / WITH / "
        f"SHOW / DESCRIBE / EXPLAIN statement); published tables and the ledger change "
        f"only through backfill, publish and rollback"
    )


# What a read-only statement starts with (its first keyword, after comments): anything else
# (INSERT, CREATE, DROP, SET, CACHE, ...) is refused before a Spark session starts. Spark's
# parser then judges the statements that start so (``check_read_only``): the authority.
READ_ONLY_STARTS = ("SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "VALUES", "TABLE",
                    "FROM", "(")  # fmt: skip
_LEADING = re.compile(r"\s+|--[^\n]*|/\*.*?\*/", re.DOTALL)  # whitespace and comments
_FIRST_WORD = re.compile(r"\(|[A-Za-z_]+")


def first_keyword(statement: str) -> str:
    """The statement's first keyword in upper case (``(`` for a parenthesized query), after
    whitespace and comments; "" if there is none."""
    position = 0
    while match := _LEADING.match(statement, position):
        position = match.end()
    word = _FIRST_WORD.match(statement, position)
    return word.group(0).upper() if word else ""


def precheck(statement: str) -> None:
    """Refuse, without Spark, a statement whose first keyword no read-only statement has."""
    keyword = first_keyword(statement)
    if keyword not in READ_ONLY_STARTS:
        raise _refuse(f"a statement starting with {keyword or 'nothing'!r} is not a query")


def check_read_only(spark: SparkSession, statement: str) -> None:
    """Parse ``statement`` with Spark's parser; CommandError unless it is one read-only
    statement. Nothing is analysed or run here."""
    from pyspark.errors import PySparkException

    try:
        plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(statement)
    except PySparkException as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        first = lines[0].strip() if lines else "cannot parse the statement"
        raise CommandError(
            f"not one valid statement ({first}); `sql` runs exactly one read-only statement"
        ) from None
    reason = _refusal(plan, spark)
    if reason:
        raise _refuse(reason)


def _plain(value: object) -> object:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


JDBC_CATALOG = "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog"


def ledger_catalog(spark: SparkSession, warehouse_dir: str) -> None:
    """The ledger database as Spark's catalog ``audit``: ``audit.publications`` and the other
    audit tables are read from it through JDBC, joinable with the published tables."""
    from backfill_assets.core.warehouse import database
    from backfill_assets.core.warehouse.tables import AUDIT_DB

    spark.conf.set(f"spark.sql.catalog.{AUDIT_DB}", JDBC_CATALOG)
    for key, value in database.jdbc_options(warehouse_dir).items():
        spark.conf.set(f"spark.sql.catalog.{AUDIT_DB}.{key}", value)


def run(args: argparse.Namespace) -> int:
    from pyspark.errors import PySparkException

    from backfill_assets.core.spark.session import spark_session
    from backfill_assets.settings import Settings

    precheck(args.query)  # most refusals need no Spark session
    settings = Settings.from_env()
    spark = spark_session(settings)
    check_read_only(spark, args.query)
    ledger_catalog(spark, settings.warehouse_dir)
    run_sql_on_files = spark.conf.get(_RUN_SQL_ON_FILES)
    spark.conf.set(_RUN_SQL_ON_FILES, "false")  # Spark refuses `format`.`path` as well
    try:
        df = spark.sql(args.query)  # a query is analysed here and runs when rows are read
        if _calls_java(df._jdf.queryExecution().analyzed(), spark.sparkContext._gateway):
            raise _refuse("the query calls a Java method by reflection")
        columns = df.columns
        rows = df.toLocalIterator()
        if args.format == "jsonl":
            for row in rows:
                print(json.dumps({c: _plain(v) for c, v in zip(columns, row, strict=True)}))
        elif args.format == "csv":
            writer = csv.writer(sys.stdout)
            writer.writerow(columns)
            for row in rows:
                writer.writerow([_plain(v) for v in row])
        else:
            materialized = [[str(_plain(v)) for v in row] for row in rows]
            widths = [
                max([len(c)] + [len(r[i]) for r in materialized]) for i, c in enumerate(columns)
            ]
            print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
            for r in materialized:
                print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
            print(f"({len(materialized)} row(s))")
    except PySparkException as exc:
        raise CommandError(str(exc).splitlines()[0]) from None
    finally:
        spark.conf.set(_RUN_SQL_ON_FILES, run_sql_on_files)
    return 0
