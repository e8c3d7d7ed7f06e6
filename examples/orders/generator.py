"""Produce order events to `orders`: JSON keyed by customer, record timestamp = event time,
some late, a few malformed.

    python -m examples.orders.generator --bootstrap 127.0.0.1:9092 --count 1000 --rate 200
"""
from __future__ import annotations

import argparse
import sys
import time

from examples.orders.kafka_io import create_topics, produce
from examples.orders.model import generate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=200, help="orders per second (wall clock)")
    ap.add_argument("--span-minutes", type=float, default=5,
                    help="event time the orders cover, ending now")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    span_ms = args.span_minutes * 60_000
    events = generate(args.count, seed=args.seed, start_ms=int(time.time() * 1000 - span_ms),
                      spacing_ms=span_ms / args.count)
    create_topics(args.bootstrap)
    produce(args.bootstrap, events, rate=args.rate)
    print(f"produced {len(events)} orders ({sum(1 for e in events if e.malformed)} malformed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
