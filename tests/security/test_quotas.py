"""Client quotas: Kafka's precedence of quota entities, its sampled rate, and a greedy client
held to its quota (fake clock; the real-socket version is compat_tests/test_security_quotas.py)."""
from __future__ import annotations

import pytest

from kbroker.security.image import SecurityImage
from kbroker.security.quotas import FETCH, PRODUCE, QuotaManager, SampledRate, resolve, throttle_ms


def _key(user=False, client=False):
    k = []
    if client is not False:
        k.append(("client-id", client))
    if user is not False:
        k.append(("user", user))
    return tuple(k)


# (entities that set producer_byte_rate, in the order added) -> expected (bound, tags) for alice/app
LEVELS = [
    (_key("alice", "app"), ("alice", "app")),
    (_key("alice", None), ("alice", "app")),
    (_key("alice"), ("alice", "")),
    (_key(None, "app"), ("alice", "app")),
    (_key(None, None), ("alice", "app")),
    (_key(None), ("alice", "")),
    (_key(client="app"), ("", "app")),
    (_key(client=None), ("", "app")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_precedence_picks_the_most_specific_entity(level):
    # every level from `level` down is configured, each with its own bound: the first wins
    quotas = {LEVELS[i][0]: {PRODUCE: 1000.0 + i} for i in range(level, len(LEVELS))}
    assert resolve(quotas, PRODUCE, "alice", "app") == (1000.0 + level, LEVELS[level][1])


def test_quota_kinds_resolve_separately_and_unset_means_unlimited():
    quotas = {_key("alice"): {PRODUCE: 10.0}, _key(client=None): {FETCH: 20.0}}
    assert resolve(quotas, PRODUCE, "alice", "x") == (10.0, ("alice", ""))
    assert resolve(quotas, FETCH, "alice", "x") == (20.0, ("", "x"))
    assert resolve(quotas, PRODUCE, "bob", "x") is None


def test_rate_spans_the_live_samples_and_at_least_one_window():
    r = SampledRate(11, 1000)
    r.record(1000, 0)
    assert r.span_ms(0) == 1000
    assert r.rate(0) == pytest.approx(1000.0)
    r.record(1000, 5000)
    assert r.rate(5000) == pytest.approx(400.0)
    r.record(1000, 12_500)          # the first sample expired (11 windows old)
    assert r.span_ms(12_500) == 7500
    assert r.rate(12_500) == pytest.approx(2000 / 7.5)
    assert throttle_ms(150.0, 100.0, 10_000) == 5000
    assert throttle_ms(90.0, 100.0, 10_000) == 0


def test_default_user_quota_gives_each_user_its_own_sensor():
    img = SecurityImage()
    img.quotas[_key(None)] = {PRODUCE: 1000.0}
    qm = QuotaManager(img)
    assert qm.record(PRODUCE, "alice", "a", 1000, 0) == 0        # one window's worth: at the bound
    assert qm.record(PRODUCE, "alice", "b", 1000, 0) == 1000     # alice's clients share
    assert qm.record(PRODUCE, "bob", "a", 1000, 0) == 0          # bob has his own


def _greedy_client(kind: str, quota: float, seconds: int, request: int, cost_ms: int = 1,
                   samples: int = 11, window_s: int = 1) -> float:
    """A client that sends ``request``-byte requests back to back, muted for the throttle
    time each answer carries; the bytes the broker accepted per second over ``seconds``."""
    from kbroker.security.quotas import QuotaConfig
    img = SecurityImage()
    img.quotas[_key("u")] = {kind: quota}
    qm = QuotaManager(img, QuotaConfig(samples, window_s * 1000))
    now, end, total = 1_000_000, 1_000_000 + seconds * 1000, 0
    while now < end:
        throttle = qm.record(kind, "u", "c", request, now)   # served, then muted
        total += request
        now += max(cost_ms, throttle)
    return total / seconds


@pytest.mark.parametrize("kind", [PRODUCE, FETCH])
@pytest.mark.parametrize("request_size", [16 * 1024, 100 * 1024, 1024 * 1024])
def test_greedy_client_is_held_within_ten_percent_over_twenty_seconds(kind, request_size):
    quota = 1024 * 1024
    rate = _greedy_client(kind, quota, 20, request_size)
    assert abs(rate - quota) / quota < 0.10, rate / quota


def test_greedy_client_without_a_quota_is_not_held():
    img = SecurityImage()
    qm = QuotaManager(img)
    assert not qm.enabled
    assert qm.record(PRODUCE, "u", "c", 10**9, 0) == 0
