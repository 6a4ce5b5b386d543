"""The production stack on this machine, once per session, stopped by PID at the end.

``postgres_url``: a Postgres cluster in a temporary directory (as user ``postgres`` when
root). ``stack``: on top of it, the Hive metastore service (schema created first), a Spark
standalone master and worker, an S3 server holding a generated backup tree, and a Dagster
instance on Postgres with its daemon; ``stack.env`` is the environment of a production run
(``BACKFILL_ENV=production``) against them. Every server binds 127.0.0.1 and runs in its
own process group; the finalizers stop them all, also when a fixture or a test fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backfill_assets.core.spark.session import s3a_conf
from backfill_assets.settings import PROJECT_ROOT, Settings
from backfill_assets_dev.generator import generate_backups
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
from backfill_assets_tests.helpers.processes import (
    bin_of,
    start_daemon,
    wait_for_postgres_heartbeat,
)
from backfill_assets_tests.helpers.stack import CLIENTS, HOURS, Stack


@pytest.fixture(scope="session")
def processes() -> Iterator[servers.Processes]:
    """Every server the stack starts; all stopped by PID (process group) at the end, also
    when pytest itself is terminated (SIGTERM) or exits without tearing down."""
    with servers.stopped_at_exit(servers.Processes()) as started:
        yield started


@pytest.fixture(scope="session")
def stack_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack-logs")


@pytest.fixture(scope="session")
def postgres_url(processes: servers.Processes, stack_logs: Path) -> str:
    """Base URL (``postgresql+psycopg2://postgres@127.0.0.1:PORT``); databases
    ``dagster`` and ``metastore`` exist."""
    return servers.start_postgres(processes, stack_logs, ["dagster", "metastore", "ledger"])


@pytest.fixture(scope="session")
def s3_endpoint(processes: servers.Processes, stack_logs: Path) -> str:
    """An S3 API (moto) on 127.0.0.1; credentials ``AWS``."""
    return servers.start_s3(processes, stack_logs, {**os.environ, **AWS})


@pytest.fixture(scope="session")
def stack(
    processes: servers.Processes,
    postgres_url: str,
    s3_endpoint: str,
    stack_logs: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Stack:
    root = tmp_path_factory.mktemp("stack")
    logs = stack_logs
    # The warehouse on the S3 server too: written and swapped through S3A (magic committer).
    data_root = f"s3://{WAREHOUSE_BUCKET}/data"
    home = root / "dagster_home"
    home.mkdir()
    write_instance_config(home)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    base.update(AWS)
    base["DAGSTER_HOME"] = str(home)
    base["DAGSTER_POSTGRES_URL"] = f"{postgres_url}/dagster"
    base["BACKFILL_LEDGER_URL"] = f"{postgres_url}/ledger"  # the ledger and audit tables
    base["PYSPARK_PYTHON"] = sys.executable  # executors run this environment's Python

    # Slow, independent steps first, in the background: the metastore schema and turning
    # the reconciliation sensor off (the test decides which runs exist, not the sensor).
    metastore_jdbc = "jdbc:postgresql://" + postgres_url.split("@", 1)[1] + "/metastore"
    sensor_off = subprocess.Popen(
        [
            bin_of("dagster"),
            "sensor",
            "stop",
            "reconciliation_sensor",
            "-w",
            str(PROJECT_ROOT / "workspace.yaml"),
        ],
        cwd=PROJECT_ROOT,
        env={**base, "BACKFILL_ENV": "production", "DAGSTER_DISABLE_TELEMETRY": "1"},
        stdout=open(logs / "sensor-stop.log", "wb"),  # noqa: SIM115 (closed with the process)
        stderr=subprocess.STDOUT,
    )
    try:
        s3 = s3_endpoint
        client = servers.s3_client(s3, AWS)
        backups = root / "backups"
        generate_backups(
            backups,
            start=START,
            hours=HOURS,
            clients=CLIENTS,
            users_per_client=25,
            seed=11,
            workers=1,
        )
        servers.upload_tree(client, backups / "raw", BUCKET, f"{PREFIX}/raw")
        client.create_bucket(Bucket=LOG_BUCKET)
        client.create_bucket(Bucket=WAREHOUSE_BUCKET)
        master = servers.start_spark_cluster(
            processes, logs, base, worker_cores=4, worker_memory="4g"
        )
        servers.create_metastore_schema(metastore_jdbc, root / "schematool", logs / "schema.log")
        settings = Settings.from_env({**base, "DATA_ROOT": data_root, "AWS_ENDPOINT_URL_S3": s3})
        metastore = servers.start_metastore(
            processes, logs, metastore_jdbc, settings.warehouse_dir, base, s3a_conf(settings)
        )
        if sensor_off.wait(timeout=300) != 0:
            raise servers.StackError(
                f"dagster sensor stop failed:\n{servers.tail(logs / 'sensor-stop.log')}"
            )
    finally:
        if sensor_off.poll() is None:
            sensor_off.kill()
            sensor_off.wait()
    env = production_env(
        base,
        backup_root=f"s3://{BUCKET}/{PREFIX}",
        data_root=data_root,
        s3=s3,
        master=master,
        metastore=metastore,
    )
    daemon = start_daemon(processes, env, logs / "dagster-daemon.log")
    wait_for_postgres_heartbeat(processes, daemon, env["DAGSTER_POSTGRES_URL"])
    return Stack(env, backups, data_root, home, logs, postgres_url)
