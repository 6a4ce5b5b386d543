"""Launch backfills headlessly: the same assets and checks the UI launches, same instance.

``launch`` runs one Dagster run per layer over that layer's partition range (in layer
order), in this process: each run has one Spark session (the in-process executor), runs
are recorded in the ``DAGSTER_HOME`` instance and show in the UI afterwards.
"""

from __future__ import annotations

import getpass
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import dagster as dg

from backfill_assets import tags
from backfill_assets.layers.windows import (
    DEFAULT_LOOKAHEAD_HOURS,
    DEFAULT_LOOKBACK_HOURS,
    session_hours_touching,
)
from backfill_assets.partitions import hour_range, parse_hour

log = logging.getLogger(__name__)

LAYERS = ("raw", "transformed", "aggregated")
# Layers whose partitions are received hours (the damaged hours of a backfill).
RECEIVED_HOUR_LAYERS = ("raw", "transformed")
SHADOW_PREFIX = "shadow"


@dataclass
class LayerRun:
    layer: str
    first: str
    last: str
    run_id: str
    success: bool
    seconds: float
    failures: list[str] = field(default_factory=list)
    checks: dict[str, dict] = field(default_factory=dict)
    request_id: str = ""

    @property
    def hours(self) -> int:
        return len(hour_range(self.first, self.last))


STEPS = ("all", "shadow", "publish")


def layer_keys(defs: dg.Definitions, layer: str, steps: str = "all") -> list[dg.AssetKey]:
    """The assets of ``layer`` (its Dagster group): ``shadow`` ones only for a dry run,
    ``publish`` ones only to publish what a dry run checked, or ``all``."""
    graph = defs.resolve_asset_graph()
    keys = [
        key
        for key in graph.get_all_asset_keys()
        if graph.get(key).group_name == layer
        and (steps == "all" or (key.path[0] == SHADOW_PREFIX) == (steps == "shadow"))
    ]
    return sorted(keys, key=lambda k: k.to_user_string())


def validate_layers(layers: Sequence[str], known: Sequence[str] = LAYERS) -> list[str]:
    unknown = [layer for layer in layers if layer not in known]
    if unknown:
        raise ValueError(f"unknown layer(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [layer for layer in known if layer in layers]


def plan_ranges(
    layers: Sequence[str],
    first: str,
    last: str,
    *,
    lookback: int = DEFAULT_LOOKBACK_HOURS,
    lookahead: int = DEFAULT_LOOKAHEAD_HOURS,
) -> list[tuple[str, str, str]]:
    """Partition range of each layer for ``first..last``.

    With a received-hour layer (raw, transformed) selected, ``first..last`` are the damaged
    received hours: those layers rebuild them, and ``aggregated`` rebuilds every session
    hour whose window touches them. With only ``aggregated`` selected, ``first..last`` are
    its own session-start hours.
    """
    upstream = any(layer in RECEIVED_HOUR_LAYERS for layer in layers)
    ranges = []
    for layer in layers:
        if layer == "aggregated" and upstream:
            ranges.append((layer, *session_hours_touching(first, last, lookback, lookahead)))
        else:
            ranges.append((layer, first, last))
    return ranges


def run_tags(
    *,
    first: str,
    last: str,
    dry_run: bool,
    reason: str | None,
    ticket: str | None,
    requested_by: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    result = {
        "dagster/asset_partition_range_start": first,
        "dagster/asset_partition_range_end": last,
        tags.MODE: "dry_run" if dry_run else "backfill",
        tags.REQUESTED_BY: requested_by or getpass.getuser(),
    }
    if reason:
        result[tags.REASON] = reason
    if ticket:
        result[tags.TICKET] = ticket
    result.update(extra or {})
    return result


def _summarize(result: dg.ExecuteInProcessResult) -> tuple[list[str], dict[str, dict]]:
    failures, checks = [], {}
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            error = event.event_specific_data.error
            message = error.message.strip().splitlines()[0] if error else event.message
            cause = error.cause if error else None
            while cause is not None:
                message = cause.message.strip().splitlines()[0]
                cause = cause.cause
            failures.append(f"{event.step_key}: {message}")
        elif event.event_type_value == "ASSET_CHECK_EVALUATION":
            evaluation = event.event_specific_data
            checks[evaluation.check_name] = {
                "passed": evaluation.passed,
                "severity": evaluation.severity.value,
                "description": evaluation.description,
            }
    return failures, checks


def launch(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    ranges: Sequence[tuple[str, str, str]],
    *,
    steps: str = "all",
    reason: str | None = None,
    ticket: str | None = None,
    requested_by: str | None = None,
    extra_tags: Mapping[str, str] | None = None,
    on_run: Callable[[LayerRun], None] | None = None,
) -> list[LayerRun]:
    """Run each ``(layer, first, last)`` in order; stop at the first layer that fails.

    Every run carries the layer tag and one request id for the whole launch, so
    ``backfill-assets report --backfill <request id>`` reports the launch as a whole.
    """
    job = defs.resolve_implicit_global_asset_job_def()
    request_id = (extra_tags or {}).get(tags.REQUEST_ID) or f"launch-{uuid.uuid4().hex[:12]}"
    runs: list[LayerRun] = []
    for layer, first, last in ranges:
        parse_hour(first), parse_hour(last)
        dry_run = steps == "shadow"
        keys = layer_keys(defs, layer, steps)
        log.info(
            "%s %s: %s..%s (%d hour(s)), assets %s",
            "dry run" if dry_run else steps,
            layer,
            first,
            last,
            len(hour_range(first, last)),
            ", ".join(k.to_user_string() for k in keys),
        )
        started = time.monotonic()
        result = job.execute_in_process(
            instance=instance,
            asset_selection=keys,
            tags=run_tags(
                first=first,
                last=last,
                dry_run=dry_run,
                reason=reason,
                ticket=ticket,
                requested_by=requested_by,
                extra={**(extra_tags or {}), tags.LAYER: layer, tags.REQUEST_ID: request_id},
            ),
            raise_on_error=False,
        )
        failures, checks = _summarize(result)
        run = LayerRun(
            layer,
            first,
            last,
            result.run_id,
            result.success,
            time.monotonic() - started,
            failures,
            checks,
            request_id,
        )
        runs.append(run)
        if on_run:
            on_run(run)
        if not result.success:
            break
    return runs
