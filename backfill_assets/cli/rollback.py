"""``backfill-assets rollback`` and ``verify``: undo a publish; check ledger vs metastore."""

from __future__ import annotations

import argparse

from backfill_assets.cli.main import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "rollback",
        help="roll back a release in every layer it published, in one transaction",
        description="Roll back a release (--backfill ID), or the release currently published "
        "at an hour (--hour H [--layer L]; repeat to walk further back). Runs as a Dagster "
        "run of the rollback_release job, so the UI and the sensor see it.",
    )
    p.add_argument("--backfill", dest="release", help="the release (backfill id) to roll back")
    p.add_argument("--hour", metavar="YYYY-MM-DDTHH", help="roll back the release live at H")
    p.add_argument("--layer", default="raw", help="the layer whose hour names the release")
    p.add_argument("--reason")
    p.add_argument("--ticket")
    p.add_argument("--requested-by")
    p.add_argument("--no-wait", action="store_true", help="submit and exit without following")
    p.set_defaults(handler=run_rollback)
    v = subparsers.add_parser(
        "verify",
        help="settle crashed publishes, check the ledger against the metastore, list orphans",
    )
    v.set_defaults(handler=run_verify)


def run_rollback(args: argparse.Namespace) -> int:
    import getpass

    from backfill_assets.cli.backfill import _context, _follow
    from backfill_assets.core import tags
    from backfill_assets.core.hours import InvalidHourError, parse_hour
    from backfill_assets.core.names import LAYERS
    from backfill_assets.defs.jobs.rollback import ROLLBACK_JOB
    from backfill_assets.release import launch

    if args.layer not in LAYERS:
        raise CommandError(f"unknown layer {args.layer!r}; choose from {', '.join(LAYERS)}")
    try:
        if args.release:
            tags.validate_release_id(args.release)
        elif args.hour:
            parse_hour(args.hour)
        else:
            raise CommandError("name the release (--backfill ID) or an hour (--hour H)")
    except (InvalidHourError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    requested_by = args.requested_by or getpass.getuser()
    config = {
        "release_id": args.release or "",
        "hour": args.hour or "",
        "layer": args.layer,
        "reason": args.reason or "",
        "ticket": args.ticket or "",
        "requested_by": requested_by,
    }
    settings, instance = _context(args)
    refuse_unpublished(settings, args.release, args.hour, LAYERS[args.layer])
    try:
        run_id = launch.submit_run(
            settings,
            ROLLBACK_JOB,
            {"ops": {"rollback_op": {"config": config}}},
            {tags.MODE: "rollback", tags.REQUESTED_BY: requested_by},
        )
    except launch.LaunchError as exc:
        raise CommandError(str(exc)) from None
    print(f"submitted rollback run {run_id}")
    if args.no_wait:
        return 0
    return _follow(settings, instance, "rollback", run_id=run_id)


def refuse_unpublished(settings, release: str | None, hour: str | None, layer) -> None:
    """Refuse, before anything is submitted, to roll back a release the ledger has no
    committed publication of (an unknown id, a dry run never published), or an hour where
    nothing of the layer was ever published."""
    from backfill_assets.core.warehouse import audit
    from backfill_assets.core.warehouse.ledger import COMMIT, PUBLISH

    where = {"mode": PUBLISH, "phase": COMMIT}
    if release:
        where["backfill_id"] = release
    else:
        where.update(hour=hour, table_name=list(layer.tables))
    if audit.rows(settings.warehouse_dir, audit.PUBLICATIONS, where):
        return
    if release:
        raise CommandError(
            f"release {release} has no publication in the ledger: nothing to roll back "
            f"(is the id right? `backfill-assets report --backfill {release}` shows what a "
            f"release did)"
        )
    raise CommandError(
        f"nothing of the {layer.name} layer was ever published at {hour}: nothing to roll back"
    )


def run_verify(args: argparse.Namespace) -> int:
    from backfill_assets.core.names import LAYERS
    from backfill_assets.core.spark.session import spark_session
    from backfill_assets.core.warehouse import database, publisher
    from backfill_assets.settings import Settings

    settings = Settings.from_env()
    # the ledger database itself first (integrity, schema revision), before Spark starts
    print(database.health(settings.warehouse_dir))
    spark = spark_session(settings)
    layers = list(LAYERS.values())
    tables = publisher.published_tables(layers)
    # Every layer's publish fence while settling: a pending transaction of a layer another
    # run is publishing is that run's, between two swaps, not a crashed one.
    with database.fence(settings.warehouse_dir, [layer.name for layer in layers]):
        settled = publisher.recover(spark, settings.warehouse_dir, tables)
    for e in settled:
        print(
            f"settled crashed transaction {e['txn_id']}: {e['table_name']} hour={e['hour']} "
            f"{e['phase']}"
        )
    problems = publisher.verify(spark, tables)
    for problem in problems:
        print(f"DISAGREES: {problem}")
    orphans = publisher.orphan_versions(spark)
    for o in orphans:
        print(
            f"orphan shadow version: {o['table_name']} version={o['version']} "
            f"release={o['release_id']} ({o['hours']} hour(s), {o['rows']:,} rows; never "
            f"published)"
        )
    print(
        f"ledger and metastore {'agree' if not problems else 'disagree'} on {', '.join(tables)}; "
        f"{len(orphans)} orphan shadow version(s)"
    )
    return 1 if problems else 0
