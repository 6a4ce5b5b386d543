"""Planning a release's publish (read only): per layer and hour, the newest candidate of
the release, held back by the rules of ``HOLD_BACK_RULES`` (see ``publisher``), and the
published hours it read that changed since (the whole release is refused).

The ledger and audit rows are database queries; the metastore listings and the change
gates' measures are Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from backfill_assets.core.names import Layer
from backfill_assets.core.warehouse import audit, gates
from backfill_assets.core.warehouse.release_reads import (  # noqa: F401  (re-exported)
    _check_outcomes,
    _gate_measures,
    _known_clients,
    _last_moves,
    _reads,
    _rows,
    _same_rows,
    _written,
    approvals_of,
    deleted_by,
    published_versions_checked,
    release_candidates,
    releases_of,
)
from backfill_assets.core.warehouse.tables import partition_locations, table_exists

PUBLISHED, UNCHANGED, HELD_BACK = "published", "unchanged", "held_back"
SOURCE_RELEASE, SOURCE_PUBLISHED = "release", "published"
# An hour read as empty for good: the release declared it so, or it lies before the backups'
# first hour (where the data begins).
SOURCE_EMPTY = "empty"
# Hours a windowed build read as empty for want of data. OUTSIDE: after the newest hour of
# the backups, no data exists yet: the hours built from it are published *provisional* (the
# best there is; rebuilt when the later hours land). UNAVAILABLE: inside the backups but
# neither published nor rebuilt by the release: the data exists, so the hours built without
# it are held back (the rest of the release publishes).
SOURCE_OUTSIDE, SOURCE_UNAVAILABLE = "outside", "unavailable"
READ_AS_EMPTY = (SOURCE_EMPTY, SOURCE_OUTSIDE, SOURCE_UNAVAILABLE)
PROVISIONAL = "provisional"  # metadata of a published hour: why it is provisional, or ""
# How a reason says an hour is held back only because an upstream hour it reads is.
HELD_UPSTREAM = "of this release, which is held back"


@dataclass
class HourOutcome:
    layer: str
    hour: str
    status: str  # published | unchanged | held_back
    version: str | None = None
    reasons: list[str] = field(default_factory=list)
    tables: dict[str, dict] = field(default_factory=dict)
    gates: list[str] = field(default_factory=list)  # change-gate findings (approved or not)
    approval: dict | None = None  # the approval that let the gate's findings through
    provisional: list[str] = field(default_factory=list)  # window hours read without data

    @property
    def provisional_note(self) -> str:
        """Why the hour is provisional ("" when it is final)."""
        return provisional_note(self.provisional)

    @property
    def awaiting_approval(self) -> bool:
        """Held back by change gates alone: an approval publishes it."""
        return self.status == HELD_BACK and all(r.startswith(gates.PREFIX) for r in self.reasons)


@dataclass
class ReleasePlan:
    release_id: str
    outcomes: list[HourOutcome]
    stale: list[str]  # published upstream hours that changed since the release read them
    approvals: list[dict] = field(default_factory=list)  # given by this publish, to record

    def by_layer(self, layer: str) -> list[HourOutcome]:
        return [o for o in self.outcomes if o.layer == layer]

    @property
    def held(self) -> list[HourOutcome]:
        return [o for o in self.outcomes if o.status == HELD_BACK]


@dataclass(frozen=True)
class Approval:
    """A person's approval of a release's change-gate findings, given with a publish."""

    approved_by: str
    reason: str
    hours: frozenset[str] | None = None  # None: every hour the gates hold
    ticket: str | None = None

    def covers(self, hour: str) -> bool:
        return self.hours is None or hour in self.hours


# ------------------------------------------------------------------------------ planning


def lock_names(layers: Sequence[Layer]) -> list[str]:
    """The publish locks a publish of ``layers`` takes: theirs and their upstreams'."""
    return sorted(
        {layer.name for layer in layers} | {lay.upstream for lay in layers if lay.upstream}
    )


def published_tables(layers: Sequence[Layer]) -> list[str]:
    """The published tables of ``layers`` (a caller holding their locks may settle their
    pending transactions: ``recover``)."""
    return [table for layer in layers for table in layer.tables]


