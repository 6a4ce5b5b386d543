"""Read-only access to a backup tree: the local file system or S3 (boto3, Dagster-free;
``defs.resources`` hands the S3 store dagster-aws's client).

The driver uses a store to list folders and read manifests (small); the part files are read
on the executors: by Spark itself (``spark_path``: a local path, or ``s3a://`` through
Hadoop's S3A connector when its jars are installed, ``make jars``), else, for an S3 tree on
an image without them, by ``read_files``: pyarrow's ``S3FileSystem`` inside the executors'
Python workers (``backups/reader_executors.py``, every line judged in Python). Nothing here
writes: backups are read-only input.
"""

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import boto3

from backfill_assets.settings import s3_endpoint, spark_location

FILES_SCHEMA = "path string, content binary"
# Files fetched per Spark task: small enough to spread a range over the executors.
FILES_PER_TASK = 8
REGULAR = "regular file"  # the one kind of entry a reader of backups opens
_KINDS = (  # what else an entry of a local tree can be, by its lstat
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISDIR, "folder"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


@dataclass(frozen=True)
class Entry:
    """What a path of the tree is, told without opening it: its kind (``REGULAR`` or a
    description such as ``symbolic link``), its size (None when the store does not say),
    and what a symbolic link points at."""

    kind: str
    size: int | None = None
    target: str = ""


class NotRegularFile(OSError):
    """A path that is not (or no longer) a regular file of the tree: never read."""


class BackupStore:
    """The interface every store implements; paths are relative to ``root``, ``/``-separated."""

    root: str

    def list_dir(self, rel: str) -> list[str]:
        """Names directly below ``rel`` (folders and files), sorted; [] if it does not exist."""
        raise NotImplementedError

    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        """The file's bytes; ``ValueError`` if it holds more than ``limit``."""
        raise NotImplementedError

    def entry(self, rel: str) -> Entry:
        """What ``rel`` is, without opening it (objects of a store are regular files)."""
        return Entry(REGULAR)

    def outside_tree(self, rel: str) -> str | None:
        """Where ``rel`` really is when that is outside the tree (a link out), else None."""
        return None

    def open_file(self, rel: str) -> BinaryIO:
        """``rel`` opened for reading, only if it is a regular file of the tree."""
        raise NotImplementedError

    def spark_path(self, rel: str) -> str:
        raise NotImplementedError

    def spark_reads_files(self) -> bool:
        """Whether Spark opens this store's files itself (else ``read_files`` fetches them)."""
        return True

    def read_files(self, spark: Any, rels: list[str]) -> Any:
        """A DataFrame ``path string, content binary`` of the files ``rels``, read by the
        executors; ``path`` ends with the file's path relative to the root."""
        paths = [self.spark_path(rel) for rel in rels]
        return spark.read.format("binaryFile").load(paths).select("path", "content")


@dataclass(frozen=True)
class LocalBackupStore(BackupStore):
    """A backup tree on a local (or mounted) file system."""

    root: str

    def list_dir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(Path(self.root) / rel))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        with self.open_file(rel) as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise ValueError(f"larger than {limit} bytes")
        return data

    def entry(self, rel: str) -> Entry:
        path = os.path.join(self.root, rel)
        st = os.lstat(path)  # FileNotFoundError for a missing path
        if stat.S_ISREG(st.st_mode):
            return Entry(REGULAR, st.st_size)
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "special file")
        return Entry(kind, None, os.readlink(path) if stat.S_ISLNK(st.st_mode) else "")

    def outside_tree(self, rel: str) -> str | None:
        root = os.path.realpath(self.root)
        real = os.path.realpath(os.path.join(self.root, rel))  # lstat/readlink, no open
        return None if real == root or real.startswith(root + os.sep) else real

    def open_file(self, rel: str) -> BinaryIO:
        """Opened without following a link (``O_NOFOLLOW``) and without waiting for a
        writer (``O_NONBLOCK``: a FIFO put there after it was listed), then refused unless
        the opened file is regular (``NotRegularFile``)."""
        path = os.path.join(self.root, rel)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotRegularFile(errno.ELOOP, "a symbolic link, not opened", rel) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotRegularFile(errno.EINVAL, "not a regular file", rel)
        return os.fdopen(fd, "rb")

    def spark_path(self, rel: str) -> str:
        return str((Path(self.root) / rel).resolve())


