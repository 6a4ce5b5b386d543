"""``backfill-assets pause`` and ``resume``: stop a release starting runs, go on with it.

``pause`` stops a release in flight from starting runs (``release.pause``: its backfill
leaves the daemon's iterations, its queued runs are held in the run queue, its running runs
finish); it keeps holding its hours. ``resume`` on a paused release sets its backfill back
to requested (Dagster's ``resumePartitionBackfill``) and lets its held runs start, then
follows it to its end like ``backfill``: it publishes once, at its end.

``resume`` on a release whose run failed or was killed: Dagster re-executes the release's
last backfill from failure (as the UI's *Re-execute* does): a backfill of what it did not
materialize, tagged with the release's first backfill (``dagster/root_backfill_id``), so
its runs belong to the same release. The candidates that
passed their checks are read, not rebuilt (a shadow version never changes), and the
release is published once, in one ledger transaction, its report and rollback those of
the one release.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from backfill_assets.cli.main import CommandError

if TYPE_CHECKING:
    from backfill_assets.release.daemon import DaemonSupervisor

BACKFILLS_SEARCHED = 500  # the newest backfills of the instance searched for the release's


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "resume",
        help="go on with a failed or killed release: build only what it did not, publish once",
        description="Re-execute a finished release from failure (Dagster's re-execution of "
        "its backfill, as the UI's Re-execute): only the partitions it did not materialize "
        "are built, the candidates that passed are reused, and the release is published "
        "once. The release keeps its id (its first backfill's).",
    )
    p.add_argument("--backfill", dest="release", required=True, help="the release's id")
    p.add_argument("--no-wait", action="store_true", help="submit and exit without following")
    p.add_argument("--by", dest="requested_by", help="who resumes (default: the current user)")
    p.set_defaults(handler=run_resume, validate=validate)

    text = "pause a release in flight: no new run of it starts, its running runs finish"
    p = subparsers.add_parser(
        "pause",
        help=text,
        description=f"{text}; its hours stay held (the sensor and other releases are "
        "refused them) until `resume` goes on with it or `cancel` ends it.",
    )
    p.add_argument("--backfill", dest="release", required=True, help="the release's id")
    p.add_argument("--reason", help="why (recorded with the pause, shown by holds and report)")
    p.add_argument("--by", dest="requested_by", help="who pauses (default: the current user)")
    p.set_defaults(handler=run_pause, validate=validate)


def validate(args: argparse.Namespace) -> None:
    from backfill_assets.core import tags

    try:
        tags.validate_release_id(args.release)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def latest_backfill(instance, release: str):
    """The newest backfill of the release's chain (its first, or a re-execution), or None."""
    from backfill_assets.core import tags

    chain = [
        b
        for b in instance.get_backfills(limit=BACKFILLS_SEARCHED)
        if b.backfill_id == release or b.tags.get(tags.ROOT_BACKFILL) == release
    ]
    return max(chain, key=lambda b: b.backfill_timestamp, default=None)


def _latest(instance, release: str):
    latest = latest_backfill(instance, release)
    if latest is None:
        raise CommandError(
            f"no release {release} in the Dagster instance ({instance.root_directory})"
        )
    return latest


