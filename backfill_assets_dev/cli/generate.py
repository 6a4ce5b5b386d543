"""``backfill-assets generate`` and ``backfill-assets land``: synthetic backup trees.

``generate`` writes a backup tree that follows ``shared/backup-format.md`` (with ground
truth under ``_truth/``); ``land`` moves the folders it held back into ``raw/``, as a late
upload of the backup tool would. The generator is imported inside the handlers so that
``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from backfill_assets.cli.main import CommandError
from backfill_assets.settings import Settings

logger = logging.getLogger(__name__)

DEFAULT_START = "2026-11-20T00"


def _rate(text: str) -> float:
    """argparse type: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def _at_least(minimum: int) -> Callable[[str], int]:
    """argparse type factory: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


def _hour(text: str) -> str:
    """argparse type: an hour key ``YYYY-MM-DDTHH`` (UTC)."""
    from backfill_assets.core.hours import InvalidHourError, parse_hour  # imports dagster

    try:
        parse_hour(text)
    except InvalidHourError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``generate`` and ``land`` subcommands."""
    gen = subparsers.add_parser(
        "generate",
        help="write a synthetic backup tree (with ground truth) for tests and demos",
        description=(
            "Write <out>/raw/date=.../hour=../client_id=N/part-NNNNN.jsonl.zst and "
            "_MANIFEST.json as the backup tool would, plus the ground truth under "
            "<out>/_truth. Same arguments, same bytes."
        ),
    )
    target = gen.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", metavar="PATH", help="the folder to write the tree into")
    target.add_argument(
        "--into-backup-root",
        action="store_true",
        help="write into the configured BACKUP_ROOT (backups are read-only input: only "
        "with this flag does the generator write there)",
    )
    gen.add_argument(
        "--start",
        type=_hour,
        default=DEFAULT_START,
        metavar="YYYY-MM-DDTHH",
        help=f"first hour, UTC (default {DEFAULT_START})",
    )
    gen.add_argument("--hours", type=_at_least(1), default=24, help="hours to write (default 24)")
    gen.add_argument("--clients", type=_at_least(1), default=4, help="clients 1..N (default 4)")
    gen.add_argument(
        "--users-per-client", type=_at_least(1), default=200, help="visitors per client (200)"
    )
    gen.add_argument("--seed", type=_at_least(0), default=7, help="random seed (default 7)")
    for flag, default, what in (
        ("--malformed-rate", 0.002, "share of lines that are malformed"),
        ("--duplicate-rate", 0.01, "share of payloads delivered twice"),
        ("--late-hours-rate", 0.03, "share of payloads arriving 1-6 hours late"),
        ("--late-days-rate", 0.002, "share of payloads arriving 1-7 days late"),
        ("--clock-ahead-rate", 0.01, "share of users whose browser clock runs 1-5 min ahead"),
        ("--v2-share", 0.5, "share of payloads in schema version 2"),
    ):
        gen.add_argument(
            flag, type=_rate, default=default, metavar="RATE", help=f"{what} ({default})"
        )
    gen.add_argument(
        "--hold-back",
        nargs="+",
        action="extend",
        default=[],
        metavar="SPEC",
        help="write these folders under _held_back/ (YYYY-MM-DDTHH for all clients, "
        "YYYY-MM-DDTHH/<client_id> for one); land them later with `backfill-assets land`",
    )
    gen.add_argument(
        "--records-per-file", type=_at_least(1), default=5000, help="lines per part file (5000)"
    )
    gen.add_argument(
        "--workers", type=_at_least(1), help="processes (default: CPUs, up to clients)"
    )
    gen.add_argument("--no-truth", action="store_true", help="do not write <out>/_truth")
    gen.add_argument(
        "--force",
        action="store_true",
        help="delete <out>/raw, <out>/_held_back and <out>/_truth first (only in a tree "
        "the generator wrote: it marks its trees; a foreign file stops it)",
    )
    gen.set_defaults(handler=run_generate)

    land = subparsers.add_parser(
        "land",
        help="move held-back folders of a generated tree into raw/",
        description="Move <root>/_held_back/raw/... into <root>/raw/..., part files first and "
        "the manifest last.",
    )
    where = land.add_mutually_exclusive_group(required=True)
    where.add_argument("--root", metavar="PATH", help="the generated tree to land folders in")
    where.add_argument(
        "--into-backup-root",
        action="store_true",
        help="land in the configured BACKUP_ROOT (a tree the generator wrote)",
    )
    land.set_defaults(handler=run_land)


def run_generate(args: argparse.Namespace) -> int:
    """Handler of ``generate``."""
    from backfill_assets_dev.generator import GeneratorError, generate_backups

    out = args.out or Settings.from_env().backup_root  # --into-backup-root
    try:
        summary = generate_backups(
            out,
            start=args.start,
            hours=args.hours,
            clients=args.clients,
            users_per_client=args.users_per_client,
            seed=args.seed,
            malformed_rate=args.malformed_rate,
            duplicate_rate=args.duplicate_rate,
            late_hours_rate=args.late_hours_rate,
            late_days_rate=args.late_days_rate,
            clock_ahead_rate=args.clock_ahead_rate,
            v2_share=args.v2_share,
            hold_back=list(args.hold_back),
            records_per_file=args.records_per_file,
            write_truth=not args.no_truth,
            workers=args.workers,
            force=args.force,
        )
    except GeneratorError as exc:
        raise CommandError(str(exc)) from None
    print(summary.describe())
    print(f"backup root: {out}")
    return 0


def run_land(args: argparse.Namespace) -> int:
    """Handler of ``land``."""
    from backfill_assets_dev.generator import GeneratorError, land_held_back

    root = args.root or Settings.from_env().backup_root  # --into-backup-root
    try:
        moved = land_held_back(root)
    except GeneratorError as exc:
        raise CommandError(str(exc)) from None
    if not moved:
        print(f"nothing held back under {root}")
        return 0
    for rel in moved:
        print(f"landed {rel}")
    print(f"{len(moved)} folder(s) landed under {root}")
    return 0
