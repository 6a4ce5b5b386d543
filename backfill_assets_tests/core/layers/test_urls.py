"""URL normalization of the transformed layer: the rule, and Python == Spark on every URL."""

import re

import numpy as np
import pytest

from backfill_assets.core.layers.urls import (
    NORMAL_PATTERN,
    normalize_url,
    normalize_url_column,
    normalize_urls,
)
from backfill_assets_dev.generator.world import build_url_pool

CASES = [
    # scheme and host lower-case
    ("HTTPS://WWW.Example.COM/Path", "https://www.example.com/Path"),
    ("Http://Www.Example.Com/a?B=C", "http://www.example.com/a?B=C"),
    # default ports dropped, others kept
    ("https://example.com:443/a", "https://example.com/a"),
    ("http://example.com:80/a", "http://example.com/a"),
    ("https://example.com:80/a", "https://example.com:80/a"),
    ("http://example.com:443/a", "http://example.com:443/a"),
    ("http://example.com:8080/a", "http://example.com:8080/a"),
    ("https://user:pw@Example.com:443/a", "https://user:pw@example.com/a"),
    ("https://[2001:DB8::1]:443/a", "https://[2001:db8::1]/a"),
    ("https://[2001:db8::1]:8443/a", "https://[2001:db8::1]:8443/a"),
    # fragment dropped
    ("https://example.com/a#top", "https://example.com/a"),
    ("https://example.com/a?x=1#", "https://example.com/a?x=1"),
    ("https://example.com/#section-2", "https://example.com/"),
    # trailing slash dropped unless the path is "/"
    ("https://example.com/shop/", "https://example.com/shop"),
    ("https://example.com/shop//", "https://example.com/shop"),
    ("https://example.com/", "https://example.com/"),
    ("https://example.com", "https://example.com"),
    ("https://example.com/?q=1", "https://example.com/?q=1"),
    ("https://example.com/a/?q=1#x", "https://example.com/a?q=1"),
    # utm_ parameters (any case) dropped, the others kept in their order
    (
        "https://example.com/a?utm_source=x&ref=home&UTM_Medium=y&gclid=1&Utm_campaign=z",
        "https://example.com/a?ref=home&gclid=1",
    ),
    ("https://example.com/a?b=2&a=1&c=3", "https://example.com/a?b=2&a=1&c=3"),
    ("https://example.com/a?utm_source=x", "https://example.com/a"),
    ("https://example.com/a?utm_source=x&", "https://example.com/a"),
    (
        "https://example.com/a?utm=1&utmx=2&x_utm_a=3",
        "https://example.com/a?utm=1&utmx=2&x_utm_a=3",
    ),
    ("https://example.com/a?q=utm_source&UTM_", "https://example.com/a?q=utm_source"),
    ("https://example.com/a?", "https://example.com/a"),
    # no percent-decoding, path case kept
    ("https://example.com/A%2Fb/?x=%20", "https://example.com/A%2Fb?x=%20"),
    # not absolute: unchanged
    ("/relative/path/", "/relative/path/"),
    ("mailto:someone@example.com", "mailto:someone@example.com"),
]


@pytest.mark.parametrize(("url", "expected"), CASES)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


def test_normalize_url_is_idempotent() -> None:
    for url, expected in CASES:
        assert normalize_url(expected) == expected, url
    assert normalize_url(None) is None


# Near misses of the normal form: each needs the full normalization.
NOT_NORMAL = [
    "https://example.com/a/",
    "https://example.com//",
    "HTTPS://example.com/a",
    "https://Example.com/a",
    "https://example.com:443/a",
    "https://example.com:8080/a",
    "https://user@example.com/a",
    "https://example.com/a#x",
    "https://example.com/a?",
    "https://example.com/a?x=1&",
    "https://example.com/a?x=1&&y=2",
    "https://example.com/a?utm_source=x",
    "https://example.com/a?x=1&UTM_medium=y",
    "https://example.com/a/?x=1",
    "https://[::1]/a",
    "ftp://example.com/a",
]


def _generated_urls() -> list[str]:
    urls = [u for u, _ in CASES] + NOT_NORMAL
    for client_id in range(1, 4):
        urls += build_url_pool(np.random.default_rng(client_id), client_id).urls
    return [
        *urls,
        "https://example.com/a\n/",
        "https://example.com/a/\n",
        "http://a.b/\u00c9/?\u00fc=1",
        # empty parts, and the character the fast form joins groups with (parsed part by part)
        "http:///a/",
        "HTTP://",
        "https://Ex\u0001ample.com:443/a/?utm_x=1&b=\u0001#f",
        "https://example.com/\u0001/",
        "https://[a]b:443/x/",
    ]


def test_the_normal_form_pattern_only_matches_urls_normalization_keeps() -> None:
    """The column's shortcut: a URL matching ``NORMAL_PATTERN`` is taken as it is, so the
    pattern must never match a URL that ``normalize_url`` would change; and it matches most
    generated page URLs (else the shortcut buys nothing)."""
    normal = re.compile(NORMAL_PATTERN.replace(r"\z", r"\Z"))
    urls = _generated_urls()
    matched = [u for u in urls if normal.match(u)]
    assert [u for u in matched if normalize_url(u) != u] == []
    assert [u for u in NOT_NORMAL if normal.match(u)] == []
    assert normal.match("https://example.com/a?b=2&utm=1") and normal.match("https://example.com")
    assert len(matched) > len(urls) / 2


def test_spark_normalization_equals_python(spark) -> None:
    """The Spark expression gives the Python result on the cases and on every URL the
    generator can emit (utm-tagged landing pages, ports, upper-case hosts, fragments)."""
    urls = _generated_urls()
    df = spark.createDataFrame([(u,) for u in urls], "url string")
    # both Spark forms: the column expression (the check's rule) and the layer's faster one
    both = df.select(
        "url", normalize_url_column(df["url"]).alias("by_column"), df["url"].alias("by_frame")
    )
    rows = normalize_urls(both, "by_frame").collect()
    mismatches = [
        (r["url"], r["by_column"], r["by_frame"], normalize_url(r["url"]))
        for r in rows
        if not r["by_column"] == r["by_frame"] == normalize_url(r["url"])
    ]
    assert not mismatches
    assert len(rows) == len(urls)
    nulls = spark.createDataFrame([(None,)], "url string")
    assert nulls.select(normalize_url_column(nulls["url"])).first()[0] is None
    assert normalize_urls(nulls, "url").first()[0] is None
