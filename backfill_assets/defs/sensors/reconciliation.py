"""The reconciliation sensor: finds broken hours on its own and requests scoped backfills.

Every ``BACKFILL_RECONCILE_INTERVAL_SECONDS`` (on by default) it compares the newest
backup hours with what is published (``core.reconcile.findings``), reading only the backup store
and the Dagster instance: it never starts Spark in the daemon. It then

- records its findings where the UI shows them: one ``AssetObservation`` per hour with
  findings on the layer's first published table (e.g. ``raw/raw_payloads``), with the
  findings and what the sensor did about them, and a "resolved" one when they are gone;
- submits one **release** (a Dagster asset backfill, the one the UI launches: see
  ``release.launch.submit_backfill``) rooted at the damaged hours of the topmost damaged layer,
  downstream included (Dagster derives the session hours whose windows touch them),
  tagged with the run manifest (reason = what drifted, requested_by =
  ``reconciliation-sensor``, mode = ``backfill``) and with Dagster's ``dagster/sensor_name``
  (the UI shows the backfill and its runs as launched by this sensor and lists them on
  its page), oldest first, at most
  ``BACKFILL_MAX_HOURS_PER_TICK`` hours;
- never submits a release estimated above ``BACKFILL_MAX_CORE_HOURS`` (``over_cost``):
  the tick's reason and its log name it and the command that launches it with approval;
- never requests twice: hours that a queued or running run rebuilds are skipped, the
  cursor remembers the damage each requested hour was requested for (same damage, no
  new request, even if that run failed: a person looks), and each request has a run key.

Dagster orders each release's layers (a downstream run starts once its upstream
partitions are built) and queues the runs under the instance's limits.
"""

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg

from backfill_assets.core import names, tags
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.hours import hour_range
from backfill_assets.core.names import Layer
from backfill_assets.core.plan import LAYERS, plan_ranges, release_layers
from backfill_assets.core.reconcile.findings import ReconcileConfig, describe_hours, digest
from backfill_assets.core.reconcile.requests import RangeRequest, Reconciliation
from backfill_assets.core.warehouse import database
from backfill_assets.release import estimate, holds, keys, launch
from backfill_assets.release.keys import table_key
from backfill_assets.release.orphans import fail_orphaned_runs
from backfill_assets.release.state import (
    layer_asset_keys,
    published_from_instance,
    reconcile,
    reconcile_window,
)
from backfill_assets.settings import Settings, max_core_hours

SENSOR_NAME = "reconciliation_sensor"
# The message of a tick that found nothing (the tick history shows it; the demo reads it).
NO_FINDINGS = "no findings: backups and published data agree"
# An hour's observation: metadata OBSERVATION is DRIFT (with kinds, findings, action) or
# RESOLVED (the drift reported before is gone).
OBSERVATION = "reconciliation"
DRIFT = "drift"
RESOLVED = "resolved"


@dataclass
class Cursor:
    """The sensor's memory between evaluations (JSON in the sensor cursor).

    ``requested``: layer -> hour -> fingerprint of the damage it was requested for;
    ``reported``: layer -> hour -> digest of the findings last recorded as an observation;
    ``health``: layer -> digest of the health numbers last recorded as an observation;
    ``cancelled``: releases seen cancelled (their hours' damage then counts as requested).
    """

    requested: dict[str, dict[str, str]] = field(default_factory=dict)
    reported: dict[str, dict[str, str]] = field(default_factory=dict)
    health: dict[str, str] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str | None) -> "Cursor":
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except ValueError:
            return cls()  # an unreadable cursor only costs one repeated report
        return cls(
            requested=data.get("requested", {}),
            reported=data.get("reported", {}),
            health=data.get("health", {}),
            cancelled=data.get("cancelled", []),
        )

    def dump(self) -> str:
        return json.dumps(
            {
                "requested": self.requested,
                "reported": self.reported,
                "health": self.health,
                "cancelled": self.cancelled[-holds.BACKFILL_PAGE :],
            },
            sort_keys=True,
            separators=(",", ":"),
        )


def releases(requests: Sequence[RangeRequest]) -> list[tuple[RangeRequest, list[str]]]:
    """The releases that cover ``requests``: (root request, layers rebuilt). A request is a
    root unless an earlier layer's root already derives all of its hours."""

    covered: dict[str, set[str]] = {}
    result = []
    for request in sorted(requests, key=lambda r: (LAYERS.index(r.layer), r.first)):
        hours = set(hour_range(request.first, request.last))
        if hours <= covered.get(request.layer, set()):
            continue
        layers = release_layers([request.layer])
        for layer, first, last in plan_ranges(layers, request.first, request.last):
            covered.setdefault(layer, set()).update(hour_range(first, last))
        result.append((request, layers))
    return result


