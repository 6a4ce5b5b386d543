"""Resources per environment, chosen in one place: ``build_resources(settings)``."""

from __future__ import annotations

from typing import Any

from backfill_assets.core.backups.store import LocalBackupStore, S3BackupStore
from backfill_assets.core.names import (
    BACKUPS,
    LAUNCH_FORM,
    PYSPARK,
    RELEASES,
    SHADOW_IO_MANAGER,
    WAREHOUSE,
)
from backfill_assets.defs.resources.io_managers import ShadowTableIOManager
from backfill_assets.defs.resources.launch_form import LaunchForm
from backfill_assets.defs.resources.releases import ReleaseRequests
from backfill_assets.defs.resources.spark import spark_resource
from backfill_assets.defs.resources.warehouse import Warehouse
from backfill_assets.settings import Settings, is_uri

__all__ = [
    "BACKUPS",
    "LAUNCH_FORM",
    "PYSPARK",
    "RELEASES",
    "SHADOW_IO_MANAGER",
    "WAREHOUSE",
    "build_resources",
]


def build_resources(settings: Settings) -> dict[str, Any]:
    """The resources of the code location for ``settings.environment``.

    local: Spark local mode + embedded metastore.
    production: the production Spark profile (cluster, shared metastore), resolved from the
    run's environment when its Spark session starts.
    Backups are read from S3 when ``BACKUP_ROOT`` is ``s3://…``, else from the file system.
    """
    # ${VAR}s of the Spark profile are resolved when a run starts its session, so the
    # code location loads where those variables are not set (webserver, daemon).
    pyspark = spark_resource(settings)
    backups: Any
    if is_uri(settings.backup_root):
        # through S3A when its jars are installed (make jars), as Spark opens local trees
        from dagster_aws.s3 import S3Resource  # a second to import: only where backups are on S3

        s3a = bool(settings.spark_jars)
        s3 = S3Resource()  # dagster-aws's client: the same settings as the other AWS resources
        backups = S3BackupStore(
            root=settings.backup_root,
            client_factory=s3.get_client,
            endpoint_url=s3.endpoint_url,
            region=s3.region_name,
            s3a=s3a,
        )
    else:
        backups = LocalBackupStore(root=settings.backup_root)
    return {
        PYSPARK: pyspark,
        SHADOW_IO_MANAGER: ShadowTableIOManager(
            pyspark=pyspark,
            warehouse_dir=settings.warehouse_dir,
            backups=backups,
        ),
        LAUNCH_FORM: LaunchForm(),
        BACKUPS: backups,
        WAREHOUSE: Warehouse(pyspark=pyspark, warehouse_dir=settings.warehouse_dir),
        RELEASES: ReleaseRequests(
            backup_root=settings.backup_root,
            data_root=settings.data_root,
            dagster_home=settings.dagster_home,
            spark_conf_dir=settings.spark_conf_dir,
            environment=settings.environment,
        ),
    }
