"""The benchmark command: its shape checks, the plain job it compares with, and the
breakdown of a release's time read back from the instance."""

import pytest

from backfill_assets.cli.main import main


@pytest.mark.parametrize("args", [["--payloads", "10"], ["--hours", "2"], ["--clients", "0"]])
def test_bench_rejects_shapes_too_small_to_measure(args: list[str], capsys):
    assert main(["bench", *args]) == 2
    assert "need --payloads >= 1000" in capsys.readouterr().err


def test_rounds_and_the_fixed_cost_are_checked(capsys):
    assert main(["bench", "--compare", "--rounds", "0"]) == 2
    assert "--rounds N: N >= 1" in capsys.readouterr().err
    assert main(["bench", "--fixed-cost-only", "--fixed-cost-hours", "0"]) == 2
    assert "--fixed-cost-only needs --fixed-cost-hours >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("curve", ["", "1,a day", "0,24"])
def test_the_curve_lengths_are_checked(curve: str, capsys):
    assert main(["bench", "--curve", curve]) == 2
    assert "--curve" in capsys.readouterr().err


def test_the_curve_compares_each_length_with_the_day():
    """Seconds per million payloads and the driver's peak, each as a ratio to the 24-hour
    release (issue 56's bar for 168 hours: 1.2x)."""
    from backfill_assets_dev.cli.bench_curve import Point, parse_lengths, table

    assert parse_lengths("168,1,24,24") == [1, 24, 168]
    points = [
        Point(1, 66_000, 40.0, 2, 1.5 * 2**30, True),
        Point(24, 1_580_000, 158.0, 1, 2 * 2**30, True),
        Point(168, 11_060_000, 1327.2, 8, 2.2 * 2**30, False),
    ]
    header, one, day, week = table(points)
    assert header.split().count("24") == 2
    assert day.split()[3:5] == ["100.0", "1.00"] and day.split()[-1] == "1.00"
    assert week.split()[3:5] == ["120.0", "1.20"]
    assert week.split()[-2:] == ["1.10", "FAILED"]
    assert one.split()[3] == "606.1"


def test_the_plain_job_parses_each_line_once(spark, make_backups, capsys):
    """The yardstick is written for speed: Spark's JSON source parses each line in its scan,
    and no filter re-parses it. (A filter on the fields of a ``from_json`` projection is
    pushed below it as one pruned ``from_json`` per field it reads: the job did that, and
    parsed every line nine times.)"""
    import json

    from backfill_assets_dev.cli.bench_plain import _raw

    root = make_backups(hours=1, clients=1, malformed_rate=0.0, write_truth=False)
    lines = sum(json.loads(m.read_text())["records"] for m in root.glob("raw/*/*/*/_MANIFEST.json"))
    raw = _raw(spark, str(root))
    raw.explain()
    plan = capsys.readouterr().out
    assert "from_json" not in plan and "FileScan json" in plan
    assert raw.count() == lines > 0  # every line (all valid), once


def test_the_plain_job_reads_the_hours_it_is_given_only(spark, make_backups):
    """The plain job reads the hours of the release it is compared with, not the tree."""
    import json

    from backfill_assets_dev.cli.bench_plain import _raw

    root = make_backups(hours=3, clients=1, malformed_rate=0.0, write_truth=False)

    def records(hour: str) -> int:
        folder = f"raw/date={hour[:10]}/hour={hour[11:13]}/*/_MANIFEST.json"
        return sum(json.loads(m.read_text())["records"] for m in root.glob(folder))

    hours = ["2026-11-20T01", "2026-11-20T02"]
    counted = {
        r["hour"]: r["count"]
        for r in _raw(spark, str(root), hours).groupBy("hour").count().collect()
    }
    assert counted == {h: records(h) for h in hours} and all(counted.values())
    assert _raw(spark, str(root)).count() == sum(records(f"2026-11-20T0{h}") for h in range(3))


def test_the_plain_job_sessionizes_each_payload_once(spark):
    """The yardstick sessionizes each payload once per client and user, not once per
    received-hour window: a visit of ten hours (a payload every 20 minutes) is one session
    of 30 payloads in the hour it starts, which no seven-hour window holds whole."""
    from datetime import datetime, timedelta

    from backfill_assets_dev.cli.bench_plain import plain_sessions

    start = datetime(2026, 11, 20, 0, 5)
    rows = [(1, "long", f"p{i}", start + timedelta(minutes=20 * i), "pageview") for i in range(30)]
    rows += [(1, "two", "a", start, "click"), (1, "two", "b", start + timedelta(hours=2), "click")]
    payloads = spark.createDataFrame(
        rows,
        "client_id long, user_id string, payload_id string, event_time timestamp, "
        "event_type string",
    )
    hours = [f"2026-11-20T{h:02d}" for h in range(12)]

    found = {
        (r["user_id"], r["session_hour"]): (r["payload_count"], r["pageviews"])
        for r in plain_sessions(payloads, hours).collect()
    }

    assert found == {
        ("long", "2026-11-20T00"): (30, 30),
        ("two", "2026-11-20T00"): (1, 0),
        ("two", "2026-11-20T02"): (1, 0),
    }


