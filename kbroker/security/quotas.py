"""Client quota enforcement (Kafka's ClientQuotaManager, KIP-13 / KIP-55 / KIP-124 / KIP-219).

Quotas are read from ``image.security.quotas`` (ClientQuotaRecords, written by
AlterClientQuotas). Each quota kind (``producer_byte_rate``, ``consumer_byte_rate``,
``request_percentage``, ``controller_mutation_rate``) is resolved separately for a request's
(user, client-id) with Kafka's precedence of entities:

  1. user + client-id        5. default user + default client-id
  2. user + default client   6. default user
  3. user                    7. client-id
  4. default user + client   8. default client-id

The entity that matched decides who shares a sensor: a quota on a user alone is shared by all
that user's clients; a default-user quota gives every user its own sensor with that bound.

A sensor is Kafka's ``Rate`` over ``SampledStat``: ``quota.window.num`` samples of
``quota.window.size.seconds``; the rate is the sum of the live samples divided by the time
they span. Over the bound, the throttle time is the time the rate needs to get back to the
bound: ``(rate - bound) / bound * span`` (Kafka's QuotaUtils.throttleTime).

One deliberate difference: Kafka counts the span as at least ``samples - 1`` windows, which
credits a fresh (or just-expired) sensor with ten windows of quota at once. A greedy client
then takes ~11 s of quota in one burst every 11 s (a fake-clock run of Kafka's rule held a
1 MB/s producer to 1.3 MB/s over 20 s). kbroker credits at most one window, so the same
client stays within a few percent of its quota over any span of a few windows.

No clock is read here: every call takes ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
MUTATION = "controller_mutation_rate"

INACTIVE_SENSOR_MS = 3600 * 1000   # Kafka: InactiveSensorExpirationTimeSeconds


class SampledRate:
    """Kafka's ``Rate`` (a windowed sum over ``samples`` windows of ``window_ms``)."""

    __slots__ = ("samples", "window_ms", "_starts", "_values", "_cur", "last_record_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = max(2, samples)
        self.window_ms = window_ms
        self._starts: list[int] = []
        self._values: list[float] = []
        self._cur = 0
        self.last_record_ms = 0

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def record(self, value: float, now_ms: int) -> None:
        self.last_record_ms = now_ms
        if not self._starts:
            self._starts.append(now_ms)
            self._values.append(0.0)
        elif now_ms - self._starts[self._cur] >= self.window_ms:
            self._cur = (self._cur + 1) % self.samples
            if self._cur >= len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[self._cur] = now_ms
                self._values[self._cur] = 0.0
        self._values[self._cur] += value

    def span_ms(self, now_ms: int) -> int:
        """The time the live samples cover, at least one window (see the module docstring
        for why not Kafka's ``samples - 1`` windows)."""
        self._purge(now_ms)
        oldest = min(self._starts) if self._starts else now_ms
        return max(now_ms - oldest, self.window_ms)

    def rate(self, now_ms: int) -> float:
        """Per second."""
        span = self.span_ms(now_ms)
        return sum(self._values) * 1000.0 / span if span > 0 else 0.0


def throttle_ms(rate: float, bound: float, span_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: how long until ``rate`` is back at ``bound``."""
    if rate <= bound or bound <= 0:
        return 0
    return int(round((rate - bound) / bound * span_ms))


@dataclass(frozen=True)
class QuotaConfig:
    samples: int = 11          # quota.window.num
    window_ms: int = 1000      # quota.window.size.seconds

    @classmethod
    def from_broker(cls, config) -> "QuotaConfig":
        return cls(int(config.get("quota.window.num", 11)), int(config.get("quota.window.size.seconds", 1)) * 1000)


def resolve(quotas: dict, kind: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
    """(bound, sensor tags (user, client-id)) for the first entity in Kafka's precedence that
    sets ``kind``, or None (unlimited). ``quotas`` maps sorted ((type, name|None), ...) keys."""
    def get(u, c):
        key = []
        if c is not False:
            key.append(("client-id", c))
        if u is not False:
            key.append(("user", u))
        q = quotas.get(tuple(key))
        return None if q is None else q.get(kind)

    order = ((user, client_id, (user, client_id)), (user, None, (user, client_id)), (user, False, (user, "")),
             (None, client_id, (user, client_id)), (None, None, (user, client_id)), (None, False, (user, "")),
             (False, client_id, ("", client_id)), (False, None, ("", client_id)))
    for u, c, tags in order:
        bound = get(u, c)
        if bound is not None:
            return float(bound), tags
    return None


class QuotaManager:
    """One per broker: the sensors of every (kind, tags) that recorded lately."""

    def __init__(self, security_image, config: QuotaConfig | None = None) -> None:
        self.image = security_image
        self.config = config or QuotaConfig()
        self._sensors: dict[tuple, SampledRate] = {}
        self._last_expiry_ms = 0

    @property
    def enabled(self) -> bool:
        return bool(self.image.quotas)

    def _sensor(self, kind: str, tags: tuple[str, str], now_ms: int) -> SampledRate:
        key = (kind,) + tags
        s = self._sensors.get(key)
        if s is None:
            s = self._sensors[key] = SampledRate(self.config.samples, self.config.window_ms)
        if now_ms - self._last_expiry_ms > 60_000:
            self._last_expiry_ms = now_ms
            for k in [k for k, v in self._sensors.items() if now_ms - v.last_record_ms > INACTIVE_SENSOR_MS and v is not s]:
                del self._sensors[k]
        return s

    def record(self, kind: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` and answer the throttle time it earns (0: within quota)."""
        found = resolve(self.image.quotas, kind, user, client_id)
        if found is None:
            return 0
        bound, tags = found
        s = self._sensor(kind, tags, now_ms)
        s.record(value, now_ms)
        return throttle_ms(s.rate(now_ms), bound, s.span_ms(now_ms))

    def throttle_if_exceeded(self, kind: str, user: str, client_id: str, now_ms: int) -> int:
        """Strict check before acting (controller mutations, KIP-599): the throttle time if
        the quota is already exhausted, else 0."""
        found = resolve(self.image.quotas, kind, user, client_id)
        if found is None:
            return 0
        bound, tags = found
        s = self._sensors.get((kind,) + tags)
        if s is None:
            return 0
        return throttle_ms(s.rate(now_ms), bound, s.span_ms(now_ms))

    def max_value_in_window(self, kind: str, user: str, client_id: str) -> float | None:
        """The most one request may take without certain throttling (caps a fetch's size)."""
        found = resolve(self.image.quotas, kind, user, client_id)
        if found is None:
            return None
        return found[0] * (self.config.samples - 1) * self.config.window_ms / 1000.0
