"""``build_sessions`` on hand-made payloads: the 30-minute rule, windows, flags, ids."""

import hashlib
import itertools
import random
from datetime import UTC, datetime, timedelta

from pyspark.sql import functions as F

from backfill_assets.core.layers.sessions import (
    SESSION_COLUMNS,
    SESSION_GAP_MICROS,
    build_sessions,
    client_hourly,
    whole_sessions,
    window_sessions,
)

SCHEMA = (
    "payload_id string, client_id bigint, user_id string, event_time timestamp, "
    "received_at timestamp, event_type string, page_url string, device string, "
    "hour string"
)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def payload(
    pid: str,
    user: str,
    event: str,
    received: str | None = None,
    *,
    kind: str = "pageview",
    url: str = "https://a.example/",
    device: str = "desktop",
):
    got = at(received) if received else at(event) + timedelta(seconds=2)
    return (pid, 1, user, at(event), got, kind, url, device, got.strftime("%Y-%m-%dT%H"))


PAYLOADS = [
    # user a: 05:00 and 05:30:00.000 are one session (a gap of exactly 30 min), 06:00:00.001
    # starts a new one (30 min + 1 ms); p2 is delivered twice (05 and 06).
    payload("p1", "a", "2026-11-20T05:00:00", url="https://a.example/in#x", device="mobile"),
    payload("p2", "a", "2026-11-20T05:30:00", kind="click", url="https://a.example/out/"),
    payload(
        "p2",
        "a",
        "2026-11-20T05:30:00",
        "2026-11-20T06:10:00",
        kind="click",
        url="https://a.example/out/",
    ),
    payload("p3", "a", "2026-11-20T06:00:00.001", url="https://a.example/next"),
    # user b: a session from 05:50 to 08:40, read by hour 05's window up to 08:59:59.999
    # (lookahead 3): it ends 20 min before the window does, so it may be truncated.
    *[
        payload(f"b{i}", "b", t)
        for i, t in enumerate(
            [
                "2026-11-20T05:50:00",
                "2026-11-20T06:20:00",
                "2026-11-20T06:50:00",
                "2026-11-20T07:20:00",
                "2026-11-20T07:50:00",
                "2026-11-20T08:20:00",
                "2026-11-20T08:40:00",
            ]
        )
    ],
    # user c: a 04:50 payload received at 09:10 (outside the windows of 04 and 05), then a
    # 05:10 one: hour 05's window sees only the second, a session starting at 05:10.
    payload("c1", "c", "2026-11-20T04:50:00", "2026-11-20T09:10:00"),
    payload("c2", "c", "2026-11-20T05:10:00", device="tablet"),
    # user d: two payloads at the same instant: ordered by payload_id.
    payload("d2", "d", "2026-11-20T05:20:00", url="https://a.example/second"),
    payload("d1", "d", "2026-11-20T05:20:00", url="https://a.example/first", kind="scroll"),
]


