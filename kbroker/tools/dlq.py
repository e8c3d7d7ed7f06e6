"""``kbroker dlq inspect|replay``: list dead letters (kbroker.dlq) and republish chosen ones
to their original topic, keeping key, value and headers and counting replays
(``dlq.replay.count``). ``replay --all`` resumes after the last replayed record (the position
is committed for group ``--group``, default ``<dlq topic>.replay``), so running it twice does
not replay anything twice."""

from __future__ import annotations

import json
import sys

from kbroker.dlq.headers import (ATTEMPTS, ERROR, ORIGINAL_OFFSET, ORIGINAL_PARTITION, ORIGINAL_TOPIC,
                                 REPLAY_COUNT, header_map, without_context)
from kbroker.tools.client import EARLIEST, LATEST
from kbroker.tools.common import add_bootstrap, client, run
from kbroker.tools.sender import RecordSender


def add_parser(sub) -> None:
    p = sub.add_parser("dlq", help="inspect and replay dead-letter topics")
    ps = p.add_subparsers(dest="dlq_command", required=True)
    i = ps.add_parser("inspect", help="list the dead letters of a topic")
    add_bootstrap(i)
    i.add_argument("--topic", required=True, help="the dead-letter topic (e.g. orders.dlq)")
    i.add_argument("--formatter", choices=["text", "json"], default="text")
    i.add_argument("--max-messages", type=int)
    i.set_defaults(tool_main=lambda args: run(_inspect, args))
    r = ps.add_parser("replay", help="republish dead letters to their original topic")
    add_bootstrap(r)
    r.add_argument("--topic", required=True, help="the dead-letter topic")
    sel = r.add_mutually_exclusive_group(required=True)
    sel.add_argument("--offsets", help="partition:offset or offset (partition 0), comma-separated")
    sel.add_argument("--all", action="store_true", help="every dead letter after the last replayed one")
    r.add_argument("--to-topic", help="republish here instead of the original topic")
    r.add_argument("--group", help="where --all keeps its position (default <topic>.replay)")
    r.add_argument("--dry-run", action="store_true")
    r.set_defaults(tool_main=lambda args: run(_replay, args))


def _records(c, topic: str, start: dict[int, int] | None = None):
    """Every (partition, record) of ``topic`` from ``start`` (default: the beginning) to its end."""
    parts = sorted(c.partitions(topic))
    begin = c.list_offsets(topic, EARLIEST, parts)
    end = c.list_offsets(topic, LATEST, parts)
    for p in parts:
        pos = max(begin[p], (start or {}).get(p, begin[p]))
        while pos < end[p]:
            batches, _ = c.fetch(topic, p, pos, max_wait_ms=0)
            if not batches:
                break
            for b in batches:
                for rec in b.records():
                    if rec.offset >= pos and not b.is_control:
                        yield p, rec
                pos = max(pos, b.next_offset)


def _text(b) -> str:
    return "null" if b is None else b.decode("utf-8", "replace")


def _inspect(args) -> int:
    n = 0
    with client(args) as c:
        if args.formatter == "text":
            print("PARTITION\tOFFSET\tORIGINAL\tATTEMPTS\tREPLAYS\tERROR\tKEY\tVALUE")
        for p, rec in _records(c, args.topic):
            h = header_map(rec.headers)
            orig = f"{h.get(ORIGINAL_TOPIC, '?')}-{h.get(ORIGINAL_PARTITION, '?')}@{h.get(ORIGINAL_OFFSET, '?')}"
            if args.formatter == "json":
                print(json.dumps({"partition": p, "offset": rec.offset, "timestamp": rec.timestamp,
                                  "headers": h, "key": _text(rec.key), "value": _text(rec.value)}))
            else:
                print(f"{p}\t{rec.offset}\t{orig}\t{h.get(ATTEMPTS, '')}\t{h.get(REPLAY_COUNT, '0')}\t"
                      f"{h.get(ERROR, '')}\t{_text(rec.key)}\t{_text(rec.value)}")
            n += 1
            if args.max_messages is not None and n >= args.max_messages:
                break
    print(f"{n} dead letters in {args.topic}", file=sys.stderr)
    return 0


def _chosen(spec: str) -> set[tuple[int, int]]:
    out = set()
    for item in spec.split(","):
        p, _, off = item.strip().rpartition(":")
        out.add((int(p) if p else 0, int(off)))
    return out


def _replay(args) -> int:
    group = args.group or f"{args.topic}.replay"
    chosen = _chosen(args.offsets) if args.offsets else None
    replayed = 0
    with client(args) as c:
        start = None
        if args.all:
            start = {p: off for (t, p), (off, _) in c.committed(group).items() if t == args.topic}
        senders: dict[str, RecordSender] = {}
        last: dict[int, int] = {}
        for p, rec in _records(c, args.topic, start):
            if chosen is not None and (p, rec.offset) not in chosen:
                continue
            h = header_map(rec.headers)
            target = args.to_topic or h.get(ORIGINAL_TOPIC)
            if not target:
                print(f"skipping {args.topic}-{p}@{rec.offset}: no {ORIGINAL_TOPIC} header", file=sys.stderr)
                continue
            count = int(h.get(REPLAY_COUNT, "0")) + 1
            headers = without_context(rec.headers) + [(REPLAY_COUNT, str(count).encode())]
            print(f"replaying {args.topic}-{p}@{rec.offset} -> {target} (replay {count})")
            if not args.dry_run:
                s = senders.get(target)
                if s is None:
                    s = senders[target] = RecordSender(c, target, batch_records=100)
                same_partition = int(h[ORIGINAL_PARTITION]) if target == h.get(ORIGINAL_TOPIC) and ORIGINAL_PARTITION in h else None
                s.send(rec.key, rec.value, headers, partition=same_partition)
            last[p] = rec.offset + 1
            replayed += 1
        for s in senders.values():
            s.flush()
        if args.all and last and not args.dry_run:
            c.commit(group, {(args.topic, p): off for p, off in last.items()})
    print(f"replayed {replayed} dead letters from {args.topic}", file=sys.stderr)
    return 0
