"""Scale on the production stack: the same release with one executor core and with two,
backups and warehouse on S3 and on local disk.

``python -m backfill_assets_dev.stack.bench_scale [--payloads N] [--hours H]
[--clients C] [--rounds R] [--keep DIR]`` (``make bench-stack``) starts the stack's servers
as the stack test does (``servers``: Postgres, a Hive metastore service per storage, S3 on
moto, a Spark standalone master with two workers of one core each; all on 127.0.0.1,
stopped by PID at the end, also on failure or SIGTERM), generates a backup tree, uploads
it, and times what an operator runs, ``backfill-assets backfill`` of every hour (all
layers, one publish, ``BACKFILL_ENV=production``), from its start to its exit, in four
setups: S3 or local trees, ``spark.cores.max`` 1 (one worker's executor) or 2 (an executor
on each worker). ``--rounds`` rounds run the four setups in alternating order (reversed in
even rounds); the medians are printed with the load average, and written to
``results.json`` in the work directory.

Raw layer throughput: the tree's lines over the raw steps' time (``bench_release``: the
Spark start taken out); release throughput: the lines over the command's wall time; and
the lines per second of executor CPU time (Spark's event log of each release), which
other work on the machine changes least.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from backfill_assets.settings import PROJECT_ROOT, Settings
from backfill_assets_dev.stack import servers
from backfill_assets_dev.stack.production import (
    AWS,
    BUCKET,
    LOG_BUCKET,
    PREFIX,
    START,
    WAREHOUSE_BUCKET,
    production_env,
    write_instance_config,
)

STORAGES = ("s3", "local")
CORES = (1, 2)
RAW_STEPS = "raw steps"


@dataclass
class Round:
    storage: str
    cores: int
    number: int
    ok: bool
    wall: float
    raw: float  # raw steps, Spark start taken out
    task: float  # executor task seconds of the release's runs
    cpu: float  # executor CPU seconds of the release's tasks (JVM task threads)
    process_cpu: float  # CPU seconds of the release's executor processes and Python workers
    load: float  # 1-minute load average at the release's end

    @property
    def setup(self) -> tuple[str, int]:
        return self.storage, self.cores


def _conf_dir(root: Path, cores: int, events: Path) -> Path:
    """The project's Spark configuration with ``spark.cores.max`` (a standalone master
    gives an application that many cores, one executor of one core per worker) and Spark's
    event log in ``events`` (the executors' CPU time of the release's tasks)."""
    target = root / "spark-conf" / events.name
    shutil.copytree(PROJECT_ROOT / "spark", target, dirs_exist_ok=True)
    events.mkdir(parents=True, exist_ok=True)
    with open(target / "production.conf", "a") as conf:
        conf.write(
            f"\nspark.cores.max {cores}\nspark.eventLog.enabled true\n"
            f"spark.eventLog.dir {events.as_uri()}\nspark.eventLog.compress false\n"
            "spark.eventLog.rolling.enabled false\n"
        )
    return target


def workers_children_cpu(processes: servers.Processes) -> float:
    """CPU seconds of the executors the Spark workers ran and reaped (their JVMs and Python
    workers: ``cutime + cstime`` of each worker process)."""
    total = 0
    for server in processes.servers:
        if server.name.startswith("spark-worker"):
            stat = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(stat[13]) + int(stat[14])  # fields 16, 17: cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def executor_cpu_seconds(events: Path) -> float:
    """The executors' CPU time of every task in the event logs under ``events``: what the
    release's data cost, whatever else the machine was doing."""
    import io

    import zstandard

    nanoseconds = 0
    for log in sorted(p for p in events.rglob("*") if p.is_file() and not p.name.startswith(".")):
        with open(log, "rb") as raw:
            if log.suffix == ".zstd":  # Spark's default codec (a run of the old setup)
                stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
            else:
                stream = raw
            for line in io.TextIOWrapper(stream, errors="replace"):
                if '"Event":"SparkListenerTaskEnd"' in line:
                    metrics = json.loads(line).get("Task Metrics") or {}
                    nanoseconds += metrics.get("Executor CPU Time", 0)
    return nanoseconds / 1e9


