"""The Spark driver JVM's class-data-sharing archive (Java 17's AppCDS), when there is one.

``make jvm-archive`` dumps it (``backfill_assets_dev.jvm_archive``); every later driver JVM
maps it (``java_options``) and starts in about half the time. The JVM validates the archive
itself: if the JDK or the classpath differ from when it was dumped, it is ignored and the
JVM starts as usual, only slower. A missing archive changes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Silence the JVM's CDS warnings (a stale archive is a slower start, not an error).
QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def archive_path() -> Path:
    """Where this environment's archive lives (inside the virtualenv it belongs to)."""
    return Path(sys.prefix) / "share" / "backfill_assets" / "spark-driver.jsa"


def java_options() -> list[str]:
    """JVM options that map the archive, or nothing when there is none.

    Also given to executors: on a standalone cluster of this environment they run the same
    classpath (and use it); elsewhere the JVM ignores an archive it cannot use."""
    path = archive_path()
    return [f"-XX:SharedArchiveFile={path}", *QUIET] if path.is_file() else []
