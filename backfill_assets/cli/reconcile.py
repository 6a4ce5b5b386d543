"""``backfill-assets reconcile``: the reconciliation sensor's comparison, on demand.

Prints the findings per hour (and client) and the ranges the sensor would request, and
launches nothing. The published state comes from the same place the sensor reads it,
Dagster's asset records (``--source dagster``, no Spark); ``--source ledger`` reads the
publication ledger instead (Spark), which also sees rollbacks made with the CLI. Exit code
0 when nothing needs a backfill, 1 when something does.
"""

from __future__ import annotations

import argparse
import json

from backfill_assets.cli.main import CommandError

SOURCES = ("dagster", "ledger")
FORMATS = ("text", "json")


def register(subparsers: argparse._SubParsersAction) -> None:
    text = (
        "compare the closed backup manifests with what is published and print the "
        "findings and the ranges the reconciliation sensor would request (launches "
        "nothing)"
    )
    p = subparsers.add_parser(
        "reconcile",
        description=text,
        help="compare backups with what is published; print what the sensor would request",
    )
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument(
        "--source",
        choices=SOURCES,
        default="dagster",
        help="published state from Dagster's records, as the sensor (default), or "
        "from the ledger database (neither starts Spark)",
    )
    p.add_argument(
        "--from",
        dest="first",
        metavar="YYYY-MM-DDTHH",
        help="first hour to compare (default: the newest "
        "BACKFILL_RECONCILE_WINDOW_HOURS hours of the backup tree)",
    )
    p.add_argument("--to", dest="last", metavar="YYYY-MM-DDTHH", help="last hour to compare")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from backfill_assets.core.hours import InvalidHourError, hour_range
    from backfill_assets.core.names import LAYERS
    from backfill_assets.core.reconcile.findings import ReconcileConfig
    from backfill_assets.definitions import build_definitions
    from backfill_assets.defs.resources import BACKUPS
    from backfill_assets.release import holds, keys, state
    from backfill_assets.release.instance import get_instance
    from backfill_assets.settings import Settings

    if bool(args.first) != bool(args.last):
        raise CommandError("give both --from and --to, or neither")
    try:
        if args.first:
            hour_range(args.first, args.last)
        config = ReconcileConfig.from_env()
    except (InvalidHourError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    settings = Settings.from_env()
    defs = build_definitions(settings)
    store = defs.resources[BACKUPS]
    window = state.reconcile_window(store, config, args.first, args.last)
    if window is None:
        raise CommandError(
            f"no hour folders under {settings.backup_root}/raw: nothing to "
            f"compare (generate or point BACKUP_ROOT at a backup tree)"
        )
    layers = list(LAYERS.values())
    instance = get_instance(settings)
    by_layer = {layer.name: keys.layer_keys(defs, layer.name) for layer in layers}
    if args.source == "ledger":
        published = state.published_from_ledger(settings.warehouse_dir, layers, window.hours)
    else:
        published = state.published_from_instance(instance, layers, window.hours)
    result = state.reconcile(
        store,
        published,
        layers,
        window,
        config,
        source=args.source,
        in_flight=holds.by_layer(holds.in_flight(instance), by_layer),
    )
    if args.format == "json":
        document = result.to_dict()
        for entry, request in zip(document["requests"], result.plan.requests, strict=True):
            entry["tags"] = request.tags("<request id>")
        print(json.dumps(document, indent=2))
    else:
        print("\n".join(result.lines()))
    unpublished = any(h["unpublished_hours"] for h in result.health().values())
    return 1 if result.actionable or unpublished else 0
