"""``backfill-assets bench``: measure a backfill's throughput on generated data.

Performance is measured here, not in timed tests. The benchmark generates a backup tree
(``--payloads`` approximately, deterministic), backfills every layer over it in a
scratch ``DATA_ROOT`` and ``DAGSTER_HOME`` (never the configured ones), in the runs
Dagster's backfill makes of a release, and prints, per layer, hours, seconds and rows per
second, the release's wall-clock time, plus the generator's own speed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from backfill_assets.cli.main import CommandError

START = "2026-11-20T00"
TINY_START = "2026-10-01T00"
MEMORY_SHORT_HOURS = 24  # the short range the driver memory of the fixed-cost range is held to
# The driver heap of both ranges' probes: an eighth of the configured 4g, near Spark's
# floor (450 MB); a driver whose needs grew with the hours would run out in the long range.
PROBE_DRIVER_MEMORY = "512m"


@dataclass
class LayerTiming:
    layer: str
    hours: int
    seconds: float
    success: bool
    failures: list[str]


def run_project(
    defs, instance, ranges: list[tuple[str, str, str]], extra_tags: dict[str, str] | None = None
) -> tuple[list[LayerTiming], float]:
    """The project's release over ``ranges`` in the runs Dagster's backfill makes of it (the
    received-hour layers in one run, the session layer in another, then the publish step),
    in this process (``launch.execute_in_process``: the same assets, checks and publish
    transaction, without the daemon's iterations). Returns each layer's time (its steps,
    from the run's event log) and the release's wall-clock seconds."""
    import uuid

    from backfill_assets import launch
    from backfill_assets.partitions import hour_range

    # The runs of ``launch.release_stages``, except that the session layer keeps the bench's
    # range (the hours the plain job builds), not the release's wider window.
    received = [r for r in ranges if r[0] in launch.RECEIVED_HOUR_LAYERS]
    stages: list[launch.Stage] = []
    if received:
        stages.append(([layer for layer, _, _ in received], received[0][1], received[0][2]))
    stages += [([r[0]], r[1], r[2]) for r in ranges if r not in received]
    stages.append(([], None, None))  # the publish step
    started = time.monotonic()
    runs = launch.execute_in_process(
        defs,
        instance,
        stages,
        release_id=f"bench-{uuid.uuid4().hex[:8]}",
        run_tags={**launch.request_tags(dry_run=False, reason="benchmark"), **(extra_tags or {})},
    )
    wall = time.monotonic() - started
    hours = {layer: len(hour_range(first, last)) for layer, first, last in ranges}
    timings = []
    for (layers, _, _), run in zip(stages, runs, strict=False):
        for layer, seconds in layer_seconds(instance, run.run_id, layers or ["publish"]):
            timings.append(
                LayerTiming(layer, hours.get(layer, 0), seconds, run.success, run.failures)
            )
    return timings, wall


def layer_seconds(instance, run_id: str, layers: list[str]) -> list[tuple[str, float]]:
    """Each layer's share of a run, in order: from the end of the previous layer's steps
    (the run's start for the first) to the end of its own (the run's end for the last).
    A layer's steps are named after it (``raw_shadow``, ``raw_checks``)."""
    import dagster as dg

    kinds = {
        dg.DagsterEventType.RUN_START,
        dg.DagsterEventType.STEP_SUCCESS,
        dg.DagsterEventType.STEP_FAILURE,
        dg.DagsterEventType.RUN_SUCCESS,
        dg.DagsterEventType.RUN_FAILURE,
    }
    records = instance.all_logs(run_id, of_type=kinds)
    begin = min(r.timestamp for r in records)
    end = max(r.timestamp for r in records)
    result = []
    for i, layer in enumerate(layers):
        ends = [r.timestamp for r in records if (r.step_key or "").startswith(f"{layer}_")]
        until = end if i == len(layers) - 1 or not ends else max(ends)
        result.append((layer, max(until - begin, 0.0)))
        begin = until
    return result


def bench_ranges(layers: list[str], start: str, hours: int) -> list[tuple[str, str, str]]:
    from backfill_assets.partitions import shift_hour

    last = shift_hour(start, hours - 1)
    return [
        (layer, start, last)
        if layer != "aggregated"
        else (layer, shift_hour(start, 3), shift_hour(last, -3))
        for layer in layers
    ]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark generation and a full backfill on generated data",
        description=__doc__,
    )
    p.add_argument(
        "--payloads",
        type=int,
        default=200_000,
        help="approximate number of payloads to generate, per round (default 200000)",
    )
    p.add_argument("--hours", type=int, default=24, help="hours of backups (default 24)")
    p.add_argument("--clients", type=int, default=8, help="clients (default 8)")
    p.add_argument("--layers", default=None, help="comma-separated layers (default: all)")
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    p.add_argument(
        "--compare",
        action="store_true",
        help="also run a plain PySpark job of the same three layers and print the ratio",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --compare: compare on as many days of their own, one after the other "
        "(the tree holds --hours x ROUNDS hours; each round runs the plain job, then the "
        "project's release, over its own hours) and print each round's ratio and their "
        "median (default 1)",
    )
    p.add_argument(
        "--fixed-cost-hours",
        type=int,
        default=None,
        help="backfill this many hours of tiny data and print seconds per partition-hour "
        "(default 168 with --compare, else 0 = skip)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.payloads < 1000 or args.hours < 8 or args.clients < 1:
        raise CommandError("need --payloads >= 1000, --hours >= 8 and --clients >= 1")
    if args.rounds < 1 or (args.rounds > 1 and not args.compare):
        raise CommandError("--rounds N (N >= 1) repeats the comparison: it needs --compare")
    from backfill_assets.definitions import build_definitions
    from backfill_assets.generator import generate_backups
    from backfill_assets.launch import LAYERS, validate_layers
    from backfill_assets.partitions import shift_hour
    from backfill_assets.settings import Settings

    layers = validate_layers(args.layers.split(",") if args.layers else LAYERS)
    fixed_hours = args.fixed_cost_hours
    if fixed_hours is None:
        fixed_hours = 168 if args.compare else 0
    if args.compare and list(layers) != list(LAYERS):
        raise CommandError("--compare runs all three layers; drop --layers")
    rounds = args.rounds
    with tempfile.TemporaryDirectory(prefix="backfill-bench-") as scratch:
        root = Path(args.keep or scratch)
        # The generator's default shape yields about one payload per user and hour.
        users = max(1, round(args.payloads / (args.clients * args.hours * 1.04)))
        started = time.monotonic()
        summary = generate_backups(
            root / "backups",
            start=START,
            hours=args.hours * rounds,
            clients=args.clients,
            users_per_client=users,
            seed=1,
            write_truth=False,
            force=True,
        )
        generated = time.monotonic() - started
        print(
            f"generate: {summary.payloads:,} payloads, {summary.lines:,} lines, "
            f"{summary.files} files, {summary.bytes / 1e6:,.1f} MB in {generated:.1f}s "
            f"({summary.lines / generated:,.0f} lines/s)"
        )
        settings = Settings.from_env(
            {
                "BACKUP_ROOT": str(root / "backups"),
                "DATA_ROOT": str(root / "data"),
                "DAGSTER_HOME": str(root / "dagster_home"),
            }
        )
        import dagster as dg

        (root / "dagster_home").mkdir(parents=True, exist_ok=True)
        spark = None
        if args.compare:
            from backfill_assets.resources.spark import spark_session

            # The session is started before anything is timed: its JVM, and its metastore
            # client (the embedded Derby metastore boots on the first catalog call, ~2 s):
            # a run pays both once whatever its range, and the plain job needs neither.
            spark = spark_session(settings)
            spark.range(1).count()
            spark.catalog.listDatabases()
        ok = True
        compared: list[tuple[float, float]] = []  # (plain, project) seconds of each round
        with dg.DagsterInstance.local_temp(
            str(root / "dagster_home"), overrides={"telemetry": {"enabled": False}}
        ) as inst:
            defs = build_definitions(settings)
            for number in range(rounds):
                first = shift_hour(START, number * args.hours)
                ranges = bench_ranges(layers, first, args.hours)
                if rounds > 1:
                    last = shift_hour(first, args.hours - 1)
                    print(f"round {number + 1} of {rounds}: hours {first}..{last}")
                lines = summary.lines if rounds == 1 else _lines(root / "backups", ranges)
                plain = None
                if spark is not None:
                    plain = _plain(spark, root, root / f"plain-{number + 1}", ranges)
                runs, wall = run_project(defs, inst, ranges)
                ok = ok and all(r.success for r in runs) and len(runs) == len(ranges) + 1
                _print_release(runs, wall, lines)
                if plain is not None:
                    _print_compare(plain, runs, wall, lines)
                    compared.append((plain.total, wall))
            if rounds > 1:
                _print_rounds(compared)
            if fixed_hours:
                ok = _fixed_cost(root, inst, fixed_hours) and ok
        return 0 if ok else 1


def _lines(backups: Path, ranges: list[tuple[str, str, str]]) -> int:
    """The backup lines of the received hours of ``ranges`` (their manifests' records)."""
    from backfill_assets.backups.inventory import take_inventory
    from backfill_assets.partitions import hour_range
    from backfill_assets.resources.backup_store import LocalBackupStore

    raw = next(r for r in ranges if r[0] == "raw")
    inventory = take_inventory(LocalBackupStore(root=str(backups)), hour_range(raw[1], raw[2]))
    return sum(hour.expected_records for hour in inventory.values())


def _plain(spark, root: Path, out: Path, ranges: list[tuple[str, str, str]]):
    """The plain job over the hours of ``ranges`` (what the project's release builds),
    written under ``out`` (a folder of its own each round: the profile's overwrites are
    per partition, and the plain job reads back all it wrote)."""
    from backfill_assets.cli.bench_plain import run_plain
    from backfill_assets.partitions import hour_range

    raw = next(r for r in ranges if r[0] == "raw")
    aggregated = next(r for r in ranges if r[0] == "aggregated")
    return run_plain(
        spark,
        str((root / "backups").resolve()),
        str(out.resolve()),
        hour_range(aggregated[1], aggregated[2]),
        hours=hour_range(raw[1], raw[2]),
    )


def _print_release(runs: list[LayerTiming], wall: float, lines: int) -> None:
    print(f"{'layer':<12} {'hours':>5} {'seconds':>8} {'payloads/s (lines read)':>24}  result")
    for r in runs:
        shown = f"{lines / r.seconds:,.0f}" if r.layer == "raw" else "-"
        print(
            f"{r.layer:<12} {r.hours:>5} {r.seconds:>8.1f} {shown:>24}  "
            f"{'ok' if r.success else 'FAILED: ' + '; '.join(r.failures)}"
        )
    print(f"release: {wall:.1f}s wall-clock, {sum(r.seconds for r in runs):.1f}s in its runs")


def _print_compare(plain, runs: list[LayerTiming], wall: float, lines: int) -> None:
    project = {r.layer: r.seconds for r in runs}
    print("compare (same tree, same session; seconds):")
    print(f"{'layer':<12} {'plain':>8} {'project':>8} {'ratio':>6}")
    for layer, seconds in (
        ("raw", plain.raw),
        ("transformed", plain.transformed),
        ("aggregated", plain.aggregated),
        ("total", plain.total),
    ):
        # the total is the whole release, the creation of its runs included
        mine = wall if layer == "total" else project.get(layer, float("nan"))
        print(f"{layer:<12} {seconds:>8.1f} {mine:>8.1f} {mine / seconds:>6.2f}")
    print(
        f"plain raw: {lines / plain.raw:,.0f} lines/s; "
        f"project raw: {lines / project.get('raw', float('nan')):,.0f} lines/s"
    )


def _print_rounds(compared: list[tuple[float, float]]) -> None:
    """Each round's totals and ratio, and the median ratio: the two jobs of a round run
    one after the other, so a slower spell of the machine weighs on both."""
    import statistics

    ratios = [project / plain for plain, project in compared]
    print(f"{'round':<6} {'plain':>8} {'project':>8} {'ratio':>6}")
    for number, ((plain, project), ratio) in enumerate(zip(compared, ratios, strict=True), 1):
        print(f"{number:<6} {plain:>8.1f} {project:>8.1f} {ratio:>6.2f}")
    print(f"median ratio of {len(ratios)} rounds: {statistics.median(ratios):.2f}")


@dataclass(frozen=True)
class DriverMemory:
    """What a release needed of the driver's memory (both processes of a local session)."""

    python_peak_mb: float  # this Python process's peak resident set so far (ru_maxrss)
    jvm_old_peak_mb: float  # peak of the JVM heap's old generation during the release
    jvm_retained_mb: float  # JVM heap in use after full collections once it ended


def _old_generation(pool) -> bool:
    return any(word in pool.getName() for word in ("Old", "Tenured"))


def live_heap_bytes(spark) -> int:
    """The JVM heap in use after full collections, once it stops falling: Python's own
    references to JVM objects are released first (a py4j proxy pins its object until
    Python collects it), and a collection that ran while they still held is repeated."""
    import gc

    jvm = spark.sparkContext._jvm
    memory = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
    used = None
    for _ in range(5):
        gc.collect()
        jvm.java.lang.System.gc()
        before, used = used, memory.getHeapMemoryUsage().getUsed()
        if before is not None and used >= before - 2**20:
            break
    return used


def measure_driver_memory(spark, release) -> tuple[object, DriverMemory]:
    """Run ``release()`` and measure the driver's memory: the Python process's peak RSS,
    the JVM's old-generation peak (reset before) and its live heap after (``live_heap_bytes``)."""
    import resource

    jvm = spark.sparkContext._jvm
    management = jvm.java.lang.management.ManagementFactory
    heap = [p for p in management.getMemoryPoolMXBeans() if p.getType().name() == "HEAP"]
    live_heap_bytes(spark)
    for pool in heap:
        pool.resetPeakUsage()
    result = release()
    old_peak = sum(p.getPeakUsage().getUsed() for p in heap if _old_generation(p))
    retained = live_heap_bytes(spark)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    return result, DriverMemory(
        round(peak_kb / 1024, 1), round(old_peak / 2**20, 1), round(retained / 2**20, 1)
    )


def tiny_tags() -> dict[str, str]:
    """Run tags of a release over the tiny tree: two users leave most hours without a backup
    folder; read as empty (declared so), they go through every step as the others do, and
    no hour is held back."""
    from backfill_assets import tags

    return {tags.ALLOW_MISSING_HOURS: "true"}


def probe_memory(
    backups: Path, work: Path, hours: int, driver_memory: str = PROBE_DRIVER_MEMORY
) -> dict:
    """A release of ``hours`` hours of the tiny tree from ``TINY_START`` in a driver of its
    own (``bench_probe``) with a heap of ``driver_memory``: its outcome and driver memory,
    as that module prints them."""
    import json
    import shutil
    import subprocess
    import sys

    shutil.rmtree(work, ignore_errors=True)
    command = [sys.executable, "-m", "backfill_assets.cli.bench_probe"]
    done = subprocess.run(
        [*command, str(backups), str(work), TINY_START, str(hours), driver_memory],
        capture_output=True,
        text=True,
        check=False,
    )
    printed = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not printed:
        tail = " | ".join((done.stderr + done.stdout).strip().splitlines()[-5:])
        raise CommandError(f"the driver-memory probe of {hours} hours failed: {tail}")
    return json.loads(printed[-1])


MEMORY_MEASURES = (  # (probe field, column heading)
    ("python_peak_mb", "python peak"),
    ("jvm_old_peak_mb", "jvm old-gen peak"),
    ("jvm_retained_mb", "jvm retained"),
    ("jvm_rss_peak_mb", "jvm peak rss"),
)


def _mb(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _growth(probes: list[dict], measure: str, added: int) -> float | None:
    """MB more per hour more, from the short range's probe to the long one's."""
    short, long = probes[0][measure], probes[1][measure]
    return None if short is None or long is None else (long - short) / added


def _fixed_cost(root: Path, instance, hours: int) -> bool:
    """Backfill every layer over ``hours`` of tiny data: seconds per partition-hour (in this
    process, warm, as the day's release). Then the driver memory of that range and of its
    first 24 hours, each in a driver of its own (``bench_probe``): flat in the number of
    hours when the long range needs no more than the short one."""
    from backfill_assets.definitions import build_definitions
    from backfill_assets.generator import generate_backups
    from backfill_assets.launch import LAYERS
    from backfill_assets.settings import Settings

    generate_backups(
        root / "tiny",
        start=TINY_START,
        hours=hours,
        clients=1,
        users_per_client=2,
        seed=2,
        write_truth=False,
        force=True,
    )
    settings = Settings.from_env(
        {
            "BACKUP_ROOT": str(root / "tiny"),
            "DATA_ROOT": str(root / "data"),
            "DAGSTER_HOME": str(root / "dagster_home"),
        }
    )
    defs = build_definitions(settings)
    ranges = bench_ranges(list(LAYERS), TINY_START, hours)
    runs, seconds = run_project(defs, instance, ranges, tiny_tags())
    partition_hours = sum(r.hours for r in runs)
    detail = ", ".join(f"{r.layer} {r.seconds:.1f}s/{r.hours}h" for r in runs)
    print(
        f"fixed cost: {hours} hours of tiny data, {partition_hours} partition-hours in "
        f"{seconds:.1f}s = {seconds / max(partition_hours, 1):.2f} s per partition-hour ({detail})"
    )
    short = min(hours, MEMORY_SHORT_HOURS)
    probes = [probe_memory(root / "tiny", root / f"probe-{n}h", n) for n in (short, hours)]
    print(
        f"driver memory (MB), each range a release in a driver of its own "
        f"(heap {PROBE_DRIVER_MEMORY}):"
    )
    print(f"{'range':<10} {'hours':>5} " + " ".join(f"{h:>17}" for _, h in MEMORY_MEASURES))
    for label, probe in zip(("short", "long"), probes, strict=True):
        cells = " ".join(f"{_mb(probe[f]):>17}" for f, _ in MEMORY_MEASURES)
        print(f"{label:<10} {probe['hours']:>5} {cells}")
    added = probes[1]["hours"] - probes[0]["hours"]
    if added > 0:
        slopes = " ".join(f"{_mb(_growth(probes, f, added), 3):>17}" for f, _ in MEMORY_MEASURES)
        print(f"{'per hour':<10} {'+1':>5} {slopes}")
    for r in runs:
        if not r.success:
            print(f"FAILED: {r.layer} {r.hours}h: {'; '.join(r.failures) or 'hours held back'}")
    for probe in probes:
        if not probe["success"]:
            print(f"FAILED: the driver-memory probe of {probe['hours']} hours")
    return (
        all(r.success for r in runs)
        and len(runs) == len(ranges) + 1
        and all(p["success"] for p in probes)
    )
