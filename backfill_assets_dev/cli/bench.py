"""``backfill-assets bench``: how long an operator's release takes, and where the time goes.

The benchmark generates a backup tree (``--payloads`` approximately, ``--hours`` from
``START``, deterministic) and times what an operator runs: ``backfill-assets backfill``
over every hour of it (all layers, one publish), a process of its own from its start to its
exit, through Dagster's real asset backfill, daemon, run queue and run processes, in a
scratch ``DATA_ROOT`` and ``DAGSTER_HOME`` (never the configured ones; the first round
creates the warehouse, the later ones repair it). The partitions start at the tree's first
hour and run up to now, as in a deployment. With ``--compare`` it alternates those
releases with a plain PySpark job of the
same three layers, in a process of its own too (``bench_plain``), on the same tree:
``--rounds N`` rounds, the plain job first in odd rounds and the release first in even ones,
and prints each round's ratio, the medians, and where the release's time went
(``bench_release``: daemon and queue waits, process and Spark starts, each layer's steps,
the publish, Dagster events). ``--fixed-cost-hours H`` then times as many releases of ``H``
hours of tiny data: the fixed cost an operator pays for any repair.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from backfill_assets.cli.main import CommandError

START = "2026-11-20T00"
TINY_START = "2026-10-01T00"
TINY_USERS = 20  # about 36 lines an hour: every hour has a backup folder


@dataclass(frozen=True)
class Timed:
    """A command timed from its process's start to its exit (epoch seconds)."""

    began: float
    exited: float
    returncode: int
    output: str

    @property
    def seconds(self) -> float:
        return self.exited - self.began


def bench_env(backups: Path, data: Path, home: Path, first: str) -> dict[str, str]:
    """The environment of a timed command: scratch locations, the partitions from the
    tree's first hour up to now (as an operator's deployment: the session hours past the
    tree are built and published provisional), the reconciliation sensor off (nothing but
    the release runs)."""
    env = {k: v for k, v in os.environ.items() if k != "BACKFILL_PARTITIONS_END"}
    return {
        **env,
        "BACKUP_ROOT": str(backups),
        "DATA_ROOT": str(data),
        "DAGSTER_HOME": str(home),
        "BACKFILL_PARTITIONS_START": first,
        "BACKFILL_RECONCILE_SENSOR": "off",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }


def timed(command: list[str], env: dict[str, str], log: Path) -> Timed:
    """Run ``command`` to its end, its output into ``log``; stop its process group if this
    process is interrupted."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        began = time.time()
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode = process.wait()
        except BaseException:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
            raise
        exited = time.time()
    return Timed(began, exited, returncode, log.read_text())


def release_command(first: str, last: str) -> list[str]:
    """What an operator types: a release of every layer over ``first..last``, published."""
    cli = Path(sys.executable).with_name("backfill-assets")
    return [
        str(cli),
        "backfill",
        "--from",
        first,
        "--to",
        last,
        "--allow-missing-hours",
        "--reason",
        "benchmark",
    ]


def plain_command(backups: Path, out: Path, first: str, last: str) -> list[str]:
    module = "backfill_assets_dev.cli.bench_plain"
    return [sys.executable, "-m", module, str(backups), str(out), first, last]


def _tail(done: Timed) -> str:
    return " | ".join(done.output.strip().splitlines()[-5:])


def run_release(root: Path, backups: Path, home: Path, name: str, first: str, hours: int):
    """One timed ``backfill-assets backfill`` over ``hours`` hours from ``first``; its
    ``ReleaseTimes`` read back from the instance. The rounds of a tree share its
    ``DATA_ROOT`` (``data`` beside ``home``): the first release creates the warehouse and
    its metastore, the later ones repair a live warehouse, as an operator's do."""
    import dagster as dg

    from backfill_assets.core.hours import shift_hour
    from backfill_assets_dev.cli.bench_release import read_release

    env = bench_env(backups, home.with_name(f"{home.name}_data"), home, first)
    done = timed(release_command(first, shift_hour(first, hours - 1)), env, root / f"{name}.log")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        release = read_release(instance, done.began, done.exited)
    if done.returncode != 0:
        print(f"release {name} FAILED (exit {done.returncode}): {_tail(done)}")
    return release, done.returncode == 0


