"""Half-cut analysis against a Python re-computation with the truth's ``sessionize``."""

from datetime import UTC, datetime

import pytest

from backfill_assets.cli.main import main
from backfill_assets.core.hours import hour_range, shift_hour
from backfill_assets_dev.analysis.halfcut import analyse, format_table
from backfill_assets_dev.generator import generate_backups
from backfill_assets_dev.generator.truth import read_truth_payloads, sessionize

FIRST, LAST, MAX_WINDOW = "2026-11-20T04", "2026-11-20T07", 3


def payload_rows(root) -> list[dict]:
    """The payloads the tree holds, as transformed rows (``hour`` = first received hour),
    plus a re-delivery one hour later of every 20th payload (de-duplicated by the analysis)."""
    rows = []
    for p in read_truth_payloads(root):
        if not p["in_tree"]:
            continue
        row = {
            "payload_id": p["payload_id"],
            "client_id": p["client_id"],
            "user_id": p["user_id"],
            "event_time": datetime.fromtimestamp(p["event_time_ms"] / 1000, tz=UTC),
            "received_at": datetime.fromtimestamp(p["received_at_ms"] / 1000, tz=UTC),
            "event_type": p["event_type"],
            "page_url": p["page_url"],
            "device": p["device"],
            "hour": p["received_hour"],
            "event_time_ms": p["event_time_ms"],
        }
        rows.append(row)
        if len(rows) % 20 == 0:
            rows.append({**row, "hour": shift_hour(row["hour"], 1)})
    return rows


def expected_recovery(rows: list[dict]) -> dict[int, tuple[int, int, int, int]]:
    """k -> (recovered, sessions, cut recovered, cut sessions), by brute force per hour."""

    def key(s: dict) -> tuple:
        return (
            s["client_id"],
            s["user_id"],
            s["session_start_ms"],
            s["session_end_ms"],
            s["payload_count"],
        )

    reference = [s for s in sessionize(rows) if FIRST <= s["hour"] <= LAST]
    rebuilt = {}
    for k in range(MAX_WINDOW + 1):
        rebuilt[k] = set()
        for hour in hour_range(FIRST, LAST):
            low, high = shift_hour(hour, -k), shift_hour(hour, k)
            visible = sorted(
                (r for r in rows if low <= r["hour"] <= high), key=lambda r: r["received_at"]
            )
            rebuilt[k] |= {key(s) for s in sessionize(visible) if s["hour"] == hour}
    cut = [s for s in reference if key(s) not in rebuilt[0]]
    return {
        k: (
            sum(key(s) in rebuilt[k] for s in reference),
            len(reference),
            sum(key(s) in rebuilt[k] for s in cut),
            len(cut),
        )
        for k in range(MAX_WINDOW + 1)
    }


def test_recovery_per_window_matches_brute_force(spark, tmp_path) -> None:
    root = tmp_path / "backups"
    generate_backups(
        root,
        start="2026-11-20T00",
        hours=12,
        clients=2,
        users_per_client=40,
        seed=5,
        late_hours_rate=0.1,
        workers=1,
    )
    rows = payload_rows(root)
    df = spark.createDataFrame(
        [{k: v for k, v in r.items() if k != "event_time_ms"} for r in rows],
        "payload_id string, client_id bigint, user_id string, event_time timestamp, "
        "received_at timestamp, event_type string, page_url string, device string, hour string",
    )
    report = analyse(df, FIRST, LAST, MAX_WINDOW)

    expected = expected_recovery(rows)
    got = {w.k: (w.recovered, w.sessions, w.cut_recovered, w.cut_sessions) for w in report.windows}
    assert got == expected
    assert expected[0][3] > 0 and expected[MAX_WINDOW][2] > 0  # some cut, some of them mended
    assert report.sessions == sum(n for _, n in (v[0] for v in report.per_hour.values()))
    table = format_table(report)
    assert all(f"±{k} h" in table for k in range(MAX_WINDOW + 1))
    assert f"{report.windows[-1].share:.1%}" in table


@pytest.mark.parametrize(
    "argv",
    [
        ["halfcut", "--from", "2026-11-20T05", "--to", "2026-11-20T04"],
        ["halfcut", "--from", "2026-11-20 05", "--to", "2026-11-20T06"],
    ],
)
def test_cli_rejects_bad_ranges(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    assert "backfill-assets halfcut:" in capsys.readouterr().err


def test_cli_rejects_bad_window(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["halfcut", "--from", FIRST, "--to", LAST, "--max-window", "-1"])
    assert "whole number of hours" in capsys.readouterr().err
