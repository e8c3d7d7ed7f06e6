"""``kbroker get-offsets`` (kafka-get-offsets.sh): offsets for a time per partition,
printed as ``topic:partition:offset``. --time: -1 latest, -2 earliest, -3 max timestamp,
-4 earliest local, -5 latest tiered, or a timestamp in ms (also ``latest``/``earliest``/``max-timestamp``)."""

from __future__ import annotations

import re

from kbroker.tools.common import add_bootstrap, client, run

NAMED_TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}


def add_parser(sub) -> None:
    p = sub.add_parser("get-offsets", help="offsets of topic partitions at a time (like kafka-get-offsets.sh)")
    add_bootstrap(p)
    p.add_argument("--topic", help="topic name or regular expression (default: all)")
    p.add_argument("--partitions", help="comma-separated partition ids")
    p.add_argument("--topic-partitions", help="topic:partition list, e.g. t:0,u:1-3,v:")
    p.add_argument("--time", default="-1")
    p.add_argument("--exclude-internal-topics", action="store_true")
    p.set_defaults(tool_main=lambda args: run(_main, args))


def _parts_spec(spec: str) -> set[int] | None:
    if not spec:
        return None
    out: set[int] = set()
    for item in spec.split(","):
        if "-" in item:
            lo, hi = item.split("-")
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(item))
    return out


def _main(args) -> int:
    t = NAMED_TIMES.get(args.time, None)
    spec = t if t is not None else int(args.time)
    with client(args) as c:
        topics = c.topics()
        wanted: list[tuple[str, set[int] | None]] = []
        if args.topic_partitions:
            for item in args.topic_partitions.split(","):
                name, _, ps = item.partition(":")
                wanted.append((name, _parts_spec(ps)))
        else:
            wanted.append((args.topic or ".*", _parts_spec(args.partitions or "")))
        for pattern, parts in wanted:
            for name in sorted(topics):
                if args.exclude_internal_topics and topics[name].is_internal:
                    continue
                if not (name == pattern or re.fullmatch(pattern, name)):
                    continue
                offsets = c.list_offsets(name, spec, sorted(parts) if parts else None)
                for p, off in sorted(offsets.items()):
                    if off >= 0:
                        print(f"{name}:{p}:{off}")
    return 0
