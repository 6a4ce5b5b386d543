"""The simulated world of one client: its users, their sessions, payloads and deliveries.

Everything is vectorised with numpy and drawn from one ``numpy.random.Generator`` seeded
with ``(seed, client_id)``, so a client's world depends only on the seed, the client id and
the shape (never on other clients, worker count or scheduling).

The model, per client:

- ``users_per_client`` visitors, each with a device and, for ``clock_ahead_rate`` of them,
  a browser clock running 1-5 minutes ahead (``event_time = true time + skew``).
- Each user has about ``SESSIONS_PER_USER_HOUR * hours`` sessions starting inside the
  window; a session is ``MEAN_PAYLOADS_PER_SESSION`` payloads on average, seconds to 20
  minutes apart; consecutive sessions of a user are more than 30 minutes apart.
- Arrival: ``received_at = true time + delay``; the delay is 0.1-10 s, or 1-6 h
  (``late_hours_rate``), or 1-7 days (``late_days_rate``).
- Traffic from before the window contributes only what is still in flight at its start:
  a *backlog* of single payloads from the 6 hours (hours-late) and 7 days (days-late)
  before ``start``, at the steady-state rate, received at or after ``start``.
- ``duplicate_rate`` of payloads are delivered a second time, seconds to 3 hours later; a
  re-delivery 5 minutes or more later (a consumer restart) keeps the first delivery's
  ``received_at``, so it can lie outside its folder's hour (written by ``generate``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from backfill_assets.core.backups.contract import DEVICES, EVENT_TYPES

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
SESSION_IDLE_MS = 1_800_000

SESSIONS_PER_USER_HOUR = 0.15
MEAN_PAYLOADS_PER_SESSION = 7.0
MAX_PAYLOADS_PER_SESSION = 80
PAYLOADS_PER_USER_HOUR = SESSIONS_PER_USER_HOUR * MEAN_PAYLOADS_PER_SESSION

DEVICE_WEIGHTS = (0.55, 0.38, 0.07)  # desktop, mobile, tablet
# Event types after the first payload of a session (which is always a pageview).
EVENT_TYPE_WEIGHTS = (0.50, 0.20, 0.17, 0.06, 0.07)
ON_TIME, LATE_HOURS, LATE_DAYS = 0, 1, 2
HOURS_LATE_MS = (1 * HOUR_MS, 6 * HOUR_MS)
DAYS_LATE_MS = (1 * DAY_MS, 7 * DAY_MS)
ON_TIME_MS = (100, 10_000)
CLOCK_AHEAD_MS = (60_000, 300_000)

V1_OMIT_VERSION_SHARE = 0.3
EXTRA_KEY_SHARE = 0.004
REFERRER_ABSENT_SHARE = 0.08
REFERRER_NULL_SHARE = 0.05
LANDING_WITH_UTM_SHARE = 0.25
EXTERNAL_REFERRER_SHARE = 0.6

# Unknown keys some tag versions add (allowed by the contract); pre-encoded JSON fragments.
EXTRA_FRAGMENTS = (
    ',"tag_version":"3.14.1"',
    ',"consent":true',
    ',"viewport":{"w":1280,"h":720}',
    ',"ab_bucket":null',
    ',"_debug":["sampled"]',
)

_SITES = (
    "acme-outdoor",
    "northwind-traders",
    "bluebird-news",
    "fjord-furniture",
    "pixel-press",
    "greenleaf-grocer",
    "harbor-bank",
    "summit-travel",
)
_SLUGS = (
    "trail-runner-2",
    "down-jacket",
    "oak-table",
    "winter-sale",
    "how-to-pack",
    "gift-ideas",
    "red-kettle",
    "smart-lamp",
    "city-guide",
    "faq",
    "returns",
    "size-chart",
)
_PATHS = (
    "/",
    "/products",
    "/products/{slug}",
    "/products/{slug}/reviews",
    "/category/{slug}",
    "/cart",
    "/checkout",
    "/checkout/confirm",
    "/blog",
    "/blog/{slug}",
    "/search",
    "/account",
    "/login",
    "/help/{slug}",
    "/about",
)
_UTM_SOURCE_NAMES = ("utm_source", "utm_source", "UTM_Source", "Utm_Source", "utm_SOURCE")
_UTM_MEDIUM_NAMES = ("utm_medium", "utm_medium", "UTM_Medium", "utm_Medium")
_UTM_CAMPAIGN_NAMES = ("utm_campaign", "utm_campaign", "UTM_Campaign")
_UTM_SOURCES = ("google", "newsletter", "facebook", "bing", "Partner_Blog")
_UTM_MEDIUMS = ("cpc", "email", "social", "referral")
_UTM_CAMPAIGNS = ("black_friday_2026", "winter-sale", "retargeting", "brand")
EXTERNAL_REFERRERS = (
    "https://www.google.com/",
    "https://www.bing.com/search?q=winter+jacket",
    "https://t.co/x7Qz2",
    "https://www.facebook.com/",
    "https://news.ycombinator.com/item?id=41234567",
    "https://duckduckgo.com/",
    "android-app://com.google.android.gm/",
)


@dataclass(frozen=True)
class WorldShape:
    """Everything that shapes a client's world (the generation arguments minus layout)."""

    start_ms: int
    hours: int
    users_per_client: int
    seed: int
    duplicate_rate: float
    late_hours_rate: float
    late_days_rate: float
    clock_ahead_rate: float
    v2_share: float

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.hours * HOUR_MS


