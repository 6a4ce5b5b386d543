"""Which hours each release in flight holds: one release per hour at a time.

A release *in flight* is a Dagster asset backfill that has not finished (requested,
cancelling, failing), a paused one (``release.pause``: it goes on when resumed) or a
release's run that is queued or started. The hours it *holds*
are every partition of every layer it rebuilds (the backfill's target partitions, which
include the session hours Dagster derives, and each in-flight run's partition range):
a release of raw 00..02 also holds the session hours whose windows touch those hours.

One function (``in_flight``) serves the three places that decide:

- the CLI refuses a release at launch whose hours an earlier release holds (and, after
  submitting, cancels its own backfill if an earlier one appeared meanwhile);
- the reconciliation sensor skips hours held by a release in flight;
- a release's first step refuses at once when an EARLIER release in flight holds any of its
  hours (a UI launch, which no code of ours sees before Dagster creates the backfill): of
  two racing releases, the one created first proceeds, the other stops in one line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.core.hours import InvalidHourError, parse_hour
from backfill_assets.release.instance import release_filters, release_runs
from backfill_assets.release.keys import PUBLISH_KEY
from backfill_assets.release.launch import IN_FLIGHT as RUN_IN_FLIGHT
from backfill_assets.release.orphans import fail_orphaned_runs
from backfill_assets.release.pause import paused

BACKFILL_IN_FLIGHT = ("REQUESTED", "CANCELING", "FAILING")
RUN_RUNNING = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED)
BEGUN = [
    s
    for s in dg.DagsterRunStatus
    if s not in (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED)
]
BACKFILL_PAGE = 200  # newest backfills read; an older one still in flight is a stuck daemon
HELD_BY = "held by release"  # the words every refusal and skip uses
IN_FLIGHT = "in flight"
CANCELLED = "cancelled by an operator"  # the sensor does not relaunch it for the same damage


@dataclass(frozen=True)
class Release:
    """A release in flight: its id (backfill, else run), when it was created, its hours."""

    release_id: str
    created: float
    hours: frozenset[str]
    requested_by: str = ""
    started: bool = True  # False: none of its runs has started (queued, or none yet)
    paused: str = ""  # ``paused by X at T (why)`` for a paused release (it holds its hours)

    def order(self) -> tuple[float, str]:
        return (self.created, self.release_id)

    def describe(self, hours: Iterable[str]) -> str:
        """``release ID (requested by X) holds 2026-11-20T01..2026-11-20T02``."""
        mine = sorted(set(hours) & self.hours)
        span = f"{mine[0]}..{mine[-1]}" if len(mine) > 1 else (mine[0] if mine else "-")
        who = f" (requested by {self.requested_by})" if self.requested_by else ""
        waiting = "" if self.started else ", queued: none of its runs has started"
        if self.paused:
            waiting = f", {self.paused} (`backfill-assets resume --backfill {self.release_id}`)"
        return f"release {self.release_id}{who} holds {span}{waiting}"


def _hour_keys(keys: Iterable[str | None]) -> set[str]:
    hours = set()
    for key in keys:
        try:
            if key:
                parse_hour(key)
                hours.add(key)
        except InvalidHourError:
            continue
    return hours


def backfill_hours(backfill) -> set[str]:
    """Every hour partition a Dagster asset backfill rebuilds, any layer (the publish
    step's hours are those of the layers it publishes, or of the session window around
    them: it rebuilds none)."""
    data = getattr(backfill, "asset_backfill_data", None)
    if data is None:
        return _hour_keys(getattr(backfill, "partition_names", None) or [])
    return _hour_keys(
        p.partition_key
        for p in data.target_subset.iterate_asset_partitions()
        if p.asset_key != PUBLISH_KEY
    )


def run_hours(run: dg.DagsterRun) -> frozenset[str]:
    """The hours a run rebuilds: its partition range, none for a publish step alone."""
    if set(run.asset_selection or ()) <= {PUBLISH_KEY} and run.asset_selection:
        return frozenset()
    return frozenset(tags.partition_range(run.tags))


def release_hours(instance: dg.DagsterInstance, release_id: str) -> list[str]:
    """Every hour a release's runs built or published (the partitions its publish step
    targets when it publishes the release on its own); [] for a release with no run here."""
    runs = release_runs(instance, release_id)
    return sorted({hour for run in runs for hour in tags.partition_range(run.tags)})


def in_flight(instance: dg.DagsterInstance) -> list[Release]:
    """Every release in flight with the hours it holds, oldest first (a run whose process
    is gone is marked failed first: it holds nothing). A run left queued or not started
    holds its hours until it runs or is cancelled (``backfill-assets cancel``, which stops
    such runs too): the refusal says that none of its runs has started."""

    fail_orphaned_runs(instance)
    found: dict[str, Release] = {}
    backfills = instance.get_backfills(limit=BACKFILL_PAGE)
    pauses = paused(instance, backfills)  # a paused release is in flight: it holds its hours
    for backfill in backfills:
        pause = pauses.get(backfill.backfill_id)
        if backfill.status.value in BACKFILL_IN_FLIGHT or pause is not None:
            release = pause.release_id if pause is not None else backfill.backfill_id
            root = instance.get_backfill(release) if release != backfill.backfill_id else None
            found[release] = Release(
                release,
                (root or backfill).backfill_timestamp,
                frozenset(backfill_hours(backfill)),
                tags.requested_by(backfill.tags or {}) or "",
                started=False,
                paused=pause.describe() if pause is not None else "",
            )
    records = instance.get_run_records(filters=dg.RunsFilter(statuses=RUN_IN_FLIGHT))
    for record in records:
        run = record.dagster_run
        release = tags.release_id(run.tags, run.run_id)
        hours = run_hours(run)
        running = run.status in RUN_RUNNING
        known = found.get(release)
        if known is None:
            created = record.create_timestamp.timestamp()
            parent = instance.get_backfill(release) if release != run.run_id else None
            created = parent.backfill_timestamp if parent is not None else created
            who = tags.requested_by(run.tags) or ""
            found[release] = Release(release, created, hours, who, started=running)
        else:
            found[release] = dataclasses.replace(
                known, hours=known.hours | hours, started=known.started or running
            )
    if found:
        _mark_started(instance, found)
    return sorted(found.values(), key=Release.order)


def _mark_started(instance: dg.DagsterInstance, found: dict[str, Release]) -> None:
    """A backfill one of whose runs has started (or ended: it is between its runs) has
    started."""
    for release_id, release in list(found.items()):
        if release.started:
            continue
        if release_runs(instance, release_id, BEGUN):
            found[release_id] = dataclasses.replace(release, started=True)


def runs_left(instance: dg.DagsterInstance, release_id: str) -> list[dg.DagsterRun]:
    """The runs of a release still queued, not started or running: the run itself (a
    release of one run), or the runs tagged with the release or its backfill."""
    statuses = RUN_IN_FLIGHT
    found = {
        r.run_id: r
        for f in (
            dg.RunsFilter(run_ids=[release_id], statuses=statuses),
            *release_filters(release_id, statuses),
        )
        for r in instance.get_runs(filters=f)
    }
    return sorted(found.values(), key=lambda r: r.run_id)


def holders(
    releases: Sequence[Release], hours: Iterable[str], *, before: Release | None = None
) -> list[Release]:
    """The releases of ``releases`` holding any of ``hours``; with ``before``, only those
    created before it (and never itself)."""
    wanted = set(hours)
    return [
        r
        for r in releases
        if r.hours & wanted
        and (before is None or (r.release_id != before.release_id and r.order() < before.order()))
    ]


def refusal(blocking: Sequence[Release], hours: Iterable[str], what: str) -> str:
    """One line: ``<what> refused: hours held by release ID ... in flight; ...``."""
    named = "; ".join(r.describe(hours) for r in blocking)
    return (
        f"{what} refused: {HELD_BY} in flight: {named}; wait for it to finish (or cancel it "
        f"with `backfill-assets cancel --backfill {blocking[0].release_id}`), then launch again"
    )


def cancelled(instance: dg.DagsterInstance) -> list[Release]:
    """Releases (backfills among the newest) that were cancelled, with the hours they held."""
    return [
        Release(
            b.backfill_id,
            b.backfill_timestamp,
            frozenset(backfill_hours(b)),
            tags.requested_by(b.tags or {}) or "",
        )
        for b in instance.get_backfills(limit=BACKFILL_PAGE)
        if b.status.value == "CANCELED"
    ]


def by_layer(
    releases: Sequence[Release], layers: Iterable[str], state: str = IN_FLIGHT
) -> dict[str, dict[str, str]]:
    """layer -> hour -> ``release ID <state>`` for every hour held (any layer: one release
    per hour at a time), the shape the reconciliation plan skips."""
    held: dict[str, str] = {}
    for release in sorted(releases, key=Release.order, reverse=True):
        for hour in release.hours:
            held[hour] = f"release {release.release_id} {state}"
    return {layer: dict(held) for layer in layers}


def earlier_holders(instance: dg.DagsterInstance, run_tags: Mapping[str, str], run_id: str):
    """The releases created before the one run ``run_id`` belongs to that hold any of its
    hours, and the line refusing it ("" if none)."""
    releases = in_flight(instance)
    own_id = tags.release_id(run_tags, run_id)
    own = next((r for r in releases if r.release_id == own_id), None)
    if own is None:
        return [], ""
    blocking = holders(releases, own.hours, before=own)
    if not blocking:
        return [], ""
    return blocking, refusal(blocking, own.hours, f"release {own_id}")


def refuse_if_held(context: dg.AssetExecutionContext) -> None:
    """At a release's step: fail at once, in one line, if an earlier release in flight
    holds any hour of this one (no retries: waiting would not change the order)."""
    blocking, line = earlier_holders(context.instance, context.run.tags, context.run_id)
    if blocking:
        raise dg.Failure(description=line, allow_retries=False)
