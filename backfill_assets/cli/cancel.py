"""``backfill-assets cancel --backfill ID``: stop a release, publish nothing of it.

Cancels the release's Dagster backfill as the UI's cancel button does (its queued and
running runs are terminated, its publish never runs), waits until none of its runs is
left, then records the cancellation (ledger row, observation the report shows) with one
run of ``record_cancellation``.
"""

from __future__ import annotations

import argparse

from backfill_assets.cli.main import CommandError

CANCELLABLE = ("REQUESTED", "CANCELING", "FAILING")


def register(subparsers: argparse._SubParsersAction) -> None:
    text = "stop a release: cancel its queued and running runs, publish nothing of it"
    p = subparsers.add_parser("cancel", help=text, description=text)
    p.add_argument("--backfill", dest="release", required=True, help="the release (backfill id)")
    p.add_argument("--reason", help="why (recorded in the ledger and the report)")
    p.add_argument("--ticket", help="ticket reference")
    p.add_argument("--by", dest="requested_by", help="who cancels (default: the current user)")
    p.set_defaults(handler=run_cancel)


def _hours(instance, release_id: str) -> str:
    from backfill_assets.holds import backfill_hours

    backfill = instance.get_backfill(release_id)
    hours = sorted(backfill_hours(backfill)) if backfill is not None else []
    return f"{hours[0]}..{hours[-1]}" if hours else ""


def run_cancel(args: argparse.Namespace) -> int:
    import getpass

    import dagster as dg

    from backfill_assets import launch, tags
    from backfill_assets.cli.backfill import _context, _follow
    from backfill_assets.publishing.cancel import CANCEL_JOB

    try:
        release = tags.validate_release_id(args.release)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    settings, _defs, instance = _context(args)
    backfill = instance.get_backfill(release)
    if backfill is None:
        raise CommandError(f"no release (backfill) {release} in the Dagster instance")
    if backfill.status.value not in CANCELLABLE:
        raise CommandError(
            f"release {release} is already {backfill.status.value.lower()}: nothing to cancel"
        )
    hours = _hours(instance, release)
    try:
        launch.cancel_backfill(settings, release)
    except launch.LaunchError as exc:
        raise CommandError(f"release {release}: {exc}") from None
    print(f"cancelling release {release} ({hours or 'no hours'}): stopping its runs")
    _follow(settings, instance, "cancelled release", backfill_id=release)
    backfill = instance.get_backfill(release)
    runs = instance.get_runs(filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: release}))
    config = {
        "release_id": release,
        "status": backfill.status.value if backfill is not None else "",
        "hours": hours,
        "runs": ",".join(sorted(r.run_id for r in runs)),
        "cancelled_by": args.requested_by or getpass.getuser(),
        "reason": args.reason or "",
        "ticket": args.ticket or "",
    }
    run_tags = {tags.MODE: "cancel", tags.REQUESTED_BY: config["cancelled_by"]}
    try:
        run_id = launch.submit_run(
            settings,
            CANCEL_JOB,
            {"ops": {"record_cancellation_op": {"config": config}}},
            run_tags,
        )
    except launch.LaunchError as exc:
        raise CommandError(f"release {release} cancelled; recording it failed: {exc}") from None
    status = _follow(settings, instance, "record cancellation", run_id=run_id)
    print(
        f"release {release} cancelled by {config['cancelled_by']}: nothing of it published; "
        f"report: backfill-assets report --backfill {release}"
    )
    return status
