"""Sessionizing (Spark only): the payloads read for a range of session hours become the
sessions that start in each hour and the per-client hourly metrics (``aggregated`` wires
them as the layer's assets; its docstring describes the windows and range independence).
"""

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from backfill_assets.core.hours import parse_hour
from backfill_assets.core.layers import transformed
from backfill_assets.core.layers.schemas import HOUR_OF, session_id_of
from backfill_assets.core.names import AGGREGATED

CODE_VERSION = AGGREGATED.code_version
GROUP = "aggregated"
SESSION_GAP_MICROS = 30 * 60 * 1_000_000  # a gap of more than this starts a new session
# A payload's first and last session hour (epoch hours) when fewer than its window's.
SPAN_COLUMNS = ("_span_from", "_span_to")

SESSION_COLUMNS = [
    "session_id",
    "client_id",
    "user_id",
    "session_start_at",
    "session_end_at",
    "duration_seconds",
    "payload_count",
    "pageview_count",
    "entry_url",
    "exit_url",
    "device",
    "may_be_truncated",
]
CLIENT_HOURLY_COLUMNS = [
    "client_id",
    "sessions",
    "payloads",
    "pageviews",
    "bounces",
    "mean_duration_seconds",
    "p95_duration_seconds",
    "truncated_sessions",
]
# What sessionizing reads of a transformed payload: its columns but the referrer and the
# schema version, and its hour.
PAYLOAD_COLUMNS = [
    *(c for c in transformed.PAYLOAD_COLUMNS if c not in ("referrer", "schema_version")),
    "hour",
]


# --------------------------------------------------------------------------- windows


def epoch_hour_of(hour: Column) -> Column:
    """Hours since the epoch of an hour-key column (``YYYY-MM-DDTHH``, UTC)."""
    return F.floor(F.unix_seconds(F.to_timestamp(hour, HOUR_OF)) / 3600).cast("long")


def epoch_of(hour: str) -> int:
    """Hours since the epoch of an hour key."""
    return int(parse_hour(hour).timestamp()) // 3600


def hour_of_epoch(epoch_hour: Column) -> Column:
    """The hour key of an hours-since-the-epoch column."""
    return F.date_format(F.timestamp_seconds(epoch_hour * 3600), HOUR_OF)


def assign_session_hours(
    payloads: DataFrame, first: str, last: str, lookback: int, lookahead: int
) -> DataFrame:
    """Copy each payload (received hour ``hour``) to every session hour of ``first..last``
    whose window ``[H - lookback, H + lookahead]`` holds its received hour: adds
    ``session_hour`` and ``window_end`` (end of the last received hour the window reads).
    With ``SPAN_COLUMNS`` (epoch hours, null: no limit), only to the session hours between
    them as well."""
    received = epoch_hour_of(F.col("hour"))
    lo = F.greatest(received - lookahead, F.lit(epoch_of(first)))
    hi = F.least(received + lookback, F.lit(epoch_of(last)))
    if set(SPAN_COLUMNS) <= set(payloads.columns):
        span_from, span_to = (F.col(c) for c in SPAN_COLUMNS)
        lo = F.greatest(lo, F.coalesce(span_from, lo))
        hi = F.least(hi, F.coalesce(span_to, hi))
    target = F.col("_target")
    return (
        payloads.where(lo <= hi)
        .withColumn("_target", F.explode(F.sequence(lo, hi)))
        .withColumn("session_hour", hour_of_epoch(target))
        .withColumn("window_end", F.timestamp_seconds((target + lookahead + 1) * 3600))
        .drop("_target")
    )


def assign_distinct_session_hours(
    payloads: DataFrame, first: str, last: str, lookback: int, lookahead: int
) -> DataFrame:
    """``assign_session_hours`` keeping one copy per (session hour, payload_id): the one
    ``transformed.deduplicate`` keeps (the first in ``DEDUPLICATION_ORDER``, nulls last).

    Without a second pass over the copies: one window over the payloads themselves gives
    each payload the deliveries of its id (received hour and order key), null when it was
    delivered once, as almost every payload is; a copy for session hour H is kept unless
    another delivery inside H's window orders before it. The transformed layer holds one
    row per (received hour, payload_id), so the received hour breaks ties between copies
    that are equal in every ordered column (and hence in everything sessions read).
    """
    order = F.struct(
        *(
            F.struct(F.col(c).isNull().alias("null"), F.col(c).alias("value")).alias(c)
            for c in transformed.DEDUPLICATION_ORDER
            if c in payloads.columns
        ),
        epoch_hour_of(F.col("hour")).alias("received"),
    )
    deliveries = F.collect_list(order).over(Window.partitionBy("payload_id"))
    ranked = payloads.select(
        "*",
        order.alias("_order"),
        F.when(F.size(deliveries) > 1, deliveries).alias("_deliveries"),
    )
    windowed = assign_session_hours(ranked, first, last, lookback, lookahead)
    # the copy's session hour H from its window end, (H + lookahead + 1) h: no string parse
    session = (F.unix_seconds(F.col("window_end")) / 3600).cast("long") - (lookahead + 1)
    mine = F.col("_order")

    def earlier_in_window(other: Column) -> Column:
        received = other["received"]
        return received.between(session - lookback, session + lookahead) & (other < mine)

    first_copy = F.col("_deliveries").isNull() | ~F.exists("_deliveries", earlier_in_window)
    return windowed.where(first_copy).drop("_order", "_deliveries")


