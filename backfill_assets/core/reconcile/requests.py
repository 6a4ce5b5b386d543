"""What the reconciliation requests for its findings (``findings``): the damaged hours of
each layer and the layers after it, merged into ranges, capped per evaluation, and the
result of one comparison (``Reconciliation``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from backfill_assets.core import tags
from backfill_assets.core.hours import clamp_range, hour_range, parse_hour, shift_hour
from backfill_assets.core.names import RECEIVED_HOUR_LAYERS
from backfill_assets.core.plan import plan_ranges as planned_ranges
from backfill_assets.core.reconcile.findings import (
    LAYER_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    REQUEST_ID_TAG,
    REQUESTED_BY,
    Finding,
    PlanRanges,
    Window,
    contiguous_ranges,
    describe_hours,
    digest,
)
from backfill_assets.core.text import one_line
from backfill_assets.core.windows import received_window

# ------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class RangeRequest:
    """One partition range of one layer to backfill, and the findings behind it."""

    layer: str
    first: str
    last: str
    causes: tuple[Finding, ...]
    fingerprint: str  # digest of the causes: the same damage gives the same fingerprint
    allow_missing: tuple[str, ...] = ()  # hours outside the backup tree the run reads as empty

    @property
    def hours(self) -> int:
        return len(hour_range(self.first, self.last))

    @property
    def run_key(self) -> str:
        return f"reconcile:{self.layer}:{self.first}..{self.last}:{self.fingerprint}"

    @property
    def reason(self) -> str:
        """What drifted, for the run's reason tag."""
        by_kind: dict[tuple[str, str], set[str]] = defaultdict(set)
        clients: dict[tuple[str, str], set[int]] = defaultdict(set)
        for cause in self.causes:
            by_kind[(cause.kind, cause.layer)].add(cause.hour)
            if cause.client_id is not None:
                clients[(cause.kind, cause.layer)].add(cause.client_id)
        parts = []
        for (kind, layer), hours in sorted(by_kind.items()):
            who = clients.get((kind, layer))
            suffix = f" (client {', '.join(map(str, sorted(who)))})" if who else ""
            parts.append(f"{kind} in {layer} {describe_hours(hours)}{suffix}")
        text = "reconciliation: " + "; ".join(parts)
        return one_line(text, tags.MAX_REASON_CHARS)  # within the limit operators have too

    def tags(self, request_id: str) -> dict[str, str]:
        """The run tags of this request (run manifest + partition range)."""
        result = {
            RANGE_START_TAG: self.first,
            RANGE_END_TAG: self.last,
            tags.MODE: "backfill",
            tags.REQUESTED_BY: REQUESTED_BY,
            tags.REASON: self.reason,
            LAYER_TAG: self.layer,
            REQUEST_ID_TAG: request_id,
        }
        if self.allow_missing:
            result[tags.ALLOW_MISSING_HOURS] = ",".join(self.allow_missing)
        return result

    def to_dict(self) -> dict:
        return {
            "layer": self.layer,
            "first": self.first,
            "last": self.last,
            "hours": self.hours,
            "reason": self.reason,
            "run_key": self.run_key,
            "allow_missing_hours": list(self.allow_missing),
        }


@dataclass
class Plan:
    """What to request now, what waits, and what is skipped (already handled)."""

    requests: list[RangeRequest] = field(default_factory=list)
    deferred: list[tuple[RangeRequest, str]] = field(default_factory=list)
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)  # layer -> hour -> why
    targets: dict[str, dict[str, str]] = field(default_factory=dict)  # layer -> hour -> fp

    def status(self, layer: str, hour: str) -> str:
        """What this evaluation does about ``layer`` at ``hour``."""
        for request in self.requests:
            if request.layer == layer and request.first <= hour <= request.last:
                return f"backfill requested: {layer} {request.first}..{request.last}"
        for request, why in self.deferred:
            if request.layer == layer and request.first <= hour <= request.last:
                return f"not requested: {why}"
        skipped = self.skipped.get(layer, {}).get(hour)
        return f"not requested: {skipped}" if skipped else "reported"

    @property
    def requested_hours(self) -> int:
        return len({h for r in self.requests for h in hour_range(r.first, r.last)})


