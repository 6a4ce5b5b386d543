"""What a release rebuilds: its layers and each layer's hours (Dagster-free).

The root layer's damaged hours, every downstream layer by default, and the session layer's
hours derived through the session window (what Dagster derives through the partition
mappings for the same selection)."""

from __future__ import annotations

from collections.abc import Sequence

from backfill_assets.core import names
from backfill_assets.core.names import RECEIVED_HOUR_LAYERS
from backfill_assets.core.windows import session_hours_touching

LAYERS = tuple(names.LAYERS)


def validate_layers(layers: Sequence[str], known: Sequence[str] = LAYERS) -> list[str]:
    """Known layers in dependency order; an empty or unknown name is an error."""
    names = [layer.strip() for layer in layers]
    unknown = [repr(n) for n in names if n not in known]
    if unknown or not names:
        raise ValueError(
            f"unknown layer(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(known)}"
        )
    return [layer for layer in known if layer in names]


def release_layers(layers: Sequence[str], *, downstream: bool = True) -> list[str]:
    """The layers a release rebuilds: the chosen ones and, by default, all downstream."""
    chosen = validate_layers(layers)
    if not downstream:
        return chosen
    return list(LAYERS[LAYERS.index(chosen[0]) :])


def plan_ranges(layers: Sequence[str], first: str, last: str) -> list[tuple[str, str, str]]:
    """Partition range of each layer a release rooted at ``first..last`` rebuilds: the
    received-hour layers those hours, the session layer every hour whose window touches
    them (what Dagster derives through the partition mappings), or its own hours when it
    is the root."""
    upstream = any(layer in RECEIVED_HOUR_LAYERS for layer in layers)
    return [
        (layer, *session_hours_touching(first, last))
        if layer == "aggregated" and upstream
        else (layer, first, last)
        for layer in layers
    ]
