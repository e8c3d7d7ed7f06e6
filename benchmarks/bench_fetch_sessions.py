"""Cost of an incremental fetch (KIP-227) against the size of its session, in-process.

    python benchmarks/bench_fetch_sessions.py [--partitions 1000,10000] [--fetches 300]

A broker (in this process, fake clock, no sockets) hosts P partitions (topics of 1,000); one
full fetch opens a session over all of them, then each round appends one record to one
partition and sends an incremental fetch (no partitions named, max_wait 0): what a consumer
of a large session sends all day. Reported: mean microseconds per incremental fetch. With
the session's caught-up partitions parked, the cost should not grow with P.

Then one record lands on every partition (all of them become ready at once, as when a
producer spreads over every partition) and incremental fetches run until the client has
them all: the longest fetch (the event loop is held that long: reads that run in one go stop
after fetch.READ_WHOLE_S), how many fetches it took and their total time.

librdkafka (confluent-kafka, the client of bench_scale) never opens a session: it sends a
full, sessionless fetch each time; the Java client (and Spark) use sessions.
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbroker.handlers.context import RequestContext  # noqa: E402
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest  # noqa: E402
from kbroker.wire.generated.fetch_request import FetchRequest  # noqa: E402
from kbroker.wire.generated.produce_request import ProduceRequest  # noqa: E402
from kbroker.wire.records import BatchBuilder  # noqa: E402
from tests.offline_server import start_offline, stop_offline  # noqa: E402

T = FetchRequest.FetchTopic


def offline_partitions(partitions: int, prefix: str):
    """A broker in this process hosting ``partitions`` partitions (topics of 1,000 named
    ``prefix0``, ``prefix1``...): (server, call(api key, version, request) -> response,
    [(topic, partition count)]). End it with ``stop_and_remove``."""
    server = start_offline(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    loop = server.loop

    def call(key, version, req):
        ctx = RequestContext(server, None, key, version, 1, "bench", server.clock.now_ms(), "PLAINTEXT")
        out = server.api_specs[key].handle(ctx, req)
        return loop.run_until_complete(out) if asyncio.iscoroutine(out) or asyncio.isfuture(out) else out

    topics = [(f"{prefix}{j}", min(1000, partitions - j * 1000)) for j in range((partitions + 999) // 1000)]
    for name, n in topics:
        C = CreateTopicsRequest.CreatableTopic
        call(19, 7, CreateTopicsRequest(topics=[C(name=name, num_partitions=n, replication_factor=-1,
                                                  assignments=[], configs=[])]))
    return server, call, topics


def run(partitions: int, fetches: int) -> float:
    server, call, topics = offline_partitions(partitions, "fs")
    full = call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=0,
                                    topics=[T(topic=name, partitions=[T.FetchPartition(
                                        partition=i, fetch_offset=0, partition_max_bytes=1 << 20) for i in range(n)])
                                        for name, n in topics], forgotten_topics_data=[]))
    sid, epoch = full.session_id, 1
    P = ProduceRequest.TopicProduceData
    spent = 0.0
    offsets: dict = {}
    for k in range(fetches):
        name, n = topics[k % len(topics)]
        part = (k * 7919) % n
        b = BatchBuilder()
        b.append(key=None, value=b"x" * 100, timestamp=1_700_000_000_000)
        call(0, 9, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
            P(name=name, partition_data=[P.PartitionProduceData(index=part, records=b.build())])]))
        # the client names the partitions whose position moved since the last fetch
        moved = [T(topic=t, partitions=[T.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)])
                 for (t, p), o in offsets.items()]
        t0 = time.perf_counter()
        resp = call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=sid,
                                        session_epoch=epoch, topics=moved, forgotten_topics_data=[]))
        spent += time.perf_counter() - t0
        assert resp.error_code == 0, resp.error_code
        epoch += 1
        offsets = {(t.topic, p.partition_index): p.high_watermark for t in resp.responses for p in t.partitions}
    everywhere = records_everywhere(call, topics, sid, epoch, offsets)
    stop_and_remove(server)
    return spent / fetches * 1e6, everywhere


def stop_and_remove(server) -> None:
    """Stop an ``offline_partitions`` broker and delete its temporary data directory."""
    stop_offline(server)
    for d in server.config.log_dirs:
        shutil.rmtree(d, ignore_errors=True)


def one_record_everywhere(call, topics, size: int) -> None:
    """Append one record of ``size`` bytes to every partition of ``topics``."""
    P = ProduceRequest.TopicProduceData
    for name, n in topics:
        b = BatchBuilder()
        b.append(key=None, value=b"x" * size, timestamp=1_700_000_000_000)
        rec = b.build()
        call(0, 9, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
            P(name=name, partition_data=[P.PartitionProduceData(index=i, records=bytes(rec)) for i in range(n)])]))


def records_everywhere(call, topics, sid, epoch, offsets):
    """(longest fetch ms, fetches, total ms) to deliver one new record from every partition."""
    one_record_everywhere(call, topics, 100)
    want = sum(n for _, n in topics)
    got, fetches, total, longest = 0, 0, 0.0, 0.0
    while got < want:
        moved = [T(topic=t, partitions=[T.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)])
                 for (t, p), o in offsets.items()]
        t0 = time.perf_counter()
        resp = call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=50 << 20, session_id=sid,
                                        session_epoch=epoch, topics=moved, forgotten_topics_data=[]))
        dt = time.perf_counter() - t0
        total, longest, fetches, epoch = total + dt, max(longest, dt), fetches + 1, epoch + 1
        offsets = {}
        for t in resp.responses:
            for p in t.partitions:
                if getattr(p.records, "size", 0):   # (a log ReadResult; b"" when none)
                    got += 1
                    offsets[(t.topic, p.partition_index)] = p.high_watermark
        assert fetches < 10 * want, "records not delivered"
    return longest * 1e3, fetches, total * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", default="1000,10000")
    ap.add_argument("--fetches", type=int, default=300)
    args = ap.parse_args()
    print("| partitions | incremental fetch, one append between (us) | a record on every partition: "
          "longest fetch ms | fetches | total ms |")
    print("|---:|---:|---:|---:|---:|")
    for p in [int(x) for x in args.partitions.split(",")]:
        mean_us, (longest, n, total) = run(p, args.fetches)
        print(f"| {p} | {mean_us:.0f} | {longest:.1f} | {n} | {total:.0f} |", flush=True)


if __name__ == "__main__":
    main()
