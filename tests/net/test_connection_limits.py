"""ConnectionLimits as pure state (the listener side is compat_tests/test_connection_limits.py)."""
from __future__ import annotations

from kbroker.config import BrokerConfig
from kbroker.net.connection_limits import ConnectionLimits, parse_overrides


def limits(*overrides, quotas=None, exempt=()):
    return ConnectionLimits(BrokerConfig(dict(o.split("=", 1) for o in overrides), strict=False), quotas, exempt)


def test_per_ip_limit_with_overrides():
    lim = limits("max.connections.per.ip=2", "max.connections.per.ip.overrides=127.0.0.2:3")
    assert [lim.accepted("L", "127.0.0.1", 0)[0] for _ in range(3)] == [True, True, False]
    lim.closed("127.0.0.1")                  # the refused one, once the listener closed it
    assert [lim.accepted("L", "127.0.0.2", 0)[0] for _ in range(4)] == [True, True, True, False]
    lim.closed("127.0.0.1")
    assert lim.accepted("L", "127.0.0.1", 0)[0]
    assert parse_overrides("localhost:1")["127.0.0.1"] == 1   # host names resolved


def test_max_connections_counts_every_listener_but_the_protected_one():
    lim = limits("max.connections=2", exempt=["INTERNAL"])
    lim.accepted("A", "1.1.1.1", 0)
    assert not lim.at_capacity("B")
    lim.accepted("B", "1.1.1.2", 0)
    assert lim.at_capacity("A") and lim.at_capacity("B") and not lim.at_capacity("INTERNAL")
    lim.closed("1.1.1.1")
    assert not lim.at_capacity("A")


def test_creation_rate_pauses_accepting():
    lim = limits("max.connection.creation.rate=5")
    pauses = [lim.accepted("L", f"10.0.0.{i}", 0)[2] for i in range(8)]
    assert pauses[:5] == [0] * 5 and all(p > 0 for p in pauses[5:])


def test_ip_connection_creation_rate_quota_closes_after_the_throttle():
    quotas = {(("ip", None),): {"connection_creation_rate": 2.0}}
    lim = limits(quotas=quotas)
    out = [lim.accepted("L", "10.0.0.1", 0) for _ in range(3)]
    assert [o[0] for o in out] == [True, True, False] and out[2][1] > 0


def test_idle():
    lim = limits("connections.max.idle.ms=1000")
    assert not lim.idle(0, 1000) and lim.idle(0, 1001)
    assert not limits("connections.max.idle.ms=-1").idle(0, 10**12)
