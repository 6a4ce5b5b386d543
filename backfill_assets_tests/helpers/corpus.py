"""Generated corpora of part-file lines for the parity and fuzz tests (deterministic per seed).

``edge_lines``: every malformed kind, both schema versions, unknown keys, unicode, wrong
types (booleans and floats for integers, huge numbers, nulls), timestamp forms, URL forms,
received-hour skew. ``fuzz_lines``: random bytes, random JSON, mutations of valid lines,
deep nesting and long lines. All lines are for the folder ``CLIENT_ID`` / ``HOUR``.
"""

from __future__ import annotations

import json
import random

from backfill_assets.core.backups import contract

CLIENT_ID = 7
HOUR = "2026-11-20T03"
HOUR_START_MS = contract.parse_iso_ms("2026-11-20T03:00:00Z")

V1: dict = {
    "schema_version": 1,
    "payload_id": "p-1",
    "client_id": CLIENT_ID,
    "user_id": "u-1",
    "event_time": "2026-11-20T03:15:42.123Z",
    "received_at": "2026-11-20T03:15:43.000Z",
    "event_type": "pageview",
    "page_url": "https://Example.com/a/?utm_source=x#f",
    "device": "mobile",
}
V2: dict = {
    **{k: v for k, v in V1.items() if k != "event_time"},
    "schema_version": 2,
    "event_time_ms": 1_795_144_542_123,
    "referrer": None,
}
INT_FIELDS = ("schema_version", "client_id", "event_time_ms")
STR_FIELDS = ("payload_id", "user_id", "event_type", "page_url", "device", "referrer")
TIME_FIELDS = ("event_time", "received_at")

_ODD_VALUES: list[object] = [
    None,
    True,
    False,
    0,
    1,
    2,
    -0.0,
    1.0,
    1.5,
    7.0,
    1e2,
    10**19,
    10**20,
    10**40,
    -(10**19),
    "1",
    "",
    [],
    [1, "a"],
    {},
    {"a": 1},
    float("nan"),
    float("inf"),
]
_TIMES = [
    "2026-11-20T03:15:42Z",
    "2026-11-20T03:15:42",
    "2026-11-20T03:15:42.1Z",
    "2026-11-20T03:15:42.12Z",
    "2026-11-20T03:15:42.1234Z",
    "2026-11-20T03:15:42.12345Z",
    "2026-11-20T03:15:42.123456Z",
    "2026-11-20T03:15:42.999999Z",
    "2026-11-20T03:15:42.9995Z",
    "2026-11-20T03:15:42.0005Z",
    "2026-11-20T03:15:42.1234567Z",
    "2026-11-20T03:15:42+01:00",
    "2026-11-20T03:15:42.5-05:30",
    "2026-11-20 03:15:42Z",
    "2026-11-20T03:15:42.Z",
    "2026-11-20",
    "20261120T031542Z",
    # date-only, week-date, ordinal and basic forms: fromisoformat takes them (midnight...)
    "20261120",
    "2026-W47-5",
    "2026W475",
    "2026-W47-5T03:15:42Z",
    "2026-324",
    "2026-324T03:15:42Z",
    "20261120T031542.123Z",
    "2026-11-20T03",
    "2026-11-20T03:15",
    "2026-11-20T03:15Z",
    "2026-11-20T03:15:42,123Z",
    "2026-11-20T03:15:42+00:00",
    "2026-11-20T03:15:42.123-00:00",
    "2026-11-20T03:15:42+0000",
    "2026-11-20T03:15:42+00",
    "2026-11-20t03:15:42z",
    "\u0662\u0660\u0662\u0666-11-20T03:15:42Z",
    "2026-11-20T03:15:42Z ",
    "2026-02-29T00:00:00Z",
    "2028-02-29T00:00:00Z",
    "2000-02-29T12:00:00Z",
    "1900-02-29T12:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-04-31T00:00:00Z",
    "2026-11-20T24:00:00Z",
    "2026-11-20T23:60:00Z",
    "2026-11-20T23:59:60Z",
    "0000-01-01T00:00:00Z",
    "1999-12-31T23:59:59.999Z",
    "2000-01-01T00:00:00.000Z",
    "2099-12-31T23:59:59.999Z",
    "2100-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999Z",
    "2026-11-20T02:59:59.999Z",
    "2026-11-20T04:00:00.000Z",
    "2026-11-19T03:15:42.123Z",
    "yesterday",
    'it\'s "now"',
    "back\\slash",
    "2026-11-20T03:15:42Z\n",
    "２０２６-11-20T03:15:42Z",
    "",
]
_URLS = [
    "https://Example.com/a/?utm_source=x#f",
    "HTTP://A.EXAMPLE:80/",
    "http://a.example",
    "https://user:pw@a.example:8443/p?q=1",
    "http://[::1]/x",
    "http://[::1/x",
    "http://::1]/x",
    "http://[not-an-ip]/x",
    "http://ex\uff0fample.com/",
    "http://bücher.example/straße",
    "https://a.example/caf\u00e9?q=\u2603",
    "/relative",
    "ftp://a.example/",
    "http:/a.example",
    "http://",
    "http:///path",
    "http://?q",
    "http://@/",
    "http://:80/",
    "https://user@/p",
    "http://u@:8/x",
    "http://u@a.example/",
    "https:#frag",
    " http://a.example/",
    "\x01http://a.example/",
    "http://a.exa\tmple/",
    "http://a.example/\r\n",
    "ht tp://a.example/",
    "1http://a.example/",
    "javascript:alert('x')",
    'mailto:"me"@a.example',
    "http://a.example/" + "x" * 300,
    "",
]


