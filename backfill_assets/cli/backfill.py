"""``backfill-assets backfill|publish``: launch a backfill of a range headlessly."""

from __future__ import annotations

import argparse

from backfill_assets.cli.main import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    for name, steps, text in (
        (
            "backfill",
            None,
            "rebuild a range of hours: shadow write, checks, publish (or --dry-run)",
        ),
        ("publish", "publish", "publish the checked shadow versions of a range (after a dry run)"),
    ):
        p = subparsers.add_parser(name, help=text, description=text)
        p.add_argument(
            "--from",
            dest="first",
            required=True,
            metavar="YYYY-MM-DDTHH",
            help="first hour, UTC, inclusive",
        )
        p.add_argument(
            "--to",
            dest="last",
            required=True,
            metavar="YYYY-MM-DDTHH",
            help="last hour, UTC, inclusive",
        )
        p.add_argument(
            "--layers",
            default=None,
            help="comma-separated layers (default: all, in dependency order)",
        )
        if steps is None:
            p.add_argument(
                "--dry-run",
                action="store_true",
                help="write and check shadow tables only; publish nothing",
            )
            p.add_argument(
                "--allow-missing-hours",
                action="store_true",
                help="publish hours with no backup folder at all as empty partitions",
            )
        p.add_argument("--reason", help="why (recorded in run tags, lineage and the ledger)")
        p.add_argument("--ticket", help="ticket reference (recorded like --reason)")
        p.add_argument("--requested-by", help="who asked (default: the current user)")
        p.set_defaults(handler=run, steps=steps)


def run(args: argparse.Namespace) -> int:
    from backfill_assets import launch as launching
    from backfill_assets import tags
    from backfill_assets.definitions import build_definitions
    from backfill_assets.instance import get_instance
    from backfill_assets.partitions import InvalidHourError, hour_range
    from backfill_assets.settings import Settings

    try:
        hour_range(args.first, args.last)
        layers = launching.validate_layers(
            args.layers.split(",") if args.layers else launching.LAYERS
        )
    except (InvalidHourError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    steps = args.steps or ("shadow" if args.dry_run else "all")
    extra = (
        {tags.ALLOW_MISSING_HOURS: "true"} if getattr(args, "allow_missing_hours", False) else {}
    )
    settings = Settings.from_env()
    defs = build_definitions(settings)
    ranges = launching.plan_ranges(layers, args.first, args.last)

    def show(run: launching.LayerRun) -> None:
        state = "ok" if run.success else "FAILED"
        print(
            f"[{state}] {run.layer} {run.first}..{run.last} ({run.hours} h) run {run.run_id} "
            f"in {run.seconds:.1f}s"
        )
        for name, check in sorted(run.checks.items()):
            mark = "pass" if check["passed"] else f"FAIL ({check['severity']})"
            print(f"    check {name}: {mark} - {check['description']}")
        for failure in run.failures:
            print(f"    failure: {failure}")

    runs = launching.launch(
        defs,
        get_instance(settings),
        ranges,
        steps=steps,
        reason=args.reason,
        ticket=args.ticket,
        requested_by=args.requested_by,
        extra_tags=extra,
        on_run=show,
    )
    failed = [r for r in runs if not r.success]
    skipped = [layer for layer, _, _ in ranges[len(runs) :]]
    label = {"shadow": "dry run", "publish": "publish", "all": "backfill"}[steps]
    print(
        f"{label}: {len(runs) - len(failed)} of {len(ranges)} layer run(s) succeeded"
        + (f"; not run after the failure: {', '.join(skipped)}" if skipped else "")
        + ("; held-back hours keep their published data" if failed else "")
    )
    if runs:
        print(f"report: backfill-assets report --backfill {runs[0].request_id}")
    return 1 if failed or skipped else 0
