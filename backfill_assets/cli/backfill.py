"""``backfill-assets backfill|publish``: submit a release as a Dagster backfill and follow it.

Both submit the same asset backfill the UI launches (``launch.submit_backfill``), so the
release is recorded in the instance, shows on the UI's Backfills page with its runs and
waits in the instance's run queue; the command prints each run as it finishes and a
summary, and runs ``dagster-daemon`` meanwhile if no daemon serves the instance.
"""

from __future__ import annotations

import argparse
import os

from backfill_assets.cli.main import CommandError

DEFAULT_MAX_RANGE_HOURS = 24 * 31


def _hour_args(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--from", dest="first", required=required, metavar="YYYY-MM-DDTHH",
                   help="first hour, UTC, inclusive")  # fmt: skip
    p.add_argument("--to", dest="last", required=required, metavar="YYYY-MM-DDTHH",
                   help="last hour, UTC, inclusive")  # fmt: skip


def _manifest_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reason", help="why (recorded in run tags, lineage and the ledger)")
    p.add_argument("--ticket", help="ticket reference (recorded like --reason)")
    p.add_argument("--requested-by", help="who asked (default: the current user)")
    p.add_argument("--no-wait", action="store_true", help="submit and exit without following")


def register(subparsers: argparse._SubParsersAction) -> None:
    text = (
        "rebuild a range of hours as one release: shadows of the chosen layers and every "
        "downstream layer, checks, one publish transaction (or --dry-run)"
    )
    p = subparsers.add_parser("backfill", help=text, description=text)
    _hour_args(p, required=True)
    p.add_argument(
        "--layers",
        default="raw",
        help="comma-separated layers whose hours are damaged (default: raw); downstream "
        "layers are rebuilt too unless --no-downstream",
    )
    p.add_argument("--no-downstream", action="store_true", help="rebuild only --layers")
    p.add_argument("--dry-run", action="store_true", help="build and check; publish nothing")
    p.add_argument(
        "--allow-missing-hours",
        action="store_true",
        help="publish hours with no backup folder at all as empty partitions",
    )
    p.add_argument(
        "--allow-shrink",
        action="store_true",
        help="publish hours whose new version has much fewer rows than the published one",
    )
    p.add_argument(
        "--max-hours",
        type=int,
        default=None,
        help=f"refuse ranges longer than this (default: $BACKFILL_MAX_RANGE_HOURS or "
        f"{DEFAULT_MAX_RANGE_HOURS})",
    )
    _manifest_args(p)
    p.set_defaults(handler=run_backfill, validate=validate_backfill)

    text = "publish a checked dry-run release without rebuilding it"
    q = subparsers.add_parser("publish", help=text, description=text)
    q.add_argument("--backfill", dest="release", help="the release (backfill id) to publish")
    _hour_args(q, required=False)
    q.add_argument("--layers", default="", help="layers to publish (default: all it built)")
    q.add_argument("--allow-shrink", action="store_true", help="as for backfill")
    _manifest_args(q)
    q.set_defaults(handler=run_publish)


def _context(args: argparse.Namespace):
    from backfill_assets.definitions import build_definitions
    from backfill_assets.instance import get_instance
    from backfill_assets.settings import Settings

    settings = Settings.from_env()
    return settings, build_definitions(settings), get_instance(settings)


def _show(run) -> None:
    state = "ok" if run.success else run.status
    print(
        f"[{state}] run {run.run_id} {run.partition_range} in {run.seconds:.1f}s: "
        f"{', '.join(run.assets)}"
    )
    for name, check in sorted(run.checks.items()):
        mark = "pass" if check["passed"] else f"FAIL ({check['severity']})"
        print(f"    check {name}: {mark} - {check['description']}")
    for failure in run.failures:
        print(f"    failure: {failure}")


