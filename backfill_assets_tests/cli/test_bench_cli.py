"""The benchmark command validates its shape before generating anything."""

import pytest

from backfill_assets.cli.main import main


@pytest.mark.parametrize("args", [["--payloads", "10"], ["--hours", "2"], ["--clients", "0"]])
def test_bench_rejects_shapes_too_small_to_measure(args: list[str], capsys):
    assert main(["bench", *args]) == 2
    assert "need --payloads >= 1000" in capsys.readouterr().err


def test_driver_memory_is_measured_on_both_sides_of_the_session(spark):
    from backfill_assets.cli.bench import measure_driver_memory

    def release():
        # a driver-side allocation the old generation must hold: 64 MB collected rows
        return len(spark.range(200_000).selectExpr("repeat('x', 300) AS s").collect())

    result, memory = measure_driver_memory(spark, release)

    assert result == 200_000  # the release's own result comes back
    assert memory.python_peak_mb > 64  # this process held the collected rows
    assert memory.jvm_old_peak_mb > 0  # the JVM heap pools were found and read
    assert 0 < memory.jvm_retained_mb < memory.jvm_old_peak_mb + 4096