@dataclass
class _Facts:
    """What the plan of one release reads once (a few queries and Spark listings), for the
    rules that decide each (layer, hour)."""

    release_id: str
    limits: gates.Limits
    approve: Approval | None
    by_name: dict[str, Layer]
    candidates: dict[tuple[str, str], dict]
    checks: dict
    current: dict[str, dict[str, str]]
    written: dict[str, dict]
    measured: dict[str, dict[gates.Key, dict[str, float]]]
    known: dict[str, dict[str, set[str]]]
    approved: dict[tuple[str, str, str], list[dict]]
    purged: dict[str, dict]
    not_yet: set[tuple[str, str]]  # (reader, upstream hour) read before its data exists
    gaps: set[tuple[str, str]]  # (reader, upstream hour) read while its data is unavailable
    read_from_release: dict[tuple[str, str, str], set[str]]  # (reader, upstream, hour)
    status_of: dict[tuple[str, str], HourOutcome] = field(default_factory=dict)
    new_approvals: list[dict] = field(default_factory=list)


def _facts(
    spark: SparkSession,
    release_id: str,
    layers: Sequence[Layer],
    limits: gates.Limits,
    approve: Approval | None,
    reads: list[dict],
) -> _Facts:
    shadows = [s for layer in layers for s, _ in layer.pairs]
    candidates = release_candidates(spark, release_id, shadows)
    versions = {row["version"] for row in candidates.values()}
    current = {t: partition_locations(spark, t) for t in published_tables(layers)}
    written = _written(spark, {loc for locs in current.values() for loc in locs.values() if loc})
    published_of = {shadow: published for layer in layers for shadow, published in layer.pairs}
    measured = _gate_measures(spark, candidates, current, published_of, written)
    from_release: dict[tuple[str, str, str], set[str]] = {}
    for r in reads:
        if r["source"] == SOURCE_RELEASE:
            key = (r["reader_table"], r["upstream_table"], r["hour"])
            from_release.setdefault(key, set()).add(r["version"])
    return _Facts(
        release_id=release_id,
        limits=limits,
        approve=approve,
        by_name={layer.name: layer for layer in layers},
        candidates=candidates,
        checks=_check_outcomes(spark, [layer.checked_table for layer in layers], versions),
        current=current,
        written=written,
        measured=measured,
        known=_known_clients(spark, candidates, measured, current, written, published_of),
        approved=approvals_of(spark, release_id),
        purged=audit.deleted(spark, {row["location"] for row in candidates.values()}),
        not_yet={(r["reader_table"], r["hour"]) for r in reads if r["source"] == SOURCE_OUTSIDE},
        gaps={(r["reader_table"], r["hour"]) for r in reads if r["source"] == SOURCE_UNAVAILABLE},
        read_from_release=from_release,
    )


def _stale(spark: SparkSession, reads: Sequence[dict], current: Mapping) -> list[str]:
    """Published upstream hours the release read that changed since (the release is
    refused). Every upstream table read as published, whether or not this publish includes
    its layer (publishing only the downstream layer must not skip the check); an hour read
    as empty is stale once something is published there."""
    outside = [r for r in reads if r["source"] in (SOURCE_PUBLISHED, *READ_AS_EMPTY)]
    upstream_now = {
        t: current[t] if t in current else partition_locations(spark, t)
        for t in sorted({r["upstream_table"] for r in outside})
        if t in current or table_exists(spark, t)
    }
    last_moves = _last_moves(spark, outside)

    def moved_since(read: dict):
        """When the pointer the build read last moved, if after the read (else None)."""
        when = last_moves.get((read["upstream_table"], read["hour"]))
        return when if when is not None and read["read_at"] and when > read["read_at"] else None

    return sorted(
        {
            f"{r['upstream_table']} {r['hour']} (read "
            f"{'as empty' if r['source'] in READ_AS_EMPTY else 'at ' + r['location']}, now "
            f"{upstream_now.get(r['upstream_table'], {}).get(r['hour'])}"
            + (f"; republished or rolled back at {moved_since(r)}" if moved_since(r) else "")
            + ")"
            for r in outside
            if upstream_now.get(r["upstream_table"], {}).get(r["hour"]) != r["location"]
            or moved_since(r)
        }
    )


# The hold-back rules: each adds its reasons to the outcome of one (layer, hour) of the
# release (and what it learns on the way: the tables to swap, the gates' findings).