def allowed_outside(layer: str, first: str, last: str, window: Window) -> tuple[str, ...]:
    """Hours a run of ``layer`` over ``first..last`` reads that lie outside the backup tree
    (before its first hour or after its newest): they have no data yet or never will, so
    the run may read them as empty. Only session layers read beyond their own hours. Hours
    a window reaches outside the partitions (before the first, after the last) are no
    partition: nothing reads them, so they are not listed."""
    if layer in RECEIVED_HOUR_LAYERS:
        return ()
    span = clamp_range(received_window(first)[0], received_window(last)[1])
    if span is None:
        return ()
    return tuple(h for h in hour_range(*span) if h < window.earliest or h > window.newest)


def _causes(
    findings: Sequence[Finding], order: Mapping[str, int]
) -> dict[tuple[str, str], set[Finding]]:
    """The actionable findings of the compared layers, per (layer, hour)."""
    causes: dict[tuple[str, str], set[Finding]] = defaultdict(set)
    for finding in findings:
        if finding.actionable and finding.layer in order:
            causes[(finding.layer, finding.hour)].add(finding)
    return causes


def _targets(
    causes: Mapping[tuple[str, str], set[Finding]],
    layer_names: Sequence[str],
    window: Window,
    in_flight: Mapping[str, Mapping[str, str]],
    plan_ranges: PlanRanges,
) -> tuple[dict[str, dict[str, set[Finding]]], set[tuple[str, str]], dict[tuple[str, str], str]]:
    """The (layer, hour)s the causes damage within the window, with their findings; those
    some cause not held in flight reaches (free); what holds the others."""
    order = {name: i for i, name in enumerate(layer_names)}
    targets: dict[str, dict[str, set[Finding]]] = defaultdict(lambda: defaultdict(set))
    free: set[tuple[str, str]] = set()  # targets some cause not held in flight reaches
    held: dict[tuple[str, str], str] = {}  # the others: what holds their cause's hours
    for (layer, hour), found in causes.items():
        downstream = list(layer_names[order[layer] :])
        spans = [
            (name, target)
            for name, first, last in plan_ranges(downstream, hour, hour)
            for target in hour_range(first, last)
        ]
        # a release rooted here would rebuild every span: one held by a release in flight
        # (any layer) blocks the cause
        holder = next((in_flight[n][t] for n, t in spans if t in in_flight.get(n, {})), None)
        for name, target in spans:
            if window.earliest <= target <= window.newest:
                targets[name][target] |= found
                if holder is None:
                    free.add((name, target))
                else:
                    held.setdefault((name, target), holder)
    return targets, free, held


def _ranges(todo: Mapping[str, Mapping[str, set[Finding]]], window: Window) -> list[RangeRequest]:
    """The hours to request merged into contiguous ranges per layer."""
    ranges = []
    for layer, hours in todo.items():
        for first, last in contiguous_ranges(hours):
            found = set().union(*(hours[h] for h in hour_range(first, last)))
            ranges.append(
                RangeRequest(
                    layer,
                    first,
                    last,
                    tuple(sorted(found, key=lambda f: f.key)),
                    digest(f.key for f in found),
                    allowed_outside(layer, first, last, window),
                )
            )
    return ranges


def _capped(
    result: Plan, ranges: list[RangeRequest], order: Mapping[str, int], max_hours: int
) -> None:
    """Ranges that overlap in time form one group; groups go to ``result.requests`` oldest
    first while their hours fit in ``max_hours``, the others to ``result.deferred``."""
    groups: list[list[RangeRequest]] = []
    for request in sorted(ranges, key=lambda r: (r.first, r.last, order[r.layer])):
        if groups and request.first <= shift_hour(max(r.last for r in groups[-1]), 1):
            groups[-1].append(request)
        else:
            groups.append([request])
    used = 0
    for group in groups:
        size = len({h for r in group for h in hour_range(r.first, r.last)})
        if size > max_hours:
            why = (
                f"{size} hours exceed the cap of {max_hours} per evaluation "
                f"(BACKFILL_MAX_HOURS_PER_TICK): a person should launch it"
            )
            result.deferred += [(r, why) for r in group]
        elif used + size > max_hours:
            why = f"cap of {max_hours} hours per evaluation reached; next evaluation"
            result.deferred += [(r, why) for r in group]
        else:
            used += size
            result.requests += group


