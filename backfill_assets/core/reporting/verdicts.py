"""The one paragraph a publish that held hours back ends with (the run's verdict)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from backfill_assets.core.names import LAYERS
from backfill_assets.core.warehouse import publisher


def _cause(reasons: Sequence[str]) -> str | None:
    """An hour's first reason of its own (not an upstream hour of the release held back)."""
    return next((r for r in reasons if not r.endswith(publisher.HELD_UPSTREAM)), None)


def held_back_verdict(release: str, held: Mapping[str, list[str]], waiting: list[str]) -> str:
    """One paragraph naming the held-back hours (the first ten) and a reason of each: the
    hours held for a cause of their own first (layers in dependency order), each with its
    first such cause, then the hours held because an upstream hour is."""
    order = list(LAYERS)

    def rank(item: tuple[str, list[str]]) -> tuple:
        layer, _, hour = item[0].partition(" ")
        return (_cause(item[1]) is None, order.index(layer) if layer in order else 0, hour)

    named = [
        (key, [_cause(reasons) or reasons[0]]) for key, reasons in sorted(held.items(), key=rank)
    ]
    approve_hint = (
        f". {len(waiting)} of them wait for approval of their change: "
        f"backfill-assets approve --backfill {release} --reason '...' (or launch "
        f"release/publish with approve: true)"
        if waiting
        else ""
    )
    return (
        f"release {release}: {len(held)} hour(s) held back, their published data unchanged: "
        + "; ".join(f"{key} ({reasons[0][:300]})" for key, reasons in named[:10])
        + (f"; ... and {len(named) - 10} more" if len(named) > 10 else "")
        + approve_hint
    )