def rows(df) -> dict[tuple, dict]:
    out = df.select(
        "hour",
        "user_id",
        F.date_format("session_start_at", "HH:mm:ss.SSS").alias("start"),
        F.date_format("session_end_at", "HH:mm:ss.SSS").alias("end"),
        "payload_count",
        "pageview_count",
        "entry_url",
        "exit_url",
        "device",
        "may_be_truncated",
        "duration_seconds",
        "session_id",
        F.date_format("session_start_at", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("iso"),
    ).collect()
    return {(r["hour"], r["user_id"], r["start"]): r.asDict() for r in out}


def test_sessions_of_hand_made_payloads(spark) -> None:
    df = spark.createDataFrame(PAYLOADS, SCHEMA)
    got = rows(build_sessions(df, "2026-11-20T04", "2026-11-20T06", 3, 3))

    assert sorted(got) == [
        ("2026-11-20T05", "a", "05:00:00.000"),
        ("2026-11-20T05", "b", "05:50:00.000"),
        ("2026-11-20T05", "c", "05:10:00.000"),
        ("2026-11-20T05", "d", "05:20:00.000"),
        ("2026-11-20T06", "a", "06:00:00.001"),
    ]
    a = got[("2026-11-20T05", "a", "05:00:00.000")]
    assert (a["end"], a["payload_count"], a["pageview_count"]) == ("05:30:00.000", 2, 1)
    assert (a["entry_url"], a["exit_url"], a["device"]) == (
        "https://a.example/in#x",
        "https://a.example/out/",
        "mobile",
    )  # normalized upstream
    assert a["duration_seconds"] == 1800.0 and not a["may_be_truncated"]
    b = got[("2026-11-20T05", "b", "05:50:00.000")]
    assert (b["end"], b["payload_count"], b["may_be_truncated"]) == ("08:40:00.000", 7, True)
    c = got[("2026-11-20T05", "c", "05:10:00.000")]
    assert (c["payload_count"], c["device"]) == (1, "tablet")
    d = got[("2026-11-20T05", "d", "05:20:00.000")]
    assert (d["entry_url"], d["exit_url"], d["pageview_count"]) == (
        "https://a.example/first",
        "https://a.example/second",
        1,
    )
    for r in got.values():
        text = f"1|{r['user_id']}|{r['iso']}"
        assert r["session_id"] == hashlib.sha256(text.encode()).hexdigest()[:32]


def test_an_hour_is_the_same_whatever_range_it_is_built_in(spark) -> None:
    df = spark.createDataFrame(PAYLOADS, SCHEMA)
    wide = rows(build_sessions(df, "2026-11-20T02", "2026-11-20T08", 3, 3))
    for hour in ("2026-11-20T05", "2026-11-20T06"):
        alone = rows(build_sessions(df, hour, hour, 3, 3))
        assert alone == {k: v for k, v in wide.items() if k[0] == hour}
    # A narrower lookahead reads less: b's session is cut at 06:50 and flagged.
    narrow = rows(build_sessions(df, "2026-11-20T05", "2026-11-20T05", 3, 1))
    b = narrow[("2026-11-20T05", "b", "05:50:00.000")]
    assert (b["end"], b["payload_count"], b["may_be_truncated"]) == ("06:50:00.000", 3, True)


def test_client_hourly_metrics(spark) -> None:
    df = spark.createDataFrame(PAYLOADS, SCHEMA)
    sessions = build_sessions(df, "2026-11-20T05", "2026-11-20T05", 3, 3)
    [row] = client_hourly(sessions).collect()
    durations = sorted([1800.0, 10200.0, 0.0, 0.0])  # a, b, c, d
    assert (row["sessions"], row["payloads"], row["pageviews"], row["bounces"]) == (4, 12, 10, 3)
    assert row["mean_duration_seconds"] == sum(durations) / 4
    # p95 of 4 values, linear: rank 0.95 * 3 = 2.85 -> d[2] + 0.85 * (d[3] - d[2])
    assert abs(row["p95_duration_seconds"] - (1800 + 0.85 * (10200 - 1800))) < 1e-9
    assert row["truncated_sessions"] == 1


def test_distinct_session_hours_keep_the_copy_the_deduplication_keeps(spark):
    """One window over the payloads chooses, per session hour, the copy that a window over
    the copies (``transformed.deduplicate``) would: deliveries across received hours, a
    later one that orders first (earlier event time, same received_at), exact ties."""
    from backfill_assets.core.layers import transformed
    from backfill_assets.core.layers.sessions import (
        assign_distinct_session_hours,
        assign_session_hours,
    )

    rows = [
        payload("d1", "a", "2026-11-20T05:00:00", "2026-11-20T04:10:00", kind="click"),
        payload("d1", "a", "2026-11-20T05:00:00", "2026-11-20T06:10:00"),
        payload("d1", "a", "2026-11-20T05:00:00", "2026-11-20T09:10:00", device="tablet"),
        payload("d2", "b", "2026-11-20T05:00:00", "2026-11-20T05:10:00", kind="scroll"),
        payload("d2", "b", "2026-11-20T04:59:00", "2026-11-20T07:10:00"),
        payload("d3", "c", "2026-11-20T05:00:00", "2026-11-20T05:10:00"),
        payload("d3", "c", "2026-11-20T05:00:00", "2026-11-20T06:10:00"),
        payload("once", "d", "2026-11-20T05:00:00"),
    ]
    # an exact tie: the same copy in the folders of two received hours
    tie = payload("d4", "e", "2026-11-20T05:00:00", "2026-11-20T05:10:00")
    rows += [tie, (*tie[:-1], "2026-11-20T08")]
    df = spark.createDataFrame(rows, SCHEMA)
    keys = ["session_hour", "window_end"]
    # not "hour": of two exact ties, which folder's copy is kept does not matter
    columns = ["session_hour", "payload_id", "event_type", "device", "event_time", "received_at"]

    def sorted_rows(frame):
        return sorted(tuple(r) for r in frame.select(*columns).collect())

    for first, last in (("2026-11-20T02", "2026-11-20T12"), ("2026-11-20T07", "2026-11-20T07")):
        expected = transformed.deduplicate(assign_session_hours(df, first, last, 3, 3), keys)
        got = assign_distinct_session_hours(df, first, last, 3, 3)
        assert sorted_rows(got) == sorted_rows(expected)
        assert got.groupBy(*keys, "payload_id").count().where("count > 1").count() == 0


def test_a_session_takes_its_own_first_row_even_where_that_row_holds_nulls(spark) -> None:
    """Entry URL and device are those of the session's first payload, also when they are
    null there (as ``min_by`` gives them): never the previous session's; the digest of the
    payload ids is per session."""
    from backfill_assets.core.layers.sessions import sessionize

    rows = [
        payload("p1", "a", "2026-11-20T05:00:00", url="https://a.example/one", device="mobile"),
        payload("p2", "a", "2026-11-20T05:10:00", url="https://a.example/two", kind="click"),
        # an hour later: a new session whose first payload has neither URL nor device
        (*payload("p3", "a", "2026-11-20T06:30:00")[:6], None, None, "2026-11-20T06"),
        payload("p4", "a", "2026-11-20T06:40:00", url="https://a.example/four", device="tablet"),
    ]
    df = spark.createDataFrame(rows, SCHEMA)
    sessions = sorted(
        sessionize(df.withColumn("k", F.lit(0)), ["k"], with_payload_digest=True).collect(),
        key=lambda r: r["session_start_at"],
    )
    assert [(s["entry_url"], s["exit_url"], s["device"]) for s in sessions] == [
        ("https://a.example/one", "https://a.example/two", "mobile"),
        (None, "https://a.example/four", None),
    ]
    assert [(s["payload_count"], s["pageview_count"]) for s in sessions] == [(2, 1), (2, 2)]
    digests = {
        ids: spark.sql(
            f"select cast(sum(cast(xxhash64(id) as decimal(38,0))) as string) from "
            f"values {', '.join(repr(i) for i in ids)} as t(id)"
        ).first()[0]
        for ids in (("p1", "p2"), ("p3", "p4"))
    }
    assert [s["payload_digest"] for s in sessions] == list(digests.values())


def tangled_payloads(clients: int) -> list[tuple]:
    """Payloads of a few users of each client (its own random draw) over ten hours, with
    every case ``whole_sessions`` must send to the per-hour windows: deliveries hours late
    or early (a browser clock ahead), re-deliveries in later hours (also under another user
    or with another event time), exact ties, sessions longer than the window; one row per
    (received hour, payload_id), as the transformed layer holds."""
    start = at("2026-11-20T02:00:00")
    # x's copy in hour 05 is delivered first: hour 05's window keeps it, not w's, although
    # x's session is at 07 (so w's session at 05 is w0 alone)
    rows = [
        payload("w0", "w", "2026-11-20T05:00:00", "2026-11-20T05:00:10"),
        payload("copied", "w", "2026-11-20T05:10:00", "2026-11-20T05:10:30"),
        payload("copied", "x", "2026-11-20T07:40:00", "2026-11-20T05:05:00"),
    ]
    seen = {(r[-1], r[0]) for r in rows}

    def add(client, pid, user, event, received, **kw):
        row = payload(pid, user, event.isoformat(), received.isoformat(), **kw)
        if (row[-1], pid) not in seen:
            seen.add((row[-1], pid))
            rows.append((pid, client, *row[2:]))

    for client, u in itertools.product(range(1, clients + 1), range(6)):
        rng = random.Random(client * 10 + u)
        t = start + timedelta(minutes=rng.randrange(0, 120))
        for i in range(60):
            t += timedelta(minutes=rng.choice([1, 5, 12, 29, 30, 31, 45, 90]))
            event = t.replace(tzinfo=None)
            roll = rng.random()
            if roll < 0.1:
                delay = timedelta(hours=rng.uniform(1, 8))  # late
            elif roll < 0.15:
                delay = -timedelta(minutes=rng.uniform(1, 90))  # clock ahead
            else:
                delay = timedelta(seconds=rng.uniform(0, 120))
            kind = rng.choice(["pageview", "pageview", "click"])
            url = f"https://a.example/{rng.randrange(5)}"
            pid, user = f"c{client}-u{u}-{i}", f"user{u}"
            add(client, pid, user, event, event + delay, kind=kind, url=url)
            roll = rng.random()
            if roll < 0.05:  # re-delivered, hours later
                later = event + delay + timedelta(hours=rng.uniform(0.5, 4))
                add(client, pid, user, event, later)
            elif roll < 0.07:  # the same id from another user, another time
                other = event + timedelta(minutes=rng.uniform(-60, 60))
                later = other + timedelta(hours=rng.uniform(0, 3))
                add(client, pid, f"user{(u + 1) % 6}", other, later)
            elif roll < 0.09:  # an exact copy in the next hour's folder
                add(client, pid, user, event, event + delay + timedelta(hours=1))
    return rows


def literal_sessions(df, first: str, last: str, lookback: int, lookahead: int) -> list[tuple]:
    """Each session hour from its own window, as the definition reads (``window_sessions``)."""
    sessions = window_sessions(df, first, last, lookback, lookahead)
    start = F.col("session_start_at")
    truncated = F.unix_micros("window_end") - F.unix_micros("session_end_at") <= SESSION_GAP_MICROS
    return sorted(
        tuple(r)
        for r in sessions.where(F.date_format(start, "yyyy-MM-dd'T'HH") == F.col("session_hour"))
        .select(F.col("session_hour").alias("hour"), *COMPARED[1:-1], truncated)
        .collect()
    )


# what the definition gives a session (its id and duration follow from these)
COMPARED = ["hour", *(c for c in SESSION_COLUMNS if c not in ("session_id", "duration_seconds"))]


def test_sessions_are_those_of_each_hours_own_window(spark) -> None:
    """``build_sessions`` (one sessionization, the per-hour windows only for the sessions
    they can change) gives exactly the sessions of each hour's own window, on payloads
    tangled every way, for several ranges and windows; both of its paths are taken."""
    df = spark.createDataFrame(tangled_payloads(clients=3), SCHEMA).cache()
    for first, last, lookback, lookahead in (
        ("2026-11-20T02", "2026-11-20T12", 3, 3),
        ("2026-11-20T05", "2026-11-20T07", 3, 3),
        ("2026-11-20T04", "2026-11-20T09", 2, 1),
        ("2026-11-20T03", "2026-11-20T10", 0, 0),
    ):
        got = build_sessions(df, first, last, lookback, lookahead)
        assert sorted(tuple(r) for r in got.select(*COMPARED).collect()) == literal_sessions(
            df, first, last, lookback, lookahead
        ), (first, last, lookback, lookahead)
    ends = whole_sessions(df, "2026-11-20T02", "2026-11-20T12", 3, 3).where("_last")
    assert {r["_clean"] for r in ends.select("_clean").collect()} == {True, False}
    df.unpersist()
