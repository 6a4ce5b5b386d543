"""``backfill-assets resume``: go on with a release whose run failed or was killed.

Dagster re-executes the release's last backfill from failure (as the UI's *Re-execute*
does): a backfill of what it did not materialize, tagged with the release's first backfill
(``dagster/root_backfill_id``), so its runs belong to the same release. The candidates that
passed their checks are read, not rebuilt (a shadow version never changes), and the
release is published once, in one ledger transaction, its report and rollback those of
the one release.
"""

from __future__ import annotations

import argparse

from backfill_assets.cli.main import CommandError

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
    p.set_defaults(handler=run_resume, validate=validate)


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


def run_resume(args: argparse.Namespace) -> int:
    from backfill_assets.cli.backfill import _context, _follow, refuse_if_held, supervisor_of
    from backfill_assets.release import holds, launch

    settings, _defs, instance = _context(args)
    release = args.release
    latest = latest_backfill(instance, release)
    if latest is None:
        raise CommandError(
            f"no release {release} in the Dagster instance ({instance.root_directory})"
        )
    status = latest.status.value
    if status not in launch.FINISHED:
        raise CommandError(
            f"release {release} is still in flight (backfill {latest.backfill_id}: "
            f"{status.lower()}): follow it to its end, or cancel it, before resuming it"
        )
    refuse_if_held(instance, holds.release_hours(instance, release), f"resume {release}")
    with supervisor_of(settings, instance) as supervisor:
        if not args.no_wait:
            supervisor.prepare()
        try:
            resumed = launch.reexecute_backfill(
                settings, latest.backfill_id, workspace=supervisor.workspace()
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
