"""Aggregated layer: sessions and per-client hourly metrics, rebuilt with half-cut-aware windows.

Sessions of hour H (the UTC hour of their first payload's event time) are built from the
transformed payloads received in ``[H - lookback, H + lookahead]`` (``core.windows``: 3
and 3 hours; the partition mapping of the input, so the UI shows what a backfill reads):
the release's candidates for the hours it rebuilt, the published ones for the others.
Only the sessions that start in H are kept (see "Sessions" in ``shared/backup-format.md``).

Range independence: the sessions of H depend only on H's own window, whatever range H is
backfilled in. Built without copying every payload to every window that holds it: the
payloads read are sessionized once per (client_id, user_id) (``whole_sessions``), and a
session whose received hours lie in the windows of all the hours it touches, with no
payload delivered twice, is exactly what its start hour's window gives (88% of the
generated sessions). Only the payloads of the other sessions (late or early deliveries,
re-deliveries, sessions longer than the window) are copied to each session hour of the
range whose window holds their received hour and sessionized per (session hour,
client_id, user_id) (``window_sessions``, the literal definition, which the tests hold
the build to). Window functions only, no per-hour jobs, nothing collected to the driver.
"""

import time
import warnings
from collections.abc import Iterator, Mapping

import dagster as dg
from pyspark import StorageLevel
from pyspark.sql import DataFrame

from backfill_assets.core import faults
from backfill_assets.core.layers.schemas import session_id_aggregates
from backfill_assets.core.layers.sessions import (
    CLIENT_HOURLY_COLUMNS,
    CODE_VERSION,
    GROUP,
    SESSION_COLUMNS,
    client_hourly,
    sessions_of,
    whole_sessions,
)
from backfill_assets.core.layers.shadow_stats import WithRules
from backfill_assets.core.layers.upstream import PartialWindow, UpstreamGap, unwrap
from backfill_assets.core.names import AGGREGATED
from backfill_assets.core.warehouse.publisher import SOURCE_OUTSIDE, provisional_note
from backfill_assets.core.windows import LOOKAHEAD_HOURS, LOOKBACK_HOURS, received_window
from backfill_assets.defs.layers import transformed
from backfill_assets.defs.layers.common import (
    json_metadata,
    refuse,
    release_input,
    run_lineage,
    shadow_out,
    with_lineage,
)
from backfill_assets.defs.partitions import RUN_POLICY, hourly_partitions
from backfill_assets.defs.resources.launch_form import LaunchForm
from backfill_assets.release.holds import refuse_if_held
from backfill_assets.release.keys import table_key

SHADOW_SESSIONS = table_key("shadow.sessions")
SHADOW_CLIENT_HOURLY = table_key("shadow.client_hourly")
SESSIONS = table_key("aggregated.sessions")
CLIENT_HOURLY = table_key("aggregated.client_hourly")


SOURCE_TABLE = transformed.TABLE

# Check names (constants: the publisher gates on them, tests and the UI refer to them).
(
    SESSIONS_ROW_RULES,
    SESSIONS_END_NOT_BEFORE_START,
    SESSIONS_DURATION,
    SESSIONS_START_IN_HOUR,
    SESSIONS_UNIQUE_ID,
    CLIENT_HOURLY_RECONCILIATION,
) = AGGREGATED.checks

LAYER = AGGREGATED


def provisional_hours(hours: list[str], without_data: Mapping[str, str]) -> dict[str, str]:
    """Session hour -> why it is provisional, for each hour whose window read hours after
    the newest backup hour (``without_data``: upstream hour -> why it was read as empty;
    an hour that read a gap instead is held back by the publisher, not provisional)."""
    not_yet = {h for h, source in without_data.items() if source == SOURCE_OUTSIDE}
    notes = {}
    for hour in hours:
        lacking = [h for h in LAYER.reads(hour) if h in not_yet]
        if lacking:
            notes[hour] = provisional_note(lacking)
    return notes


def session_window_mapping() -> dg.TimeWindowPartitionMapping:
    """Session hour H reads received hours [H - lookback, H + lookahead]; the newest hours'
    windows reach into hours that do not exist yet (they are simply not read)."""
    with warnings.catch_warnings():  # the flag is beta in dagster 1.13; the mapping is not
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.TimeWindowPartitionMapping(
            start_offset=-LOOKBACK_HOURS,
            end_offset=LOOKAHEAD_HOURS,
            allow_nonexistent_upstream_partitions=True,
        )


