"""``backfill-assets sql``: query the published tables and the ledger (read-only)."""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys

from backfill_assets.cli.main import CommandError

_READ_ONLY = re.compile(r"^\s*(select|with|show|describe|desc|explain)\b", re.IGNORECASE)
FORMATS = ("table", "csv", "jsonl")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sql",
        help="run a read-only Spark SQL query on the tables and the ledger",
        description="Examples: SELECT hour, count(*) FROM raw.payloads GROUP BY hour; "
        "SELECT * FROM audit.publications ORDER BY recorded_at",
    )
    p.add_argument("query", help="SELECT / WITH / SHOW / DESCRIBE / EXPLAIN statement")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(handler=run)


def _plain(value: object) -> object:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def run(args: argparse.Namespace) -> int:
    if not _READ_ONLY.match(args.query) or ";" in args.query.strip().rstrip(";"):
        raise CommandError("only one read-only statement (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN)")
    from pyspark.errors import PySparkException

    from backfill_assets.resources.spark import spark_session
    from backfill_assets.settings import Settings

    spark = spark_session(Settings.from_env())
    try:
        df = spark.sql(args.query.strip().rstrip(";"))
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
    return 0
