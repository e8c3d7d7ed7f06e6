"""``kbroker perf produce`` (kafka-producer-perf-test.sh) and ``kbroker perf consume``
(kafka-consumer-perf-test.sh): Kafka's output lines, plus a progress bar, a results table
and a throughput plot (``--plot FILE.svg`` also writes it as SVG)."""

from __future__ import annotations

import sys
import time

from kbroker.tools.client import EARLIEST, LATEST
from kbroker.tools.common import add_bootstrap, client, parse_kv, run
from kbroker.tools.perf_report import Progress, ascii_plot, svg_plot, table

REPORT_EVERY_S = 5.0


def add_parser(sub) -> None:
    p = sub.add_parser("perf", help="producer / consumer performance tests (like kafka-*-perf-test.sh)")
    ps = p.add_subparsers(dest="perf_command", required=True)
    pr = ps.add_parser("produce", help="like kafka-producer-perf-test.sh")
    pr.add_argument("--bootstrap-server", help="or bootstrap.servers in --producer-props")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--num-records", type=int, required=True)
    pr.add_argument("--record-size", type=int)
    pr.add_argument("--payload-file")
    pr.add_argument("--payload-delimiter", default="\\n")
    pr.add_argument("--throughput", type=float, required=True, help="records/s cap; -1 for none")
    pr.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE")
    pr.add_argument("--producer.config", dest="producer_config")
    pr.add_argument("--print-metrics", action="store_true")
    pr.add_argument("--plot", metavar="FILE.svg")
    pr.add_argument("--no-progress", action="store_true")
    pr.set_defaults(tool_main=lambda args: run(_produce, args))
    co = ps.add_parser("consume", help="like kafka-consumer-perf-test.sh")
    add_bootstrap(co)
    co.add_argument("--topic", required=True)
    co.add_argument("--messages", type=int, required=True)
    co.add_argument("--group", default="perf-consumer")
    co.add_argument("--fetch-size", type=int, default=1048576)
    co.add_argument("--from-latest", action="store_true")
    co.add_argument("--timeout", type=int, default=10000, help="ms without records before giving up")
    co.add_argument("--show-detailed-stats", action="store_true")
    co.add_argument("--reporting-interval", type=int, default=5000)
    co.add_argument("--hide-header", action="store_true")
    co.add_argument("--plot", metavar="FILE.svg")
    co.add_argument("--no-progress", action="store_true")
    co.set_defaults(tool_main=lambda args: run(_consume, args))


def _percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return 0.0
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


class _ProduceStats:
    """Acks as they arrive: latencies, totals, the current report window, the plot series."""

    def __init__(self, start: float) -> None:
        self.start = self.win_start = start
        self.lat: list[float] = []
        self.acked = self.bytes = self.errors = 0
        self.win_n = self.win_bytes = 0
        self.win_lat_sum = self.win_lat_max = 0.0
        self.series: list[tuple[float, float]] = []

    def ack(self, n: int, size: int, secs: float, error: int) -> None:
        ms = secs * 1000
        if error:
            self.errors += n
        self.lat.extend([ms] * n)
        self.acked += n
        self.bytes += size
        self.win_n += n
        self.win_bytes += size
        self.win_lat_sum += ms * n
        self.win_lat_max = max(self.win_lat_max, ms)

    def tick(self, now: float) -> None:
        if now - self.win_start >= REPORT_EVERY_S and self.win_n:
            _window_line(self.win_n, self.win_bytes, now - self.win_start, self.win_lat_sum / self.win_n, self.win_lat_max)
            self.series.append((now - self.start, self.win_n / (now - self.win_start)))
            self.win_start, self.win_n, self.win_bytes, self.win_lat_sum, self.win_lat_max = now, 0, 0, 0.0, 0.0
        elif not self.series or now - self.start - self.series[-1][0] >= 0.25:
            self.series.append((now - self.start, self.acked / max(1e-9, now - self.start)))


