"""``backfill-assets cancel --backfill ID``: stop a release, publish nothing of it.

Cancels the release's Dagster backfill as the UI's cancel button does (its queued and
running runs are terminated, its publish never runs), waits until none of its runs is
left, then records the cancellation (ledger row, observation the report shows) with one
run of ``record_cancellation``. A release whose backfill is no longer in flight but left
runs queued, not started or running (or a release of one run, launched outside a
backfill) is stopped by terminating those runs as the UI's *Terminate* does: until then
they hold their hours for every other release.
"""

from __future__ import annotations

import argparse

from backfill_assets.cli.main import CommandError

CANCELLABLE = ("REQUESTED", "CANCELING", "FAILING")


def register(subparsers: argparse._SubParsersAction) -> None:
    text = "stop a release: cancel its queued and running runs, publish nothing of it"
    p = subparsers.add_parser("cancel", help=text, description=text)
    p.add_argument(
        "--backfill",
        dest="release",
        required=True,
        help="the release (backfill id, or the run id of a release of one run)",
    )
    p.add_argument("--reason", help="why (recorded in the ledger and the report)")
    p.add_argument("--ticket", help="ticket reference")
    p.add_argument("--by", dest="requested_by", help="who cancels (default: the current user)")
    p.set_defaults(handler=run_cancel)


def _hours(instance, release_id: str, runs) -> str:
    from backfill_assets.core import tags
    from backfill_assets.release.holds import backfill_hours

    backfill = instance.get_backfill(release_id)
    found = set(backfill_hours(backfill)) if backfill is not None else set()
    for run in runs:
        found.update(tags.partition_range(run.tags))
    hours = sorted(found)
    return f"{hours[0]}..{hours[-1]}" if hours else ""


def _end_pauses(instance, release: str, backfills: list, by: str) -> set[str]:
    """Record the end of the pause of each paused backfill of the release (cancelled: its
    followers stop waiting for a resume); returns their ids, to be cancelled as in flight."""
    from backfill_assets.release import pause

    found = pause.paused(instance, [b for b in backfills if b is not None])
    for backfill_id in found:
        pause.record(instance, backfill_id, release, pause.CANCELLED, by)
    return set(found)


def _target(supervisor):
    """Where a GraphQL call of the command goes: the code server of its daemon (started by
    the first call), in the process started ahead for the first call."""
    supervisor.prepare()
    return supervisor.graphql_target()


def _stop(settings, instance, release: str, by: str, supervisor) -> list:
    """Stop the release: cancel its backfill if it is in flight (as the UI's *Cancel*
    does), else terminate the runs it left queued, not started or running (a release of
    one run, or runs a finished backfill left behind: they hold their hours until then).
    Returns the runs it terminated; one line (exit 2) if there is nothing to stop."""
    from backfill_assets.core import tags
    from backfill_assets.release import launch
    from backfill_assets.release.holds import runs_left

    backfill = instance.get_backfill(release)
    left = runs_left(instance, release)
    if backfill is None and not left:
        raise CommandError(f"no release (backfill or run) {release} in the Dagster instance")
    # a release resumed (re-executed from failure) goes on in backfills of its own
    resumed = {r.tags.get(tags.DAGSTER_BACKFILL) for r in left} - {release, None}
    children = [instance.get_backfill(child) for child in sorted(resumed)]
    paused = _end_pauses(instance, release, [backfill, *children], by)  # cancelled as in flight
    try:
        for found in children:
            if found is not None and (
                found.status.value in CANCELLABLE or found.backfill_id in paused
            ):
                launch.cancel_backfill(settings, found.backfill_id, _target(supervisor))
        if backfill is not None and (backfill.status.value in CANCELLABLE or release in paused):
            launch.cancel_backfill(settings, release, _target(supervisor))
            return []  # Dagster stops its runs
        if left:
            for run in left:
                launch.terminate_run(settings, run, _target(supervisor))
        else:
            raise CommandError(
                f"release {release} is already {backfill.status.value.lower()}: nothing to cancel"
            )
    except launch.LaunchError as exc:
        raise CommandError(f"release {release}: {exc}") from None
    return left


def run_cancel(args: argparse.Namespace) -> int:
    from backfill_assets.cli.backfill import _context, supervisor_of
    from backfill_assets.core import tags

    try:  # before any instance, daemon or code server: a typo costs nothing
        release = tags.validate_release_id(args.release)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    settings, instance = _context(args)
    with supervisor_of(settings, instance) as supervisor:  # one for every step of it
        return _cancel(args, release, settings, instance, supervisor)


def _cancel(args: argparse.Namespace, release: str, settings, instance, supervisor) -> int:
    import getpass

    from backfill_assets.cli.backfill import _follow
    from backfill_assets.core import tags
    from backfill_assets.defs.jobs.cancel import CANCEL_JOB
    from backfill_assets.release import launch
    from backfill_assets.release.instance import release_runs

    by = args.requested_by or getpass.getuser()
    left = _stop(settings, instance, release, by, supervisor)
    hours = _hours(instance, release, left)
    print(f"cancelling release {release} ({hours or 'no hours'}): stopping its runs")
    if instance.get_backfill(release) is not None:
        _follow(settings, instance, "cancelled release", backfill_id=release, supervisor=supervisor)
    for run in left:
        _follow(settings, instance, "cancelled run", run_id=run.run_id, supervisor=supervisor)
    backfill = instance.get_backfill(release)
    runs = release_runs(instance, release)
    runs = runs or [r for r in (instance.get_run_by_id(x.run_id) for x in left) if r]
    config = {
        "release_id": release,
        "status": backfill.status.value if backfill is not None else "CANCELED",
        "hours": hours,
        "runs": ",".join(sorted(r.run_id for r in runs)),
        "cancelled_by": by,
        "reason": args.reason or "",
        "ticket": args.ticket or "",
    }
    run_tags = {tags.MODE: "cancel", tags.REQUESTED_BY: by}
    run_config = {"ops": {"record_cancellation_op": {"config": config}}}
    try:
        run_id = launch.submit_run(settings, CANCEL_JOB, run_config, run_tags, _target(supervisor))
    except launch.LaunchError as exc:
        raise CommandError(f"release {release} cancelled; recording it failed: {exc}") from None
    status = _follow(
        settings, instance, "record cancellation", run_id=run_id, supervisor=supervisor
    )
    print(
        f"release {release} cancelled by {by}: nothing of it published; "
        f"report: backfill-assets report --backfill {release}"
    )
    return status
