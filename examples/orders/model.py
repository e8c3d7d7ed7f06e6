"""Order events and the reference aggregates, in plain Python (no Spark).

The generator, the end-to-end test and the pipeline command share this: the events are built
first from a seed, so the same list drives the producer and the reference the Spark output is
checked against.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timezone

TOPIC = "orders"
DEAD_LETTER_TOPIC = "orders-dead-letter"
AGGREGATES_TOPIC = "orders-per-category-minute"
CATEGORIES = ["books", "games", "garden", "kitchen", "music", "toys"]
WINDOW_MS = 60_000
WATERMARK = "3 minutes"      # the stream job drops events older than this behind the newest
MAX_LATENESS_MS = 60_000     # how late the generator makes its late events (< WATERMARK)
# Malformed kinds and the error the pipeline reports for each.
MALFORMED = {
    "not-json": "value does not parse as an order (not JSON, or a field of the wrong type)",
    "wrong-type": "value does not parse as an order (not JSON, or a field of the wrong type)",
    "missing-amount": "missing field: amount_cents",
}


@dataclass(frozen=True)
class Event:
    key: bytes
    value: bytes
    timestamp_ms: int            # the record's timestamp: the order's event time
    malformed: str | None = None  # a key of MALFORMED, or None for a valid order

    def order(self) -> dict:
        return json.loads(self.value)


def generate(count: int, *, seed: int, start_ms: int, spacing_ms: float,
             late_fraction: float = 0.1, malformed_fraction: float = 0.03) -> list[Event]:
    """count events, one every spacing_ms of event time from start_ms; some late (event time up
    to MAX_LATENESS_MS before their place in the stream), a few malformed."""
    rng = random.Random(seed)
    events = []
    for i in range(count):
        customer = f"c-{rng.randrange(40):03d}"
        ts = start_ms + int(i * spacing_ms)
        if rng.random() < late_fraction:
            ts = max(start_ms, ts - rng.randrange(5_000, MAX_LATENESS_MS))
        order = {"order_id": f"o-{seed}-{i:06d}", "customer": customer,
                 "category": rng.choice(CATEGORIES), "amount_cents": rng.randrange(100, 20_000),
                 "event_time_ms": ts}
        kind = None
        if rng.random() < malformed_fraction:
            kind = rng.choice(sorted(MALFORMED))
            if kind == "not-json":
                value = b"{order " + order["order_id"].encode()
            elif kind == "wrong-type":
                value = json.dumps({**order, "amount_cents": "12.50 EUR"}).encode()
            else:
                value = json.dumps({k: v for k, v in order.items() if k != "amount_cents"}).encode()
        else:
            value = json.dumps(order).encode()
        events.append(Event(customer.encode(), value, ts, kind))
    return events


def minute(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def aggregate_key(window_start_ms: int, category: str) -> str:
    return f"{minute(window_start_ms)}|{category}"


def reference_aggregates(events: list[Event], from_ms: int | None = None,
                         to_ms: int | None = None) -> dict[str, dict]:
    """Orders and revenue per category per minute of event time: what the Spark jobs must write.
    from_ms/to_ms restrict to event times in [from_ms, to_ms)."""
    out: dict[str, dict] = {}
    for e in events:
        if e.malformed:
            continue
        o = e.order()
        ts = o["event_time_ms"]
        if (from_ms is not None and ts < from_ms) or (to_ms is not None and ts >= to_ms):
            continue
        start = ts - ts % WINDOW_MS
        row = out.setdefault(aggregate_key(start, o["category"]), {
            "window_start": minute(start), "window_end": minute(start + WINDOW_MS),
            "category": o["category"], "orders": 0, "revenue_cents": 0})
        row["orders"] += 1
        row["revenue_cents"] += o["amount_cents"]
    return out