def over_cost(
    instance: dg.DagsterInstance, backups: BackupStore, settings: Settings, request, layers
) -> str | None:
    """Why a release the sensor would submit is not submitted: its estimate is above
    ``BACKFILL_MAX_CORE_HOURS`` (``release.estimate``; the CLI's ``--approve-cost`` is an
    operator's decision, the sensor takes none); None: under the cap, or it reads no backups."""
    cap = max_core_hours()
    if cap is None or "raw" not in layers:
        return None
    hours = hour_range(request.first, request.last)
    guess = estimate.estimate(instance, backups, hours, estimate.configured_cores(settings))
    if not estimate.over_cap(guess.core_hours, cap):
        return None
    what = f"release of {request.layer} {request.first}..{request.last}"
    return (
        f"{estimate.refusal(guess, cap, what)} (`backfill-assets backfill --from "
        f"{request.first} --to {request.last} --layers {request.layer}`)"
    )


def submit_releases(
    evaluation: "Evaluation",
    settings: Settings,
    over_cap: Callable[[RangeRequest, list[str]], str | None] = lambda request, layers: None,
) -> tuple[list[str], list[str]]:
    """Submit the evaluation's releases as Dagster asset backfills: their ids, and the
    refusals of those ``over_cap`` refuses (not submitted)."""

    ids, refused = [], []
    for request, layers in releases(evaluation.requests):
        refusal = over_cap(request, layers)
        if refusal:
            refused.append(refusal)
            continue
        # the release's own tags: not the per-range ones (partition range, root layer)
        run_tags = {
            k: v
            for k, v in request.tags(evaluation.request_id).items()
            if not k.startswith("dagster/") and k not in (tags.LAYER, tags.ALLOW_MISSING_HOURS)
        }
        run_tags[tags.DAGSTER_SENSOR] = SENSOR_NAME  # "launched by" this sensor in the UI
        ids.append(
            launch.submit_backfill(
                settings,
                keys.release_keys(layers),
                hour_range(request.first, request.last),
                run_tags,
                title=f"reconcile {request.layer} {request.first}..{request.last}",
                description=request.reason,
            )
        )
    return ids, refused


@dataclass
class Evaluation:
    """One evaluation: the comparison, and what the sensor returns for it."""

    reconciliation: Reconciliation | None
    result: dg.SensorResult
    request_id: str

    @property
    def requests(self) -> list[RangeRequest]:
        return self.reconciliation.plan.requests if self.reconciliation else []


def _next_requested(result: Reconciliation, previous: Cursor) -> dict[str, dict[str, str]]:
    """Hours requested now or before for damage that is still the same."""
    targets = result.plan.targets
    kept: dict[str, dict[str, str]] = {}
    for layer, hours in previous.requested.items():
        for hour, fp in hours.items():
            if targets.get(layer, {}).get(hour) == fp:
                kept.setdefault(layer, {})[hour] = fp
    for request in result.plan.requests:
        for hour, fp in targets.get(request.layer, {}).items():
            if request.first <= hour <= request.last:
                kept.setdefault(request.layer, {})[hour] = fp
    for layer, hours in result.plan.skipped.items():  # a release an operator cancelled:
        for hour, why in hours.items():  # its damage as it is now counts as requested
            if holds.CANCELLED in why and hour in targets.get(layer, {}):
                kept.setdefault(layer, {})[hour] = targets[layer][hour]
    return kept


