"""``backfill-assets``: the operator's command line.

Each module of ``SUBCOMMAND_MODULES`` registers its subcommands with
``register(subparsers)`` (one, or a family: ``backfill`` also ``publish`` and ``approve``,
``generate`` also ``land``, ``rollback`` also ``verify``); heavy imports
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
    "cancel",
    "sql",
    "rollback",
    "vacuum",
    "erase",
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


def _check_text_limits(args: argparse.Namespace) -> None:
    """A reason, ticket or requester past its limit is refused before anything is asked of
    Dagster or Spark (one line, exit code 2)."""
    from backfill_assets import tags

    names = {
        tags.REASON: "--reason",
        tags.TICKET: "--ticket",
        tags.REQUESTED_BY: "--by" if args.command == "approve" else "--requested-by",
    }
    values = {
        tags.REASON: getattr(args, "reason", None),
        tags.TICKET: getattr(args, "ticket", None),
        tags.REQUESTED_BY: getattr(args, "requested_by", None),
    }
    try:
        tags.check_text_limits(values, names)
    except tags.OperatorTextError as exc:
        raise CommandError(str(exc)) from None


def _preflight(args: argparse.Namespace) -> None:
    """Fail in seconds, in one line, on what the command would otherwise meet deep in
    Spark (paths, permissions, a metastore in use, a missing backup tree)."""
    from backfill_assets import preflight
    from backfill_assets.partitions import InvalidHourError, hour_range
    from backfill_assets.settings import Settings

    _check_text_limits(args)
    validate = getattr(args, "validate", None)
    if validate is not None:  # the command's own arguments, before the environment
        validate(args)
    needs = preflight.needs_of(args.command, vars(args))
    if not needs:
        return
    try:
        first, last = getattr(args, "first", None), getattr(args, "last", None)
        if first and last:
            hour_range(first, last)  # a bad argument is named before the environment
        preflight.check(Settings.from_env(), needs)
    except (preflight.PreflightError, InvalidHourError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        _preflight(args)
        return int(args.handler(args) or 0)
    except CommandError as exc:
        print(f"backfill-assets {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
