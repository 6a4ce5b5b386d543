"""The publishable layers by name, in dependency order (CLI, sensors, reports)."""

from backfill_assets.layers import raw
from backfill_assets.publishing.publisher import Layer

LAYERS: dict[str, Layer] = {raw.LAYER.name: raw.LAYER}
