"""The publishable layers by name, in dependency order (CLI, sensors, reports)."""

from backfill_assets.layers import aggregated, raw, transformed
from backfill_assets.publishing.publisher import Layer

LAYERS: dict[str, Layer] = {
    layer.name: layer for layer in (raw.LAYER, transformed.LAYER, aggregated.LAYER)
}
