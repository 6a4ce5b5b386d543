"""The Dagster asset keys of the release: the shadow and published tables' keys, the publish
step's, and the selection a release submits."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from backfill_assets.core import names
from backfill_assets.core.plan import validate_layers
from backfill_assets.core.warehouse.tables import UnsafeValueError, identifier, split_table

SHADOW_PREFIX = "shadow"
PUBLISH_KEY = dg.AssetKey(["release", "publish"])

# Asset keys a person can read in the graph, whose labels are the keys' last parts: a
# shadow (the run-scoped candidates) ends in ``_candidate``, a published table names its
# layer. One table per key and one key per table; tables outside this list (the audit
# ledger's) map as <database>/<table>.
TABLE_KEYS: dict[str, dg.AssetKey] = {
    "shadow.raw_payloads": dg.AssetKey(["shadow", "raw_payloads_candidate"]),
    "shadow.raw_quarantine": dg.AssetKey(["shadow", "raw_quarantine_candidate"]),
    "shadow.transformed_payloads": dg.AssetKey(["shadow", "transformed_payloads_candidate"]),
    "shadow.sessions": dg.AssetKey(["shadow", "sessions_candidate"]),
    "shadow.client_hourly": dg.AssetKey(["shadow", "client_hourly_candidate"]),
    "raw.payloads": dg.AssetKey(["raw", "raw_payloads"]),
    "raw.quarantine": dg.AssetKey(["raw", "raw_quarantine"]),
    "transformed.payloads": dg.AssetKey(["transformed", "transformed_payloads"]),
    "aggregated.sessions": dg.AssetKey(["aggregated", "sessions"]),
    "aggregated.client_hourly": dg.AssetKey(["aggregated", "client_hourly"]),
}
_KEY_TABLES = {key: table for table, key in TABLE_KEYS.items()}


def table_key(table: str) -> dg.AssetKey:
    """The asset key of a table (``raw.payloads`` -> ``raw/raw_payloads``)."""
    return TABLE_KEYS.get(table) or dg.AssetKey(list(split_table(table)))


def table_name(key: dg.AssetKey) -> str:
    """The table of an asset key (``raw/raw_payloads`` -> ``raw.payloads``), validated."""
    if key in _KEY_TABLES:
        return _KEY_TABLES[key]
    if len(key.path) != 2:
        raise UnsafeValueError(f"asset key {key.to_user_string()} is not <database>/<table>")
    return ".".join(identifier(part) for part in key.path)


def layer_keys(defs: dg.Definitions, layer: str) -> list[dg.AssetKey]:
    """The shadow assets of ``layer`` (its Dagster group): what a release rebuilds."""
    graph = defs.resolve_asset_graph()
    return sorted(
        (
            key
            for key in graph.get_all_asset_keys()
            if graph.get(key).group_name == layer and key.path[0] == SHADOW_PREFIX
        ),
        key=lambda k: k.to_user_string(),
    )


def release_selection(
    defs: dg.Definitions, layers: Sequence[str], *, publish: bool = True
) -> list[dg.AssetKey]:
    keys = [key for layer in layers for key in layer_keys(defs, layer)]
    return [*keys, PUBLISH_KEY] if publish else keys


def spec_keys(layer: str) -> list[dg.AssetKey]:
    """The shadow assets of ``layer`` from its spec alone (``core.names.LAYERS``): its shadow
    tables' keys, which ``layer_keys`` finds in the definitions (a test holds them equal).
    For callers the definitions are built from (resources, sensors)."""
    shadows = (shadow for shadow, _ in names.LAYERS[layer].pairs)
    return sorted((table_key(shadow) for shadow in shadows), key=lambda k: k.to_user_string())


def release_keys(layers: Sequence[str], *, publish: bool = True) -> list[dg.AssetKey]:
    """``release_selection`` without the definitions (``spec_keys``)."""
    keys = [key for layer in validate_layers(layers) for key in spec_keys(layer)]
    return [*keys, PUBLISH_KEY] if publish else keys