@dataclass
class UrlPool:
    """A client's URLs: ``urls[:n_pages]`` plain pages, the rest utm-tagged landing pages."""

    urls: list[str]
    n_pages: int

    @property
    def page_weights(self) -> np.ndarray:
        ranks = np.arange(1, self.n_pages + 1, dtype=np.float64)
        weights = 1.0 / ranks**1.1
        return weights / weights.sum()


@dataclass
class ClientWorld:
    """All payloads of one client (index ``i`` is payload ``i``) and the users behind them.

    ``referrer`` indexes ``referrers`` (-1: null, -2: absent; only meaningful for v2).
    ``dup_received_ms`` is the second delivery (-1: delivered once).
    """

    client_id: int
    user_ids: list[str]
    user_device: np.ndarray  # per user, index into DEVICES
    payload_ids: list[str]
    user: np.ndarray  # per payload, index into user_ids
    event_ms: np.ndarray
    received_ms: np.ndarray  # first delivery
    dup_received_ms: np.ndarray
    event_type: np.ndarray  # index into EVENT_TYPES
    url: np.ndarray  # index into urls
    referrer: np.ndarray
    version: np.ndarray  # 1 or 2
    omit_version: np.ndarray  # bool, v1 only
    extra: np.ndarray  # index into EXTRA_FRAGMENTS, -1 none
    delay_kind: np.ndarray  # ON_TIME, LATE_HOURS, LATE_DAYS
    urls: list[str]
    referrers: list[str]

    def __len__(self) -> int:
        return len(self.payload_ids)


def client_rng(seed: int, client_id: int, *salt: int) -> np.random.Generator:
    """The random stream of one client (and optional sub-stream), independent of all others."""
    return np.random.default_rng([seed, client_id, *salt])