def _window_unavailable(facts: _Facts, layer: Layer, outcome: HourOutcome) -> None:
    """An hour read without data that exists holds it back; one read before its data
    exists makes it provisional."""
    window = layer.reads(outcome.hour)
    outcome.provisional = [h for h in window if (layer.checked_table, h) in facts.not_yet]
    outcome.reasons += [
        f"reads {layer.upstream} {h}, which has backups but is neither published nor "
        f"rebuilt by this release: publish it (a release of that hour), then rebuild"
        for h in window
        if (layer.checked_table, h) in facts.gaps
    ]


def _checks_not_passed(facts: _Facts, layer: Layer, outcome: HourOutcome) -> None:
    """A check of the layer that did not pass for this exact version."""
    results = facts.checks.get((layer.checked_table, outcome.hour, outcome.version), {})
    outcome.reasons += [f"{n}: not checked" for n in layer.checks if n not in results]
    outcome.reasons += [f"{n}: {d}" for n, (ok, d) in sorted(results.items()) if not ok]


def _upstream_of_release(facts: _Facts, layer: Layer, outcome: HourOutcome) -> None:
    """An upstream candidate of the release it read that is held back, or that is another
    version than the one going live, or that this publish leaves out."""
    upstream = facts.by_name.get(layer.upstream or "")
    reads = layer.reads(outcome.hour)
    if upstream is None:
        if layer.upstream and any(
            r[0] == layer.checked_table and r[2] in reads for r in facts.read_from_release
        ):
            outcome.reasons.append(
                f"reads {layer.upstream} candidates of this release that are not published "
                f"with it (publish {layer.upstream} too)"
            )
        return
    main = upstream.tables[0]
    for needed in reads:
        held = facts.status_of.get((upstream.name, needed))
        read = facts.read_from_release.get((layer.checked_table, main, needed))
        if held is None or not read:
            continue
        if held.status == HELD_BACK:
            outcome.reasons.append(f"reads {upstream.name} {needed} {HELD_UPSTREAM}")
        elif read != {held.version}:
            # the upstream hour was rebuilt after this hour was built
            outcome.reasons.append(
                f"reads {upstream.name} {needed} version "
                f"{', '.join(sorted(v[:8] for v in read))}, but the release "
                f"publishes version {held.version[:8]} there: rebuild this hour"
            )


def _candidate_of(facts: _Facts, shadow: str, published: str, outcome: HourOutcome):
    """The row to publish for one table of the hour, or the reason it cannot be."""
    hour, version = outcome.hour, outcome.version
    row = facts.candidates.get((shadow, hour))
    if row is None or row["version"] != version:
        return None, f"{shadow}: no partition of version {version}"
    if row["location"] in facts.purged:
        gone = deleted_by(facts.purged[row["location"]])
        return None, f"{shadow} {hour}: version {version} was {gone}; rebuild the hour"
    was = facts.current[published].get(hour)
    before = facts.written.get(was or "", {})
    newer_live = (
        was
        and was != row["location"]
        and before.get("written_at") is not None
        and before["written_at"] > row["written_at"]
    )
    if newer_live and _same_rows(before, row):
        # the same rows as the newer version (two backfills of the same input): what is
        # published already holds them, nothing moves
        return {**row, "location": was}, None
    if newer_live:
        # an older build over a newer one (an old command run again, a release approved
        # late): going back is a rollback's job, not a publish's
        return None, (
            f"{published} {hour}: the published version {before['version'][:8]} "
            f"(release {before.get('release_id') or '?'}) is newer than version "
            f"{version[:8]} (written {before['written_at']:%Y-%m-%d %H:%M:%S} "
            f"after it); roll back to return to an older version"
        )
    return row, None


def _tables(facts: _Facts, layer: Layer, outcome: HourOutcome) -> None:
    """Each table's candidate (missing, purged, or older than what is published holds the
    hour back), what it replaces, and the change gates' findings on it."""
    hour = outcome.hour
    for shadow, published in layer.pairs:
        row, reason = _candidate_of(facts, shadow, published, outcome)
        if row is None:
            outcome.reasons.append(reason)
            continue
        was = facts.current[published].get(hour)
        before = facts.written.get(was or "", {})
        if was and was != row["location"] and shadow in facts.measured:
            numbers = facts.measured[shadow]
            outcome.gates += gates.findings(
                facts.limits,
                layer.name,
                hour,
                numbers.get((hour, before.get("version")), {}),
                numbers.get((hour, outcome.version), {}),
                facts.known.get(shadow, {}).get(hour, set()),
                shadow,
            )
        outcome.tables[published] = {
            "previous_location": was,
            "new_location": row["location"],
            "row_count": row["row_count"],
            "previous_row_count": int(before.get("row_count") or 0) if was else None,
            "checksum": row["checksum"],
            "code_version": row["code_version"],
        }


