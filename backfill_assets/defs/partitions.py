"""The one hourly partitioning shared by every layer: Dagster's definition of the span that
``core.hours`` validates keys against (``settings.partition_span``). The span is read when
the code location loads (every process that loads it: the webserver, the daemon, each run,
the CLI commands that build the definitions); a bad value fails the load naming the variable.
"""

from __future__ import annotations

import dagster as dg

from backfill_assets.core.windows import LOOKAHEAD_HOURS, LOOKBACK_HOURS
from backfill_assets.settings import HOUR_FORMAT, hours_per_run, partition_span


def hourly_partitions_def() -> dg.HourlyPartitionsDefinition:
    """The partitions of ``BACKFILL_PARTITIONS_START`` .. ``BACKFILL_PARTITIONS_END``."""
    start, end = partition_span()
    return dg.HourlyPartitionsDefinition(
        start_date=start, end_date=end, fmt=HOUR_FORMAT, timezone="UTC"
    )


def run_policy(window_hours: int = 0) -> dg.BackfillPolicy:
    """How a backfill splits a layer's hours into runs: ``BACKFILL_HOURS_PER_RUN`` hours
    each, plus ``window_hours`` for a layer whose hour reads a window of hours around it.
    Steps of the same policy join in one run (Dagster), so the publish shares its layer's."""
    return dg.BackfillPolicy.multi_run(max_partitions_per_run=hours_per_run() + window_hours)


# The assets and checks are declared when their modules load: the span is read then.
hourly_partitions = hourly_partitions_def()
RUN_POLICY = run_policy()
# The session layer and the publish: a release's session hours reach its hours' window
# (lookback and lookahead) beyond them, so a release of BACKFILL_HOURS_PER_RUN hours is one
# run of this layer too; a run's memory follows the hours it reads, about a chunk's either way.
WINDOW_RUN_POLICY = run_policy(LOOKBACK_HOURS + LOOKAHEAD_HOURS)
