"""A production run against the stack's servers: the S3 buckets and credentials, the
environment of a run (``BACKFILL_ENV=production``) and the Dagster instance's config."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from backfill_assets.settings import PROJECT_ROOT
from backfill_assets_dev.stack.servers import HOST

BUCKET = "backups"
PREFIX = "tree"
LOG_BUCKET = "dagster-logs"
WAREHOUSE_BUCKET = "warehouse"
START = "2026-11-20T00"
AWS = {
    "AWS_ACCESS_KEY_ID": "stack-test",
    "AWS_SECRET_ACCESS_KEY": "stack-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def write_instance_config(home: Path) -> None:
    """The production instance config minus what needs Kubernetes: same storage, pools,
    run queue and S3 compute logs; runs launched as local processes by the daemon."""
    config = yaml.safe_load((PROJECT_ROOT / "deploy" / "dagster.production.yaml").read_text())
    config.pop("run_launcher")
    config["concurrency"]["runs"]["max_concurrent_runs"] = 4
    # The runs stage their logs under this stack's home (removed with it), not in the
    # machine's /tmp/dagster-compute-logs, where each run would leave a directory behind.
    config["compute_logs"]["config"]["local_dir"] = str(home / "compute-logs")
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))


def production_env(
    base: Mapping[str, str],
    *,
    backup_root: str,
    data_root: str,
    s3: str,
    master: str,
    metastore: str,
    executors: int = 1,
) -> dict[str, str]:
    """The environment of a production run against the stack's servers (``base``: this
    process's environment without ``SPARK_*``, with the AWS credentials and Dagster's);
    ``executors`` executors of one core each."""
    return {
        **base,
        "BACKFILL_ENV": "production",
        "BACKUP_ROOT": backup_root,
        "DATA_ROOT": data_root,
        "DAGSTER_LOG_BUCKET": LOG_BUCKET,
        "AWS_ENDPOINT_URL_S3": s3,
        "SPARK_MASTER": master,
        "SPARK_DRIVER_HOST": HOST,
        "SPARK_DRIVER_BIND_ADDRESS": HOST,
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DRIVER_MEMORY": "1g",
        "SPARK_EXECUTOR_MEMORY": "1g",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_INSTANCES": str(executors),
        "SPARK_SHUFFLE_PARTITIONS": "4",
        "HIVE_METASTORE_URIS": metastore,
        # Kubernetes-only settings of the profile; a standalone master ignores them.
        "SPARK_IMAGE": "unused-on-standalone",
        "SPARK_NAMESPACE": "unused-on-standalone",
        "SPARK_SERVICE_ACCOUNT": "unused-on-standalone",
        "SPARK_DRIVER_POD_NAME": "unused-on-standalone",
        "BACKFILL_LOCK_TIMEOUT_SECONDS": "600",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
