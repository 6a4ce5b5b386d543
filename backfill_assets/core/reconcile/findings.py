"""Reconciliation: compare the closed backup manifests with what is published, pure functions.

``find`` turns an inventory of the backup tree (``core.backups.inventory``) and the published
state of every layer (``Published``, read from Dagster's records or from the ledger, see
``release.state``) into ``Finding``s, per hour and, where it can tell, per client:

Requested by a backfill (a backfill fixes them):

- ``unpublished``: closed manifests, nothing published (unless within ``grace_hours`` of the
  newest backup hour: the live pipeline's turn);
- ``count_mismatch``: published rows + quarantined lines (+ lines left out as erased) != the
  closed manifests' records;
- ``manifest_appeared``: a client's manifest closed after the hour was published (the
  published version read none of its files);
- ``manifest_changed``: a client's files differ from those the published version read;
- ``stale``: published by an older code version than the layer's current one;
- ``outdated``: published before an upstream partition it reads was republished.

Reported for a person (a backfill cannot fix them):

- ``missing_hour``: no backup folder for any client and nothing published (an outage; a
  person decides whether the hour really had no traffic: ``--allow-missing-hours``);
- ``backup_problem``: open folder, unreadable manifest, missing part file, a stray folder
  that no hour reads (``hour=24``, ``date=2026-13-01``) beside the hour's...;
- ``backup_gone``: rows published, but the backup folder is now gone or open.

``plan`` turns the requested findings into the partition ranges to backfill: the affected
hours of each layer (``plan.plan_ranges``: damaged received hours, then the session
hours whose windows touch them), minus hours already being backfilled or requested for the
same damage, merged into contiguous ranges and bounded by ``max_hours`` per evaluation.

The first layer of the registry (``raw``) is the one that reads the backups; partitions of
every layer but the session layer are received hours (``plan.plan_ranges``).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from backfill_assets import settings
from backfill_assets.core import tags
from backfill_assets.core.backups.inventory import HourInventory
from backfill_assets.core.hours import hour_range, shift_hour
from backfill_assets.core.names import Layer
from backfill_assets.core.plan import plan_ranges

MISSING_HOUR = "missing_hour"
BACKUP_PROBLEM = "backup_problem"
BACKUP_GONE = "backup_gone"
UNPUBLISHED = "unpublished"
COUNT_MISMATCH = "count_mismatch"
MANIFEST_APPEARED = "manifest_appeared"
MANIFEST_CHANGED = "manifest_changed"
STALE = "stale"
OUTDATED = "outdated"
KINDS = (
    MISSING_HOUR,
    BACKUP_PROBLEM,
    BACKUP_GONE,
    UNPUBLISHED,
    COUNT_MISMATCH,
    MANIFEST_APPEARED,
    MANIFEST_CHANGED,
    STALE,
    OUTDATED,
)

REQUESTED_BY = "reconciliation-sensor"
LAYER_TAG = tags.LAYER
REQUEST_ID_TAG = tags.REQUEST_ID
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"

PlanRanges = Callable[[Sequence[str], str, str], list[tuple[str, str, str]]]


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ReconcileConfig:
    """Reconciliation settings (environment variables, read when definitions load).

    - ``BACKFILL_RECONCILE_INTERVAL_SECONDS`` (300): the sensor's minimum interval;
    - ``BACKFILL_MAX_HOURS_PER_TICK`` (48): hours one evaluation may request; beyond it
      the rest is reported and waits (a group larger than the cap waits for a person);
    - ``BACKFILL_RECONCILE_WINDOW_HOURS`` (168): the newest backup hours compared;
    - ``BACKFILL_RECONCILE_GRACE_HOURS`` (2): newest hours left to the live pipeline when
      unpublished;
    - ``BACKFILL_RECONCILE_SENSOR`` (``on``): ``off`` makes the sensor stopped by default
      (a daemon started for one CLI command in tests, for example).
    """

    interval_seconds: int = 300
    max_hours_per_tick: int = 48
    window_hours: int = 168
    grace_hours: int = 2
    enabled: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReconcileConfig:
        return cls(**settings.reconcile_values(env))


# ------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Published:
    """The published partition of a layer at an hour, as far as reconciliation needs it."""

    layer: str
    hour: str
    rows: Mapping[str, int]  # published table -> row count of the published version
    version: str | None  # shadow version (the run id that wrote it)
    code_version: str | None  # code version that wrote it (None: unknown)
    published_at: float | None  # epoch seconds the version was put in place
    run_id: str | None = None  # the run that published it
    # Backup-reading layer only: client_id -> {part file name: sha256} the version read;
    # None when unknown (then only counts are compared).
    read: Mapping[int, Mapping[str, str]] | None = None
    manifest: Mapping[str, str] = field(default_factory=dict)  # reason, mode, ... of the run
    erased: int = 0  # backup lines the version left out as an erased user's (accounted for)

    @property
    def lines(self) -> int:
        """Rows over every published table of the layer (raw: payloads + quarantined lines)."""
        return sum(self.rows.values())


@dataclass(frozen=True)
class Finding:
    """One thing reconciliation found at an hour of a layer (and client, when known)."""

    layer: str
    hour: str
    kind: str
    detail: str
    client_id: int | None = None
    actionable: bool = True  # a backfill fixes it (else: reported for a person)

    @property
    def key(self) -> str:
        client = "-" if self.client_id is None else str(self.client_id)
        return f"{self.layer}@{self.hour}:{self.kind}:{client}:{self.detail}"

    def to_dict(self) -> dict:
        return {
            "layer": self.layer,
            "hour": self.hour,
            "kind": self.kind,
            "client_id": self.client_id,
            "actionable": self.actionable,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Window:
    """The hours compared (``hours``) and the bounds of the backup tree (first, newest)."""

    hours: tuple[str, ...]
    earliest: str  # first hour present in the backup tree
    newest: str  # newest hour present in the backup tree


def digest(items: Iterable[str], size: int = 12) -> str:
    """A short order-independent digest of ``items`` (fingerprints in cursors, run keys)."""
    return hashlib.sha256("\n".join(sorted(items)).encode()).hexdigest()[:size]


def contiguous_ranges(hours: Iterable[str]) -> list[tuple[str, str]]:
    """Sorted hour keys merged into inclusive ``(first, last)`` runs of consecutive hours."""
    ranges: list[tuple[str, str]] = []
    for hour in sorted(set(hours)):
        if ranges and shift_hour(ranges[-1][1], 1) == hour:
            ranges[-1] = (ranges[-1][0], hour)
        else:
            ranges.append((hour, hour))
    return ranges


def describe_hours(hours: Iterable[str]) -> str:
    """``2026-11-20T09..2026-11-20T11, 2026-11-20T15`` for a set of hours."""
    return ", ".join(a if a == b else f"{a}..{b}" for a, b in contiguous_ranges(hours))


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "an unknown time"
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


# ------------------------------------------------------------------------------- find


def _client_findings(layer: str, hour: str, inv: HourInventory, pub: Published) -> list[Finding]:
    """Per client: the files of the closed manifests now vs the files the version read."""
    assert pub.read is not None
    now = {
        f.client_id: {p.name: p.sha256 for p in f.files}
        for f in inv.folders
        if f.closed and f.records is not None
    }
    folders = {f.client_id: f for f in inv.folders}
    version = (pub.version or "?")[:8]
    findings = []
    for client in sorted(set(now) | set(pub.read)):
        current, read = now.get(client), pub.read.get(client)
        if current is not None and not read:
            if current:  # a closed folder with files that the published version never saw
                records = folders[client].records
                findings.append(
                    Finding(
                        layer,
                        hour,
                        MANIFEST_APPEARED,
                        f"client_id={client}: manifest of {records} record(s) in {len(current)} "
                        f"file(s) closed after the hour was published (version {version} read "
                        f"none of this client's files)",
                        client,
                    )
                )
        elif current is None and read:
            state = "open (no manifest)" if client in folders else "gone"
            findings.append(
                Finding(
                    layer,
                    hour,
                    BACKUP_GONE,
                    f"client_id={client}: the published version read {len(read)} file(s); the "
                    f"folder is now {state}",
                    client,
                    actionable=False,
                )
            )
        elif current is not None and current != read:
            added = sorted(set(current) - set(read or {}))
            removed = sorted(set(read or {}) - set(current))
            changed = sorted(n for n in set(current) & set(read or {}) if current[n] != read[n])
            parts = [
                f"{label} {', '.join(names)}"
                for label, names in (
                    ("new", added),
                    ("removed", removed),
                    ("different digest", changed),
                )
                if names
            ]
            findings.append(
                Finding(
                    layer,
                    hour,
                    MANIFEST_CHANGED,
                    f"client_id={client}: manifest changed after the hour was published "
                    f"(version {version}): {'; '.join(parts)}",
                    client,
                )
            )
    return findings


def _absent_hour(name: str, hour: str, pub: Published | None) -> Finding | None:
    """An hour without a backup folder: missing if nothing is published, gone if lines
    are (neither is for a backfill to repair)."""
    if pub is None:
        return Finding(
            name,
            hour,
            MISSING_HOUR,
            "no backup folder for any client (backup outage?): nothing to read and "
            "nothing published; backfill it with --allow-missing-hours only if the "
            "hour really had no traffic",
            actionable=False,
        )
    if pub.lines:
        return Finding(
            name,
            hour,
            BACKUP_GONE,
            f"{pub.lines} line(s) published, but the hour has no backup folder any more",
            actionable=False,
        )
    return None


def _backup_findings(
    layer: Layer,
    inventory: Mapping[str, HourInventory],
    published: Mapping[str, Published],
    window: Window,
    grace_hours: int,
) -> list[Finding]:
    name = layer.name
    findings: list[Finding] = []
    grace_from = shift_hour(window.newest, -grace_hours + 1) if grace_hours else None
    for hour, inv in sorted(inventory.items()):
        pub = published.get(hour)
        if not inv.exists and not inv.stray:
            absent = _absent_hour(name, hour, pub)
            if absent is not None:
                findings.append(absent)
            continue
        problems = inv.all_problems
        if problems:
            more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
            findings.append(
                Finding(
                    name,
                    hour,
                    BACKUP_PROBLEM,
                    "; ".join(problems[:3]) + more + " - waiting until the backup is consistent",
                    actionable=False,
                )
            )
            continue
        closed = [f for f in inv.folders if f.closed]
        expected = inv.expected_records
        if pub is None:
            waiting = grace_from is not None and hour >= grace_from
            findings.append(
                Finding(
                    name,
                    hour,
                    UNPUBLISHED,
                    f"{len(closed)} closed folder(s) with {expected} record(s), nothing published"
                    + (
                        f" (within {grace_hours} h of the newest backup hour: the live pipeline's "
                        f"turn)"
                        if waiting
                        else ""
                    ),
                    actionable=not waiting,
                )
            )
            continue
        if pub.lines + pub.erased != expected:
            counts = " + ".join(f"{n} in {table}" for table, n in sorted(pub.rows.items()))
            counts += f" + {pub.erased} erased" if pub.erased else ""
            findings.append(
                Finding(
                    name,
                    hour,
                    COUNT_MISMATCH,
                    f"published {pub.lines} line(s) ({counts}) but the closed manifests now say "
                    f"{expected} ({expected - pub.lines:+d})",
                )
            )
        if pub.read is not None:
            findings.extend(_client_findings(name, hour, inv, pub))
    return findings


def _stale(layer: Layer, published: Mapping[str, Published]) -> list[Finding]:
    return [
        Finding(
            layer.name,
            hour,
            STALE,
            f"published by code version {pub.code_version}; the layer's code is now "
            f"{layer.code_version}",
        )
        for hour, pub in sorted(published.items())
        if pub.code_version is not None and pub.code_version != layer.code_version
    ]


def _outdated(
    upstream: Layer,
    layer: Layer,
    published: Mapping[str, Mapping[str, Published]],
    window: Window,
    plan: PlanRanges,
) -> list[Finding]:
    """Partitions of ``layer`` published before an upstream partition they read was."""
    ups, downs = published.get(upstream.name, {}), published.get(layer.name, {})
    newer: dict[str, list[str]] = defaultdict(list)
    hours = set(window.hours)
    for hour, up in ups.items():
        if up.published_at is None:
            continue
        for name, first, last in plan([upstream.name, layer.name], hour, hour):
            if name != layer.name:
                continue
            for target in hour_range(first, last):
                down = downs.get(target)
                if (
                    target in hours
                    and down is not None
                    and down.published_at is not None
                    and down.published_at < up.published_at
                ):
                    newer[target].append(hour)
    return [
        Finding(
            layer.name,
            target,
            OUTDATED,
            f"published at {_when(downs[target].published_at)}, before {upstream.name} "
            f"{describe_hours(sources)} that it reads was republished",
        )
        for target, sources in sorted(newer.items())
    ]


def find(
    inventory: Mapping[str, HourInventory],
    published: Mapping[str, Mapping[str, Published]],
    layers: Sequence[Layer],
    window: Window,
    *,
    grace_hours: int = 2,
    plan: PlanRanges | None = None,
) -> list[Finding]:
    """Everything that differs between the backups (``inventory``) and ``published``.

    ``layers`` in dependency order, the first reading the backups; ``published`` maps a
    layer name to its published partitions in the window.
    """
    plan = plan or plan_ranges
    if not layers:
        return []
    findings = _backup_findings(
        layers[0], inventory, published.get(layers[0].name, {}), window, grace_hours
    )
    for index, layer in enumerate(layers):
        findings += _stale(layer, published.get(layer.name, {}))
        if index:
            findings += _outdated(layers[index - 1], layer, published, window, plan)
    order = {layer.name: i for i, layer in enumerate(layers)}
    return sorted(
        findings,
        key=lambda f: (f.hour, order[f.layer], KINDS.index(f.kind), f.client_id or 0, f.detail),
    )
