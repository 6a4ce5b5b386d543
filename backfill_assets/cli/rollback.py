"""``backfill-assets rollback`` and ``verify``: undo a publish; check ledger vs metastore."""

from __future__ import annotations

import argparse

from backfill_assets.cli.main import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "rollback",
        help="swap a layer's partitions of an hour back to their previous version",
    )
    p.add_argument("--layer", required=True, help="layer name, e.g. raw")
    p.add_argument(
        "--hour",
        required=True,
        action="append",
        metavar="YYYY-MM-DDTHH",
        help="hour to roll back (repeatable)",
    )
    p.add_argument("--reason")
    p.add_argument("--ticket")
    p.add_argument("--requested-by")
    p.set_defaults(handler=run_rollback)
    v = subparsers.add_parser(
        "verify",
        help="settle crashed publishes and check that the ledger agrees with the metastore",
    )
    v.set_defaults(handler=run_verify)


def run_rollback(args: argparse.Namespace) -> int:
    import getpass
    import uuid

    from backfill_assets.layers.registry import LAYERS
    from backfill_assets.partitions import InvalidHourError, parse_hour
    from backfill_assets.publishing import publisher
    from backfill_assets.resources.spark import spark_session
    from backfill_assets.settings import Settings

    if args.layer not in LAYERS:
        raise CommandError(f"unknown layer {args.layer!r}; choose from {', '.join(LAYERS)}")
    try:
        for hour in args.hour:
            parse_hour(hour)
    except InvalidHourError as exc:
        raise CommandError(str(exc)) from None
    settings = Settings.from_env()
    spark = spark_session(settings)
    manifest = {
        "reason": args.reason,
        "ticket": args.ticket,
        "requested_by": args.requested_by or getpass.getuser(),
    }
    operation = f"rollback-{uuid.uuid4().hex[:12]}"
    for hour in args.hour:
        try:
            events = publisher.rollback(
                spark,
                settings.warehouse_dir,
                LAYERS[args.layer],
                hour,
                run_id=operation,
                manifest=manifest,
            )
        except publisher.PublishError as exc:
            raise CommandError(str(exc)) from None
        for e in events:
            print(
                f"rolled back {e['table_name']} hour={hour}: {e['previous_location']} -> "
                f"{e['new_location'] or '(no partition)'}"
            )
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from backfill_assets.layers.registry import LAYERS
    from backfill_assets.publishing import publisher
    from backfill_assets.resources.spark import spark_session
    from backfill_assets.settings import Settings

    settings = Settings.from_env()
    spark = spark_session(settings)
    settled = publisher.recover(spark, settings.warehouse_dir)
    for e in settled:
        print(f"settled crashed publish of {e['table_name']} hour={e['hour']}: {e['phase']}")
    tables = [t for layer in LAYERS.values() for _, t in layer.pairs]
    problems = publisher.verify(spark, tables)
    for problem in problems:
        print(f"DISAGREES: {problem}")
    print(f"ledger and metastore {'agree' if not problems else 'disagree'} on {', '.join(tables)}")
    return 1 if problems else 0
