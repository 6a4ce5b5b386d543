"""``backfill-assets backfill|publish|approve``: submit a release (or its publication) as a
Dagster backfill and follow it.

Both submit the same asset backfill the UI launches (``release.launch.submit_backfill``), so the
release is recorded in the instance, shows on the UI's Backfills page with its runs and
waits in the instance's run queue; the command prints each run as it finishes and a
summary, and runs ``dagster-daemon`` meanwhile if no daemon serves the instance.
"""

from __future__ import annotations

import argparse
import sys

from backfill_assets.cli.main import CommandError
from backfill_assets.settings import max_range_hours

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
        "--approve-changes",
        "--allow-shrink",
        dest="approve_changes",
        action="store_true",
        help="approve now the change gates' findings (hours whose rows, keys or sums move "
        "beyond the limits), recorded with --requested-by and --reason",
    )
    p.add_argument(
        "--approve-cost",
        action="store_true",
        help="launch although the estimate is above $BACKFILL_MAX_CORE_HOURS executor "
        "core-hours (needs --reason; recorded in the release's tags)",
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
    q.add_argument(
        "--approve-changes",
        "--allow-shrink",
        dest="approve_changes",
        action="store_true",
        help="as for backfill (needs --reason)",
    )
    _manifest_args(q)
    q.set_defaults(handler=run_publish)

    text = (
        "approve the change of the hours a release's change gates hold, and publish them "
        "(recorded with who approved and why)"
    )
    a = subparsers.add_parser("approve", help=text, description=text)
    a.add_argument("--backfill", dest="release", required=True, help="the release (backfill id)")
    a.add_argument(
        "--hours",
        default="",
        help="comma-separated hours or FIRST..LAST (default: every hour waiting for approval)",
    )
    a.add_argument("--reason", required=True, help="why the change is right (recorded)")
    a.add_argument("--by", dest="requested_by", help="who approves (default: the current user)")
    a.add_argument("--ticket", help="ticket reference")
    a.add_argument("--no-wait", action="store_true", help="submit and exit without following")
    a.set_defaults(handler=run_approve, validate=validate_approve)


def _context(args: argparse.Namespace):
    """The settings and the Dagster instance of a command. Not the definitions: the
    command's Dagster processes (code server, runs) load them, a command that only submits
    and follows does not (0.8 s of imports)."""
    from backfill_assets.release.instance import get_instance
    from backfill_assets.settings import Settings

    settings = Settings.from_env()
    return settings, get_instance(settings)


def _show(run) -> None:
    if run.success:
        state = "ok"
    elif run.status != "SUCCESS":
        state = run.status
    elif run.refused:  # a step that ended without building: its reason is a failure line
        state = "refused"
    else:
        state = f"{run.held_back} hour(s) held back"
    print(
        f"[{state}] run {run.run_id} {run.partition_range} in {run.seconds:.1f}s: "
        f"{', '.join(run.assets)}"
    )
    for name, check in sorted(run.checks.items()):
        mark = "pass" if check["passed"] else f"FAIL ({check['severity']})"
        print(f"    check {name}: {mark} - {check['description']}")
    for failure in run.failures:
        print(f"    failure: {failure}")


def supervisor_of(settings, instance):
    """The daemon supervisor of a command (``release.daemon.DaemonSupervisor``): its
    daemon's and code server's output go to ``$DAGSTER_HOME/logs/daemon.log``."""
    from pathlib import Path

    from backfill_assets.release import daemon

    log_file = Path(settings.dagster_home) / "logs" / "daemon.log"
    return daemon.DaemonSupervisor(settings, instance, log_file)


def interrupted_note(supervisor, release: str) -> str:
    """What a command interrupted while following ``release`` leaves behind, in one line."""
    ends = f"end it with `backfill-assets cancel --backfill {release}`"
    if supervisor.code_server is None:  # another process runs the daemon: nothing stops
        return (
            f"interrupted: release {release} goes on under the instance's daemon (this "
            f"command started none); follow it in the UI, or {ends}"
        )
    return (
        f"interrupted: this command's daemon and code server are stopped, and with them the "
        f"runs of release {release} they ran (a killed run publishes nothing); the release "
        f"stays requested in the Dagster instance, holding its hours: {ends}"
    )


def _follow(
    settings,
    instance,
    label: str,
    *,
    backfill_id=None,
    run_id=None,
    report_id=None,
    supervisor=None,
    progress=None,
) -> int:
    """Follow a backfill (or run) to its end, through ``supervisor`` (a new one if None);
    ``report_id``: the release its report is of (a publish's own backfill holds only the
    release gates: report the release it published)."""
    from backfill_assets.release import launch, pause

    if supervisor is None:
        with supervisor_of(settings, instance) as own:
            return _follow(
                settings,
                instance,
                label,
                backfill_id=backfill_id,
                run_id=run_id,
                report_id=report_id,
                supervisor=own,
                progress=progress,
            )
    try:
        paused = pause.watcher(instance, backfill_id) if backfill_id else None
        outcome = launch.follow(
            instance,
            backfill_id=backfill_id,
            run_id=run_id,
            supervisor=supervisor,
            on_run=_show,
            progress=progress,
            paused=paused,
        )
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the supervisor stops what it started
        print(interrupted_note(supervisor, backfill_id or run_id), file=sys.stderr)
        raise
    failed = [r for r in outcome.runs if not r.success]
    print(
        f"{label} {outcome.backfill_id}: {outcome.status.lower()}, "
        f"{len(outcome.runs) - len(failed)} of {len(outcome.runs)} run(s) succeeded"
        + ("; held-back and failed hours keep their published data" if failed else "")
    )
    if report_id or backfill_id:
        print(f"report: backfill-assets report --backfill {report_id or backfill_id}")
    from backfill_assets.release.holds import HELD_BY

    held = [f for r in outcome.runs for f in r.failures if HELD_BY in f]
    if held:  # refused at its first step: an earlier release holds its hours
        raise CommandError(held[0].split(": ", 1)[-1])
    return 0 if outcome.success else 1


def run_job(
    args: argparse.Namespace,
    job: str,
    op: str,
    config: dict,
    run_tags: dict[str, str],
    label: str,
    note: str = "",
) -> int:
    """Submit one run of a one-op ``job``, follow it, then print what its op logged."""
    from backfill_assets.release import launch, outcomes

    settings, instance = _context(args)
    with supervisor_of(settings, instance) as supervisor:
        supervisor.prepare()
        try:
            run_id = launch.submit_run(
                settings,
                job,
                {"ops": {op: {"config": config}}},
                run_tags,
                target=supervisor.graphql_target(),
            )
        except launch.LaunchError as exc:
            raise CommandError(str(exc)) from None
        print(f"submitted {label} run {run_id}{note}")
        status = _follow(settings, instance, label, run_id=run_id, supervisor=supervisor)
    for message in outcomes.run_messages(instance, run_id, op):
        print(f"    {message}")
    return status


def validate_backfill(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The range's hours and the release's layers, or one line naming the bad argument."""
    from backfill_assets.core import plan
    from backfill_assets.core.hours import InvalidHourError, range_hours

    try:
        cap = args.max_hours
        if cap is None:
            cap = max_range_hours(DEFAULT_MAX_RANGE_HOURS)
        if cap < 1:
            raise ValueError(f"--max-hours {cap}: the cap on a range's hours must be at least 1")
        hours = range_hours(args.first, args.last, cap)
        if getattr(args, "approve_cost", False) and not (args.reason or "").strip():
            raise ValueError("--approve-cost needs --reason: why the cost is right")
        layers = plan.release_layers(args.layers.split(","), downstream=not args.no_downstream)
    except (InvalidHourError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    return hours, layers


def release_hours(layers: list[str], first: str, last: str) -> list[str]:
    """Every hour a release rooted at ``first..last`` rebuilds, any layer (the session
    layer's hours reach past the root's)."""
    from backfill_assets.core import plan
    from backfill_assets.core.hours import hour_range

    spans = plan.plan_ranges(layers, first, last)
    return sorted({h for _, a, b in spans for h in hour_range(a, b)})


def refuse_if_held(
    instance, hours: list[str], what: str, *, own: str | None = None, settings=None
) -> None:
    """Refuse, in one line (exit 2), a release whose hours a release in flight holds.

    Before submitting (``own`` None): any release in flight. After (``own``: the backfill
    just created): only one created earlier, and this one is cancelled first, so of two
    releases launched together exactly the first proceeds."""
    from backfill_assets.release import holds, launch

    releases = holds.in_flight(instance)
    mine = next((r for r in releases if r.release_id == own), None) if own else None
    if own is not None and mine is None:
        return  # finished already: nothing in flight was ahead of it
    blocking = holds.holders(releases, hours, before=mine)
    if not blocking:
        return
    if own is not None:
        try:
            launch.cancel_backfill(settings, own)
        except launch.LaunchError as exc:
            line = f"{holds.refusal(blocking, hours, what)}; cancel failed: {exc}"
            raise CommandError(line) from None
    raise CommandError(holds.refusal(blocking, hours, what))


def run_backfill(args: argparse.Namespace) -> int:
    from backfill_assets.release.instance import get_instance
    from backfill_assets.settings import Settings

    hours, layers = validate_backfill(args)
    settings = Settings.from_env()
    instance = get_instance(settings)
    kind = "dry run" if args.dry_run else "backfill"
    # refused before any code server or daemon starts: a held range costs the instance query
    held = release_hours(layers, args.first, args.last)
    refuse_if_held(instance, held, f"{kind} {args.first}..{args.last}")
    with supervisor_of(settings, instance) as supervisor:
        if not args.no_wait:
            supervisor.prepare(driver=True)  # the code server loads while this command plans
        from backfill_assets.definitions import build_definitions

        defs = build_definitions(settings)
        return _run_backfill(args, hours, layers, (settings, defs, instance), supervisor)


def _run_backfill(args, hours: list[str], layers: list[str], context, supervisor) -> int:
    from backfill_assets.cli.cost import estimate_tags, short_run
    from backfill_assets.core import tags
    from backfill_assets.core.text import one_line
    from backfill_assets.release import keys, launch

    settings, defs, instance = context
    extra = {}
    if args.allow_missing_hours:
        extra[tags.ALLOW_MISSING_HOURS] = "true"
    if args.approve_changes:
        extra[tags.APPROVE_CHANGES] = "true"
    if "raw" in layers:  # the release reads backups: how long should it take, at what cost?
        extra.update(estimate_tags(args, context, hours))
    if not args.no_wait:  # the runs' driver JVM starts while the release is submitted
        supervisor.start_driver(short_run=short_run(extra))
    selection = keys.release_selection(defs, layers, publish=not args.dry_run)
    kind = "dry run" if args.dry_run else "backfill"
    held = release_hours(layers, args.first, args.last)
    refuse_if_held(instance, held, f"{kind} {args.first}..{args.last}")  # again: while it planned
    try:
        backfill_id = launch.submit_backfill(
            settings,
            selection,
            hours,
            launch.request_tags(
                dry_run=args.dry_run,
                reason=args.reason,
                ticket=args.ticket,
                requested_by=args.requested_by,
                extra=extra,
            ),
            title=f"{kind} {args.first}..{args.last} {'+'.join(layers)}",
            description=one_line(args.reason or "", tags.MAX_REASON_CHARS),
            target=supervisor.graphql_target(),
        )
    except launch.LaunchError as exc:
        raise CommandError(str(exc)) from None
    refuse_if_held(instance, held, f"{kind} {backfill_id}", own=backfill_id, settings=settings)
    print(
        f"submitted {kind} {backfill_id}: {'+'.join(layers)} for {args.first}..{args.last} "
        f"({len(hours)} h){'' if args.dry_run else ' and publish'}"
    )
    if args.no_wait:
        return 0
    from backfill_assets.release.pace import reporter

    progress = reporter(settings, defs.resolve_asset_graph(), instance, backfill_id)
    return _follow(
        settings, instance, kind, backfill_id=backfill_id, supervisor=supervisor, progress=progress
    )


def run_publish(args: argparse.Namespace) -> int:
    from backfill_assets.core import plan, tags
    from backfill_assets.core.hours import InvalidHourError, hour_range

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
            config["layers"] = plan.validate_layers(args.layers.split(","))
    except (InvalidHourError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    if args.approve_changes:
        if not (args.reason or "").strip():
            raise CommandError("--approve-changes needs --reason: why the change is right")
        config.update(approve=True, approval_reason=args.reason)
    return _submit_publish(args, config, f"publish {args.release or f'{args.first}..{args.last}'}")


def validate_approve(args: argparse.Namespace) -> dict:
    """The publish config of an approval, or one line naming the bad argument."""
    from backfill_assets.core import tags
    from backfill_assets.core.hours import InvalidHourError, hour_range, parse_hour

    hours: list[str] = []
    try:
        tags.validate_release_id(args.release)
        for part in filter(None, (p.strip() for p in args.hours.split(","))):
            if ".." in part:
                hours += hour_range(*part.split("..", 1))
            else:
                parse_hour(part)
                hours.append(part)
    except (InvalidHourError, ValueError, TypeError) as exc:
        raise CommandError(f"--hours / --backfill: {exc}") from None
    if not args.reason.strip():
        raise CommandError("--reason must say why the change is right")
    return {
        "release_id": args.release,
        "approve": True,
        "approve_hours": hours,
        "approval_reason": args.reason.strip(),
        "approved_by": args.requested_by or "",
    }


def run_approve(args: argparse.Namespace) -> int:
    config = validate_approve(args)
    return _submit_publish(args, config, f"approve {args.release}")


def _publish_hours(instance, config: dict) -> list[str]:
    """The hours the publish step targets: the release's (the hours its runs built), or
    the range named; refused in one line when the release built nothing here."""
    from backfill_assets.core.hours import hour_range
    from backfill_assets.release.holds import release_hours

    if not config.get("release_id"):
        return hour_range(config["first_hour"], config["last_hour"])
    hours = release_hours(instance, config["release_id"])
    if not hours:
        raise CommandError(
            f"release {config['release_id']} has no run in this Dagster instance "
            f"({instance.root_directory}): nothing of it to publish"
        )
    return hours


def _submit_publish(args: argparse.Namespace, config: dict, title: str) -> int:
    """Submit ``release/publish`` with ``config`` as a backfill and follow it."""
    from backfill_assets.core import tags
    from backfill_assets.release import keys, launch

    settings, instance = _context(args)
    hours = _publish_hours(instance, config)
    with supervisor_of(settings, instance) as supervisor:
        if not args.no_wait:
            supervisor.prepare()
        try:
            backfill_id = launch.submit_backfill(
                settings,
                [keys.PUBLISH_KEY],
                hours,
                launch.request_tags(
                    dry_run=False,
                    reason=args.reason,
                    ticket=args.ticket,
                    requested_by=args.requested_by,
                    extra={tags.MODE: "publish"},
                ),
                title=title,
                run_config={"ops": {"release__publish": {"config": config}}},
                target=supervisor.graphql_target(),
            )
        except launch.LaunchError as exc:
            raise CommandError(str(exc)) from None
        print(f"submitted {title}: {backfill_id}")
        if args.no_wait:
            return 0
        return _follow(
            settings,
            instance,
            title.split()[0],
            backfill_id=backfill_id,
            report_id=config.get("release_id"),
            supervisor=supervisor,
        )
