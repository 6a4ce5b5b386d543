"""The Spark resource: dagster-pyspark's lazy session over ``core.spark.session``."""

from __future__ import annotations

import time

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import PrivateAttr
from pyspark.sql import SparkSession

from backfill_assets.core import tags
from backfill_assets.core.spark import preflight
from backfill_assets.core.spark.session import (
    DRIVER_PEAK_BYTES,
    SPARK_CORES,
    SPARK_JOBS,
    SPARK_SESSION_SECONDS,
    SPARK_START_SECONDS,
    SPARK_STARTED_AT,
    SPARK_TASK_SECONDS,
    SparkUsage,
    is_short_run,
    last_job,
    last_stage,
    spark_config,
    spark_usage,
    start_session,
    stop_driver,
)
from backfill_assets.core.warehouse.tables import warm_metastore
from backfill_assets.settings import Settings, short_run_bytes


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy session (started on first use, once per run process).

    ``spark_config`` may hold ``${VAR}`` placeholders (the production profile): they are
    resolved from the run process's environment when the session starts, so the code
    location loads anywhere and a run missing a variable fails naming it. Before the
    session starts, ``data_root`` (when set) is checked (``core.spark.preflight.before_spark``): an
    unwritable ``DATA_ROOT`` or a metastore held by another process fails the run at once
    with a ``dg.Failure`` naming the cause, before a JVM is started. The JVMs of a run whose
    release reads at most ``short_run_bytes`` (its ``tags.INPUT_BYTES``) start for a short
    life (``core.spark.session.SHORT_RUN_JAVA_OPTIONS``).
    """

    data_root: str | None = None
    short_run_bytes: int = 0
    _short_run: bool = PrivateAttr(default=False)
    _usage_mark: tuple[int, float, int] | None = PrivateAttr(default=None)
    _started: tuple[float, float] | None = PrivateAttr(default=None)  # (at, seconds) if cold

    def usage(self) -> SparkUsage | None:
        """What this run's Spark work cost so far (from its session's start in this
        resource); None before the session started."""
        if self._spark_session is None or self._usage_mark is None:
            return None
        return spark_usage(self._spark_session, *self._usage_mark)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        run_tags = context.dagster_run.tags if context.dagster_run else {}
        self._short_run = is_short_run(tags.input_bytes(run_tags), self.short_run_bytes)

    def _init_session(self) -> None:
        if self._spark_session is not None:
            return
        began, cold = time.time(), SparkSession.getActiveSession() is None
        try:
            self._spark_session = start_session(
                self.spark_config, self.data_root, short_run=self._short_run
            )
        except preflight.PreflightError as exc:
            raise dg.Failure(description=str(exc)) from None
        if cold:  # this process's Spark start: JVM, context, session
            self._started = (began, time.time() - began)
            warm_metastore(self._spark_session)
        session = self._spark_session
        self._usage_mark = (last_stage(session), time.monotonic(), last_job(session))

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """A session this run started stops with its JVM before the run reports its end
        (``core.spark.session.stop_driver``): a run that ended holds no metastore."""
        if self._spark_session is not None and self._started is not None:
            stop_driver()

    def usage_metadata(self) -> dict[str, float | int]:
        """The run's Spark usage so far as metadata ({} before the session started)."""
        usage = self.usage()
        if usage is None:
            return {}
        started = (
            {
                SPARK_STARTED_AT: round(self._started[0], 3),
                SPARK_START_SECONDS: round(self._started[1], 1),
            }
            if self._started
            else {}
        )
        peak = usage.driver_peak_bytes
        return {
            SPARK_TASK_SECONDS: usage.task_seconds,
            SPARK_CORES: usage.cores,
            SPARK_SESSION_SECONDS: usage.wall_seconds,
            SPARK_JOBS: usage.jobs,
            **started,
            **({DRIVER_PEAK_BYTES: peak} if peak else {}),
        }


def spark_resource(settings: Settings) -> SparkResource:
    """The Spark resource of ``settings`` (its session is checked before it starts)."""
    return SparkResource(
        spark_config=spark_config(settings, resolve=False),
        data_root=settings.data_root,
        short_run_bytes=short_run_bytes(),
    )


def usage_metadata(resource: object) -> dict[str, float | int]:
    """The run's Spark usage so far as metadata ({} when the resource cannot tell)."""
    return resource.usage_metadata() if isinstance(resource, SparkResource) else {}
