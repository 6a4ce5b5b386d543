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
    each (the layers and the publish alike, so that a release shorter than that is one or
    two runs: Dagster joins steps of the same policy in one run)."""
    return dg.BackfillPolicy.multi_run(max_partitions_per_run=hours_per_run())


# The assets and checks are declared when their modules load: the span is read then.
hourly_partitions = hourly_partitions_def()
RUN_POLICY = run_policy()
