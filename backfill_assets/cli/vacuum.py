"""``backfill-assets vacuum``: retention of shadow versions, as a run of the vacuum job."""

from __future__ import annotations

import argparse

from backfill_assets.cli.main import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    from backfill_assets.core.warehouse import retention

    p = subparsers.add_parser(
        "vacuum",
        help="delete old unpublished and deeply superseded shadow versions (--dry-run lists)",
        description="Delete shadow versions nobody can publish or roll back to any more: "
        "unpublished ones (dry runs, rolled back) older than --max-age-days and superseded "
        "ones deeper than --rollback-depth beneath each published hour. Never a published "
        "version or a rollback target. Each deletion is recorded in audit.deletions. Runs "
        "as a Dagster run of the vacuum job (its schedule, vacuum_daily, runs the same).",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would go, with sizes")
    p.add_argument(
        "--max-age-days",
        type=float,
        default=retention.DEFAULT_MAX_AGE_DAYS,
        help="age beyond which unpublished versions go (default %(default)g)",
    )
    p.add_argument(
        "--rollback-depth",
        type=int,
        default=retention.DEFAULT_ROLLBACK_DEPTH,
        help="superseded versions kept beneath each published hour (default %(default)s)",
    )
    p.set_defaults(handler=run_vacuum, validate=validate)


def validate(args: argparse.Namespace) -> None:
    if args.max_age_days < 0 or args.rollback_depth < 0:
        raise CommandError("--max-age-days and --rollback-depth must not be negative")


def run_vacuum(args: argparse.Namespace) -> int:
    from backfill_assets.cli.backfill import run_job
    from backfill_assets.core import tags
    from backfill_assets.defs.jobs.vacuum import VACUUM_JOB, VACUUM_OP

    note = " (dry run)" if args.dry_run else ""
    return run_job(
        args, VACUUM_JOB, VACUUM_OP, vacuum_config(args), {tags.MODE: "vacuum"}, "vacuum", note
    )


def vacuum_config(args: argparse.Namespace) -> dict:
    """The vacuum op's config (``defs.jobs.vacuum.VacuumConfig``) from the arguments."""
    return {
        "dry_run": bool(args.dry_run),
        "max_age_days": float(args.max_age_days),
        "rollback_depth": int(args.rollback_depth),
    }