def run_pause(args: argparse.Namespace) -> int:
    import getpass

    from backfill_assets.cli.backfill import _context
    from backfill_assets.release import holds, pause

    _settings, instance = _context(args)
    release = args.release
    latest = _latest(instance, release)
    if pause.is_paused(instance, latest.backfill_id):
        raise CommandError(f"release {release} is already paused: nothing to pause")
    if latest.status.value != "REQUESTED":
        raise CommandError(
            f"release {release} is {latest.status.value.lower()}, not running: nothing to pause"
        )
    if not pause.hold_configured(instance):
        raise CommandError(
            f"release {release} not paused: the run queue of {instance.root_directory}/"
            f"dagster.yaml does not hold paused runs; add {pause.HOLD_LIMIT} to its "
            "concurrency.runs.tag_concurrency_limits (deploy/dagster.yaml) and restart the daemon"
        )
    by = args.requested_by or getpass.getuser()
    done, held = pause.pause(instance, latest, release, by, args.reason or "")
    running = pause.running(instance, latest.backfill_id)
    hours = sorted(holds.backfill_hours(latest))
    span = f"{hours[0]}..{hours[-1]}" if hours else "no hours"
    print(
        f"paused release {release} ({span}) {done.describe().removeprefix('paused ')}: "
        f"no new run starts; {len(running)} running run(s) finish, {len(held)} queued run(s) "
        f"held; its hours stay held; go on with `backfill-assets resume --backfill {release}`"
    )
    return 0


def _prepare(supervisor: DaemonSupervisor, release_tags: Mapping[str, str]) -> None:
    """The daemon that serves the resumed release, and the driver JVM its runs share, as a
    backfill's (short-lived if the release's estimate, in its tags, says so)."""
    from backfill_assets.cli.cost import short_run

    supervisor.prepare(driver=True)
    supervisor.start_driver(short_run=short_run(release_tags))


def _resume_paused(args, settings, instance, latest) -> int:
    """Go on with a paused release: its backfill requested again, its held runs released;
    then follow it to its end (it publishes once, at its end)."""
    import getpass

    from backfill_assets.cli.backfill import _follow, supervisor_of
    from backfill_assets.release import launch, pause

    release = args.release
    with supervisor_of(settings, instance) as supervisor:
        if not args.no_wait:
            _prepare(supervisor, latest.tags)
        by = args.requested_by or getpass.getuser()
        pause.record(instance, latest.backfill_id, release, pause.RESUMED, by)
        try:
            launch.resume_backfill(
                settings,
                latest.backfill_id,
                target=supervisor.graphql_target(),
            )
        except launch.LaunchError as exc:
            pause.record(instance, latest.backfill_id, release, pause.PAUSED, by, "resume failed")
            raise CommandError(f"release {release} stays paused: {exc}") from None
        released = pause.release_queued(instance, latest.backfill_id)
        print(
            f"resumed release {release}: backfill {latest.backfill_id} goes on where it was "
            f"paused ({len(released)} held run(s) released), then publishes the release"
        )
        if args.no_wait:
            return 0
        return _follow(
            settings,
            instance,
            "resumed release",
            backfill_id=latest.backfill_id,
            report_id=release,
            supervisor=supervisor,
        )


def run_resume(args: argparse.Namespace) -> int:
    from backfill_assets.cli.backfill import _context, _follow, refuse_if_held, supervisor_of
    from backfill_assets.release import holds, launch, pause

    settings, instance = _context(args)
    release = args.release
    latest = _latest(instance, release)
    if pause.is_paused(instance, latest.backfill_id):
        return _resume_paused(args, settings, instance, latest)
    status = latest.status.value
    if status not in launch.FINISHED:
        raise CommandError(
            f"release {release} is still in flight (backfill {latest.backfill_id}: "
            f"{status.lower()}): follow it to its end, or cancel it, before resuming it"
        )
    refuse_if_held(instance, holds.release_hours(instance, release), f"resume {release}")
    with supervisor_of(settings, instance) as supervisor:
        if not args.no_wait:
            _prepare(supervisor, latest.tags)
        try:
            resumed = launch.reexecute_backfill(
                settings,
                latest.backfill_id,
                target=supervisor.graphql_target(),
            )
        except launch.LaunchError as exc:
            raise CommandError(f"release {release}: {exc}") from None
        print(
            f"resumed release {release}: backfill {resumed} builds what "
            f"{latest.backfill_id} did not, then publishes the release"
        )
        if args.no_wait:
            return 0
        return _follow(
            settings,
            instance,
            "resumed release",
            backfill_id=resumed,
            report_id=release,
            supervisor=supervisor,
        )