def _generate(root: Path, args: argparse.Namespace):
    from backfill_assets_dev.cli.bench import generate_tree

    return generate_tree(root, args, start=START)


def start_servers(processes: servers.Processes, root: Path, base: dict[str, str]) -> dict:
    """Every server of the benchmark; returns per storage its environment's parts."""
    logs = root / "logs"
    kinds = ("dagster", "metastore", "ledger")
    databases = [f"{kind}_{storage}" for kind in kinds for storage in STORAGES]
    postgres = servers.start_postgres(processes, logs, databases)
    s3 = servers.start_s3(processes, logs, {**os.environ, **AWS})
    client = servers.s3_client(s3, AWS)
    servers.upload_tree(client, root / "backups" / "raw", BUCKET, f"{PREFIX}/raw")
    client.create_bucket(Bucket=LOG_BUCKET)
    client.create_bucket(Bucket=WAREHOUSE_BUCKET)
    master = servers.start_spark_cluster(
        processes, logs, base, worker_cores=1, worker_memory="1536m", workers=2
    )
    roots = {
        "s3": (f"s3://{BUCKET}/{PREFIX}", f"s3://{WAREHOUSE_BUCKET}/data"),
        "local": (str(root / "backups"), str(root / "data")),
    }
    setups = {}
    for storage, (backup_root, data_root) in roots.items():
        from backfill_assets.core.spark.session import s3a_conf

        jdbc = "jdbc:postgresql://" + postgres.split("@", 1)[1] + f"/metastore_{storage}"
        servers.create_metastore_schema(jdbc, root / f"schema-{storage}", logs / "schema.log")
        settings = Settings.from_env({**base, "DATA_ROOT": data_root, "AWS_ENDPOINT_URL_S3": s3})
        metastore = servers.start_metastore(
            processes, logs, jdbc, settings.warehouse_dir, base, s3a_conf(settings)
        )
        home = root / f"dagster_home_{storage}"
        home.mkdir(exist_ok=True)
        write_instance_config(home)
        env = production_env(
            base,
            backup_root=backup_root,
            data_root=data_root,
            s3=s3,
            master=master,
            metastore=metastore,
        )
        env.update(
            DAGSTER_HOME=str(home),
            DAGSTER_POSTGRES_URL=f"{postgres}/dagster_{storage}",
            BACKFILL_LEDGER_URL=f"{postgres}/ledger_{storage}",  # as in production
            BACKFILL_PARTITIONS_START=START,
            BACKFILL_RECONCILE_SENSOR="off",
        )
        setups[storage] = env
    return setups


def time_release(root: Path, env: dict[str, str], name: str, hours: int):
    """One timed ``backfill-assets backfill`` of every hour; its breakdown from the
    instance (``bench_release``)."""
    import dagster as dg

    from backfill_assets.core.hours import shift_hour
    from backfill_assets_dev.cli.bench import release_command, timed
    from backfill_assets_dev.cli.bench_release import breakdown, read_release

    done = timed(release_command(START, shift_hour(START, hours - 1)), env, root / f"{name}.log")
    os.environ["DAGSTER_POSTGRES_URL"] = env["DAGSTER_POSTGRES_URL"]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        release = read_release(instance, done.began, done.exited)
    parts = dict(breakdown(release))
    raw = next(v for k, v in parts.items() if k.startswith(RAW_STEPS))
    task = sum(run.spark_task_seconds for run in release.runs)
    if done.returncode != 0:
        print(f"{name} FAILED (exit {done.returncode}), log {root / f'{name}.log'}")
    return done.returncode == 0, release.wall, raw, task