# --------------------------------------------------------------------------- sessions


def _sessions_marked(
    payloads: DataFrame, keys: list[str], totals: dict[str, Column]
) -> tuple[DataFrame, WindowSpec]:
    """Every payload row, sessionized per ``keys`` + (client_id, user_id) in one sort by
    (event_time, payload_id): ``_first`` / ``_last`` (the row starts / ends its session),
    the running sum of each of ``totals`` (name: the row's own value), ``_sid`` (the
    session's number within its user, from 1) and ``_session_first``, the session's first
    row carried forward to each of its rows (start, entry URL, device, each total before
    it: a session's total is the running sum on its last row minus that). The struct is
    not null on a first row even where its fields are (a null entry URL stays null).
    Also returns the running frame."""
    by_user = Window.partitionBy(*keys, "client_id", "user_id").orderBy("event_time", "payload_id")
    running = by_user.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    micros = F.unix_micros("event_time")
    gap = micros - F.lag(micros).over(by_user)
    gap_after = F.lead(micros).over(by_user) - micros
    marked = payloads.select(
        "*",
        (gap.isNull() | (gap > SESSION_GAP_MICROS)).alias("_first"),
        (gap_after.isNull() | (gap_after > SESSION_GAP_MICROS)).alias("_last"),
        *(F.sum(value).over(running).alias(name) for name, value in totals.items()),
    )
    first_row = F.struct(
        F.col("event_time").alias("start"),
        F.col("page_url").alias("entry_url"),
        F.col("device").alias("device"),
        *((F.col(name) - value).alias(name) for name, value in totals.items()),
    )
    first = F.col("_first")
    return marked.select(
        "*",
        F.last(F.when(first, first_row), ignorenulls=True).over(running).alias("_session_first"),
        F.sum(first.cast("long")).over(running).alias("_sid"),
    ), running


def _session_columns(with_payload_digest: bool = False) -> list[Column]:
    """A session's columns on its last row of ``_sessions_marked`` (over ``_totals``)."""
    first = F.col("_session_first")
    columns = [
        "client_id",
        "user_id",
        first["start"].alias("session_start_at"),
        F.col("event_time").alias("session_end_at"),
        (F.col("_n") - first["_n"]).cast("long").alias("payload_count"),
        (F.col("_pageviews") - first["_pageviews"]).cast("long").alias("pageview_count"),
        first["entry_url"].alias("entry_url"),
        F.col("page_url").alias("exit_url"),
        first["device"].alias("device"),
    ]
    if with_payload_digest:
        digest = (F.col("_digest") - first["_digest"]).cast("string")
        columns.append(digest.alias("payload_digest"))
    return columns


def _totals(with_payload_digest: bool = False) -> dict[str, Column]:
    pageview = F.when(F.col("event_type") == "pageview", 1).otherwise(0).cast("long")
    totals = {"_n": F.lit(1).cast("long"), "_pageviews": pageview}
    if with_payload_digest:
        totals["_digest"] = F.xxhash64("payload_id").cast("decimal(38,0)")
    return totals


def sessionize(
    payloads: DataFrame,
    keys: list[str],
    *,
    with_payload_digest: bool = False,
    distinct: bool = False,
) -> DataFrame:
    """Sessions of ``payloads`` per ``keys`` (each key value is sessionized on its own).

    Per key value: de-duplicate by ``payload_id`` (``transformed.deduplicate``: earliest
    delivery); per (client_id, user_id) order by (event_time, payload_id); a gap of more
    than 30 minutes starts a new session. Returns ``keys`` + client_id, user_id,
    session_start_at, session_end_at, payload_count, pageview_count, entry_url, exit_url,
    device (+ ``payload_digest``, an order-independent digest of the payload id set).
    ``distinct``: the caller de-duplicated the payloads per key value already.

    Window functions only, in the one sort of the payloads per user: each row carries its
    session's first row forward (start, entry URL, device, counts before it) and the last
    row of each session is kept. No aggregation by session: grouping by a computed session
    number sorted every payload a second time (a sort aggregate, string values in its
    buffers), the build's largest cost.
    """
    if not distinct:
        payloads = transformed.deduplicate(payloads, keys)
    totals = _totals(with_payload_digest)
    marked, _ = _sessions_marked(payloads, keys, totals)
    return marked.where(F.col("_last")).select(*keys, *_session_columns(with_payload_digest))