def _dump(record: object, **kwargs: object) -> bytes:
    return json.dumps(record, **kwargs).encode("utf-8", "surrogatepass")


def _with(base: dict, **changes: object) -> dict:
    out = dict(base)
    for name, value in changes.items():
        if value is _MISSING:
            out.pop(name, None)
        else:
            out[name] = value
    return out


_MISSING = object()


def edge_lines() -> list[bytes]:
    """Hand-picked edge cases (about 700 lines)."""
    lines: list[bytes] = []
    for base in (V1, V2, _with(V1, schema_version=_MISSING)):
        lines.append(_dump(base))
        lines.append(_dump(base, separators=(",", ":")))
        lines.append(_dump(base, indent=None, ensure_ascii=False).replace(b", ", b" ,\t"))
        lines.append(_dump(_with(base, extra={"nested": [1, 2.5, {"x": None}], "n": 1e300})))
        lines.append(_dump(_with(base, extra_float=1.0, extra_big=10**50)))
        lines.append(_dump(_with(base, user_id="ユーザー😀", payload_id="p-é")))
        lines.append(_dump(_with(base, user_id="ユーザー😀"), ensure_ascii=False))
        lines.append(_dump(_with(base, user_id='nul\x00tab\tquote"back\\')))
        lines.append(_dump(base) + b"\r")
        lines.append(b"  " + _dump(base) + b" \t ")
        for name in (*INT_FIELDS, *STR_FIELDS, *TIME_FIELDS):
            lines.append(_dump(_with(base, **{name: _MISSING})))
            for value in _ODD_VALUES:
                lines.append(_dump(_with(base, **{name: value})))
        for name in TIME_FIELDS:
            for text in _TIMES:
                lines.append(_dump(_with(base, **{name: text})))
        for url in _URLS:
            lines.append(_dump(_with(base, page_url=url)))
            lines.append(_dump(_with(base, page_url=url), ensure_ascii=False))
        for value in ("hover", "it's", 'say "hi"', "both ' and \"", "back\\slash", "é", "x" * 150):
            lines.append(_dump(_with(base, event_type=value)))
            lines.append(_dump(_with(base, device=value)))
        for referrer in ("https://r.example/", "", "ü", _MISSING):
            lines.append(_dump(_with(base, referrer=referrer)))
        for client in (8, 0, -7, 10**19):
            lines.append(_dump(_with(base, client_id=client)))
    for ms in (
        contract._MIN_MS - 1,
        contract._MIN_MS,
        contract._MAX_MS - 1,
        contract._MAX_MS,
        -1,
        HOUR_START_MS - 1,
        HOUR_START_MS + contract.HOUR_MS,
    ):
        lines.append(_dump(_with(V2, event_time_ms=ms)))
    for version in (0, 3, -1, 10**20):
        lines.append(_dump(_with(V1, schema_version=version)))
    lines.append(_dump(_with(V1, event_time_ms="ignored in v1", referrer=5)))
    lines.append(_dump(_with(V2, event_time="ignored in v2")))
    lines.append(_dump(_with(V1, payload_id="", user_id="u")))
    lines.append(_dump(_with(V1, user_id="\ud800")))
    lines.append(_dump(_with(V1, user_id="\udfff\ud800")))
    lines.append(_dump(_with(V2, referrer="r\ud83d")))
    lines.append(_dump(_with(V1, page_url="https://a.example/\udc00")))
    lines.append(_dump(_with(V1, unknown_key="\ud800")))
    good = _dump(V1)
    lines += [
        b"",
        b" ",
        b"\r",
        b"not json",
        b"{payload_id: 'not-json'}",
        b"[1, 2]",
        b"42",
        b"1.0",
        b"1e2",
        b"-0",
        b"123456789012345678901234567890",
        b"1" * 50,
        b'"pageview"',
        b"null",
        b"true",
        b"[]",
        b"{}",
        good + b" x",
        good + b"{}",
        good + b"]",
        good + b"]]",
        good + b",{}]",
        good + b",0]",
        b"[" + good + b"]",
        b"\xef\xbb\xbf" + good,
        good[:-1],
        good[:-1] + b',"a":NaN}',
        good[:-1] + b',"a":Infinity}',
        good[:-1] + b',"a":-Infinity}',
        good[:-1] + b',"a":01}',
        good[:-1] + b',"a":1.}',
        good[:-1] + b',"a":.5}',
        good[:-1] + b',"a":+1}',
        good[:-1] + b',"a":"x\ty"}',
        good[:-1] + b',"a":"x\x00y"}',
        good[:-1] + b",}",
        good[:-1] + b',"a":1 /* c */}',
        good[:-1] + b",'a':1}",
        good[:-1] + b',"client_id":"7"}',
        good[:-1] + b',"client_id":7}',
        good[:-1] + b',"payload_id":"again"}',
        good[:-1] + b',"a":1,"a":2}',
        good[:-1] + b',"n":{"a":1,"a":2}}',
        good[:-1] + b',"payload\\u005fid":"escaped-key"}',
        # from_json's leniencies (spark_contract): an absent version and a null one,
        # JSON text of other types read as strings, anything after the first value, depth
        _dump(_with(V1, schema_version=_MISSING))[:-1] + b',"schema\\u005fversion":null}',
        _dump(_with(V1, schema_version=_MISSING))[:-1] + b',"schema_version" :null}',
        *(good.replace(b'"p-1"', value) for value in (b"1e400", b"-0.5e3", b'"-0.5e3"')),
        *(
            good.replace(b'"u-1"', value)
            for value in (
                b"true",
                b'"true"',
                b'{"u":"-1"}',
                b'"{\\"u\\":1}"',
                b'["u-1"]',
                b'"[u-1]"',
                b'"\\"u-1"',
            )
        ),
        _dump(_with(V2, referrer=12)),
        _dump(_with(V2, referrer="12")),
        _dump(_with(V2, referrer={"r": 1})),
        good + b"\x00",
        good + b"\x0b",
        good[:-1] + b',"n":{"a":[1]}}' + b" x",
        good[:-1] + b',"n":{"a":[1]}}' + b"{}",
        good[:-1] + b',"deep":' + b"[" * 990 + b"]" * 990 + b"}",
        good[:-1] + b',"deep":' + b'{"a":' * 990 + b"1" + b"}" * 990 + b"}",
        good[:-1] + b',"deep":' + b"[" * 399 + b"]" * 399 + b"}",
        good[:-1] + b',"a":"\\u00e9\\ud83d\\ude00"}',
        good[:-1] + b',"a":"\\ud83d"}',
        good[:-1] + b',"a":"\\x"}',
        good[:-1] + b',"a":' + b"9" * 5000 + b"}",
        good[:-1] + b',"a":' + b"9" * 900 + b"}",
        good[:-1] + b',"a":1e99999}',
        good[:-1] + b',"deep":' + b"[" * 400 + b"]" * 400 + b"}",
        good[:-1] + b',"deep":' + b"[" * 1200 + b"]" * 1200 + b"}",
        b"[" * 200_000,
        b'{"a":' * 100_000,
        good[:-1] + b',"long":"' + b"x" * 200_000 + b'"}',
        good.replace(b"u-1", b"u-\xff"),
        good.replace(b"u-1", b"u-\xe9t"),
        good.replace(b"u-1", b"u-\xed\xa0\x80"),
        good.replace(b"u-1", b"u-\xc0\xaf"),
        good.replace(b"u-1", b"u-\xf4\x90\x80\x80"),
        good.replace(b"u-1", b"u-\xe2\x82"),
        b"\xff\xfe{}",
        b"\x00\x00\x00",
    ]
    return lines


