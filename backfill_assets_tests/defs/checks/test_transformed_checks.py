"""The transformed layer's reconciliation with raw: duplicates, missing and extra ids."""

from backfill_assets.core.layers.digests import id_digests
from backfill_assets.defs.checks.transformed import (
    reconcile_by_digest,
    reconcile_with_raw,
    reconciliation_failures,
)

H1, H2, H3 = "2026-11-20T05", "2026-11-20T06", "2026-11-20T07"


def test_reconciliation_names_each_broken_hour(spark) -> None:
    raw = spark.createDataFrame(
        [(H1, "a"), (H1, "a"), (H1, "b"), (H2, "c"), (H2, "d"), (H3, "e")],
        "hour string, payload_id string",
    )
    good = spark.createDataFrame(
        [(H1, "a"), (H1, "b"), (H2, "c"), (H2, "d"), (H3, "e")], "hour string, payload_id string"
    )
    counts = reconcile_with_raw(good, raw)
    assert counts[H1] == {
        "rows": 2,
        "raw_distinct_ids": 2,
        "duplicated_ids": 0,
        "missing_ids": 0,
        "extra_ids": 0,
    }
    assert reconciliation_failures([H1, H2, H3], counts) == {}

    bad = spark.createDataFrame(
        [(H1, "a"), (H1, "a"), (H1, "b"), (H2, "c"), (H2, "x"), (H3, "e")],
        "hour string, payload_id string",
    )
    failing = reconciliation_failures([H1, H2, H3], reconcile_with_raw(bad, raw))
    assert sorted(failing) == [H1, H2]
    assert "1 duplicated" in failing[H1]
    assert "1 missing" in failing[H2] and "1 not in raw.payloads" in failing[H2]
    # An hour with nothing at all on either side passes; one written empty but raw has rows fails.
    assert reconciliation_failures(["2026-11-20T08"], {}) == {}
    assert list(reconciliation_failures([H3], reconcile_with_raw(bad.limit(0), raw))) == [H3]


def test_the_digests_give_the_exact_counts_and_find_what_row_counts_miss(spark) -> None:
    raw = spark.createDataFrame(
        [(H1, "a"), (H1, "a"), (H1, "b"), (H2, "c"), (H2, "d"), (H3, "e")],
        "hour string, payload_id string",
    )
    hours = [H1, H2, H3, "2026-11-20T08"]

    def by_digest(transformed):
        return reconcile_by_digest(transformed, raw, hours, id_digests(transformed))

    good = spark.createDataFrame(
        [(H1, "a"), (H1, "b"), (H2, "c"), (H2, "d"), (H3, "e")], "hour string, payload_id string"
    )
    assert by_digest(good) == reconcile_with_raw(good, raw)
    assert reconciliation_failures(hours, by_digest(good)) == {}
    # Each broken hour keeps its row count: H1 one id twice and one missing, H2 one id
    # replaced by another, H3 written empty; the digests tell them apart all the same.
    bad = spark.createDataFrame(
        [(H1, "a"), (H1, "a"), (H2, "c"), (H2, "x")], "hour string, payload_id string"
    )
    counts = by_digest(bad)
    assert counts == reconcile_with_raw(bad, raw)
    failing = reconciliation_failures(hours, counts)
    assert sorted(failing) == [H1, H2, H3]
    assert "1 duplicated, 1 missing" in failing[H1]
    assert "1 missing, 1 not in raw.payloads" in failing[H2]
