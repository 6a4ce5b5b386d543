"""Half-cut analysis: how wide must the session window be to rebuild sessions exactly?

For the session hours ``first..last``, the reference is the sessions built from ALL the
given payloads (normally every published hour of ``transformed.payloads``). For each
window of ``k = 0..max_window`` hours each side, the sessions of hour H are rebuilt the way
the aggregated layer does it, from the payloads received in ``[H - k, H + k]`` only. A
reference session is *recovered* by ``k`` when that build has a session with the same
client, user, start, end, payload count and payload id set (an order-independent digest).
A *cut* session is one the hour alone (``k = 0``) does not recover.

Spark work: one job for the whole table (every k and hour at once: each payload is copied
to each (hour, k) whose window holds it, then sessionized per (k, hour, client, user) with
window functions), plus one small job for the published hours. The per-(hour, k) counts
come back to the driver, never the sessions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_assets.core.hours import hour_range, hours_between, shift_hour
from backfill_assets.core.layers.schemas import HOUR_OF
from backfill_assets.core.layers.sessions import (
    PAYLOAD_COLUMNS,
    epoch_hour_of,
    epoch_of,
    hour_of_epoch,
    sessionize,
)
from backfill_assets.core.warehouse.tables import published_hours
from backfill_assets.defs.layers.aggregated import SOURCE_TABLE

MATCH_KEYS = [
    "client_id",
    "user_id",
    "session_start_at",
    "session_end_at",
    "payload_count",
    "payload_digest",
]
DEFAULT_MAX_WINDOW = 6


@dataclass(frozen=True)
class WindowRow:
    """What a window of ``k`` hours each side recovers over the analysed hours."""

    k: int
    recovered: int
    sessions: int
    cut_recovered: int
    cut_sessions: int

    @property
    def share(self) -> float:
        return self.recovered / self.sessions if self.sessions else 1.0

    @property
    def cut_share(self) -> float:
        return self.cut_recovered / self.cut_sessions if self.cut_sessions else 1.0


@dataclass
class HalfCutReport:
    first: str
    last: str
    max_window: int
    sessions: int
    cut_sessions: int
    windows: list[WindowRow]
    per_hour: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    unpublished_hours: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "first": self.first,
            "last": self.last,
            "max_window": self.max_window,
            "sessions": self.sessions,
            "cut_sessions": self.cut_sessions,
            "windows": [
                {**asdict(w), "share": round(w.share, 6), "cut_share": round(w.cut_share, 6)}
                for w in self.windows
            ],
            "per_hour": {
                h: {str(k): {"recovered": r, "sessions": n} for k, (r, n) in v.items()}
                for h, v in self.per_hour.items()
            },
            "unpublished_hours": self.unpublished_hours,
        }


def _windowed(payloads: DataFrame, first: str, last: str, max_window: int) -> DataFrame:
    """Each payload copied to every (session hour H of first..last, k) with its received
    hour in ``[H - k, H + k]``: columns ``session_hour`` and ``k`` added."""
    received = epoch_hour_of(F.col("hour"))
    lo = F.greatest(received - max_window, F.lit(epoch_of(first)))
    hi = F.least(received + max_window, F.lit(epoch_of(last)))
    with_target = payloads.where(lo <= hi).withColumn("_target", F.explode(F.sequence(lo, hi)))
    distance = F.abs(received - F.col("_target"))
    return (
        with_target.withColumn("k", F.explode(F.sequence(distance, F.lit(max_window))))
        .withColumn("session_hour", hour_of_epoch(F.col("_target")))
        .drop("_target")
    )


def recovery_counts(
    payloads: DataFrame, first: str, last: str, max_window: int
) -> dict[tuple[str, int, bool], int]:
    """``{(hour, k, recovered_at_0): sessions}`` with ``k = -1`` counting all reference
    sessions of the hour (one Spark job)."""
    payloads = payloads.select(*PAYLOAD_COLUMNS)
    reference = (
        sessionize(payloads.withColumn("_all", F.lit(0)), ["_all"], with_payload_digest=True)
        .withColumn("hour", F.date_format("session_start_at", HOUR_OF))
        .where(F.col("hour").between(first, last))
        .select("hour", *MATCH_KEYS)
    )
    window_read = payloads.where(
        F.col("hour").between(shift_hour(first, -max_window), shift_hour(last, max_window))
    )
    rebuilt = (
        sessionize(
            _windowed(window_read, first, last, max_window),
            ["k", "session_hour"],
            with_payload_digest=True,
        )
        .where(F.date_format("session_start_at", HOUR_OF) == F.col("session_hour"))
        .select(F.col("session_hour").alias("hour"), "k", *MATCH_KEYS)
    )
    matched = (
        reference.join(rebuilt, ["hour", *MATCH_KEYS], "left")
        .groupBy("hour", *MATCH_KEYS)
        .agg(F.collect_set("k").alias("ks"))
        .select(
            "hour",
            F.array_contains("ks", 0).alias("at_0"),
            F.explode(F.array_union("ks", F.array(F.lit(-1)))).alias("k"),
        )
    )
    rows = matched.groupBy("hour", "k", "at_0").count().collect()
    return {(r["hour"], int(r["k"]), bool(r["at_0"])): int(r["count"]) for r in rows}


def analyse(
    payloads: DataFrame,
    first: str,
    last: str,
    max_window: int = DEFAULT_MAX_WINDOW,
    unpublished: list[str] | None = None,
) -> HalfCutReport:
    """The half-cut report of session hours ``first..last`` over ``payloads`` (transformed
    rows of any received hours, column ``hour`` = received hour)."""
    if not isinstance(max_window, int) or max_window < 0:
        raise ValueError(f"max_window must be a non-negative integer, got {max_window!r}")
    hours = hour_range(first, last)
    counts = recovery_counts(payloads, first, last, max_window)

    def total(hour: str | None, k: int, at_0: bool | None) -> int:
        return sum(
            n
            for (h, kk, a), n in counts.items()
            if (hour is None or h == hour) and kk == k and (at_0 is None or a == at_0)
        )

    sessions, cut = total(None, -1, None), total(None, -1, False)
    windows = [
        WindowRow(k, total(None, k, None), sessions, total(None, k, False), cut)
        for k in range(max_window + 1)
    ]
    per_hour = {
        h: {k: (total(h, k, None), total(h, -1, None)) for k in range(max_window + 1)}
        for h in hours
    }
    return HalfCutReport(
        first, last, max_window, sessions, cut, windows, per_hour, unpublished or []
    )


def analyse_published(
    spark: SparkSession, first: str, last: str, max_window: int = DEFAULT_MAX_WINDOW
) -> HalfCutReport:
    """``analyse`` over every published hour of ``transformed.payloads``; the report names
    the hours of the widest window that are not published (their payloads are missing
    from every build, so shares near the edges are then too low)."""
    published = set(published_hours(spark, SOURCE_TABLE))
    if not published:
        raise ValueError(
            f"{SOURCE_TABLE} has no published hour: backfill the transformed layer first"
        )
    widest = hours_between(shift_hour(first, -max_window), shift_hour(last, max_window))
    unpublished = [h for h in widest if h not in published]
    return analyse(spark.table(SOURCE_TABLE), first, last, max_window, unpublished)


def format_table(report: HalfCutReport) -> str:
    """The report as an aligned plain-text table (for the terminal and the README)."""
    header = ("window", "sessions rebuilt exactly", "share", "cut sessions rebuilt", "share of cut")
    body = [
        (
            f"±{w.k} h",
            f"{w.recovered} / {w.sessions}",
            f"{w.share:.1%}",
            f"{w.cut_recovered} / {w.cut_sessions}",
            f"{w.cut_share:.1%}",
        )
        for w in report.windows
    ]
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    lines = [
        f"Half-cut analysis of session hours {report.first}..{report.last} "
        f"({len(report.per_hour)} h): {report.sessions} sessions built from all published "
        f"data; {report.cut_sessions} of them are cut by the hour alone (not rebuilt "
        f"exactly from a ±0 h window).",
        "",
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        ),
    ]
    for row in body:
        lines.append(
            "  ".join(
                v.ljust(w) if i == 0 else v.rjust(w)
                for i, (v, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    if report.unpublished_hours:
        lines += [
            "",
            "warning: received hours not published (missing from every build): "
            + ", ".join(report.unpublished_hours),
        ]
    return "\n".join(lines)
