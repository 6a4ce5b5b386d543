"""The one hourly partitioning shared by every layer: Dagster's definition of the span that
``core.hours`` validates keys against (``settings.partition_span``). The span is read when
the code location loads (every process that loads it: the webserver, the daemon, each run,
the CLI commands that build the definitions); a bad value fails the load naming the variable.
"""

from __future__ import annotations

import dagster as dg

from backfill_assets.settings import HOUR_FORMAT, partition_span


def hourly_partitions_def() -> dg.HourlyPartitionsDefinition:
    """The partitions of ``BACKFILL_PARTITIONS_START`` .. ``BACKFILL_PARTITIONS_END``."""
    start, end = partition_span()
    return dg.HourlyPartitionsDefinition(
        start_date=start, end_date=end, fmt=HOUR_FORMAT, timezone="UTC"
    )


# The assets and checks are declared when their modules load: the span is read then.
hourly_partitions = hourly_partitions_def()
