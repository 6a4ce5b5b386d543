"""The publishable layers by name, in dependency order (CLI, sensors, reports): ``names.LAYERS``."""

from backfill_assets.names import LAYERS

__all__ = ["LAYERS"]