def _produce(args) -> int:
    props = parse_kv(args.producer_props, None)
    args.bootstrap_server = args.bootstrap_server or props.get("bootstrap.servers")
    if not args.bootstrap_server:
        raise SystemExit("--bootstrap-server or --producer-props bootstrap.servers=... is required")
    if args.record_size is None and not args.payload_file:
        raise SystemExit("Either --record-size or --payload-file must be specified")
    if args.payload_file:
        delim = args.payload_delimiter.encode().decode("unicode_escape").encode()
        payloads = [x for x in open(args.payload_file, "rb").read().split(delim) if x]
    else:
        payloads = [bytes((65 + i % 26) for i in range(args.record_size))]
    with client(args) as c:
        nparts = len(c.partitions(args.topic))
        if nparts == 0:
            raise SystemExit(f"topic {args.topic} does not exist")
        kc = c.kafka_client(c.leader_addr(args.topic, 0))
        st = c.loop.run_until_complete(_produce_async(args, props, kc, nparts, payloads))
    elapsed = time.perf_counter() - st.start
    lat = sorted(st.lat)
    rate = st.acked / elapsed
    mb = st.bytes / 1024 / 1024 / elapsed
    avg = sum(lat) / len(lat) if lat else 0.0
    mx = lat[-1] if lat else 0.0
    p50, p95, p99, p999 = (_percentile(lat, q) for q in (0.5, 0.95, 0.99, 0.999))
    print(f"{st.acked} records sent, {rate:.1f} records/sec ({mb:.2f} MB/sec), {avg:.2f} ms avg latency, "
          f"{mx:.2f} ms max latency, {p50:.0f} ms 50th, {p95:.0f} ms 95th, {p99:.0f} ms 99th, {p999:.0f} ms 99.9th.")
    table([("records", f"{st.acked}"), ("errors", f"{st.errors}"), ("elapsed s", f"{elapsed:.2f}"),
           ("records/s", f"{rate:,.1f}"), ("MB/s", f"{mb:.2f}"), ("avg latency ms", f"{avg:.2f}"),
           ("p50 ms", f"{p50:.2f}"), ("p99 ms", f"{p99:.2f}"), ("max ms", f"{mx:.2f}")])
    st.series.append((elapsed, rate))
    ascii_plot(st.series, "throughput (records/s, cumulative average)")
    if args.plot:
        svg_plot(st.series, args.plot, f"kbroker perf produce {args.topic}", "records/s")
    return 1 if st.errors else 0


