"""How far a release is: the hours of each layer its backfill targets (its first backfill,
whatever re-executions followed) against those it has built, from the ledger.

A release longer than ``BACKFILL_HOURS_PER_RUN`` is built in several runs per layer; its
publish step runs with each chunk of the session layer, and publishes only once nothing
of the release is left to build (``unbuilt``), so the release is one ledger transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dagster as dg

from backfill_assets.core.names import Layer
from backfill_assets.core.reconcile.findings import describe_hours
from backfill_assets.core.warehouse import audit, publisher
from backfill_assets.release.keys import table_key


def targeted(
    instance: dg.DagsterInstance, asset_graph, release: str, layers: Sequence[Layer]
) -> dict[str, list[str]] | None:
    """Layer -> the hours the release's first backfill targets (None: the release is not a
    backfill of this instance, e.g. a run of its own)."""
    backfill = instance.get_backfill(release)
    if backfill is None or not backfill.is_asset_backfill:
        return None
    data = backfill.get_asset_backfill_data(asset_graph)
    found = {}
    for layer in layers:
        key = table_key(layer.checked_table)
        if key in data.target_subset.asset_keys:
            found[layer.name] = sorted(data.get_target_partitions_subset(key).get_partition_keys())
    return found


def unbuilt(
    target: Mapping[str, Sequence[str]], built: Mapping[str, set[str]]
) -> dict[str, list[str]]:
    """Layer -> targeted hours with no candidate of the release yet."""
    missing = {
        layer: sorted(set(hours) - built.get(layer, set())) for layer, hours in target.items()
    }
    return {layer: hours for layer, hours in missing.items() if hours}


def built(spark, release: str, layers: Sequence[Layer]) -> dict[str, set[str]]:
    """Layer -> hours the release has a candidate of (the ledger's shadow partitions)."""
    of_table = {layer.checked_table: layer.name for layer in layers}
    found: dict[str, set[str]] = {}
    for table, hour in publisher.release_candidates(spark, release, list(of_table)):
        found.setdefault(of_table[table], set()).add(hour)
    return found


def published_since_built(spark, release: str, layers: Sequence[Layer]) -> bool:
    """Whether a ledger transaction of the release committed after its newest candidate:
    another chunk's publish step published all of it already."""
    candidates = publisher.release_candidates(spark, release, [x.checked_table for x in layers])
    commits = audit.rows(
        audit.warehouse_of(spark), audit.PUBLICATIONS, {"backfill_id": release, "phase": "commit"}
    )
    newest = max((c["written_at"] for c in candidates.values()), default=None)
    return bool(commits) and newest is not None and max(c["recorded_at"] for c in commits) >= newest


def waiting_line(
    instance: dg.DagsterInstance, asset_graph, spark, release: str, layers: Sequence[Layer]
) -> str | None:
    """Why a publish step of the release's own backfill leaves the publication to another
    one (None: it publishes): hours still to build in other runs, or all of it published."""
    target = targeted(instance, asset_graph, release, layers)
    if target is None:
        return None
    missing = unbuilt(target, built(spark, release, layers))
    if missing:
        left = "; ".join(f"{layer} {describe_hours(hours)}" for layer, hours in missing.items())
        return (
            f"release {release}: {sum(map(len, missing.values()))} hour(s) still to build in "
            f"other runs ({left}); the run that builds the last of them publishes the release"
        )
    if published_since_built(spark, release, layers):
        return f"release {release}: published already by another of its runs"
    return None