def window_sessions(
    payloads: DataFrame, first: str, last: str, lookback: int, lookahead: int
) -> DataFrame:
    """The sessions of each session hour of ``first..last`` from its own window, literally:
    every payload copied to each session hour whose window holds its received hour (at
    most ``lookback + lookahead + 1`` copies), de-duplicated and sessionized per (session
    hour, client, user). ``sessionize``'s columns + ``session_hour``, ``window_end``; a
    session hour's sessions that start in other hours are still there."""
    spans = [c for c in SPAN_COLUMNS if c in payloads.columns]  # see assign_session_hours
    windowed = assign_distinct_session_hours(
        payloads.select(*PAYLOAD_COLUMNS, *spans), first, last, lookback, lookahead
    )
    return sessionize(windowed, ["session_hour", "window_end"], distinct=True)


def _read_hours(first: str, last: str, lookback: int, lookahead: int) -> tuple[int, int]:
    """The epoch hour of the first received hour a build of ``first..last`` reads, and how
    many hours it reads."""
    base = epoch_of(first) - lookback
    return base, epoch_of(last) + lookahead - base + 1


def whole_sessions(
    payloads: DataFrame, first: str, last: str, lookback: int, lookahead: int
) -> DataFrame:
    """The transformed payloads received in the windows of ``first..last``, sessionized
    once per (client, user) over all of them; ``sessions_of`` takes each hour's sessions
    from it. Cache it when they are read more than once.

    A session of this one sessionization whose received hours all lie in the window of
    every hour it touches (``[end hour - lookback, start hour + lookahead]``) and none of
    whose payload ids is delivered twice in the hours read is, exactly, the session that
    its start hour's own window gives, and no other hour's window makes a session starting
    in that hour out of its payloads: a window holds all of it, and its neighbours in a
    window are at least as far away as here (more than 30 minutes). Its last row has
    ``_clean`` true. Any other session (``_clean`` false: late or early deliveries,
    re-deliveries, sessions longer than the window) is rebuilt hour by hour from its own
    payloads by ``sessions_of``: a window's sessions never join payloads of two
    sessions of the whole read, which are more than 30 minutes apart here and so in
    every window too.

    Columns: ``PAYLOAD_COLUMNS``, ``_last``, ``_clean`` (on last rows), ``_sid``, ``_n``,
    ``_pageviews``, ``_session_first``.
    """
    base, span = _read_hours(first, last, lookback, lookahead)
    received = (epoch_hour_of(F.col("hour")) - base).alias("_received")
    read = payloads.select(*PAYLOAD_COLUMNS, received).where(
        # in no window of the range otherwise; and the offsets below must lie in [0, span)
        F.col("_received").between(0, span - 1)
    )
    delivered_twice = (
        read.groupBy("payload_id")
        .agg(F.count(F.lit(1)).alias("_deliveries"))
        .where(F.col("_deliveries") > 1)
        .select("payload_id", F.lit(1).cast("long").alias("_copy"))
    )
    read = read.join(delivered_twice, "payload_id", "left").withColumn(
        "_copy", F.coalesce(F.col("_copy"), F.lit(0).cast("long"))
    )
    totals = {**_totals(), "_copies": F.col("_copy")}
    marked, running = _sessions_marked(read, [], totals)
    # The greatest and least received hour of the session so far: a running maximum over
    # the user's rows of (session number * span +/- received) is its session's own, as
    # the received offsets lie in [0, span).
    sid, received = F.col("_sid") * span, F.col("_received")
    marked = marked.select(
        "*",
        (F.max(sid + received).over(running) - sid).alias("_latest"),
        (sid - F.max(sid - received).over(running)).alias("_earliest"),
    )
    first_row = F.col("_session_first")
    start_hour = _epoch_hour(first_row["start"]) - base
    end_hour = _epoch_hour(F.col("event_time")) - base
    clean = (
        (F.col("_copies") == first_row["_copies"])
        & (F.col("_latest") <= start_hour + lookahead)
        & (F.col("_earliest") >= end_hour - lookback)
    )
    return marked.select(
        *PAYLOAD_COLUMNS,
        "_last",
        F.when(F.col("_last"), clean).alias("_clean"),
        "_sid",
        "_n",
        "_pageviews",
        "_session_first",
    )


def _epoch_hour(timestamp: Column) -> Column:
    return F.floor(F.unix_seconds(timestamp) / 3600).cast("long")


