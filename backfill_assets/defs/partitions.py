"""The one hourly partitioning shared by every layer: Dagster's definition of the span that
``core.hours`` validates keys against (``settings.partition_span``). The span is read when
the code location loads (every process that loads it: the webserver, the daemon, each run,
the CLI commands that build the definitions); a bad value fails the load naming the variable.
"""

from __future__ import annotations

import dagster as dg

from backfill_assets.settings import HOUR_FORMAT, hours_per_run, partition_span


def hourly_partitions_def() -> dg.HourlyPartitionsDefinition:
    """The partitions of ``BACKFILL_PARTITIONS_START`` .. ``BACKFILL_PARTITIONS_END``."""
    start, end = partition_span()
    return dg.HourlyPartitionsDefinition(
        start_date=start, end_date=end, fmt=HOUR_FORMAT, timezone="UTC"
    )


def run_policy() -> dg.BackfillPolicy:
    """How a backfill splits a layer's hours into runs: ``BACKFILL_HOURS_PER_RUN`` hours
    each, every layer and the publish alike. Dagster puts steps of the same policy and
    partitions, over an identity mapping, in one run: a release whose session hours are
    its hours (the newest hours) is one run; a day's session hours (3 more on each side,
    30 by default) are one run too."""
    return dg.BackfillPolicy.multi_run(max_partitions_per_run=hours_per_run())


# The assets and checks are declared when their modules load: the span is read then.
hourly_partitions = hourly_partitions_def()
# One policy for every layer: with two (the session layer's larger by its window), the
# newest day, whose layers all have the same 24 hours, was two runs. A run's memory follows
# the hours it reads: a chunk is at most a day and its window.
RUN_POLICY = run_policy()