@dataclass
class S3BackupStore(BackupStore):
    """A backup tree under ``s3://bucket/prefix``: listed with boto3 (``S3Resource``) on the
    driver; part files read by Spark through S3A (``s3a``: the connector's jars are on the
    classpath, ``spark_path`` spells them ``s3a://``), else fetched with pyarrow on the
    executors (``read_files``).

    ``client_factory`` makes the driver's boto3 client (default: boto3's, for
    ``endpoint_url`` and ``region``). The endpoint is ``endpoint_url``, else
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` of the driver (an S3-compatible store);
    credentials come from each process's default AWS chain, never through Spark.
    """

    root: str
    client_factory: Callable[[], Any] | None = None
    endpoint_url: str | None = None
    region: str | None = None
    s3a: bool = False  # Spark reads the part files itself, through Hadoop's S3A
    _client: Any = field(default=None, init=False, repr=False, compare=False)

    def client(self) -> Any:
        """One boto3 client per store (creating one costs more than a listing)."""
        if self._client is None:
            self._client = (self.client_factory or self._boto3_client)()
        return self._client

    def _boto3_client(self) -> Any:
        return boto3.session.Session(region_name=self.region).client(
            "s3", endpoint_url=self.endpoint()
        )

    def _bucket_key(self, rel: str) -> tuple[str, str]:
        without_scheme = self.root.split("://", 1)[1]
        bucket, _, prefix = without_scheme.partition("/")
        key = "/".join(part for part in (prefix.strip("/"), rel.strip("/")) if part)
        return bucket, key

    def list_dir(self, rel: str) -> list[str]:
        bucket, key = self._bucket_key(rel)
        prefix = f"{key}/" if key else ""
        names: set[str] = set()
        paginator = self.client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
            names.update(
                p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])
            )
            names.update(o["Key"][len(prefix) :] for o in page.get("Contents", []))
        return sorted(n for n in names if n)

    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        bucket, key = self._bucket_key(rel)
        extra = {} if limit is None else {"Range": f"bytes=0-{limit}"}
        data = self.client().get_object(Bucket=bucket, Key=key, **extra)["Body"].read()
        if limit is not None and len(data) > limit:
            raise ValueError(f"larger than {limit} bytes")
        return data

    def open_file(self, rel: str) -> BinaryIO:
        """The object's body, streamed (an object of a store is a regular file)."""
        bucket, key = self._bucket_key(rel)
        body = self.client().get_object(Bucket=bucket, Key=key)["Body"]
        return contextlib.closing(body)  # type: ignore[return-value]

    def spark_path(self, rel: str) -> str:
        bucket, key = self._bucket_key(rel)
        path = f"s3://{bucket}/{key}"
        return spark_location(path) if self.s3a else path

    def endpoint(self) -> str | None:
        return self.endpoint_url or s3_endpoint()

    def spark_reads_files(self) -> bool:
        return self.s3a  # else no S3A on the classpath: the executors fetch with pyarrow

    def read_files(self, spark: Any, rels: list[str]) -> Any:
        if not rels:
            return spark.createDataFrame([], FILES_SCHEMA)
        objects = [self._bucket_key(rel) for rel in rels]
        fetch = _s3_fetcher(self.endpoint(), self.region)
        tasks = max(1, -(-len(objects) // FILES_PER_TASK))
        keys = spark.createDataFrame([f"{b}/{k}" for b, k in objects], "string").toDF("key")
        return keys.repartition(tasks).mapInArrow(fetch, FILES_SCHEMA)


def _s3_fetcher(endpoint: str | None, region: str | None):
    """The executor-side function: ``key`` batches in, ``(s3://key, bytes)`` batches out."""

    def fetch(batches: Iterator) -> Iterator:
        import pyarrow as pa
        from pyarrow import fs

        options: dict[str, Any] = {}
        if endpoint:
            scheme, _, host = endpoint.partition("://")
            options.update(endpoint_override=host or scheme, scheme=scheme if host else "https")
        if region:
            options["region"] = region
        s3 = fs.S3FileSystem(**options)
        for batch in batches:
            paths, contents = [], []
            for key in batch.column("key").to_pylist():
                with s3.open_input_stream(key, compression=None) as stream:  # bytes as stored
                    contents.append(stream.read())
                paths.append(f"s3://{key}")
            yield pa.RecordBatch.from_arrays(
                [pa.array(paths, pa.string()), pa.array(contents, pa.binary())],
                names=["path", "content"],
            )

    return fetch