async def _produce_async(args, props, kc, nparts: int, payloads: list[bytes]) -> _ProduceStats:
    """Batches of ``batch.size`` bytes round-robin over the partitions, up to
    ``max.in.flight.requests.per.connection`` requests pipelined on one connection."""
    import asyncio

    from kbroker.tools.partitioner import Partitioner
    from kbroker.tools.sender import CODEC_IDS
    from kbroker.wire.generated.produce_request import ProduceRequest
    from kbroker.wire.records import BatchBuilder
    acks = {"all": -1}.get(props.get("acks", "all"), None)
    acks = int(props.get("acks", "-1")) if acks is None else acks
    batch_bytes = int(props.get("batch.size", 16384))
    slots = asyncio.Semaphore(int(props.get("max.in.flight.requests.per.connection", 5)))
    codec = CODEC_IDS[props.get("compression.type", "none")]
    parts = Partitioner(nparts)
    per_batch = max(1, batch_bytes // max(1, len(payloads[0]) + 10))
    P = ProduceRequest.TopicProduceData
    progress = Progress(args.num_records, not args.no_progress and sys.stderr.isatty())
    st = _ProduceStats(time.perf_counter())

    async def send(req, n: int, size: int) -> None:
        t = time.perf_counter()
        try:
            resp = await kc.send(req, 9, expect_response=acks != 0)
        finally:
            slots.release()
        code = resp.responses[0].partition_responses[0].error_code if resp is not None else 0
        st.ack(n, size, time.perf_counter() - t, code)

    tasks = []
    sent = 0
    while sent < args.num_records:
        await slots.acquire()
        n = min(per_batch, args.num_records - sent)
        b = BatchBuilder(compression=codec)
        now_ms = int(time.time() * 1000)
        size = 0
        for i in range(n):
            v = payloads[(sent + i) % len(payloads)]
            size += len(v)
            b.append(value=v, timestamp=now_ms)
        p = parts(None)
        parts.next_batch()
        req = ProduceRequest(acks=acks, timeout_ms=30000, topic_data=[P(name=args.topic, partition_data=[
            P.PartitionProduceData(index=p, records=bytes(b.build()))])])
        tasks.append(asyncio.ensure_future(send(req, n, size)))
        sent += n
        if args.throughput > 0:
            ahead = sent / args.throughput - (time.perf_counter() - st.start)
            if ahead > 0:
                await asyncio.sleep(ahead)
        now = time.perf_counter()
        progress.update(st.acked, st.acked / max(1e-9, now - st.start))
        st.tick(now)
    await asyncio.gather(*tasks)
    progress.finish()
    return st


def _window_line(n, size, secs, avg, mx) -> None:
    print(f"{n} records sent, {n / secs:.1f} records/sec ({size / 1024 / 1024 / secs:.2f} MB/sec), "
          f"{avg:.1f} ms avg latency, {mx:.1f} ms max latency.")


def _consume(args) -> int:
    progress = Progress(args.messages, not args.no_progress and sys.stderr.isatty())
    series: list[tuple[float, float]] = []
    n = nbytes = 0
    with client(args) as c:
        parts = sorted(c.partitions(args.topic))
        start_ms = int(time.time() * 1000)
        t0 = time.perf_counter()
        pos = c.list_offsets(args.topic, LATEST if args.from_latest else EARLIEST, parts)
        fetch_start = time.perf_counter()
        last_data = fetch_start
        while n < args.messages:
            got = 0
            for p in parts:
                batches, _ = c.fetch(args.topic, p, pos[p], max_bytes=args.fetch_size, max_wait_ms=100)
                for b in batches:
                    if b.base_offset + b.records_count <= pos[p] or b.is_control:
                        pos[p] = max(pos[p], b.next_offset)
                        continue
                    for rec in b.records():
                        if rec.offset < pos[p]:
                            continue
                        n += 1
                        got += 1
                        nbytes += len(rec.value or b"") + len(rec.key or b"")
                        pos[p] = rec.offset + 1
                        if n >= args.messages:
                            break
                    if n >= args.messages:
                        break
                if n >= args.messages:
                    break
            now = time.perf_counter()
            if got:
                last_data = now
                series.append((now - fetch_start, n / max(1e-9, now - fetch_start)))
            elif (now - last_data) * 1000 >= args.timeout:
                print(f"WARNING: Exiting before consuming the expected number of messages: timeout ({args.timeout} ms) exceeded.",
                      file=sys.stderr)
                break
            progress.update(n, n / max(1e-9, now - fetch_start))
        c.commit(args.group, {(args.topic, p): off for p, off in pos.items()})
    end = time.perf_counter()
    progress.finish()
    secs, fetch_secs = end - t0, end - fetch_start
    mb = nbytes / 1024 / 1024
    if not args.hide_header:
        print("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
              "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    fmt = lambda ms: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f":{ms % 1000:03d}"  # noqa: E731
    end_ms = start_ms + int(secs * 1000)
    print(f"{fmt(start_ms)}, {fmt(end_ms)}, {mb:.4f}, {mb / secs:.4f}, {n}, {n / secs:.4f}, "
          f"{int((fetch_start - t0) * 1000)}, {int(fetch_secs * 1000)}, {mb / fetch_secs:.4f}, {n / fetch_secs:.4f}")
    table([("records", f"{n}"), ("MB", f"{mb:.3f}"), ("elapsed s", f"{secs:.2f}"), ("records/s", f"{n / secs:,.1f}"),
           ("MB/s", f"{mb / secs:.2f}")])
    ascii_plot(series, "throughput (records/s, cumulative average)")
    if args.plot:
        svg_plot(series, args.plot, f"kbroker perf consume {args.topic}", "records/s")
    return 0 if n >= args.messages else 1