def _gates_unapproved(facts: _Facts, layer: Layer, outcome: HourOutcome) -> None:
    """Change-gate findings hold the hour unless approved. An approval covers the change it
    was given for: the same findings (the same measures of the same candidate against what
    it replaces); if what is published moved since (a rollback, say), the change is
    another one."""
    if not outcome.gates:
        return
    change = "; ".join(outcome.gates)
    given = facts.approved.get((layer.name, outcome.hour, outcome.version), [])
    covering = [a for a in given if a["gate"] == change]
    approve = facts.approve
    if covering:
        outcome.approval = covering[-1]
    elif approve is not None and approve.covers(outcome.hour) and not outcome.reasons:
        outcome.approval = {
            "release_id": facts.release_id,
            "layer": layer.name,
            "hour": outcome.hour,
            "version": outcome.version,
            "gate": change,
            "approved_by": approve.approved_by,
            "reason": approve.reason,
            "ticket": approve.ticket,
        }
        facts.new_approvals.append(outcome.approval)
    else:
        outcome.reasons += [gates.PREFIX + finding for finding in outcome.gates]
        if given:
            outcome.reasons.append(
                f"{gates.PREFIX}the approval on record (by "
                f"{given[-1]['approved_by'] or '?'}) was for another change: "
                f"{given[-1]['gate']}"
            )


HOLD_BACK_RULES = (
    _window_unavailable,
    _checks_not_passed,
    _upstream_of_release,
    _tables,
    _gates_unapproved,  # last: an approval given now only covers an hour nothing else holds
)


def _decide(facts: _Facts, layer: Layer, hour: str) -> HourOutcome:
    version = facts.candidates[(layer.checked_table, hour)]["version"]
    outcome = HourOutcome(layer.name, hour, PUBLISHED, version)
    for rule in HOLD_BACK_RULES:
        rule(facts, layer, outcome)
    if outcome.reasons:
        outcome.status = HELD_BACK
    elif all(t["previous_location"] == t["new_location"] for t in outcome.tables.values()):
        outcome.status = UNCHANGED
    facts.status_of[(layer.name, hour)] = outcome
    return outcome


def plan_release(
    spark: SparkSession,
    release_id: str,
    layers: Sequence[Layer],
    *,
    limits: gates.Limits | None = None,
    approve: Approval | None = None,
) -> ReleasePlan:
    """Decide, per layer and hour of the release, what publishing it would do (read only):
    each hour goes through ``HOLD_BACK_RULES``.

    ``layers`` in dependency order. A few queries of the ledger database and Spark actions
    for the whole release, whatever its size: candidates, check results, reads, approvals,
    published locations (one listing per table), and one measuring job per table whose
    published hours it would replace. ``approve``: approve the change-gate findings of
    these hours now (the approvals to record come back in ``ReleasePlan.approvals``);
    approvals recorded earlier count too, for the change they were given for.
    """
    reads = _reads(spark, release_id)
    facts = _facts(spark, release_id, layers, limits or gates.Limits(), approve, reads)
    stale = _stale(spark, reads, facts.current)
    outcomes = [
        _decide(facts, layer, hour)
        for layer in layers
        for hour in sorted({h for (t, h) in facts.candidates if t == layer.checked_table})
    ]
    return ReleasePlan(release_id, outcomes, stale, facts.new_approvals)


def provisional_note(hours: Sequence[str]) -> str:
    """One line saying which hours of a window were read without data ("" for none)."""
    if not hours:
        return ""
    span = hours[0] if len(hours) == 1 else f"{hours[0]}..{hours[-1]}"
    return (
        f"provisional: built while {len(hours)} hour(s) of its window had no data "
        f"({span}); rebuilt when they land"
    )
