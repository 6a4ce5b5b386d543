"""The process that holds the runs' shared driver JVM (``shared_driver``): it launches the
JVM with the code location's configuration, writes FILE once the JVM listens, and holds
the JVM until its input ends. Run as ``python -m backfill_assets.core.spark.driver_host
FILE``."""

from __future__ import annotations

import sys
from pathlib import Path

from backfill_assets.core.spark.session import launch_conf, spark_config
from backfill_assets.core.spark.shared_driver import HOST_FILE_ENV, Host
from backfill_assets.settings import Settings, is_uri, without_spark_conf_dir

__all__ = ["HOST_FILE_ENV", "command", "wanted"]


def wanted(settings) -> bool:
    """Whether runs of ``settings`` can share a host's JVM: a local master and an
    embedded metastore (a cluster's or Kubernetes' runs keep their own drivers)."""
    if settings.environment != "local" or is_uri(settings.data_root):
        return False
    return spark_config(settings, resolve=False).get("spark.master", "").startswith("local")


SHORT_RUN = "--short-run"


def command(path: Path, *, short_run: bool = False) -> list[str]:
    """The host's command line, writing ``path``; its JVM for a short life if
    ``short_run`` (``session.SHORT_RUN_JAVA_OPTIONS``)."""
    return [sys.executable, "-m", __name__, str(path), *([SHORT_RUN] if short_run else [])]


def main(argv: list[str] | None = None) -> int:
    """Launch the driver JVM with the code location's configuration, write FILE, and hold
    the JVM until this process's input ends."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    path, *flags = sys.argv[1:] if argv is None else argv
    config = launch_conf(spark_config(Settings.from_env()), short_run=SHORT_RUN in flags)
    conf = SparkConf().setAll(list(config.items()))
    with without_spark_conf_dir():
        gateway = launch_gateway(conf)
    params = gateway.gateway_parameters
    Host(params.port, params.auth_token, gateway.proc.pid).write(Path(path))
    print(f"driver JVM {gateway.proc.pid} serves the runs of this command ({path})", flush=True)
    sys.stdin.read()  # the command's end closes it
    gateway.proc.stdin.close()  # the JVM's end of input: it exits
    gateway.proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