def test_a_release_breakdown_adds_up_to_its_wall_time():
    """Each part of the breakdown comes from the runs' records, and the parts add up to the
    command's wall time: the Spark start (run metadata) is taken out of the step it
    happened in, the rest of each run's steps is its layer's."""
    import dagster as dg

    from backfill_assets.core.spark.session import (
        DRIVER_PEAK_BYTES,
        SPARK_JOBS,
        SPARK_START_SECONDS,
        SPARK_STARTED_AT,
        SPARK_TASK_SECONDS,
    )
    from backfill_assets_dev.cli.bench_release import (
        ReleaseTimes,
        breakdown,
        breakdown_table,
        read_run,
        run_lines,
    )

    @dg.asset(name="raw_shadow")
    def raw(context: dg.AssetExecutionContext) -> None:
        import time

        began = time.time()
        time.sleep(0.2)  # the "Spark start" the metadata reports (work to measure, not a wait)
        context.add_output_metadata(
            {
                SPARK_STARTED_AT: began,
                SPARK_START_SECONDS: 0.2,
                SPARK_TASK_SECONDS: 1.5,
                SPARK_JOBS: 7,
                DRIVER_PEAK_BYTES: 3 * 2**29,
            }
        )

    @dg.asset(key=["release", "publish"], deps=[raw])
    def publish() -> None:
        pass

    with dg.DagsterInstance.ephemeral() as instance:
        ids = [
            dg.materialize([asset], instance=instance, selection=[asset]).run_id
            for asset in (raw, publish)
        ]
        records = {r.dagster_run.run_id: r for r in instance.get_run_records()}
        runs = [read_run(instance, records[i]) for i in ids]
        events = [len(instance.all_logs(i)) for i in ids]

    release = ReleaseTimes(
        "b", "COMPLETED_SUCCESS", runs[0].created - 5, runs[0].created - 2, runs[1].ended + 3, runs
    )
    parts = dict(breakdown(release))

    assert abs(sum(parts.values()) - release.wall) < 1e-6
    assert parts["before the submission (command, estimate, GraphQL)"] == 3
    assert abs(parts["after the last run (backfill marked done, daemon stop)"] - 3) < 1e-6
    assert parts["Spark starts (JVM, context, session)"] == 0.2
    raw_step = runs[0].steps["raw_shadow"]
    assert parts["raw steps (Spark jobs, events, metastore)"] == raw_step[1] - raw_step[0] - 0.2
    assert parts["publish steps (Spark jobs, events, metastore)"] > 0
    assert runs[0].spark_task_seconds == 1.5 and runs[1].spark_start is None
    # the Spark jobs (actions) of each run, a column of the runs' lines
    header, first, second = run_lines(release)
    jobs = header.split().index("jobs")
    assert [runs[0].spark_jobs, runs[1].spark_jobs] == [7, 0]
    assert (first.split()[jobs], second.split()[jobs]) == ("7", "0")
    assert [r.events for r in runs] == events
    # the driver's peak memory: the largest run's, in the table
    assert runs[0].driver_peak_bytes == 3 * 2**29 and runs[1].driver_peak_bytes == 0
    [peak] = [line for line in breakdown_table([release]) if line.startswith("driver peak")]
    assert peak.split()[-2:] == ["1536", "1536"]


def test_a_run_queued_while_the_previous_one_ran_waits_in_the_queue_only():
    """The backfill daemon may queue the next run before the previous one ends (the run
    queue holds one run at a time): its wait is the queue's, from that end, not a negative
    daemon wait."""
    from backfill_assets_dev.cli.bench_release import ReleaseTimes, RunTimes, breakdown

    first = RunTimes("a", "SUCCESS", created=110, launched=112, started=120, ended=200)
    second = RunTimes("b", "SUCCESS", created=150, launched=203, started=210, ended=230)
    release = ReleaseTimes("x", "COMPLETED_SUCCESS", 90, 100, 260, [first, second])

    parts = dict(breakdown(release))

    assert parts["backfill daemon: submission / previous run's end -> run created"] == 10
    assert parts["run queue: created (or previous run's end) -> launched"] == 2 + 3
    assert parts["run process start (Python, Dagster, code location)"] == 8 + 7
    assert parts["in runs outside steps (resources, run events)"] == 80 + 20  # no steps here
    assert sum(parts.values()) == release.wall == 170


def test_the_local_instance_launches_a_queued_run_within_a_second(tmp_path):
    """The run queue's daemon looks at the queue every second (Dagster's default: 5 s), so
    no run of a release waits seconds in the queue for nothing."""
    import shutil

    import dagster as dg

    from backfill_assets.settings import PROJECT_ROOT

    shutil.copyfile(PROJECT_ROOT / "deploy" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 1