def _observations(
    result: Reconciliation,
    previous: Cursor,
    layers: Sequence[Layer],
    request_id: str,
) -> tuple[list[dg.AssetObservation], dict[str, dict[str, str]]]:
    """Observations for hours whose findings (or what is done about them) changed."""
    by_hour: dict[tuple[str, str], list] = {}
    for finding in result.findings:
        by_hour.setdefault((finding.layer, finding.hour), []).append(finding)
    keys = {layer.name: table_key(layer.pairs[0][1]) for layer in layers}
    window = set(result.window.hours)
    events: list[dg.AssetObservation] = []
    reported: dict[str, dict[str, str]] = {}
    for (layer, hour), found in sorted(by_hour.items()):
        action = result.plan.status(layer, hour)
        mark = digest([f.key for f in found] + [action.split(" by run ")[0]])
        reported.setdefault(layer, {})[hour] = mark
        if previous.reported.get(layer, {}).get(hour) == mark:
            continue
        requested = action.startswith("backfill requested")
        events.append(
            dg.AssetObservation(
                asset_key=keys[layer],
                partition=hour,
                description=f"reconciliation: {', '.join(sorted({f.kind for f in found}))}",
                metadata={
                    OBSERVATION: DRIFT,
                    "kinds": ", ".join(sorted({f.kind for f in found})),
                    "findings": dg.MetadataValue.json([f.to_dict() for f in found]),
                    "action": action,
                    "request_id": request_id if requested else "",
                    "sensor": SENSOR_NAME,
                },
            )
        )
    for layer, hours in sorted(previous.reported.items()):
        for hour in sorted(hours):
            if (layer, hour) not in by_hour and hour in window and layer in keys:
                events.append(
                    dg.AssetObservation(
                        asset_key=keys[layer],
                        partition=hour,
                        description=f"reconciliation: {RESOLVED}",
                        metadata={
                            OBSERVATION: RESOLVED,
                            "kinds": "",
                            "action": "none",
                            "sensor": SENSOR_NAME,
                        },
                    )
                )
    return events, reported


def _health_observations(
    result: Reconciliation, previous: Cursor, layers: Sequence[Layer]
) -> tuple[list[dg.AssetObservation], dict[str, str]]:
    """One observation per layer (its first published table, no partition) with its
    completeness and oldest damage, whenever those change (not on every tick)."""
    events, marks = [], {}
    health = result.health()
    for layer in layers:
        numbers = health.get(layer.name)
        if numbers is None:
            continue
        stable = {k: v for k, v in numbers.items() if k != "oldest_damage_age_hours"}
        marks[layer.name] = digest([json.dumps(stable, sort_keys=True)])
        if previous.health.get(layer.name) == marks[layer.name]:
            continue
        events.append(
            dg.AssetObservation(
                asset_key=table_key(layer.pairs[0][1]),
                description=f"reconciliation health: {numbers['completeness']:.1%} complete",
                metadata={
                    **{k: v if v is not None else "" for k, v in numbers.items()},
                    "window": f"{result.window.hours[0]}..{result.window.hours[-1]}",
                    "sensor": SENSOR_NAME,
                },
            )
        )
    return events, marks


def held_note(result: Reconciliation, releases: Sequence[holds.Release]) -> str:
    """``; skipped N hour(s) held by release(s) ID, ... in flight`` when the plan skipped
    hours for a release in flight ("" otherwise)."""
    skipped = {
        (layer, hour): why
        for layer, hours in result.plan.skipped.items()
        for hour, why in hours.items()
        if why.startswith(f"{holds.HELD_BY} ") and f" {holds.IN_FLIGHT} " in why
    }
    if not skipped:
        return ""
    named = sorted({why.split()[3] for why in skipped.values()})
    hours = sorted({hour for _, hour in skipped})
    span = f"{hours[0]}..{hours[-1]}" if len(hours) > 1 else hours[0]
    return (
        f"; skipped {len(hours)} hour(s) ({span}) {holds.HELD_BY}(s) "
        f"{', '.join(named)} in flight: requested again only if still damaged after it ends"
    )


