"""A release's cost before launch: executor cores of the configured Spark, core-hours, and
the cap above which it needs approval."""

import pytest

from backfill_assets.release.estimate import (
    ASSUMED_RECORDS_PER_CORE_SECOND,
    Cores,
    Estimate,
    core_hours,
    executor_cores,
    over_cap,
    refusal,
)


def test_executor_cores_of_the_local_and_the_cluster_profiles() -> None:
    assert executor_cores({"spark.master": "local[*]"}, machine_cores=8).count == 8
    assert executor_cores({"spark.master": "local[3]"}, machine_cores=8).count == 3
    assert executor_cores({"spark.master": "local"}, machine_cores=8).count == 1
    standalone = {"spark.master": "spark://h:7077", "spark.cores.max": "2"}
    assert executor_cores(standalone) == Cores(2, "spark.cores.max 2")
    k8s = {"spark.master": "k8s://x", "spark.executor.cores": "4", "spark.executor.instances": "5"}
    assert executor_cores(k8s).count == 20
    unresolved = {**k8s, "spark.executor.instances": "${SPARK_EXECUTOR_INSTANCES}"}
    assert executor_cores(unresolved).count == 4  # one executor counted, and said so
    assert "instances unknown" in executor_cores(unresolved).how


def test_core_hours_and_the_cap() -> None:
    assert core_hours(5400, 4) == 6
    assert over_cap(25, 24) and not over_cap(24, 24)
    assert not over_cap(1e9, None) and not over_cap(None, 24)


def _estimate(rate: float | None) -> Estimate:
    return Estimate(72, 72, 300, 72 * 10**9, 11_000_000, rate, 3 if rate else 0, Cores(20, "x"))


def test_cost_from_the_measured_rate_else_an_assumed_rate_per_core() -> None:
    measured = _estimate(rate=10**6)  # 72 GB at 1 MB/s: 72,000 s on 20 cores
    assert measured.core_hours == pytest.approx(400)
    assert "about 400 executor core-hour(s) (20 core(s): x)" in measured.cost()
    assumed = _estimate(rate=None)
    seconds = 11_000_000 / (ASSUMED_RECORDS_PER_CORE_SECOND * 20)
    assert assumed.core_hours == pytest.approx(seconds * 20 / 3600)
    assert "assumed" in assumed.cost()
    line = refusal(measured, 24, "release 2026-11-01T00..2026-11-03T23")
    assert "\n" not in line and "400 executor core-hour(s)" in line
    assert "BACKFILL_MAX_CORE_HOURS=24" in line and "--approve-cost --reason" in line
