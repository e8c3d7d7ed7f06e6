"""``kbroker console-consumer`` (kafka-console-consumer.sh): print records to stdout.

--partition/--offset or --from-beginning pick where to start; with --group the group's
committed offsets are the start and the position is committed at exit (a standalone
consumer: partitions are read directly, not assigned by a rebalance). Output as Kafka's
DefaultMessageFormatter (``--property print.key=true`` ...), or ``--formatter json``."""

from __future__ import annotations

import base64
import json
import re
import sys
import time

from kbroker.tools.client import EARLIEST, LATEST
from kbroker.tools.common import add_bootstrap, client, parse_kv, run


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


def _start_offsets(c, args, topics: list[str]) -> dict[tuple[str, int], int]:
    committed = {tp: off for tp, (off, _) in c.committed(args.group).items()} if args.group else {}
    start = {}
    for t in topics:
        parts = sorted(c.partitions(t)) if args.partition is None else [args.partition]
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
        pos = _start_offsets(c, args, topics)
        last_record = time.monotonic()
        out = sys.stdout
        try:
            while args.max_messages is None or n < args.max_messages:
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
        if args.group:
            c.commit(args.group, pos)
    print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0
