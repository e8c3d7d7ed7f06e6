"""Cost of a full sessionless fetch (librdkafka's only kind) against its partition count, in-process.

    python benchmarks/bench_full_fetch.py [--partitions 1000,10000] [--fetches 30]

A broker (in this process, fake clock, no sockets) hosts P partitions (topics of 1,000), each
holding one small batch. A consumer's fetch names every partition (session id 0, epoch -1,
as librdkafka sends it each time) and is timed from the request bytes to the response
chunks: decode, the handler, encode. Two shapes: "caught up" (every fetch offset at the high
watermark: the fetches of a consumer that has read everything, nothing to return) and
"all data" (every partition from offset 0). Reported: mean milliseconds per fetch and
microseconds per partition; then the same fetches dispatched on the broker's event loop
(``Dispatcher``, as a connection hands them over) beside a task that counts its turns: the
longest time the loop was held between two of its turns, median and worst over the fetches
(issue 15's budget is 10 ms). ``bench_scale.py`` is the end-to-end row against Kafka.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kbroker import gc_policy  # noqa: E402
from kbroker.handlers.dispatcher import Dispatcher  # noqa: E402
from kbroker.wire.frame import encode_request, encode_response_chunks  # noqa: E402
from kbroker.wire.generated.fetch_request import FetchRequest  # noqa: E402
from kbroker.wire.primitives import Reader  # noqa: E402

from bench_fetch_sessions import offline_partitions, one_record_everywhere, stop_and_remove  # noqa: E402

T = FetchRequest.FetchTopic
VERSION = 16


def run(partitions: int, fetches: int) -> dict[str, float]:
    server, call, topics = offline_partitions(partitions, "ff")
    one_record_everywhere(call, topics, 1024)
    ids = {name: server.image.topics_by_name[name].topic_id for name, _ in topics}
    gc.collect()
    gc.freeze()   # as a serving broker does after start-up and topic creation (kbroker.server)
    out = {}
    for shape, offset in (("caught up", 1), ("all data", 0)):
        req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=52428800, session_id=0, session_epoch=-1,
                           topics=[T(topic_id=ids[name], partitions=[T.FetchPartition(
                               partition=i, current_leader_epoch=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                               for i in range(n)]) for name, n in topics], forgotten_topics_data=[], rack_id="")
        frame = memoryview(encode_request(1, "bench", req, VERSION))
        body_at = 4 + 2 + 2 + 4 + 2 + len("bench") + 1   # size, key, version, corr, client id, tags
        t0 = time.perf_counter()
        for _ in range(fetches):
            decoded = FetchRequest.read(Reader(frame, body_at), VERSION)
            resp = call(1, VERSION, decoded)
            encode_response_chunks(1, 1, VERSION, resp)
        out[shape] = (time.perf_counter() - t0) / fetches * 1000
        parts = sum(len(t.partitions) for t in resp.responses)
        assert parts == partitions and all(p.error_code == 0 for t in resp.responses for p in t.partitions)
        out[shape + " held"] = server.loop.run_until_complete(
            _longest_holds(Dispatcher(server, server.api_specs), frame[4:], fetches))
    gc.unfreeze()
    stop_and_remove(server)
    return out


async def _longest_holds(dispatcher, frame, fetches: int) -> tuple[float, float]:
    """(median, worst) over ``fetches`` of the longest gap, in ms, between two turns of a
    task that yields at every loop iteration while one fetch is dispatched and answered."""
    worst_of_each = []
    for _ in range(fetches):
        done = False
        last = time.perf_counter()
        worst = 0.0

        async def ticker():
            nonlocal last, worst
            while not done:
                now = time.perf_counter()
                worst = max(worst, now - last)
                last = now
                await asyncio.sleep(0)
        t = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        last, worst = time.perf_counter(), 0.0
        out = dispatcher.dispatch(None, frame)
        if inspect.isawaitable(out):
            await out
        done = True
        await t
        worst_of_each.append(worst * 1000)
    return statistics.median(worst_of_each), max(worst_of_each)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", default="1000,10000")
    ap.add_argument("--fetches", type=int, default=30)
    args = ap.parse_args()
    gc_policy.for_serving()   # the serving broker's collector thresholds (kbroker.server)
    print("| partitions | caught up: ms / fetch | us / partition | all data: ms / fetch | us / partition "
          "| loop held, caught up: median / worst ms | loop held, all data: median / worst ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for p in [int(x) for x in args.partitions.split(",")]:
        r = run(p, args.fetches)
        print(f"| {p} | {r['caught up']:.1f} | {r['caught up'] * 1000 / p:.1f} "
              f"| {r['all data']:.1f} | {r['all data'] * 1000 / p:.1f} "
              f"| {r['caught up held'][0]:.1f} / {r['caught up held'][1]:.1f} "
              f"| {r['all data held'][0]:.1f} / {r['all data held'][1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