def sessions_of(
    whole: DataFrame, first: str, last: str, lookback: int, lookahead: int
) -> DataFrame:
    """The sessions of session hours ``first..last`` (``SESSION_COLUMNS`` + ``hour``) from
    ``whole_sessions``: its clean sessions as they are, the payloads of the others through
    ``window_sessions``.

    Each hour H is sessionized from its own window only and keeps the sessions whose start
    is in H. ``may_be_truncated``: the session's last payload is at most 30 minutes before
    the end of the window read (the end of received hour ``H + lookahead``), so a payload
    received after the window could continue it.
    """
    ends = whole.where(F.col("_last"))
    start_hour = _epoch_hour(F.col("_session_first")["start"])
    clean = ends.where(
        F.col("_clean") & start_hour.between(epoch_of(first), epoch_of(last))
    ).select(
        hour_of_epoch(start_hour).alias("session_hour"),
        F.timestamp_seconds((start_hour + lookahead + 1) * 3600).alias("window_end"),
        *_session_columns(),
    )
    # A window's session starting in H is part of one session of the whole read that spans
    # H, so the payloads of the others go only to the hours their session spans. (Which copy
    # of a payload delivered twice a window keeps is decided from all of its deliveries,
    # wherever they go: assign_distinct_session_hours.)
    spans = ends.where(~F.col("_clean")).select(
        "client_id",
        "user_id",
        "_sid",
        start_hour.alias(SPAN_COLUMNS[0]),
        _epoch_hour(F.col("event_time")).alias(SPAN_COLUMNS[1]),
    )
    # One row per session that is not clean (one in eight of a generated day's), broadcast:
    # the cached payloads are not shuffled again to meet them.
    others = whole.join(F.broadcast(spans), ["client_id", "user_id", "_sid"]).select(
        *PAYLOAD_COLUMNS, *SPAN_COLUMNS
    )
    rebuilt = window_sessions(others, first, last, lookback, lookahead)
    sessions = clean.unionByName(rebuilt)
    start, end = F.col("session_start_at"), F.col("session_end_at")
    return (
        sessions.where(F.date_format(start, HOUR_OF) == F.col("session_hour"))
        .withColumn("session_id", session_id_of(F.col("client_id"), F.col("user_id"), start))
        .withColumn(
            "duration_seconds", (F.unix_micros(end) - F.unix_micros(start)) / F.lit(1_000_000.0)
        )
        .withColumn(
            "may_be_truncated",
            F.unix_micros("window_end") - F.unix_micros(end) <= SESSION_GAP_MICROS,
        )
        .withColumn("hour", F.col("session_hour"))
        .select(*SESSION_COLUMNS, "hour")
    )


def build_sessions(
    payloads: DataFrame, first: str, last: str, lookback: int, lookahead: int
) -> DataFrame:
    """The sessions of session hours ``first..last`` from transformed ``payloads`` (received
    hours of the whole read window, column ``hour``); ``SESSION_COLUMNS`` + ``hour``: as
    ``window_sessions`` gives them, built from one sessionization of the payloads
    (``whole_sessions``, uncached here; ``sessions_of``)."""
    return sessions_of(
        whole_sessions(payloads, first, last, lookback, lookahead), first, last, lookback, lookahead
    )


def client_hourly(sessions: DataFrame) -> DataFrame:
    """Per (hour, client): sessions, payloads, pageviews, bounces (sessions with at most
    one pageview), mean and p95 duration, sessions flagged ``may_be_truncated``.

    ``mean_duration_seconds`` is the exact mean (integer microseconds summed, then divided,
    so it does not depend on row order). ``p95_duration_seconds`` is the exact 95th
    percentile with linear interpolation between the two closest ranks (Spark
    ``percentile``, numpy's default ``linear`` method): for n sorted durations it is
    ``d[floor(p)] + (p - floor(p)) * (d[floor(p) + 1] - d[floor(p)])`` with
    ``p = 0.95 * (n - 1)`` (0-based); for one session, its duration.
    """
    micros = F.unix_micros("session_end_at") - F.unix_micros("session_start_at")
    return sessions.groupBy("hour", "client_id").agg(
        F.count(F.lit(1)).alias("sessions"),
        F.sum("payload_count").cast("long").alias("payloads"),
        F.sum("pageview_count").cast("long").alias("pageviews"),
        F.sum(F.when(F.col("pageview_count") <= 1, 1).otherwise(0)).cast("long").alias("bounces"),
        (F.sum(micros) / F.count(F.lit(1)) / F.lit(1_000_000.0)).alias("mean_duration_seconds"),
        F.percentile(F.col("duration_seconds"), F.lit(0.95)).alias("p95_duration_seconds"),
        F.sum(F.col("may_be_truncated").cast("long")).cast("long").alias("truncated_sessions"),
    )
