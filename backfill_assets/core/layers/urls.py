"""``page_url`` normalization of the transformed layer, as pure Python and as Spark SQL.

The rule (issue 4): scheme and host lower-case; the default port dropped (80 for http,
443 for https); the fragment dropped; trailing slashes dropped from the path unless the
path is ``/``; query parameters whose name starts with ``utm_`` (any case) dropped, the
others kept in their order (empty ``&&`` segments dropped, and the ``?`` when nothing is
left). Nothing else changes: no percent-decoding, no re-encoding, an empty path stays
empty, user info and other ports are kept. A value that is not ``scheme://...`` is
returned unchanged (the raw layer admits only absolute http(s) URLs).

``normalize_url`` (Python), ``normalize_url_column`` and ``normalize_urls`` (Spark
built-in functions, no Python UDF, so they run in the JVM at Spark speed; the second
parses a whole column in fewer regex passes) parse with the same regular expressions, so
they agree; the tests hold them to it on every generated URL.
"""

import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# scheme :// authority path [? query] [# fragment]; the groups are the parts kept.
URL_PATTERN = r"^([A-Za-z][A-Za-z0-9+.\-]*)://([^/?#]*)([^?#]*)(\?[^#]*)?(#[\s\S]*)?"
# [userinfo@] host [:port]; the last '@' ends the user info, a bracketed IPv6 host may hold ':'.
AUTHORITY_PATTERN = r"^([\s\S]*@)?(\[[^\]]*\]|[^:]*)(:[\s\S]*)?"
DEFAULT_PORTS = {"http": "80", "https": "443"}
DROPPED_PARAM_PREFIX = "utm_"

# Both patterns must match a whole string: Python anchors with \Z, Java (Spark) with \z
# (``$`` would also match before a final line break, differently in each).
_URL = re.compile(URL_PATTERN + r"\Z")
_AUTHORITY = re.compile(AUTHORITY_PATTERN + r"\Z")
_URL_JAVA = URL_PATTERN + r"\z"
_AUTHORITY_JAVA = AUTHORITY_PATTERN + r"\z"

# A URL already in normal form, recognized by one match: lower-case http(s) scheme and
# host, no user info, port or fragment, a path that is empty, "/" or without a trailing
# slash, and a query (if any) of non-empty parameters none of which is utm_*. Most page
# URLs are like this, so the column takes them as they are and parses only the others
# (in two more regex passes, ``normalize_urls``). ``normalize_url`` returns such a URL unchanged
# (the tests hold it to that on every generated URL and the edge cases).
_PARAM = r"(?![Uu][Tt][Mm]_)[^&#]+"
NORMAL_PATTERN = (
    r"^https?://[a-z0-9.\-]+(/|/[^?#]*[^/?#])?(\?" + _PARAM + r"(&" + _PARAM + r")*)?\z"
)


def _keep_param(segment: str) -> bool:
    return segment != "" and not segment.split("=", 1)[0].lower().startswith(DROPPED_PARAM_PREFIX)


def normalize_url(url: str | None) -> str | None:
    """The normalized form of one URL (see the module docstring for the rule)."""
    if url is None:
        return None
    match = _URL.match(url)
    if not match:
        return url
    scheme, authority, path, query, _fragment = match.groups()
    scheme = scheme.lower()
    userinfo, host, port = _AUTHORITY.match(authority).groups()
    port = (port or "")[1:]
    shown_port = "" if port in ("", DEFAULT_PORTS.get(scheme)) else f":{port}"
    if path:
        path = path.rstrip("/") or "/"
    params = [p for p in (query or "")[1:].split("&") if _keep_param(p)]
    shown_query = f"?{'&'.join(params)}" if params else ""
    return f"{scheme}://{userinfo or ''}{host.lower()}{shown_port}{path}{shown_query}"


# Joins the groups of one regular-expression pass (``_groups``); a URL holding it is parsed
# group by group instead.
_JOIN = "\u0001"