def evaluate(
    instance: dg.DagsterInstance,
    keys_by_layer: Mapping[str, Sequence[dg.AssetKey]],
    backups: BackupStore,
    config: ReconcileConfig,
    cursor: str | None = None,
    layers: Sequence[Layer] | None = None,
) -> Evaluation:
    """One evaluation of the sensor (also used by the demo): compare, plan, build requests."""
    layers = list(names.LAYERS.values()) if layers is None else list(layers)
    fail_orphaned_runs(instance)  # a killed run must not block its hours forever
    previous = Cursor.parse(cursor)
    request_id = f"reconcile-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    window = reconcile_window(backups, config)
    if window is None:
        return Evaluation(
            None,
            dg.SensorResult(
                skip_reason=f"no hour folders under {backups.root}/raw yet",
                cursor=cursor,
            ),
            request_id,
        )
    published = published_from_instance(instance, layers, window.hours)
    releases = holds.in_flight(instance)
    stopped = [r for r in holds.cancelled(instance) if r.release_id not in previous.cancelled]
    in_flight = {  # hours of releases cancelled since the last evaluation, then in flight
        layer: {**hours, **holds.by_layer(releases, [layer])[layer]}
        for layer, hours in holds.by_layer(stopped, keys_by_layer, holds.CANCELLED).items()
    }
    result = reconcile(
        backups,
        published,
        layers,
        window,
        config,
        source="dagster",
        in_flight=in_flight,
        requested=previous.requested,
    )
    events, reported = _observations(result, previous, layers, request_id)
    health_events, health = _health_observations(result, previous, layers)
    events += health_events
    next_cursor = Cursor(
        requested=_next_requested(result, previous),
        reported=reported,
        health=health,
        cancelled=[*previous.cancelled, *(r.release_id for r in stopped)],
    ).dump()
    missing = unpublished_note(result)
    if result.plan.requests:
        summary = f"{len(result.findings)} finding(s); releases requested ({request_id})"
    elif result.findings:
        summary = f"{len(result.findings)} finding(s), nothing new to request"
    else:
        summary = "no findings in what is published" if missing else NO_FINDINGS
    summary += missing + held_note(result, releases)
    sensor_result = dg.SensorResult(skip_reason=summary, asset_events=events, cursor=next_cursor)
    return Evaluation(result, sensor_result, request_id)


def unpublished_note(result: Reconciliation) -> str:
    """``; not published: raw H1..H2 (3 of 24 hour(s)), ...`` for the layers with hours of
    the window that have no published version ("" when none): never healthy."""
    parts = [
        f"{layer} {describe_hours(h['unpublished'])} ({h['unpublished_hours']} of "
        f"{h['hours']} hour(s))"
        for layer, h in result.health().items()
        if h["unpublished_hours"]
    ]
    return f"; not published: {'; '.join(parts)}" if parts else ""


def ledger_refusal(settings: Settings) -> str | None:
    """Why the sensor requests nothing this evaluation: the ledger missing (after it
    published), damaged or rolled back (``database.check``, every evaluation); else None."""

    try:
        database.check(settings.warehouse_dir)
    except database.LedgerUnavailable as exc:
        return f"no release requested: {exc}"
    return None


def build_reconciliation_sensor(config: ReconcileConfig | None = None) -> dg.SensorDefinition:
    """The sensor for the layers of the registry (settings from the environment)."""
    config = config or ReconcileConfig.from_env()

    @dg.sensor(
        name=SENSOR_NAME,
        minimum_interval_seconds=config.interval_seconds,
        default_status=(
            dg.DefaultSensorStatus.RUNNING if config.enabled else dg.DefaultSensorStatus.STOPPED
        ),
        target=dg.AssetSelection.groups(*names.LAYERS),
        description=(
            "Compares the closed backup manifests with the published partitions (counts, "
            "missing hours, manifests that appeared or changed after publishing, stale code "
            "versions), records the findings as observations and requests scoped backfills. "
            f"At most {config.max_hours_per_tick} hours per evaluation; no Spark."
        ),
    )
    def reconciliation_sensor(
        context: dg.SensorEvaluationContext, backups: dg.ResourceParam[BackupStore]
    ) -> dg.SensorResult:
        refused = ledger_refusal(Settings.from_env())
        if refused:
            context.log.error(refused)
            return dg.SensorResult(skip_reason=refused, cursor=context.cursor)
        layers = list(names.LAYERS.values())
        keys = layer_asset_keys(
            context.repository_def.assets_defs_by_key, [layer.name for layer in layers]
        )
        evaluation = evaluate(context.instance, keys, backups, config, context.cursor, layers)
        if evaluation.reconciliation is not None:
            for line in evaluation.reconciliation.lines():
                context.log.info(line)
        settings = Settings.from_env()
        submitted, refused = submit_releases(
            evaluation,
            settings,
            lambda request, layers: over_cost(context.instance, backups, settings, request, layers),
        )
        for line in refused:
            context.log.warning(line)
        if submitted or refused:
            if submitted:
                context.log.info(f"submitted release(s) {', '.join(submitted)}")
            said = [f"submitted release(s) {', '.join(submitted)}"] if submitted else []
            said += [f"not submitted: {line}" for line in refused]
            return dg.SensorResult(
                skip_reason=f"{'; '.join(said)} for {evaluation.request_id}",
                asset_events=evaluation.result.asset_events,
                cursor=evaluation.result.cursor,
            )
        return evaluation.result

    return reconciliation_sensor
