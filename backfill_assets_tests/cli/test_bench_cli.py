"""The benchmark command: its shape checks, driver memory (in this process and in a
driver of its own) and each layer's share of a run."""

import pytest

from backfill_assets.cli.main import main


@pytest.mark.parametrize("args", [["--payloads", "10"], ["--hours", "2"], ["--clients", "0"]])
def test_bench_rejects_shapes_too_small_to_measure(args: list[str], capsys):
    assert main(["bench", *args]) == 2
    assert "need --payloads >= 1000" in capsys.readouterr().err


def test_rounds_repeat_the_comparison_only(capsys):
    assert main(["bench", "--rounds", "2"]) == 2
    assert "--rounds N (N >= 1) repeats the comparison" in capsys.readouterr().err
    assert main(["bench", "--compare", "--rounds", "0"]) == 2


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


def test_a_run_of_two_layers_is_split_at_the_end_of_the_first_layers_steps():
    import dagster as dg

    from backfill_assets.cli.bench import layer_seconds

    @dg.op
    def raw_shadow() -> int:
        return 1

    @dg.op
    def raw_checks(value: int) -> int:
        return value

    @dg.op
    def transformed_shadow(value: int) -> int:
        return value

    @dg.job
    def release():
        transformed_shadow(raw_checks(raw_shadow()))

    with dg.DagsterInstance.ephemeral() as instance:
        run_id = release.execute_in_process(instance=instance).run_id
        split = layer_seconds(instance, run_id, ["raw", "transformed"])
        records = instance.all_logs(run_id)

    def at(kind: dg.DagsterEventType, step: str | None = None) -> float:
        return next(
            r.timestamp for r in records if r.dagster_event_type == kind and r.step_key == step
        )

    started, ended = at(dg.DagsterEventType.RUN_START), at(dg.DagsterEventType.RUN_SUCCESS)
    assert [layer for layer, _ in split] == ["raw", "transformed"]
    # raw ends with its last step (the checks), transformed takes the rest of the run
    assert split[0][1] == at(dg.DagsterEventType.STEP_SUCCESS, "raw_checks") - started
    assert abs(sum(seconds for _, seconds in split) - (ended - started)) < 1e-6
    assert all(seconds > 0 for _, seconds in split)


def test_the_plain_job_parses_each_line_once(spark, make_backups, capsys):
    """The yardstick is written for speed: Spark's JSON source parses each line in its scan,
    and no filter re-parses it. (A filter on the fields of a ``from_json`` projection is
    pushed below it as one pruned ``from_json`` per field it reads: the job did that, and
    parsed every line nine times.)"""
    import json

    from backfill_assets.cli.bench_plain import _raw

    root = make_backups(hours=1, clients=1, malformed_rate=0.0, write_truth=False)
    lines = sum(json.loads(m.read_text())["records"] for m in root.glob("raw/*/*/*/_MANIFEST.json"))
    raw = _raw(spark, str(root))
    raw.explain()
    plan = capsys.readouterr().out
    assert "from_json" not in plan and "FileScan json" in plan
    assert raw.count() == lines > 0  # every line (all valid), once


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["b", "w", "2026-10-01T00"],
        ["b", "w", "2026-10-01T00", "x"],
        ["b", "w", "2026-10-01T00", "8", "512m --conf x"],
    ],
)
def test_the_probe_names_its_arguments_when_they_are_wrong(args: list[str], capsys):
    from backfill_assets.cli.bench_probe import main as probe

    assert probe(args) == 2
    assert "usage: python -m backfill_assets.cli.bench_probe" in capsys.readouterr().err


def test_a_range_is_measured_in_a_driver_of_its_own(tmp_path):
    """The bench's driver-memory probe: a new Python process and Spark JVM, its heap capped
    as asked, run a release of every layer over the range and report what it needed."""
    from backfill_assets.cli.bench import TINY_START, probe_memory
    from backfill_assets.generator import generate_backups

    backups = tmp_path / "tiny"
    generate_backups(
        backups, start=TINY_START, hours=8, clients=1, users_per_client=2, seed=2, workers=1
    )

    probe = probe_memory(backups, tmp_path / "probe", 8, driver_memory="512m")

    assert probe["success"] and probe["hours"] == 8
    assert probe["driver_memory"] == "512m"  # the JVM was started for the probe, capped
    assert 0 < probe["jvm_retained_mb"] <= probe["jvm_old_peak_mb"] + 512 <= 1024
    assert probe["python_peak_mb"] > 0
    assert probe["jvm_rss_peak_mb"] is None or probe["jvm_rss_peak_mb"] > probe["jvm_retained_mb"]
    assert (tmp_path / "probe" / "data").is_dir()  # its own DATA_ROOT, not the suite's


def test_the_plain_job_of_a_round_reads_the_hours_of_its_round_only(spark, make_backups):
    """``bench --rounds``: each round's plain job reads its own hours of the tree, as the
    project's release of that round does."""
    import json

    from backfill_assets.cli.bench_plain import _raw

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
