"""``backfill-assets bench``: measure a backfill's throughput on generated data.

Performance is measured here, not in timed tests. The benchmark generates a backup tree
(``--payloads`` approximately, deterministic), backfills every layer over it in a
scratch ``DATA_ROOT`` and ``DAGSTER_HOME`` (never the configured ones), and prints, per
layer run, hours, seconds and rows per second, plus the generator's own speed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from backfill_assets.cli.main import CommandError

START = "2026-11-20T00"


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
        help="approximate number of payloads to generate (default 200000)",
    )
    p.add_argument("--hours", type=int, default=24, help="hours of backups (default 24)")
    p.add_argument("--clients", type=int, default=8, help="clients (default 8)")
    p.add_argument("--layers", default=None, help="comma-separated layers (default: all)")
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.payloads < 1000 or args.hours < 8 or args.clients < 1:
        raise CommandError("need --payloads >= 1000, --hours >= 8 and --clients >= 1")
    from backfill_assets.definitions import build_definitions
    from backfill_assets.generator import generate_backups
    from backfill_assets.launch import LAYERS, launch, validate_layers
    from backfill_assets.partitions import shift_hour
    from backfill_assets.settings import Settings

    layers = validate_layers(args.layers.split(",") if args.layers else LAYERS)
    with tempfile.TemporaryDirectory(prefix="backfill-bench-") as scratch:
        root = Path(args.keep or scratch)
        # The generator's default shape yields about one payload per user and hour.
        users = max(1, round(args.payloads / (args.clients * args.hours * 1.04)))
        started = time.monotonic()
        summary = generate_backups(
            root / "backups",
            start=START,
            hours=args.hours,
            clients=args.clients,
            users_per_client=users,
            seed=1,
            write_truth=False,
            force=True,
        )
        generated = time.monotonic() - started
        print(
            f"generate: {summary.payloads:,} payloads, {summary.lines:,} lines, "
            f"{summary.files} files in {generated:.1f}s "
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
        last = shift_hour(START, args.hours - 1)
        ranges = [
            (layer, START, last)
            if layer != "aggregated"
            else (layer, shift_hour(START, 3), shift_hour(last, -3))
            for layer in layers
        ]
        with dg.DagsterInstance.local_temp(
            str(root / "dagster_home"), overrides={"telemetry": {"enabled": False}}
        ) as inst:
            runs = launch(build_definitions(settings), inst, ranges, reason="benchmark")
        print(f"{'layer':<12} {'hours':>5} {'seconds':>8} {'rows/s (lines read)':>20}  result")
        for r in runs:
            per_second = summary.lines / r.seconds if r.layer == "raw" else float("nan")
            shown = f"{per_second:,.0f}" if r.layer == "raw" else "-"
            print(
                f"{r.layer:<12} {r.hours:>5} {r.seconds:>8.1f} {shown:>20}  "
                f"{'ok' if r.success else 'FAILED: ' + '; '.join(r.failures)}"
            )
        return 0 if all(r.success for r in runs) and len(runs) == len(ranges) else 1