_ALREADY_REQUESTED = (
    "already requested for this damage; not requested again until it "
    "changes (if that run failed, a person should look)"
)


def plan(
    findings: Sequence[Finding],
    layer_names: Sequence[str],
    window: Window,
    *,
    max_hours: int,
    in_flight: Mapping[str, Mapping[str, str]] | None = None,
    requested: Mapping[str, Mapping[str, str]] | None = None,
    plan_ranges: PlanRanges | None = None,
) -> Plan:
    """The ranges to request for the actionable ``findings``.

    Each affected hour of a layer maps to the hours it damages in that layer and the layers
    after it (``plan_ranges``), clipped to the backup tree. Hours being backfilled now
    (``in_flight``: layer -> hour -> run id) or already requested for the same damage
    (``requested``: layer -> hour -> fingerprint, the sensor's cursor) are skipped. The rest
    are merged into contiguous ranges per layer; ranges that overlap in time form one group,
    and groups are requested oldest first while their hours (distinct hours touched, any
    layer) fit in ``max_hours``.
    """
    requested = requested or {}
    order = {name: i for i, name in enumerate(layer_names)}
    targets, free, held = _targets(
        _causes(findings, order),
        layer_names,
        window,
        in_flight or {},
        plan_ranges or planned_ranges,
    )
    result = Plan()
    todo: dict[str, dict[str, set[Finding]]] = defaultdict(dict)
    for layer, hours in targets.items():
        for hour, found in hours.items():
            fp = digest(f.key for f in found)
            result.targets.setdefault(layer, {})[hour] = fp
            if (layer, hour) not in free:
                why = f"held by {held[(layer, hour)]} (it rebuilds this hour or its sessions)"
                result.skipped.setdefault(layer, {})[hour] = why
            elif requested.get(layer, {}).get(hour) == fp:
                result.skipped.setdefault(layer, {})[hour] = _ALREADY_REQUESTED
            else:
                todo[layer][hour] = found
    _capped(result, _ranges(todo, window), order, max_hours)
    result.requests.sort(key=lambda r: (order[r.layer], r.first))
    return result


# ----------------------------------------------------------------------------- result


