"""``backfill-assets halfcut``: what share of sessions a window of ±k hours rebuilds exactly."""

from __future__ import annotations

import argparse
import json

from backfill_assets.cli.main import CommandError

FORMATS = ("table", "json")
MAX_WINDOW_LIMIT = 24


def _window(text: str) -> int:
    """argparse type: a whole number of hours from 0 to ``MAX_WINDOW_LIMIT``."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_WINDOW_LIMIT:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number of hours from 0 to {MAX_WINDOW_LIMIT}"
        )
    return int(text)


def register(subparsers: argparse._SubParsersAction) -> None:
    text = (
        "for session hours --from..--to, the share of sessions that a window of 0..N "
        "hours each side rebuilds exactly, compared with sessions built from all "
        "published transformed payloads (choose the session window from data)"
    )
    p = subparsers.add_parser(
        "halfcut", help="measure how wide the session window must be", description=text
    )
    p.add_argument(
        "--from",
        dest="first",
        required=True,
        metavar="YYYY-MM-DDTHH",
        help="first session hour, UTC, inclusive",
    )
    p.add_argument(
        "--to",
        dest="last",
        required=True,
        metavar="YYYY-MM-DDTHH",
        help="last session hour, UTC, inclusive",
    )
    p.add_argument(
        "--max-window",
        type=_window,
        default=6,
        metavar="N",
        help="largest window to try, hours each side (default 6)",
    )
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pyspark.errors import PySparkException

    from backfill_assets.core.hours import InvalidHourError, hour_range
    from backfill_assets.core.spark.session import spark_session
    from backfill_assets.settings import Settings
    from backfill_assets_dev.analysis import halfcut

    try:
        hour_range(args.first, args.last)
    except InvalidHourError as exc:
        raise CommandError(str(exc)) from None
    spark = spark_session(Settings.from_env())
    try:
        report = halfcut.analyse_published(spark, args.first, args.last, args.max_window)
    except (ValueError, PySparkException) as exc:
        raise CommandError(str(exc).splitlines()[0]) from None
    if args.format == "json":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(halfcut.format_table(report))
    return 0
