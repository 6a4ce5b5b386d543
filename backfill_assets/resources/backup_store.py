"""Read-only access to a backup tree: the local file system or S3 (``dagster-aws``).

The driver uses a store to list folders and read manifests (small); Spark reads the part
files themselves through ``spark_path`` (``file:`` locally, ``s3a://`` in production).
Nothing here writes: backups are read-only input.
"""

import os
from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource


class BackupStore(dg.ConfigurableResource):
    """The interface every store implements; paths are relative to ``root``, ``/``-separated."""

    root: str

    def list_dir(self, rel: str) -> list[str]:
        """Names directly below ``rel`` (folders and files), sorted; [] if it does not exist."""
        raise NotImplementedError

    def read_bytes(self, rel: str) -> bytes:
        raise NotImplementedError

    def spark_path(self, rel: str) -> str:
        raise NotImplementedError


class LocalBackupStore(BackupStore):
    """A backup tree on a local (or mounted) file system."""

    def list_dir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(Path(self.root) / rel))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_bytes(self, rel: str) -> bytes:
        return (Path(self.root) / rel).read_bytes()

    def spark_path(self, rel: str) -> str:
        return str((Path(self.root) / rel).resolve())


class S3BackupStore(BackupStore):
    """A backup tree under ``s3://bucket/prefix``; Spark reads it through ``s3a://``."""

    s3: dg.ResourceDependency[S3Resource]

    def _bucket_key(self, rel: str) -> tuple[str, str]:
        without_scheme = self.root.split("://", 1)[1]
        bucket, _, prefix = without_scheme.partition("/")
        key = "/".join(part for part in (prefix.strip("/"), rel.strip("/")) if part)
        return bucket, key

    def list_dir(self, rel: str) -> list[str]:
        bucket, key = self._bucket_key(rel)
        prefix = f"{key}/" if key else ""
        names: set[str] = set()
        paginator = self.s3.get_client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
            names.update(
                p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])
            )
            names.update(o["Key"][len(prefix) :] for o in page.get("Contents", []))
        return sorted(n for n in names if n)

    def read_bytes(self, rel: str) -> bytes:
        bucket, key = self._bucket_key(rel)
        return self.s3.get_client().get_object(Bucket=bucket, Key=key)["Body"].read()

    def spark_path(self, rel: str) -> str:
        bucket, key = self._bucket_key(rel)
        return f"s3a://{bucket}/{key}"