def _random_json(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 7, 2**63, -(2**63) - 1, rng.randrange(-(10**25), 10**25)])
    if kind == 3:
        return rng.choice([0.0, -1.5, 1e-7, 1e300, rng.uniform(-1e6, 1e6)])
    if kind in (4, 5):
        return "".join(
            chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x3000)]))
            for _ in range(rng.randrange(12))
        )
    if kind in (6, 7):
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        rng.choice([*V1, *V2, "x", "é"]): _random_json(rng, depth + 1)
        for _ in range(rng.randrange(5))
    }


def _mutate(rng: random.Random, line: bytes) -> bytes:
    data = bytearray(line)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(4)
        at = rng.randrange(len(data) + 1)
        if op == 0 and data:
            del data[min(at, len(data) - 1)]
        elif op == 1:
            data.insert(at, rng.randrange(256))
        elif op == 2 and data:
            data[min(at, len(data) - 1)] = rng.choice(b'{}[]",:0123456789.eE-+ tfn\\u')
        else:
            data[at:at] = rng.choice([b'"', b"\\", b"\\u", b"1.0", b"true", b"null", b"\xc3"])
    return bytes(data).replace(b"\n", b" ")


def fuzz_lines(seed: int, count: int) -> list[bytes]:
    """Random lines: bytes, JSON values and objects, mutations of valid lines (no ``\\n``)."""
    rng = random.Random(seed)
    valid = [_dump(V1), _dump(V2), _dump(V1, ensure_ascii=False), _dump(_with(V2, referrer="r"))]
    lines: list[bytes] = []
    for _ in range(count):
        kind = rng.randrange(6)
        if kind == 0:
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(60)))
            lines.append(raw.replace(b"\n", b""))
        elif kind == 1:
            lines.append(_dump(_random_json(rng)))
        elif kind == 2:
            record = dict(rng.choice([V1, V2]))
            for name in rng.sample(sorted(record), rng.randrange(3)):
                record[name] = _random_json(rng, 3)
            lines.append(_dump(record))
        else:
            lines.append(_mutate(rng, rng.choice(valid)))
    return lines
