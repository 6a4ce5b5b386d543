"""Requesting a release from inside a run: a Dagster asset backfill, as the UI launches it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dagster as dg

from backfill_assets.core import plan
from backfill_assets.release import keys, launch
from backfill_assets.settings import Settings


class ReleaseRequests(dg.ConfigurableResource):
    """Submits releases (all layers, ``release.launch.submit_backfill``) to the instance the code
    location serves; configured with the settings of that location."""

    backup_root: str
    data_root: str
    dagster_home: str
    spark_conf_dir: str
    environment: str = "local"

    def settings(self) -> Settings:
        return Settings(
            backup_root=self.backup_root,
            data_root=self.data_root,
            dagster_home=self.dagster_home,
            spark_conf_dir=self.spark_conf_dir,
            environment=self.environment,
        )

    def submit(
        self, hours: Sequence[str], run_tags: Mapping[str, str], *, title: str, description: str
    ) -> str:
        """Submit one release rebuilding every layer from ``hours``; returns its id."""

        settings = self.settings()
        selection = keys.release_keys(list(plan.LAYERS))
        return launch.submit_backfill(
            settings, selection, list(hours), run_tags, title=title, description=description
        )
