"""What the metrics cost on the request path: the same produce and fetch requests dispatched
in-process (real KafkaServer, real dispatcher, real logs; no sockets) with the request
counters on and off, alternating rounds so machine noise hits both alike. Reports time per
request and the ratio on/off.

    python benchmarks/bench_metrics_overhead.py [--requests 20000] [--rounds 5]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbroker.config import BrokerConfig  # noqa: E402
from kbroker.handlers.dispatcher import Dispatcher  # noqa: E402
from kbroker.server import KafkaServer  # noqa: E402
from kbroker.wire.frame import encode_request  # noqa: E402
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest  # noqa: E402
from kbroker.wire.generated.fetch_request import FetchRequest  # noqa: E402
from kbroker.wire.generated.produce_request import ProduceRequest  # noqa: E402
from kbroker.wire.records import BatchBuilder  # noqa: E402


def _produce_frame(i: int) -> bytes:
    b = BatchBuilder()
    for j in range(10):
        b.append(key=b"k%d" % j, value=b"v" * 100, timestamp=1000)
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[P(name="bench", partition_data=[
        P.PartitionProduceData(index=i % 3, records=bytes(b.build()))])])
    return encode_request(i, "bench", req, 9)[4:]


def _fetch_frame(i: int) -> bytes:
    F = FetchRequest.FetchTopic
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[F(topic="bench", partitions=[
                           F.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=(i * 7) % 1000,
                                            log_start_offset=-1, partition_max_bytes=1 << 16) for p in range(3)])],
                       forgotten_topics_data=[], rack_id="")
    return encode_request(i, "bench", req, 12)[4:]


def _ctx(server, req):
    from kbroker.handlers.context import RequestContext
    return RequestContext(server, None, req.API_KEY, 9 if req.API_KEY == 0 else 12, 1, "bench",
                          server.clock.now_ms(), "PLAINTEXT")


def run(requests: int, rounds: int) -> None:
    loop = asyncio.new_event_loop()
    tmp = tempfile.TemporaryDirectory()
    cfg = BrokerConfig.load(None, [f"log.dirs={tmp.name}", "listeners=PLAINTEXT://127.0.0.1:9092"])
    server = KafkaServer(cfg)
    loop.run_until_complete(server.start(listen=False))
    on = Dispatcher(server, server.api_specs)
    off = Dispatcher(server, server.api_specs)
    off.metrics = None
    T = CreateTopicsRequest.CreatableTopic
    created = on.dispatch(None, memoryview(encode_request(1, "b", CreateTopicsRequest(
        topics=[T(name="bench", num_partitions=3, replication_factor=1)], timeout_ms=1000), 7)[4:]))
    if hasattr(created, "__await__"):
        loop.run_until_complete(created)
    assert server.replicas.get("bench", 2) is not None
    produce = [memoryview(bytearray(_produce_frame(i))) for i in range(requests)]
    fetch = [memoryview(_fetch_frame(i)) for i in range(requests)]

    def timed(d, frames) -> float:
        t = time.perf_counter()
        for f in frames:
            r = d.dispatch(None, f)
            if hasattr(r, "__await__"):
                loop.run_until_complete(r)
        return (time.perf_counter() - t) / len(frames) * 1e6

    results = {("produce", "on"): [], ("produce", "off"): [], ("fetch", "on"): [], ("fetch", "off"): []}
    for r in range(rounds):
        order = [("on", on), ("off", off)] if r % 2 == 0 else [("off", off), ("on", on)]
        for name, d in order:
            # produce frames are rewritten in place by the log: fresh copies each round
            frames = [memoryview(bytearray(f)) for f in produce]
            results[("produce", name)].append(timed(d, frames))
            results[("fetch", name)].append(timed(d, fetch))
    # the counters alone: observe() on one produce and one fetch request/response pair
    from kbroker.wire.frame import decode_request
    cost = {}
    for kind, frame in (("produce", memoryview(bytearray(_produce_frame(0)))), ("fetch", fetch[0])):
        _, req = decode_request(frame)
        resp = server.api_specs[req.API_KEY].handle(_ctx(server, req), req)
        if hasattr(resp, "__await__"):
            resp = loop.run_until_complete(resp)
        m = server.request_metrics
        n = 50000
        t = time.perf_counter()
        for _ in range(n):
            m.observe(req.API_KEY, 9, req, resp, 0, 1000, 2000)
        cost[kind] = (time.perf_counter() - t) / n * 1e6
    loop.run_until_complete(server.shutdown())
    loop.close()
    print(f"| request ({requests} per round, {rounds} rounds, median) | metrics off, us/request | metrics on, us/request | on / off |")
    print("|---|---:|---:|---:|")
    for kind in ("produce", "fetch"):
        a = statistics.median(results[(kind, "off")])
        b = statistics.median(results[(kind, "on")])
        print(f"| {kind} | {a:.1f} | {b:.1f} | {b / a:.3f} |")
    for kind, us in cost.items():
        print(f"observe() alone, {kind}: {us:.2f} us/request")
    print(f"messages in counted: {sum(t.messages_in for t in server.request_metrics.topics.values())}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    run(a.requests, a.rounds)
