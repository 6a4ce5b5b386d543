"""``bench --curve 1,24,168``: the cost of a release as it grows, at the bench's volume.

For each length H, a tree of H hours at the bench's payloads per hour (``--payloads`` /
``--hours``, a day of 1.58M by default in docs/benchmarks.md) and one timed release of all
of it (``bench.run_release``: the operator's ``backfill``, its own scratch warehouse and
Dagster instance): seconds per million payloads end to end, runs, and the driver's peak
memory (the largest run's). The ratios to the curve's 24-hour release (or its first) show
whether a longer release costs more than its share: issue 56's bar is 1.2x for 168 hours.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backfill_assets.cli.main import CommandError

REFERENCE_HOURS = 24


@dataclass(frozen=True)
class Point:
    hours: int
    payloads: int
    seconds: float
    runs: int
    driver_peak_bytes: float
    ok: bool

    @property
    def seconds_per_million(self) -> float:
        return self.seconds / (self.payloads / 1e6) if self.payloads else 0.0


def parse_lengths(text: str) -> list[int]:
    """``1,24,168`` -> [1, 24, 168]: release lengths in hours, each at least 1."""
    try:
        lengths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--curve {text!r}: expected hours separated by commas") from None
    if not lengths or min(lengths) < 1:
        raise CommandError(f"--curve {text!r}: expected hours separated by commas, each >= 1")
    return sorted(set(lengths))


# (root, hours, payloads, clients) -> (payloads generated, the release's ReleaseTimes, ok):
# ``bench.measure_length``, a tree generated and one release of it timed
Measure = Callable[[Path, int, int, int], tuple]


def measure(root: Path, args: argparse.Namespace, hours: int, per_hour: float, of: Measure):
    """One release of ``hours`` hours at ``per_hour`` payloads an hour, timed."""
    payloads, release, ok = of(
        root / f"curve-{hours}h", hours, round(per_hour * hours), args.clients
    )
    peak = max((run.driver_peak_bytes for run in release.runs), default=0.0)
    return Point(hours, payloads, release.wall, len(release.runs), peak, ok)


def table(points: list[Point]) -> list[str]:
    """The curve, with each point's ratio to the reference point (24 hours, else the first)."""
    reference = next((p for p in points if p.hours == REFERENCE_HOURS), points[0])
    lines = [
        f"{'hours':>6} {'payloads':>12} {'release s':>10} {'s / M payloads':>15} "
        f"{'x ' + str(reference.hours) + ' h':>8} {'runs':>5} {'driver peak MB':>15} "
        f"{'x ' + str(reference.hours) + ' h':>8}"
    ]
    for p in points:
        per_m = p.seconds_per_million / reference.seconds_per_million
        memory = (
            p.driver_peak_bytes / reference.driver_peak_bytes if reference.driver_peak_bytes else 0
        )
        lines.append(
            f"{p.hours:>6} {p.payloads:>12,} {p.seconds:>10.1f} {p.seconds_per_million:>15.1f} "
            f"{per_m:>8.2f} {p.runs:>5} {p.driver_peak_bytes / 2**20:>15.0f} {memory:>8.2f}"
            + ("" if p.ok else "  FAILED")
        )
    return lines


def curve(root: Path, args: argparse.Namespace, of: Measure) -> bool:
    """Measure and print the curve of ``args.curve``; True if every release succeeded."""
    lengths = parse_lengths(args.curve)
    per_hour = args.payloads / args.hours
    points = []
    for hours in lengths:
        point = measure(root, args, hours, per_hour, of)
        points.append(point)
        print(
            f"curve {hours} h: {point.payloads:,} payloads in {point.seconds:.1f}s "
            f"({point.seconds_per_million:.1f} s per million), {point.runs} run(s)",
            flush=True,
        )
    print(f"\n== cost curve at {per_hour:,.0f} payloads an hour, {args.clients} client(s)")
    for line in table(points):
        print(line)
    return all(p.ok for p in points)