@dataclass
class Reconciliation:
    """One comparison: the window, what was found, and what to request."""

    window: Window
    findings: list[Finding]
    plan: Plan
    source: str  # where the published state came from: "dagster" or "ledger"
    max_hours: int
    layers: tuple[str, ...] = ()  # the layers compared, in dependency order
    # layer -> the window's hours that have a published version (None: not known)
    published: Mapping[str, frozenset[str]] | None = None

    def health(self, now: datetime | None = None) -> dict[str, dict]:
        """Per layer, numbers a monitor can scrape: the share of the window's hours that
        are published and have no finding (matching the closed manifests), the hours with
        no published version (never published, held back or failed: never healthy), the
        hours a backfill would repair, and the oldest of them with its age in hours (since
        its hour ended)."""
        now = now or datetime.now(UTC)
        hours = self.window.hours
        health = {}
        for layer in self.layers or tuple(dict.fromkeys(f.layer for f in self.findings)):
            found = {f.hour for f in self.findings if f.layer == layer} & set(hours)
            published = set(hours) if self.published is None else self.published.get(layer, set())
            unpublished = sorted(set(hours) - set(published))
            healthy = set(hours) - found - set(unpublished)
            damaged = sorted({f.hour for f in self.actionable if f.layer == layer})
            oldest = damaged[0] if damaged else None
            age = (now - parse_hour(oldest) - timedelta(hours=1)) if oldest else None
            health[layer] = {
                "hours": len(hours),
                "healthy_hours": len(healthy),
                "completeness": round(len(healthy) / len(hours), 4),
                "unpublished_hours": len(unpublished),
                "unpublished": unpublished,
                "damaged_hours": len(damaged),
                "oldest_damage_hour": oldest,
                "oldest_damage_age_hours": (
                    round(max(age.total_seconds(), 0) / 3600, 1) if age is not None else None
                ),
            }
        return health

    @property
    def actionable(self) -> list[Finding]:
        return [f for f in self.findings if f.actionable]

    def lines(self) -> list[str]:
        """The human-readable account (CLI, demo, logs)."""
        hours = self.window.hours
        source = {"dagster": "Dagster's asset records", "ledger": "the publication ledger"}
        out = [
            f"Reconciliation of {hours[0]}..{hours[-1]} ({len(hours)} hour(s); backup tree "
            f"{self.window.earliest}..{self.window.newest}; published state from "
            f"{source.get(self.source, self.source)})",
        ]
        if not self.findings:
            out.append("No findings: every closed manifest matches what is published.")
        else:
            out.append(
                f"{len(self.findings)} finding(s), {len(self.actionable)} to fix by a backfill:"
            )
            width = max(len(f.layer) for f in self.findings)
            kind_width = max(len(f.kind) for f in self.findings)
            for f in self.findings:
                mark = "" if f.actionable else "  [for a person]"
                out.append(
                    f"  {f.hour}  {f.layer:<{width}}  {f.kind:<{kind_width}}  {f.detail}{mark}"
                )
        if self.plan.requests:
            out.append(
                f"Ranges to request ({self.plan.requested_hours} hour(s) touched, cap "
                f"{self.max_hours} per evaluation), in this order:"
            )
            width = max(len(r.layer) for r in self.plan.requests)
            for r in self.plan.requests:
                out.append(f"  {r.layer:<{width}}  {r.first}..{r.last}  ({r.hours} h)  {r.reason}")
        elif self.actionable:
            out.append("Nothing new to request.")
        for r, why in self.plan.deferred:
            out.append(f"  deferred: {r.layer} {r.first}..{r.last} ({r.hours} h): {why}")
        for layer, h in self.health().items():
            damage = (
                f"oldest damage {h['oldest_damage_hour']} ({h['oldest_damage_age_hours']:,.1f} h "
                f"ago)"
                if h["oldest_damage_hour"]
                else "no damage to repair"
            )
            missing = (
                f"{h['unpublished_hours']} of {h['hours']} hour(s) not published: "
                f"{describe_hours(h['unpublished'])}; "
                if h["unpublished_hours"]
                else ""
            )
            out.append(
                f"  health {layer}: {h['completeness']:.1%} of {h['hours']} hour(s) published "
                f"and matching; {missing}{h['damaged_hours']} to repair; {damage}"
            )
        for layer, skipped in sorted(self.plan.skipped.items()):
            by_why: dict[str, list[str]] = defaultdict(list)
            for hour, why in skipped.items():
                by_why[why].append(hour)
            for why, skipped_hours in sorted(by_why.items()):
                out.append(f"  skipped: {layer} {describe_hours(skipped_hours)}: {why}")
        return out

    def to_dict(self) -> dict:
        return {
            "window": {
                "first": self.window.hours[0],
                "last": self.window.hours[-1],
                "hours": len(self.window.hours),
                "backups_earliest": self.window.earliest,
                "backups_newest": self.window.newest,
            },
            "source": self.source,
            "findings": [f.to_dict() for f in self.findings],
            "requests": [r.to_dict() for r in self.plan.requests],
            "deferred": [{**r.to_dict(), "why": why} for r, why in self.plan.deferred],
            "skipped": {
                layer: dict(sorted(h.items())) for layer, h in sorted(self.plan.skipped.items())
            },
            "max_hours_per_tick": self.max_hours,
            "health": self.health(),
        }
