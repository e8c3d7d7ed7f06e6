"""``kbroker console-producer`` (kafka-console-producer.sh): one record per input line.

Line format, as Kafka's LineMessageReader: ``[headers<TAB>][key<TAB>]value`` with
``--property parse.key=true``, ``parse.headers=true`` (``h1:v1,h2:v2``; ``headers.delimiter``,
``headers.separator``, ``headers.key.separator``, ``key.separator``, ``null.marker``).
kbroker adds ``--partition N`` and ``--property parse.timestamp=true`` (a leading
``<ms><TAB>`` field, before the headers)."""

from __future__ import annotations

import sys

from kbroker.tools.common import add_bootstrap, client, parse_kv, run
from kbroker.tools.sender import RecordSender


def add_parser(sub) -> None:
    p = sub.add_parser("console-producer", help="produce lines from stdin (like kafka-console-producer.sh)")
    add_bootstrap(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--producer.config", dest="producer_config")
    p.add_argument("--partition", type=int, help="kbroker: send every record to this partition")
    p.add_argument("--compression-codec", nargs="?", const="gzip", default="none",
                   choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--batch-size", type=int, default=200, help="records per batch when reading a pipe")
    p.add_argument("--request-required-acks", default="-1")
    p.add_argument("--sync", action="store_true", help="send each line as it is read")
    p.set_defaults(tool_main=lambda args: run(_main, args))


def _unescape(s: str) -> str:
    return s.encode("utf-8").decode("unicode_escape")


class LineParser:
    def __init__(self, props: dict[str, str]) -> None:
        t = lambda k: props.get(k, "false").lower() == "true"  # noqa: E731
        self.parse_key = t("parse.key")
        self.parse_headers = t("parse.headers")
        self.parse_ts = t("parse.timestamp")
        self.key_sep = _unescape(props.get("key.separator", "\t"))
        self.h_delim = _unescape(props.get("headers.delimiter", "\t"))
        self.h_sep = _unescape(props.get("headers.separator", ","))
        self.h_key_sep = _unescape(props.get("headers.key.separator", ":"))
        self.null = props.get("null.marker")

    def _bytes(self, s: str) -> bytes | None:
        return None if self.null is not None and s == self.null else s.encode("utf-8")

    def parse(self, line: str):
        ts = None
        headers = []
        key = None
        if self.parse_ts:
            head, _, line = line.partition("\t")
            ts = int(head)
        if self.parse_headers:
            hs, found, line = line.partition(self.h_delim)
            if not found:
                raise ValueError(f"No headers delimiter found on line: {line}")
            if hs and hs != "NO_HEADERS":
                for h in hs.split(self.h_sep):
                    k, _, v = h.partition(self.h_key_sep)
                    headers.append((k, self._bytes(v)))
        if self.parse_key:
            k, found, line = line.partition(self.key_sep)
            if not found:
                raise ValueError(f"No key separator found on line: {k}")
            key = self._bytes(k)
        return ts, headers, key, self._bytes(line)


def _main(args) -> int:
    parser = LineParser(parse_kv(args.property, None))
    interactive = args.sync or sys.stdin.isatty()
    acks = {"all": -1}.get(args.request_required_acks, None)
    acks = int(args.request_required_acks) if acks is None else acks
    with client(args) as c:
        s = RecordSender(c, args.topic, batch_records=1 if interactive else args.batch_size,
                         compression=args.compression_codec, acks=acks, partition=args.partition)
        for raw in sys.stdin:
            line = raw.rstrip("\n").rstrip("\r")
            ts, headers, key, value = parser.parse(line)
            s.send(key, value, headers, ts)
        s.flush()
    return 0
