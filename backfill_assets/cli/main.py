"""``backfill-assets``: the operator's command line.

Each subcommand lives in its own module with ``register(subparsers)``; heavy imports
(Spark, Dagster) happen inside the handlers so ``--help`` and ``generate`` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

SUBCOMMAND_MODULES = (
    "generate",
    "backfill",
    "sql",
    "rollback",
    "halfcut",
    "reconcile",
    "report",
    "demo",
    "bench",
)


class CommandError(Exception):
    """A problem the operator can fix; printed without a stack trace, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="backfill-assets",
        description="Rebuild damaged hours from backups with Dagster + PySpark, safely.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"backfill_assets.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        return int(args.handler(args) or 0)
    except CommandError as exc:
        print(f"backfill-assets {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