def _follow(settings, instance, label: str, *, backfill_id=None, run_id=None) -> int:
    from backfill_assets import launch

    log_file = os.path.join(settings.dagster_home, "logs", "daemon.log")
    from pathlib import Path

    with launch.DaemonSupervisor(settings, instance, Path(log_file)) as supervisor:
        outcome = launch.follow(
            instance,
            backfill_id=backfill_id,
            run_id=run_id,
            supervisor=supervisor,
            on_run=_show,
        )
    failed = [r for r in outcome.runs if not r.success]
    print(
        f"{label} {outcome.backfill_id}: {outcome.status.lower()}, "
        f"{len(outcome.runs) - len(failed)} of {len(outcome.runs)} run(s) succeeded"
        + ("; held-back and failed hours keep their published data" if failed else "")
    )
    if backfill_id:
        print(f"report: backfill-assets report --backfill {backfill_id}")
    return 0 if outcome.success else 1


def validate_backfill(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The range's hours and the release's layers, or one line naming the bad argument."""
    from backfill_assets import launch
    from backfill_assets.partitions import InvalidHourError

    try:
        cap = args.max_hours or int(
            os.environ.get("BACKFILL_MAX_RANGE_HOURS", DEFAULT_MAX_RANGE_HOURS)
        )
        hours = launch.range_hours(args.first, args.last, cap)
        layers = launch.release_layers(args.layers.split(","), downstream=not args.no_downstream)
    except (InvalidHourError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    return hours, layers


def run_backfill(args: argparse.Namespace) -> int:
    from backfill_assets import launch, tags

    hours, layers = validate_backfill(args)
    extra = {}
    if args.allow_missing_hours:
        extra[tags.ALLOW_MISSING_HOURS] = "true"
    if args.allow_shrink:
        extra[tags.ALLOW_SHRINK] = "true"
    settings, defs, instance = _context(args)
    if "raw" in layers:  # the release reads backups: how long should it take?
        from backfill_assets.reporting.estimate import estimate
        from backfill_assets.resources import BACKUPS

        guess = estimate(instance, defs.resources[BACKUPS], hours)
        print(guess.line())
        if guess.seconds is not None:
            extra[tags.ESTIMATE_SECONDS] = f"{guess.seconds:.0f}"
    keys = launch.release_selection(defs, layers, publish=not args.dry_run)
    kind = "dry run" if args.dry_run else "backfill"
    try:
        backfill_id = launch.submit_backfill(
            settings,
            keys,
            hours,
            launch.request_tags(
                dry_run=args.dry_run,
                reason=args.reason,
                ticket=args.ticket,
                requested_by=args.requested_by,
                extra=extra,
            ),
            title=f"{kind} {args.first}..{args.last} {'+'.join(layers)}",
            description=args.reason or "",
        )
    except launch.LaunchError as exc:
        raise CommandError(str(exc)) from None
    print(
        f"submitted {kind} {backfill_id}: {'+'.join(layers)} for {args.first}..{args.last} "
        f"({len(hours)} h){'' if args.dry_run else ' and publish'}"
    )
    if args.no_wait:
        return 0
    return _follow(settings, instance, kind, backfill_id=backfill_id)


def run_publish(args: argparse.Namespace) -> int:
    from backfill_assets import launch, tags
    from backfill_assets.partitions import InvalidHourError, hour_range

    config: dict = {}
    try:
        if args.release:
            config["release_id"] = tags.validate_release_id(args.release)
        elif args.first:
            hour_range(args.first, args.last or args.first)
            config.update(first_hour=args.first, last_hour=args.last or args.first)
        else:
            raise CommandError("name the release (--backfill ID) or its range (--from/--to)")
        if args.layers:
            config["layers"] = launch.validate_layers(args.layers.split(","))
    except (InvalidHourError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    config["allow_shrink"] = bool(args.allow_shrink)
    settings, _defs, instance = _context(args)
    try:
        backfill_id = launch.submit_backfill(
            settings,
            [launch.PUBLISH_KEY],
            None,
            launch.request_tags(
                dry_run=False,
                reason=args.reason,
                ticket=args.ticket,
                requested_by=args.requested_by,
                extra={tags.MODE: "publish"},
            ),
            title=f"publish {args.release or f'{args.first}..{args.last}'}",
            run_config={"ops": {"release__publish": {"config": config}}},
        )
    except launch.LaunchError as exc:
        raise CommandError(str(exc)) from None
    print(f"submitted publish {backfill_id} of {args.release or f'{args.first}..{args.last}'}")
    if args.no_wait:
        return 0
    return _follow(settings, instance, "publish", backfill_id=backfill_id)
