"""The cause of a failure in words, in one line: what an operator sees (the CLI's failure
lines, a run's failure, the report), never only ``Py4JJavaError: An error occurred while
calling o243.close``. The JVM's stack stays in the run's log.

``cause_line`` takes a live exception (a ``Py4JJavaError``: its Java cause chain through
py4j's ``java_exception``, ``getCause()`` and ``getMessage()``; pyspark's captured
exceptions; an ``OSError`` with its file name) or a failure as Dagster stored it (its
message, which carries the Java trace's ``Caused by:`` lines, and its causes). A cause the
operating system gave (a full disk, a permission, a read-only file system, memory) is named
first, with the path the chain names or the one the caller was writing.
"""

from __future__ import annotations

import errno
import re
from typing import Any

from backfill_assets.core.text import one_line

# What the operating system or the JVM said -> the cause in words (the first match wins).
KNOWN_CAUSES = (
    ("no space left on device", "no space left on device"),
    ("database or disk is full", "no space left on device"),  # SQLite's SQLITE_FULL
    ("disk quota exceeded", "disk quota exceeded"),
    ("read-only file system", "read-only file system"),
    ("permission denied", "permission denied"),
    ("too many open files", "too many open files"),
    ("java heap space", "the JVM ran out of memory (Java heap space)"),
    ("outofmemoryerror", "the JVM ran out of memory"),
    ("cannot allocate memory", "out of memory (cannot allocate memory)"),
)
_ERRNO_CAUSES = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
# "java.io.IOException: message", ": java...." and "Caused by: java...." lines of a Java trace
_JAVA_LINE = re.compile(
    r"^(?:Caused by: |: )?((?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error|Throwable)[\w$]*)"
    r"(?:: (.*))?$"
)
_PATH = re.compile(
    r"((?:file:|s3a?://|hdfs://)/*[^\s,;'\"()\[\]]+|/[^\s,;:'\"()\[\]]+/[^\s,;:'\"()\[\]]*)"
)
_WRAPPERS = ("Py4JJavaError", "DagsterExecutionStepExecutionError", "DagsterUserCodeExecutionError")
Link = tuple[str, str]  # (exception class, message)


def cause_line(error: Any, where: str | None = None) -> str:
    """The cause of ``error`` in one line: a known cause (with the path it names, else
    ``where``), else the innermost exception's class and message."""
    links = chain_links(error)
    text = " ".join(f"{cls} {message}" for cls, message in links).lower()
    errno_cause = _ERRNO_CAUSES.get(getattr(error, "errno", None) or -1)
    known = errno_cause or next((c for needle, c in KNOWN_CAUSES if needle in text), None)
    if known is not None:
        path = getattr(error, "filename", None) or _first_path(links) or where
        return one_line(f"{known}" + (f" ({path})" if path else ""))
    meaningful = [(c, m) for c, m in links if m and not c.endswith(_WRAPPERS)]
    cls, message = (meaningful or links or [("", str(error))])[-1]
    name = cls.rsplit(".", 1)[-1]
    return one_line(f"{name}: {message}" if name and message else name or message)


def chain_links(error: Any) -> list[Link]:
    """(class, message) of ``error`` and each of its causes, outermost first."""
    links: list[Link] = []
    seen: set[int] = set()
    while error is not None and id(error) not in seen and len(links) < 50:
        seen.add(id(error))
        java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
        if java is not None:
            links += _java_links(java) or _text_links(str(error))
        elif isinstance(error, BaseException):
            links.append((type(error).__name__, str(error).strip().split("\n", 1)[0]))
        else:  # a stored failure: its class name, its message (with any Java trace)
            links += _text_links(
                getattr(error, "message", "") or "", getattr(error, "cls_name", "")
            )
        error = _cause_of(error)
    return links


def _cause_of(error: Any) -> Any:
    if isinstance(error, BaseException):
        if getattr(error, "java_exception", None) is not None:
            return None  # its Java chain is read already
        return error.__cause__ or error.__context__
    return getattr(error, "cause", None) or getattr(error, "context", None)


def _java_links(java: Any) -> list[Link]:
    """The Java cause chain through py4j (empty if the JVM cannot be asked any more)."""
    links: list[Link] = []
    try:
        while java is not None and len(links) < 50:
            links.append((str(java.getClass().getName()), str(java.getMessage() or "")))
            java = java.getCause()
    except Exception:  # the gateway is gone: the message's text is what is left
        return []
    return [(cls, message.split("\n", 1)[0]) for cls, message in links]


def _text_links(message: str, cls_name: str = "") -> list[Link]:
    """The first line of a stored message (``module.Class: message``), then each Java
    exception line of the trace it carries."""
    lines = message.strip().splitlines()
    first = lines[0] if lines else ""
    prefix, _, rest = first.partition(": ")
    if cls_name and prefix.endswith(cls_name):
        first = rest
    links: list[Link] = [(cls_name, first)]
    for line in lines[1:]:
        found = _JAVA_LINE.match(line.strip())
        if found:
            links.append((found.group(1), (found.group(2) or "").strip()))
    return links


def _first_path(links: list[Link]) -> str | None:
    for _, message in links:
        found = _PATH.search(message)
        if found:
            return found.group(1).rstrip(".")
    return None
