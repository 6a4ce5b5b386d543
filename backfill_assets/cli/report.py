"""``backfill-assets report``: what a release read, wrote, published or held back, and why.

Prints the report of a release (``--backfill``: the Dagster backfill id, which is the
release id; ``--run``: the release that run belongs to, a run outside a backfill being a
release of its own): for every table and hour the release wrote, the candidate against what
is published (a dry run: what publishing it would change; after publishing: what it
replaced), sessions before and after, checks, time and held-back hours with their reasons.
It writes the same as Markdown with a PNG chart of rows per hour before and after into
``--out`` (default ``DATA_ROOT/reports/<id>``). For a dry run the report includes the
per-partition diff of every candidate against the published table (this starts Spark;
``--no-diff`` skips it).
"""

from __future__ import annotations

import argparse
import re

from backfill_assets.cli.main import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    text = (
        "report what a release (a backfill) read, wrote, published or held back and why, "
        "rows before and after per table and hour, checks, duration and throughput "
        "(text, Markdown, PNG)"
    )
    p = subparsers.add_parser(
        "report",
        description=text,
        help="report a release (backfill): what changed and why (text, Markdown, PNG chart)",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--run",
        metavar="RUN_ID",
        help="the release of this run (a run outside a backfill is its own release)",
    )
    which.add_argument(
        "--backfill",
        metavar="ID",
        help="the release: a Dagster backfill id (dry run or published)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="where to write report.md and rows_per_hour.png (default: DATA_ROOT/reports/<id>)",
    )
    p.add_argument(
        "--no-diff",
        dest="diff",
        action="store_false",
        help="skip the dry-run diff (which starts Spark)",
    )
    p.set_defaults(handler=run)


def progress_line(settings, release: str) -> str:
    """The release's progress (``release.pace``: hours built and checked of its target per
    layer, runs done, elapsed, time left while it runs), "" for no backfill of its own."""
    from backfill_assets.core.names import LAYERS
    from backfill_assets.definitions import build_definitions
    from backfill_assets.release import pace
    from backfill_assets.release.instance import get_instance

    graph = build_definitions(settings).resolve_asset_graph()
    progress = pace.release_progress(
        get_instance(settings), graph, settings.warehouse_dir, release, list(LAYERS.values())
    )
    return progress.line() if progress is not None else ""


def run(args: argparse.Namespace) -> int:
    from backfill_assets.core.names import LAYERS, Layer
    from backfill_assets.core.reporting.diff import DiffCounts, diff_layer
    from backfill_assets.release.instance import get_instance
    from backfill_assets.release.report import ReportError, build_report
    from backfill_assets.settings import Settings

    settings = Settings.from_env()
    sessions: list = []

    def diff(layer: Layer, version: str, hours: list[str]) -> dict[str, dict[str, DiffCounts]]:
        if not sessions:
            from backfill_assets.core.spark.session import spark_session

            sessions.append(spark_session(settings))
        return diff_layer(sessions[0], layer.pairs, version, hours)

    try:
        report = build_report(
            get_instance(settings),
            list(LAYERS.values()),
            run_id=args.run,
            backfill_id=args.backfill,
            diff=diff if args.diff else None,
        )
    except ReportError as exc:
        raise CommandError(str(exc)) from None
    if args.backfill:
        report.progress = progress_line(settings, args.backfill)
    ident = args.run or args.backfill
    out = args.out or f"{settings.reports_dir}/{re.sub(r'[^A-Za-z0-9_.-]', '_', ident)}"
    markdown, chart = report.write(out)
    print(report.text(), end="")
    print(f"\nwritten: {markdown} and {chart}")
    return 0