def _groups(text: Column, pattern: str, count: int) -> Column:
    """Groups 1..count of ``pattern``'s match in ``text`` as an array ("" for a group that
    did not take part), from ONE regex pass: the groups joined by ``_JOIN``, then split (a
    split on one plain character runs no regular expression). Only for a ``text`` that
    matches and holds no ``_JOIN``."""
    joined = F.regexp_replace(text, pattern, _JOIN.join(f"${i}" for i in range(1, count + 1)))
    return F.split(joined, _JOIN, -1)


def _extracted(text: Column, pattern: str, count: int) -> Column:
    """``_groups`` in one regex pass per group (any ``text`` that matches)."""
    return F.array(*(F.regexp_extract(text, pattern, i) for i in range(1, count + 1)))


def _assembled(parts: Column, authority: Column) -> Column:
    """The normalized URL from its parts (scheme, authority, path, query: ``_URL_JAVA``'s
    groups 1-4) and its authority's (user info, host, port: ``_AUTHORITY_JAVA``'s)."""
    scheme, path, query = F.lower(parts[0]), parts[2], parts[3]
    userinfo, host, port = authority[0], F.lower(authority[1]), authority[2]
    port = F.substring(port, 2, 1 << 20)
    default_port = (
        F.when(scheme == "http", F.lit(DEFAULT_PORTS["http"]))
        .when(scheme == "https", F.lit(DEFAULT_PORTS["https"]))
        .otherwise(F.lit(""))
    )
    shown_port = F.when((port == "") | (port == default_port), F.lit("")).otherwise(
        F.concat(F.lit(":"), port)
    )
    stripped = F.regexp_replace(path, r"/+\z", "")
    shown_path = F.when(path == "", path).when(stripped == "", F.lit("/")).otherwise(stripped)
    params = F.filter(
        F.split(F.substring(query, 2, 1 << 20), "&"),
        lambda p: (
            (p != "") & ~F.lower(F.substring_index(p, "=", 1)).startswith(DROPPED_PARAM_PREFIX)
        ),
    )
    shown_query = F.when(F.size(params) > 0, F.concat(F.lit("?"), F.array_join(params, "&")))
    return F.concat(
        scheme,
        F.lit("://"),
        userinfo,
        host,
        shown_port,
        shown_path,
        F.coalesce(shown_query, F.lit("")),
    )


def normalize_url_column(url: Column) -> Column:
    """``normalize_url`` as a Spark column expression (built-in functions only; a URL not in
    normal form takes one regex pass per part: ``normalize_urls`` is the faster form for
    a whole column)."""
    parts = _extracted(url, _URL_JAVA, 4)
    return (
        F.when(url.rlike(NORMAL_PATTERN), url)
        .when(url.rlike(_URL_JAVA), _assembled(parts, _extracted(parts[1], _AUTHORITY_JAVA, 3)))
        .otherwise(url)
    )


def normalize_urls(df: DataFrame, column: str) -> DataFrame:
    """``df`` with ``column`` normalized as ``normalize_url_column`` does, faster: a URL not
    in normal form is parsed in two regex passes (``_groups``: its parts, then its
    authority's) instead of seven. Each pass is a projection of its own, so Spark computes
    it once per row however many parts are read from it (within one expression it would
    repeat it for each)."""
    url = F.col(column)
    normal, parts, authority = "_url_normal", "_url_parts", "_url_authority"
    return (
        df.withColumn(normal, url.rlike(NORMAL_PATTERN))
        .withColumn(
            parts,
            F.when(
                ~F.col(normal) & url.rlike(_URL_JAVA) & ~url.contains(_JOIN),
                _groups(url, _URL_JAVA, 4),
            ),
        )
        .withColumn(
            authority,
            F.when(F.col(parts).isNotNull(), _groups(F.col(parts)[1], _AUTHORITY_JAVA, 3)),
        )
        .withColumn(
            column,
            F.when(F.col(normal), url)
            .when(F.col(parts).isNotNull(), _assembled(F.col(parts), F.col(authority)))
            .otherwise(normalize_url_column(url)),  # not a URL, or holds _JOIN: rare
        )
        .drop(normal, parts, authority)
    )
