"""``backfill``'s estimate before launching: bytes, payloads, seconds and executor
core-hours (``release.estimate``), and the refusal of a release above
``BACKFILL_MAX_CORE_HOURS`` unless ``--approve-cost --reason``."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from backfill_assets.cli.main import CommandError


def estimate_tags(args: argparse.Namespace, context, hours: list[str]) -> dict[str, str]:
    """Print the estimate of a release reading ``hours`` of backups; its tags (the
    estimated seconds, the approved cost); refused in one line over the cap."""
    from backfill_assets.core import tags
    from backfill_assets.defs.resources import BACKUPS
    from backfill_assets.release.estimate import configured_cores, estimate

    settings, defs, instance = context
    guess = estimate(instance, defs.resources[BACKUPS], hours, configured_cores(settings))
    print(guess.line())
    print(guess.cost())
    extra = {tags.INPUT_BYTES: str(guess.bytes)}  # a small release: short-lived JVMs
    if guess.seconds is not None:
        extra[tags.ESTIMATE_SECONDS] = f"{guess.seconds:.0f}"
    extra.update(cost_approval(args, guess))
    return extra


def cost_approval(args: argparse.Namespace, guess) -> dict[str, str]:
    """The release's tag approving its estimated cost over ``BACKFILL_MAX_CORE_HOURS``
    (none when under it); refused in one line (exit 2, nothing submitted) without
    ``--approve-cost``."""
    from backfill_assets.core import tags
    from backfill_assets.release.estimate import over_cap, refusal
    from backfill_assets.settings import max_core_hours

    cap = max_core_hours()
    if not over_cap(guess.core_hours, cap):
        return {}
    if not args.approve_cost:
        raise CommandError(refusal(guess, cap, f"release {args.first}..{args.last}"))
    print(f"cost approved above the cap of {cap:g} core-hour(s): {args.reason}")
    return {tags.APPROVE_COST: f"{guess.core_hours:.3g}"}


def short_run(extra: Mapping[str, str]) -> bool:
    """Whether a release of these tags reads so little that its JVMs start for a short
    life (``BACKFILL_SHORT_RUN_BYTES``; an unknown size is not short)."""
    from backfill_assets.core import tags
    from backfill_assets.core.spark.session import is_short_run
    from backfill_assets.settings import short_run_bytes

    return is_short_run(tags.input_bytes(extra), short_run_bytes())