@dg.multi_asset(
    name="aggregated_shadow",
    outs={
        "sessions": shadow_out(
            SHADOW_SESSIONS,
            group=GROUP,
            code_version=CODE_VERSION,
            description="Sessions starting in the hour (30-minute inactivity rule), built from "
            "the received hours around it; one shadow version per run.",
        ),
        "client_hourly": shadow_out(
            SHADOW_CLIENT_HOURLY,
            group=GROUP,
            code_version=CODE_VERSION,
            description="Per client and session hour: sessions, payloads, pageviews, bounces, "
            "mean and p95 duration; one shadow version per run.",
        ),
    },
    ins={
        "transformed_payloads": release_input(
            transformed.SHADOW_PAYLOADS,
            published=SOURCE_TABLE,
            reader=LAYER.checked_table,
            partition_mapping=session_window_mapping(),
            windowed=True,
        )
    },
    partitions_def=hourly_partitions,
    backfill_policy=RUN_POLICY,
    can_subset=False,
)
def aggregated_shadow(
    context: dg.AssetExecutionContext,
    transformed_payloads: DataFrame | PartialWindow | UpstreamGap,
    launch_form: LaunchForm,  # the launch dialog's form: its answers become the run's tags
) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:
    """Rebuild the sessions and client_hourly shadow tables of the session hours."""
    from backfill_assets.core.layers.models import SessionSchema

    refuse_if_held(context)  # an earlier release in flight holds some of its hours
    faults.checkpoint(faults.SESSIONS_BUILD)
    started = time.monotonic()
    hours = list(context.partition_keys)
    if isinstance(transformed_payloads, UpstreamGap):
        gap = transformed_payloads
        yield from refuse(context, gap.verdict, {"missing_hours": gap.missing})
        return
    transformed_payloads, without_data = unwrap(transformed_payloads)
    provisional = provisional_hours(hours, without_data)
    for hour, note in provisional.items():
        context.log.info(f"session hour {hour}: {note}")
    gaps = sorted(h for h, source in without_data.items() if source != SOURCE_OUTSIDE)
    if gaps:
        context.log.warning(
            f"{len(gaps)} upstream hour(s) inside the backups are neither published nor in "
            f"this release ({', '.join(gaps[:12])}): read as empty; the session hours "
            f"reading them will be held back at publish"
        )
    first, last = hours[0], hours[-1]
    lookback, lookahead = LOOKBACK_HOURS, LOOKAHEAD_HOURS
    spark = transformed_payloads.sparkSession
    if spark.conf.get("spark.sql.session.timeZone") != "UTC":
        raise dg.Failure(
            description="spark.sql.session.timeZone must be UTC (hour keys, session ids)",
            allow_retries=False,
        )
    read_start = received_window(first, lookback, lookahead)[0]
    read_end = received_window(last, lookback, lookahead)[1]
    context.log.info(
        f"sessions {first}..{last} from transformed payloads received {read_start}..{read_end} "
        f"(lookback {lookback} h, lookahead {lookahead} h)"
    )
    # cached while the sessions are written: their clean ones and the others' payloads are
    # both read from it
    whole = whole_sessions(transformed_payloads, first, last, lookback, lookahead).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    sessions = with_lineage(
        sessions_of(whole, first, last, lookback, lookahead), context, CODE_VERSION
    ).persist(StorageLevel.MEMORY_AND_DISK)
    lineage = {
        **run_lineage(context, CODE_VERSION),
        "source_table": SOURCE_TABLE,
        "lookback_hours": lookback,
        "lookahead_hours": lookahead,
        "received_hours_read": f"{read_start}..{read_end}",
        "provisional_hours": json_metadata(provisional),
    }
    try:
        yield dg.MaterializeResult(
            asset_key=SHADOW_SESSIONS,
            # the check's rules and distinct ids counted over the cached rows it writes
            value=WithRules(
                sessions.select(*SESSION_COLUMNS, "run_id", "code_version", "hour"),
                SessionSchema,
                session_id_aggregates(),
                cached=True,
            ),
            metadata=lineage,
        )
        yield dg.MaterializeResult(
            asset_key=SHADOW_CLIENT_HOURLY,
            value=with_lineage(client_hourly(sessions), context, CODE_VERSION).select(
                *CLIENT_HOURLY_COLUMNS, "run_id", "code_version", "hour"
            ),
            metadata={**lineage, "seconds": round(time.monotonic() - started, 2)},
        )
    finally:
        sessions.unpersist()
        whole.unpersist()
