"""``kbroker console-consumer`` (kafka-console-consumer.sh): print records to stdout.

--partition/--offset or --from-beginning pick where to start. With --group the consumer joins
the group (the KIP-848 consumer protocol: the coordinator splits the partitions between the
group's members), starts each partition it is given at the group's committed offset and
commits its position when a partition is taken away and at exit; with --group and
--partition it reads that partition directly and only commits under the group. Output as Kafka's
DefaultMessageFormatter (``--property print.key=true`` ...), or ``--formatter json``."""

from __future__ import annotations

import base64
import json
import re
import sys
import time

from kbroker.tools.client import EARLIEST, LATEST
from kbroker.tools.common import add_bootstrap, client, parse_kv, run
from kbroker.tools.group_member import GroupMember


def add_parser(sub) -> None:
    p = sub.add_parser("console-consumer", help="print records (like kafka-console-consumer.sh)")
    add_bootstrap(p)
    p.add_argument("--topic")
    p.add_argument("--include", help="regular expression of topics")
    p.add_argument("--partition", type=int)
    p.add_argument("--offset", default="latest", help="earliest, latest or an offset (with --partition)")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--timeout-ms", type=int, help="exit after this long without a record")
    p.add_argument("--group")
    p.add_argument("--isolation-level", default="read_uncommitted", choices=["read_uncommitted", "read_committed"])
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--consumer.config", dest="consumer_config")
    p.add_argument("--formatter", default="default",
                   help="default (Kafka's DefaultMessageFormatter) or json (kbroker: one object per line)")
    p.add_argument("--skip-message-on-error", action="store_true")
    p.set_defaults(tool_main=lambda args: run(_main, args))


def _text(b: bytes | None, null: str) -> str:
    return null if b is None else b.decode("utf-8", "replace")


class Formatter:
    def __init__(self, props: dict[str, str], kind: str) -> None:
        t = lambda k, d="false": props.get(k, d).lower() == "true"  # noqa: E731
        self.kind = kind
        self.ts, self.part, self.off = t("print.timestamp"), t("print.partition"), t("print.offset")
        self.key, self.headers, self.value = t("print.key"), t("print.headers"), t("print.value", "true")
        unesc = lambda s: s.encode().decode("unicode_escape")  # noqa: E731
        self.key_sep = unesc(props.get("key.separator", "\t"))
        self.line_sep = unesc(props.get("line.separator", "\n"))
        self.h_sep = unesc(props.get("headers.separator", ","))
        self.h_key_sep = unesc(props.get("headers.key.separator", ":"))
        self.null = props.get("null.literal", "null")

    def format(self, topic: str, partition: int, batch, rec) -> str:
        if self.kind == "json":
            def enc(b):
                if b is None:
                    return None
                try:
                    return b.decode("utf-8")
                except UnicodeDecodeError:
                    return {"base64": base64.b64encode(b).decode()}
            return json.dumps({"topic": topic, "partition": partition, "offset": rec.offset,
                               "timestamp": rec.timestamp,
                               "timestampType": "LogAppendTime" if batch.timestamp_type else "CreateTime",
                               "headers": [[k, enc(v)] for k, v in rec.headers], "key": enc(rec.key),
                               "value": enc(rec.value)}) + "\n"
        fields = []
        if self.ts:
            fields.append(f"{'LogAppendTime' if batch.timestamp_type else 'CreateTime'}:{rec.timestamp}")
        if self.part:
            fields.append(f"Partition:{partition}")
        if self.off:
            fields.append(f"Offset:{rec.offset}")
        if self.headers:
            fields.append(self.h_sep.join(f"{k}{self.h_key_sep}{_text(v, self.null)}" for k, v in rec.headers)
                          if rec.headers else "NO_HEADERS")
        if self.key:
            fields.append(_text(rec.key, self.null))
        if self.value:
            fields.append(_text(rec.value, self.null))
        return self.key_sep.join(fields) + self.line_sep


def _start_offsets(c, args, parts_of: dict[str, list[int]], committed: dict) -> dict[tuple[str, int], int]:
    start = {}
    for t, parts in parts_of.items():
        earliest = c.list_offsets(t, EARLIEST, parts)
        latest = c.list_offsets(t, LATEST, parts)
        for p in parts:
            if args.partition is not None and args.offset not in ("earliest", "latest"):
                start[(t, p)] = int(args.offset)
            elif (t, p) in committed:
                start[(t, p)] = committed[(t, p)]
            elif args.from_beginning or args.offset == "earliest":
                start[(t, p)] = earliest[p]
            else:
                start[(t, p)] = latest[p]
    return start


def _main(args) -> int:
    fmt = Formatter(parse_kv(args.property, None), args.formatter)
    iso = 1 if args.isolation_level == "read_committed" else 0
    n = 0
    with client(args) as c:
        if args.topic:
            topics = [args.topic]
        elif args.include:
            topics = sorted(t for t in c.topics() if re.fullmatch(args.include, t))
        else:
            raise SystemExit("Exactly one of --include/--topic is required.")
        member = GroupMember(c, args.group, topics) if args.group and args.partition is None else None
        if member is not None:
            pos: dict[tuple[str, int], int] = {}
        else:
            committed = {tp: off for tp, (off, _) in c.committed(args.group).items()} if args.group else {}
            pos = _start_offsets(c, args, {t: sorted(c.partitions(t)) if args.partition is None else [args.partition]
                                           for t in topics}, committed)
        last_record = time.monotonic()
        out = sys.stdout
        try:
            while args.max_messages is None or n < args.max_messages:
                if member is not None:
                    gained, lost = member.poll(pos)
                    for tp in lost:
                        pos.pop(tp, None)
                    if gained:
                        last_record = time.monotonic()       # --timeout-ms counts from the assignment
                        by_topic: dict[str, list[int]] = {}
                        for t, p in sorted(gained):
                            by_topic.setdefault(t, []).append(p)
                        pos.update(_start_offsets(c, args, by_topic, member.committed(gained)))
                    if not pos:
                        time.sleep(0.05)
                got = False
                for (t, p), off in list(pos.items()):
                    batches, _ = c.fetch(t, p, off, max_wait_ms=100, isolation_level=iso)
                    for b in batches:
                        if b.is_control:
                            pos[(t, p)] = b.next_offset
                            continue
                        for rec in b.records():
                            if rec.offset < off:
                                continue
                            out.write(fmt.format(t, p, b, rec))
                            n += 1
                            got = True
                            pos[(t, p)] = rec.offset + 1
                            if args.max_messages is not None and n >= args.max_messages:
                                break
                        else:
                            pos[(t, p)] = max(pos[(t, p)], b.next_offset)
                            continue
                        break
                    if args.max_messages is not None and n >= args.max_messages:
                        break
                out.flush()
                if got:
                    last_record = time.monotonic()
                elif args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                    break
        except KeyboardInterrupt:
            pass
        if member is not None:
            member.close(pos)
        elif args.group:
            c.commit(args.group, pos)
    print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0