def run_plain_process(root: Path, backups: Path, name: str, first: str, hours: int) -> Timed:
    from backfill_assets.core.hours import shift_hour

    last = shift_hour(first, hours - 1)
    env = bench_env(backups, root / f"plain-{name}" / "data", root / f"plain-{name}", first)
    done = timed(
        plain_command(backups, root / f"plain-{name}", first, last), env, root / f"plain-{name}.log"
    )
    if done.returncode != 0:
        raise CommandError(f"the plain job of round {name} failed: {_tail(done)}")
    return done


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="time an operator's release on generated data (and a plain PySpark job)",
        description=__doc__,
    )
    p.add_argument(
        "--payloads",
        type=int,
        default=200_000,
        help="approximate number of payloads to generate (default 200000)",
    )
    p.add_argument("--hours", type=int, default=24, help="hours of backups (default 24)")
    p.add_argument("--clients", type=int, default=8, help="clients (default 8)")
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    p.add_argument(
        "--compare",
        action="store_true",
        help="alternate the release with a plain PySpark job of the same three layers, each "
        "in a process of its own, and print the ratios",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="releases (with --compare: release and plain job pairs, alternating which goes "
        "first) to time; the medians are printed (default 1)",
    )
    p.add_argument(
        "--fixed-cost-hours",
        type=int,
        default=None,
        help="also time --rounds releases of this many hours of tiny data (default 1 with "
        "--compare, else 0 = skip)",
    )
    p.add_argument(
        "--fixed-cost-only",
        action="store_true",
        help="time only the releases of tiny data (no generated day)",
    )
    p.add_argument(
        "--newest",
        action="store_true",
        help=f"the generated hours end at the newest complete hour (a repair of the latest "
        f"hours: the session hours are the hours themselves, no window reaches past the "
        f"partitions) instead of starting at {START}",
    )
    p.add_argument(
        "--curve",
        metavar="HOURS",
        help="instead of the day: one release of each length (e.g. 1,24,168 hours) at the "
        "payloads per hour of --payloads/--hours; prints seconds per million payloads and "
        "the driver's peak memory of each (bench_curve)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.payloads < 1000 or args.hours < 8 or args.clients < 1:
        raise CommandError("need --payloads >= 1000, --hours >= 8 and --clients >= 1")
    if args.rounds < 1:
        raise CommandError("--rounds N: N >= 1 releases (or comparisons) to time")
    fixed_hours = args.fixed_cost_hours
    if fixed_hours is None:
        fixed_hours = 1 if args.compare or args.fixed_cost_only else 0
    if args.fixed_cost_only and fixed_hours < 1:
        raise CommandError("--fixed-cost-only needs --fixed-cost-hours >= 1")
    if args.curve is not None:
        from backfill_assets_dev.cli.bench_curve import parse_lengths

        parse_lengths(args.curve)  # refused before anything is generated
    with tempfile.TemporaryDirectory(prefix="backfill-bench-") as scratch:
        root = Path(args.keep or scratch).resolve()
        ok = True
        if args.curve is not None:
            from backfill_assets_dev.cli.bench_curve import curve

            return 0 if curve(root, args, measure_length) else 1
        if not args.fixed_cost_only:
            ok = _day(args, root) and ok
        if fixed_hours:
            ok = _fixed_cost(root, fixed_hours, args.rounds) and ok
        return 0 if ok else 1


def generate_tree(root: Path, args: argparse.Namespace, start: str = START):
    """The benchmark's backup tree under ``root/backups``: about ``args.payloads`` payloads
    over ``args.hours`` hours and ``args.clients`` clients, deterministic (seed 1)."""
    from backfill_assets_dev.generator import generate_backups

    # The generator's default shape yields about one payload per user and hour.
    users = max(1, round(args.payloads / (args.clients * args.hours * 1.04)))
    return generate_backups(
        root / "backups",
        start=start,
        hours=args.hours,
        clients=args.clients,
        users_per_client=users,
        seed=1,
        write_truth=False,
        force=True,
    )


def measure_length(root: Path, hours: int, payloads: int, clients: int):
    """A tree of ``hours`` hours from ``START`` with about ``payloads`` payloads under
    ``root`` and one timed release of all of it: (the distinct payloads the tree holds, its
    ``ReleaseTimes``, ok)."""
    shape = argparse.Namespace(payloads=payloads, hours=hours, clients=clients)
    summary = generate_tree(root, shape, START)
    release, ok = run_release(root, root / "backups", root / "dagster_home", "1", START, hours)
    return summary.payloads_in_tree, release, ok


def newest_start(hours: int) -> str:
    """The first of the ``hours`` hours ending at the newest complete hour (UTC)."""
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return (now - timedelta(hours=hours)).strftime("%Y-%m-%dT%H")


def _day(args: argparse.Namespace, root: Path) -> bool:
    """The generated day's releases (alternating with the plain job with ``--compare``)."""
    start = newest_start(args.hours) if args.newest else START
    started = time.monotonic()
    summary = generate_tree(root, args, start)
    generated = time.monotonic() - started
    print(
        f"generate: {summary.payloads:,} payloads, {summary.lines:,} lines, "
        f"{summary.files} files, {summary.bytes / 1e6:,.1f} MB in {generated:.1f}s "
        f"({summary.lines / generated:,.0f} lines/s)"
    )
    backups, home = root / "backups", root / "dagster_home"
    releases, plains, ok = [], [], True
    for number in range(1, args.rounds + 1):
        plain_first = args.compare and number % 2 == 1
        if plain_first:
            plains.append(run_plain_process(root, backups, str(number), start, args.hours))
        release, success = run_release(root, backups, home, str(number), start, args.hours)
        releases.append(release)
        ok = ok and success
        if args.compare and not plain_first:
            plains.append(run_plain_process(root, backups, str(number), start, args.hours))
        line = f"round {number}: release {release.wall:.1f}s"
        if args.compare:
            plain = plains[-1]
            line += f", plain job {plain.seconds:.1f}s, ratio {release.wall / plain.seconds:.2f}"
            line += " (plain first)" if plain_first else " (release first)"
        print(line, flush=True)
    title = f"{args.hours} h, {summary.lines:,} lines, {args.clients} clients"
    _report(title, releases, plains, summary.lines)
    return ok


def _report(title: str, releases: list, plains: list[Timed], lines: int | None = None) -> None:
    from backfill_assets_dev.cli.bench_release import breakdown_table, run_lines

    walls = [r.wall for r in releases]
    print(f"\n== release of {title}: {len(releases)} round(s)")
    print(
        f"release (backfill-assets backfill, start to exit): median {statistics.median(walls):.1f}s"
    )
    if plains:
        ratios = [r.wall / p.seconds for r, p in zip(releases, plains, strict=True)]
        plain = statistics.median(p.seconds for p in plains)
        print(f"plain job (its own process, start to exit): median {plain:.1f}s")
        print(
            f"ratio release / plain: median {statistics.median(ratios):.2f} "
            f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})"
        )
        parts = [json.loads(p.output.strip().splitlines()[-1]) for p in plains]
        inside = {
            k: statistics.median(x[k] for x in parts) for k in ("raw", "transformed", "aggregated")
        }
        print(
            "plain job inside its process (median s): "
            + ", ".join(f"{k} {v:.1f}" for k, v in inside.items())
            + "; the rest is its Python and Spark start"
        )
    if lines:
        print(f"release throughput: {lines / statistics.median(walls):,.0f} lines/s end to end")
    for line in breakdown_table(releases):
        print(line)
    middle = sorted(releases, key=lambda r: r.wall)[len(releases) // 2]
    print(f"runs of the median release ({middle.backfill_id}, {middle.status.lower()}):")
    for line in run_lines(middle):
        print(f"  {line}")


def _fixed_cost(root: Path, hours: int, rounds: int) -> bool:
    """``rounds`` releases of ``hours`` hours of tiny data (one client, ~36 lines an hour):
    what any repair costs before its data does."""
    from backfill_assets_dev.generator import generate_backups

    backups, home = root / "tiny", root / "tiny_home"
    generate_backups(
        backups,
        start=TINY_START,
        hours=hours,
        clients=1,
        users_per_client=TINY_USERS,
        seed=2,
        write_truth=False,
        force=True,
    )
    releases, ok = [], True
    for number in range(1, rounds + 1):
        release, success = run_release(root, backups, home, f"tiny-{number}", TINY_START, hours)
        releases.append(release)
        ok = ok and success
        print(
            f"fixed cost round {number}: {hours} h of tiny data in {release.wall:.1f}s", flush=True
        )
    _report(f"{hours} h of tiny data (the fixed cost)", releases, [])
    return ok
