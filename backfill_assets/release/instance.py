"""The persistent Dagster instance every command uses (``DAGSTER_HOME``)."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.settings import PROJECT_ROOT, Settings


def prepare_dagster_home(settings: Settings) -> Path:
    """Create ``DAGSTER_HOME`` with the project's ``dagster.yaml`` if it has none."""
    home = Path(settings.dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        # atomically: a command started at the same moment never reads a partial file
        partial = home / f".dagster.yaml.{os.getpid()}"
        shutil.copyfile(PROJECT_ROOT / "deploy" / "dagster.yaml", partial)
        os.replace(partial, config)
    return home


def get_instance(settings: Settings) -> dg.DagsterInstance:
    """The SQLite-backed instance in ``DAGSTER_HOME`` (the one ``make ui`` shows).

    Opening a new instance creates its SQLite schemas; two commands started together on a
    fresh ``DAGSTER_HOME`` take turns at that (a file lock held only while opening).
    """
    home = prepare_dagster_home(settings)
    os.environ["DAGSTER_HOME"] = str(home)
    with open(home / ".backfill_assets.open.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return dg.DagsterInstance.get()


def run_tags(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """The run's tags as stored now, with what its launch form added when the run started
    (``defs.resources.launch_form``); ``context.run.tags`` is the snapshot from before."""
    run = instance.get_run_by_id(run_id)
    return dict(run.tags) if run is not None else {}


def release_filters(
    release_id: str, statuses: Sequence[dg.DagsterRunStatus] | None = None
) -> list[dg.RunsFilter]:
    """The filters that find a release's runs: tagged with it as their backfill, as the
    first backfill of their chain (re-executed from failure), or as their release."""
    return [
        dg.RunsFilter(tags={tag: release_id}, statuses=list(statuses or []))
        for tag in (*tags.RELEASE_TAGS, tags.RELEASE)
    ]


def release_runs(
    instance: dg.DagsterInstance,
    release_id: str,
    statuses: Sequence[dg.DagsterRunStatus] | None = None,
) -> list[dg.DagsterRun]:
    """Every run of a release (``release_filters``), each once, oldest first."""
    found = {
        run.run_id: run
        for f in release_filters(release_id, statuses)
        for run in instance.get_runs(filters=f)
    }
    return sorted(found.values(), key=lambda r: (r.run_id not in found, r.run_id))
