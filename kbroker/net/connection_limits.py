"""Connection limits shared by a broker's listeners (Kafka's ConnectionQuotas), as pure state:
the listeners ask before and after each accept and report each close; every call takes
``now_ms``.

* ``max.connections``: broker-wide. At the limit a listener stops accepting (new clients wait
  in the TCP backlog, as Kafka's acceptor blocks) until a connection closes. The inter-broker
  listener is exempt, as in Kafka.
* ``max.connections.per.ip`` with ``max.connections.per.ip.overrides`` (``host:count,...``):
  a connection over its address's limit is closed at once.
* ``max.connection.creation.rate``: broker-wide connections per second over the quota
  windows; over it the listeners pause accepting for the throttle time.
* ``connection_creation_rate`` client quotas on ``ip`` entities (KIP-612, from
  AlterClientQuotas): over it, the new connection is closed after the throttle time.
* ``connections.max.idle.ms``: ``idle(conn_last_active_ms, now_ms)`` says when to close.
"""

from __future__ import annotations

import socket

from kbroker.security.quotas import QuotaConfig, SampledRate, throttle_ms

INT_MAX = 2**31 - 1


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: host names resolved once, as Kafka does."""
    out: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        host, sep, n = item.rpartition(":")
        if not sep or not host:
            raise ValueError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        try:
            addr = socket.gethostbyname(host)
        except OSError:
            addr = host
        out[addr] = int(n)
        out[host] = int(n)
    return out


class ConnectionLimits:
    def __init__(self, config, quotas: dict | None = None, exempt_listeners=()) -> None:
        self.max_connections = config["max.connections"]
        self.max_per_ip = config["max.connections.per.ip"]
        self.overrides = parse_overrides(config.get("max.connections.per.ip.overrides", ""))
        self.max_rate = config.get("max.connection.creation.rate", INT_MAX)
        self.idle_ms = config["connections.max.idle.ms"]
        self.exempt = set(exempt_listeners)
        self.quotas = quotas if quotas is not None else {}     # image.security.quotas (ip entities)
        qc = QuotaConfig.from_broker(config)
        self._rate = SampledRate(qc.samples, qc.window_ms)
        self._ip_rates: dict[str, SampledRate] = {}
        self._qc = qc
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.blocked: set = set()      # listeners waiting for a slot (max.connections)

    def at_capacity(self, listener: str) -> bool:
        return listener not in self.exempt and self.total >= self.max_connections

    def accepted(self, listener: str, ip: str, now_ms: int) -> tuple[bool, int, int]:
        """Count a new connection: (keep it?, ms to wait before closing it when not kept,
        ms the listeners should pause accepting)."""
        self.total += 1
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        if listener in self.exempt:
            return True, 0, 0
        pause = 0
        if self.max_rate < INT_MAX:
            self._rate.record(1, now_ms)
            pause = throttle_ms(self._rate.rate(now_ms), self.max_rate, self._rate.span_ms(now_ms))
        if self.per_ip[ip] > self.overrides.get(ip, self.max_per_ip):
            return False, 0, pause
        bound = self._ip_quota(ip)
        if bound is not None:
            r = self._ip_rates.get(ip)
            if r is None:
                r = self._ip_rates[ip] = SampledRate(self._qc.samples, self._qc.window_ms)
            r.record(1, now_ms)
            wait = throttle_ms(r.rate(now_ms), bound, r.span_ms(now_ms))
            if wait > 0:
                return False, wait, pause
        return True, 0, pause

    def closed(self, ip: str) -> None:
        self.total -= 1
        n = self.per_ip.get(ip, 0) - 1
        if n > 0:
            self.per_ip[ip] = n
        else:
            self.per_ip.pop(ip, None)

    def _ip_quota(self, ip: str) -> float | None:
        q = self.quotas.get((("ip", ip),)) or self.quotas.get((("ip", None),))
        return None if q is None else q.get("connection_creation_rate")

    def idle(self, last_active_ms: int, now_ms: int) -> bool:
        return 0 < self.idle_ms < INT_MAX and now_ms - last_active_ms > self.idle_ms
