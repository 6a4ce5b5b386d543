"""``backfill-assets``: the operator's command line.

Each module of ``SUBCOMMAND_MODULES`` registers its subcommands with
``register(subparsers)`` (one, or a family: ``backfill`` also ``publish`` and ``approve``,
``generate`` also ``land``, ``rollback`` also ``verify``, ``resume`` also ``pause``); heavy
imports (Spark, Dagster) happen inside the handlers so ``--help`` and ``generate`` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from backfill_assets.cli.interrupts import Interrupts, exit_status
from backfill_assets.core.warehouse.ledger_file import LedgerUnavailable
from backfill_assets.settings import SettingsError, check_environment

# Subcommand modules: of this package, or (the development commands, by their commands) of
# the development package, which the code location's image does not carry.
SUBCOMMAND_MODULES = (
    "backfill_assets_dev.cli.generate",
    "backfill_assets.cli.backfill",
    "backfill_assets.cli.cancel",
    "backfill_assets.cli.resume",  # also pause
    "backfill_assets.cli.sql",
    "backfill_assets.cli.rollback",
    "backfill_assets.cli.vacuum",
    "backfill_assets.cli.erase",
    "backfill_assets_dev.cli.halfcut",
    "backfill_assets.cli.reconcile",
    "backfill_assets.cli.report",
    "backfill_assets_dev.cli.demo",
    "backfill_assets_dev.cli.bench",
)
DEV_PACKAGE = "backfill_assets_dev"
DEV_COMMANDS = {
    "backfill_assets_dev.cli.generate": ("generate", "land"),
    "backfill_assets_dev.cli.halfcut": ("halfcut",),
    "backfill_assets_dev.cli.demo": ("demo",),
    "backfill_assets_dev.cli.bench": ("bench",),
}


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
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != DEV_PACKAGE:
                raise
            for command in DEV_COMMANDS[name]:
                _register_missing(subparsers, command)
        else:
            module.register(subparsers)
    return parser


def _register_missing(subparsers: argparse._SubParsersAction, command: str) -> None:
    """A development command where the development package is not installed (the image)."""

    def handler(args: argparse.Namespace) -> int:
        raise CommandError(
            f"a development command: its package {DEV_PACKAGE} is not installed here "
            "(install the repository for development: make install)"
        )

    p = subparsers.add_parser(command, help=f"(development; needs {DEV_PACKAGE})")
    p.set_defaults(handler=handler, validate=handler, missing_dev=True)  # before any preflight


def _check_text_limits(args: argparse.Namespace) -> None:
    """A reason, ticket or requester past its limit is refused before anything is asked of
    Dagster or Spark (one line, exit code 2)."""
    from backfill_assets.core import tags

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
    from backfill_assets.core.hours import InvalidHourError, hour_range
    from backfill_assets.core.spark import preflight
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


# Loggers at WARNING unless --verbose (alembic says "Context impl SQLiteImpl" at every start).
QUIET_LOGGERS = ("alembic", "pandera", "py4j")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "missing_dev", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not args.verbose:  # the libraries' progress lines are not the operator's
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    with Interrupts():  # SIGTERM unwinds as Ctrl-C does: what the command started stops
        try:
            check_environment()  # a bad variable is named now, not deep in a run
            _preflight(args)
            return int(args.handler(args) or 0)
        except (CommandError, LedgerUnavailable, SettingsError) as exc:  # ledger missing/down
            print(f"backfill-assets {args.command}: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM
            print(f"backfill-assets {args.command}: interrupted", file=sys.stderr)
            return exit_status(exc)


if __name__ == "__main__":
    sys.exit(main())