def _uuids(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` random version-4-style UUID strings."""
    raw = rng.bytes(16 * count).hex()
    out = []
    for i in range(0, 32 * count, 32):
        h = raw[i : i + 32]
        variant = "89ab"[int(h[16], 16) & 3]
        out.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-{h[20:]}")
    return out


def build_url_pool(rng: np.random.Generator, client_id: int) -> UrlPool:
    """Absolute URLs of the client's site with the variety real tags send."""
    site = _SITES[(client_id - 1) % len(_SITES)]
    host = f"www.{site}.example" if client_id <= len(_SITES) else f"www.{site}-{client_id}.example"

    def one(path_template: str) -> str:
        https = rng.random() < 0.92
        scheme = "https" if https else "http"
        roll = rng.random()
        if roll < 0.02:
            shown = host.upper()
        elif roll < 0.05:
            shown = ".".join(part.capitalize() for part in host.split("."))
        else:
            shown = host
        port = (":443" if https else ":80") if rng.random() < 0.04 else ""
        path = path_template.format(slug=_SLUGS[rng.integers(len(_SLUGS))])
        if path != "/" and rng.random() < 0.1:
            path += "/"
        return f"{scheme}://{shown}{port}{path}"

    def query_and_fragment(url: str) -> str:
        roll = rng.random()
        if roll < 0.08:
            url += f"?q={_SLUGS[rng.integers(len(_SLUGS))].replace('-', '+')}"
        elif roll < 0.14:
            url += f"?color=red&size={('s', 'm', 'l')[rng.integers(3)]}"
        elif roll < 0.18:
            url += f"?page={int(rng.integers(2, 9))}"
        if rng.random() < 0.06:
            url += ("#reviews", "#top", "#section-2", "#")[rng.integers(4)]
        return url

    pages = [query_and_fragment(one(_PATHS[i % len(_PATHS)])) for i in range(240)]
    # Shuffle so that popular ranks are not always the same path template.
    pages = [pages[i] for i in rng.permutation(len(pages))]
    landings = []
    for _ in range(80):
        params = [
            f"{_UTM_SOURCE_NAMES[rng.integers(len(_UTM_SOURCE_NAMES))]}="
            f"{_UTM_SOURCES[rng.integers(len(_UTM_SOURCES))]}",
            f"{_UTM_MEDIUM_NAMES[rng.integers(len(_UTM_MEDIUM_NAMES))]}="
            f"{_UTM_MEDIUMS[rng.integers(len(_UTM_MEDIUMS))]}",
        ]
        if rng.random() < 0.7:
            params.append(
                f"{_UTM_CAMPAIGN_NAMES[rng.integers(len(_UTM_CAMPAIGN_NAMES))]}="
                f"{_UTM_CAMPAIGNS[rng.integers(len(_UTM_CAMPAIGNS))]}"
            )
        if rng.random() < 0.2:
            params.append(f"gclid={rng.bytes(6).hex()}")
        if rng.random() < 0.3:
            params.insert(0, "ref=home")
        params = [params[i] for i in rng.permutation(len(params))]
        url = one(_PATHS[rng.integers(3)]) + "?" + "&".join(params)
        if rng.random() < 0.05:
            url += "#top"
        landings.append(url)
    return UrlPool(urls=pages + landings, n_pages=len(pages))


def _uniform_ms(rng: np.random.Generator, bounds: tuple[int, int], count: int) -> np.ndarray:
    return rng.integers(bounds[0], bounds[1], size=count, endpoint=True, dtype=np.int64)


def _sessions(
    rng: np.random.Generator, shape: WorldShape, n_users: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sessions inside the window: (per payload) user index, true time ms, is-first flag."""
    window_ms = shape.hours * HOUR_MS
    per_user = rng.poisson(SESSIONS_PER_USER_HOUR * shape.hours, size=n_users)
    sess_user = np.repeat(np.arange(n_users, dtype=np.int64), per_user)
    n_sessions = len(sess_user)
    starts = rng.integers(0, window_ms, size=n_sessions, dtype=np.int64)
    order = np.lexsort((starts, sess_user))
    starts = starts[order]  # sess_user is already sorted; sort starts within each user
    sizes = np.minimum(
        rng.geometric(1.0 / MEAN_PAYLOADS_PER_SESSION, size=n_sessions), MAX_PAYLOADS_PER_SESSION
    ).astype(np.int64)
    first = np.cumsum(sizes) - sizes  # index of each session's first payload
    n_payloads = int(sizes.sum())
    # Gaps inside a session: log-normal around 30 s, 1 s to 20 min.
    gaps = np.exp(rng.normal(np.log(30_000.0), 1.3, size=n_payloads))
    gaps = np.clip(gaps, 1_000, 1_200_000).astype(np.int64)
    gaps[first] = 0
    cum = np.cumsum(gaps)
    offsets = cum - np.repeat(cum[first], sizes)
    spans = offsets[first + sizes - 1]
    # Push sessions so that each starts more than 30 idle minutes after the previous one
    # of the same user: start'_i = c_i + max_{j<=i}(start_j - c_j), c = exclusive cumsum
    # of (span + idle) within the user, evaluated as one grouped running maximum.
    need = spans + SESSION_IDLE_MS + 1
    total = np.cumsum(need)
    exclusive = total - need
    user_first = np.cumsum(per_user) - per_user
    base = np.repeat(exclusive[user_first[per_user > 0]], per_user[per_user > 0])
    pushed_by = exclusive - base
    group = sess_user * (1 << 44)
    running = np.maximum.accumulate(starts - pushed_by + group) - group
    starts = pushed_by + running
    keep = starts < window_ms
    payload_session = np.repeat(np.arange(n_sessions), sizes)
    keep_payload = keep[payload_session]
    true_ms = (shape.start_ms + starts)[payload_session] + offsets
    is_first = np.zeros(n_payloads, dtype=bool)
    is_first[first] = True
    return sess_user[payload_session][keep_payload], true_ms[keep_payload], is_first[keep_payload]


def _backlog(
    rng: np.random.Generator, shape: WorldShape, n_users: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Late payloads of pre-window traffic still in flight at ``start``.

    Returns user index, true time, delay kind and delay (ms) of each.
    """
    users, times, kinds, delays = [], [], [], []
    for kind, rate, lookback_ms, bounds in (
        (LATE_HOURS, shape.late_hours_rate, HOURS_LATE_MS[1], HOURS_LATE_MS),
        (LATE_DAYS, shape.late_days_rate, DAYS_LATE_MS[1], DAYS_LATE_MS),
    ):
        expected = n_users * PAYLOADS_PER_USER_HOUR * rate * lookback_ms / HOUR_MS
        count = int(rng.poisson(expected))
        t = shape.start_ms - rng.integers(1, lookback_ms, size=count, endpoint=True)
        d = _uniform_ms(rng, bounds, count)
        u = rng.integers(0, n_users, size=count)
        arrived = t + d >= shape.start_ms
        users.append(u[arrived])
        times.append(t[arrived])
        kinds.append(np.full(int(arrived.sum()), kind, dtype=np.int8))
        delays.append(d[arrived])
    return (
        np.concatenate(users).astype(np.int64),
        np.concatenate(times).astype(np.int64),
        np.concatenate(kinds),
        np.concatenate(delays).astype(np.int64),
    )


def simulate_client(shape: WorldShape, client_id: int) -> ClientWorld:
    """Draw the complete world of one client; deterministic for (shape, client_id)."""
    rng = client_rng(shape.seed, client_id)
    n_users = shape.users_per_client
    user_ids = _uuids(rng, n_users)
    if len(set(user_ids)) != n_users:  # pragma: no cover - 122 random bits
        raise RuntimeError("user id collision; use another seed")
    user_device = rng.choice(len(DEVICES), size=n_users, p=DEVICE_WEIGHTS).astype(np.int8)
    ahead = rng.random(n_users) < shape.clock_ahead_rate
    skew = np.where(ahead, _uniform_ms(rng, CLOCK_AHEAD_MS, n_users), 0)
    pool = build_url_pool(rng, client_id)

    s_user, s_true, s_first = _sessions(rng, shape, n_users)
    b_user, b_true, b_kind, b_delay = _backlog(rng, shape, n_users)
    n_s, n_b = len(s_user), len(b_user)
    user = np.concatenate([s_user, b_user])
    true_ms = np.concatenate([s_true, b_true])
    is_first = np.concatenate([s_first, np.ones(n_b, dtype=bool)])
    n = n_s + n_b

    # Arrival of the in-window traffic.
    roll = rng.random(n_s)
    kind = np.full(n_s, ON_TIME, dtype=np.int8)
    kind[roll < shape.late_days_rate + shape.late_hours_rate] = LATE_HOURS
    kind[roll < shape.late_days_rate] = LATE_DAYS
    log_lo, log_hi = np.log(ON_TIME_MS[0]), np.log(ON_TIME_MS[1])
    delay = np.exp(rng.uniform(log_lo, log_hi, size=n_s)).astype(np.int64)
    late_h = kind == LATE_HOURS
    delay[late_h] = _uniform_ms(rng, HOURS_LATE_MS, int(late_h.sum()))
    late_d = kind == LATE_DAYS
    delay[late_d] = _uniform_ms(rng, DAYS_LATE_MS, int(late_d.sum()))
    delay_kind = np.concatenate([kind, b_kind])
    received_ms = true_ms + np.concatenate([delay, b_delay])
    event_ms = true_ms + skew[user]

    # What happened: the first payload of a session is a pageview; clicks and the like
    # stay on the page of the last pageview.
    event_type = rng.choice(len(EVENT_TYPES), size=n, p=EVENT_TYPE_WEIGHTS).astype(np.int8)
    event_type[is_first] = 0
    is_pageview = event_type == 0
    page = rng.choice(pool.n_pages, size=n, p=pool.page_weights)
    landing = is_first & (rng.random(n) < LANDING_WITH_UTM_SHARE)
    page[landing] = pool.n_pages + rng.integers(
        0, len(pool.urls) - pool.n_pages, int(landing.sum())
    )
    last_pageview = np.maximum.accumulate(np.where(is_pageview, np.arange(n), 0))
    url = page[last_pageview]

    # Referrer: external or null on a session's first payload, else the previous page.
    n_urls = len(pool.urls)
    referrer = np.empty(n, dtype=np.int64)
    referrer[1:] = url[:-1]
    external = rng.random(n) < EXTERNAL_REFERRER_SHARE
    first_ref = np.where(external, n_urls + rng.integers(0, len(EXTERNAL_REFERRERS), size=n), -1)
    referrer[is_first] = first_ref[is_first]
    roll = rng.random(n)
    referrer[roll < REFERRER_NULL_SHARE + REFERRER_ABSENT_SHARE] = -1
    referrer[roll < REFERRER_ABSENT_SHARE] = -2

    version = np.where(rng.random(n) < shape.v2_share, 2, 1).astype(np.int8)
    omit_version = (version == 1) & (rng.random(n) < V1_OMIT_VERSION_SHARE)
    extra = np.where(
        rng.random(n) < EXTRA_KEY_SHARE, rng.integers(0, len(EXTRA_FRAGMENTS), size=n), -1
    )

    dup = rng.random(n) < shape.duplicate_rate
    soon = rng.random(n) < 0.7
    resend = np.where(
        soon, _uniform_ms(rng, (500, 120_000), n), _uniform_ms(rng, (300_000, 3 * HOUR_MS), n)
    )
    dup_received_ms = np.where(dup, received_ms + resend, -1)

    return ClientWorld(
        client_id=client_id,
        user_ids=user_ids,
        user_device=user_device,
        payload_ids=_uuids(rng, n),
        user=user,
        event_ms=event_ms,
        received_ms=received_ms,
        dup_received_ms=dup_received_ms,
        event_type=event_type,
        url=url,
        referrer=referrer,
        version=version,
        omit_version=omit_version,
        extra=extra,
        delay_kind=delay_kind,
        urls=pool.urls,
        referrers=pool.urls + list(EXTERNAL_REFERRERS),
    )


def json_strings(values: list[str]) -> list[str]:
    """JSON encodings of ``values`` (with quotes), for assembling lines by concatenation."""
    return [json.dumps(v) for v in values]