def run_rounds(
    processes: servers.Processes, root: Path, setups: dict, rounds: int, hours: int
) -> list[Round]:
    order = [(storage, cores) for cores in CORES for storage in STORAGES]
    results = []
    for number in range(1, rounds + 1):
        for storage, cores in order if number % 2 else reversed(order):
            name = f"{storage}-{cores}core-{number}"
            events = root / "events" / name
            env = {
                **setups[storage],
                "SPARK_CONF_DIR": str(_conf_dir(root, cores, events)),
                "SPARK_EXECUTOR_INSTANCES": str(cores),
            }
            before = workers_children_cpu(processes)
            ok, wall, raw, task = time_release(root, env, name, hours)
            cpu, process_cpu = (
                executor_cpu_seconds(events),
                workers_children_cpu(processes) - before,
            )
            load = os.getloadavg()[0]
            result = Round(storage, cores, number, ok, wall, raw, task, cpu, process_cpu, load)
            results.append(result)
            print(
                f"round {number} {storage} {cores} core(s): release {wall:.1f}s, raw steps "
                f"{raw:.1f}s, task {task:.1f}s, executor CPU {cpu:.1f}s (tasks) "
                f"{process_cpu:.1f}s (processes), load {load:.1f}",
                flush=True,
            )
    return results


def report(results: list[Round], lines: int) -> list[str]:
    """A Markdown table of the medians per setup, and the scaling from 1 to 2 cores."""
    out = [
        "| storage | executor cores | release s | raw steps s | raw lines/s | raw lines/s "
        "per core | release lines/s | lines per executor CPU s (tasks / processes) | "
        "load (1 min) | rounds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    medians = {}
    for storage in STORAGES:
        for cores in CORES:
            timed = [r for r in results if r.setup == (storage, cores)]
            done = [r for r in timed if r.ok]
            if not done:
                state = "failed" if timed else "not run"
                out.append(f"| {storage} | {cores} | {state} | | | | | | | 0 |")
                continue
            wall = statistics.median(r.wall for r in done)
            raw = statistics.median(r.raw for r in done)
            load = statistics.median(r.load for r in done)
            cpu = statistics.median(r.cpu for r in done)
            process_cpu = statistics.median(r.process_cpu for r in done)
            medians[storage, cores] = (wall, raw)
            out.append(
                f"| {storage} | {cores} | {wall:.1f} | {raw:.1f} | {lines / raw:,.0f} | "
                f"{lines / raw / cores:,.0f} | {lines / wall:,.0f} | "
                f"{lines / cpu if cpu else 0:,.0f} / "
                f"{lines / process_cpu if process_cpu else 0:,.0f} | {load:.1f} | {len(done)} |"
            )
    for storage in STORAGES:
        if (storage, 1) in medians and (storage, 2) in medians:
            (wall1, raw1), (wall2, raw2) = medians[storage, 1], medians[storage, 2]
            out.append(
                f"\n{storage}: 1 -> 2 cores: raw layer {raw1 / raw2:.2f}x, "
                f"release {wall1 / wall2:.2f}x"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payloads", type=int, default=150_000)
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    args = parser.parse_args(argv)
    root = Path(args.keep or tempfile.mkdtemp(prefix="stack-bench-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    base.update(AWS, PYSPARK_PYTHON=sys.executable)
    summary = _generate(root, args)
    print(f"tree: {summary.lines:,} lines, {summary.files} files, {args.hours} h", flush=True)
    try:
        with servers.stopped_at_exit(servers.Processes()) as processes:
            setups = start_servers(processes, root, base)
            results = run_rounds(processes, root, setups, args.rounds, args.hours)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    table = report(results, summary.lines)
    print(f"\n{summary.lines:,} lines, {args.hours} h, {args.clients} clients")
    print("\n".join(table))
    if args.keep:
        (root / "results.json").write_text(
            json.dumps({"lines": summary.lines, "rounds": [asdict(r) for r in results]})
        )
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
