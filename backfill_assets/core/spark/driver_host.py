"""The process that holds the runs' shared driver JVM (``shared_driver``): it launches the
JVM with the code location's configuration, writes the host's file once the JVM listens,
and holds the JVM

- until its input ends: ``python -m backfill_assets.core.spark.driver_host FILE
  [--short-run]`` (the ``backfill`` command's host, for its release's runs);
- or for the life of a command: ``python -m backfill_assets.core.spark.driver_host --run
  COMMAND...``, whose processes (``dagster dev``'s daemon and code servers, and the runs
  they launch) find the file in their environment (``make ui``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from backfill_assets.core.spark.session import launch_conf, spark_config
from backfill_assets.core.spark.shared_driver import Host, hosted
from backfill_assets.settings import DRIVER_HOST_ENV, Settings, is_uri, without_spark_conf_dir


def wanted(settings) -> bool:
    """Whether runs of ``settings`` can share a host's JVM: a local master and an
    embedded metastore (a cluster's or Kubernetes' runs keep their own drivers)."""
    if settings.environment != "local" or is_uri(settings.data_root):
        return False
    return spark_config(settings, resolve=False).get("spark.master", "").startswith("local")


SHORT_RUN = "--short-run"
RUN = "--run"


def command(path: Path, *, short_run: bool = False) -> list[str]:
    """The host's command line, writing ``path``; its JVM for a short life if
    ``short_run`` (``session.SHORT_RUN_JAVA_OPTIONS``)."""
    return [sys.executable, "-m", __name__, str(path), *([SHORT_RUN] if short_run else [])]


def around(args: list[str]) -> list[str]:
    """The command line running ``args`` with a host for its life (``run``)."""
    return [sys.executable, "-m", __name__, RUN, *args]


def _launch(path: Path, *, short_run: bool):
    """The driver JVM's gateway, launched with the code location's configuration; its
    host's file written at ``path``."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    config = launch_conf(spark_config(Settings.from_env()), short_run=short_run)
    conf = SparkConf().setAll(list(config.items()))
    with without_spark_conf_dir():
        gateway = launch_gateway(conf)
    params = gateway.gateway_parameters
    Host(params.port, params.auth_token, gateway.proc.pid).write(path)
    return gateway


def _stop(gateway) -> None:
    gateway.proc.stdin.close()  # the JVM's end of input: it exits
    gateway.proc.wait()


def serve(path: Path, *, short_run: bool) -> int:
    """Hold the JVM until this process's input ends (the command's end or death)."""
    gateway = _launch(path, short_run=short_run)
    print(f"driver JVM {gateway.proc.pid} serves the runs of this command ({path})", flush=True)
    sys.stdin.read()
    _stop(gateway)
    return 0


def run(args: list[str]) -> int:
    """Run ``args`` with the host's file in its environment; hold the JVM until it exits
    and exit with its status. An interrupt reaches the command (its process group's, or
    passed on) and the JVM is stopped once the command has ended. Where runs cannot share
    a JVM (``wanted``), or a host already serves this process, the command alone, in this
    process."""
    if not wanted(Settings.from_env()) or hosted() is not None:
        os.execvp(args[0], args)
    scratch = Path(tempfile.mkdtemp(prefix="backfill-assets-driver-"))
    path = scratch / "driver.json"
    gateway = _launch(path, short_run=False)
    try:
        said = f"driver JVM {gateway.proc.pid} serves the runs of: {shlex.join(args)}"
        print(said, file=sys.stderr, flush=True)  # the command's output stays its own
        child = subprocess.Popen(args, env={**dict(os.environ), DRIVER_HOST_ENV: str(path)})
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal sends it to the command
        signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
        while True:
            with contextlib.suppress(InterruptedError):
                return child.wait()
    finally:
        _stop(gateway)
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == [RUN]:
        rest = args[1:]
        return run(rest[1:] if rest[:1] == ["--"] else rest)
    path, *flags = args
    return serve(Path(path), short_run=SHORT_RUN in flags)


if __name__ == "__main__":
    sys.exit(main())
