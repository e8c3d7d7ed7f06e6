"""A full fetch of many partitions (librdkafka sends nothing else) is read and answered in
slices: the loop serves others meanwhile, the answer is the one-go answer, and an append to a
partition already read during the slices still wakes its long poll."""

import asyncio
import functools

from kbroker.handlers import fetch as fetch_handler
from kbroker.handlers.context import RequestContext
from kbroker.slices import run_in_slices, run_to_end
from kbroker.wire.frame import encode_response_chunks

from test_handlers import batch, create, produce
from kbroker.wire.generated.fetch_response import FetchResponse
from tests.handlers.test_full_fetch import T, FetchRequest
from tests.loop_ticks import with_ticker

VERSION = 16


def _request(tid, parts, offset, max_wait_ms=0, min_bytes=0):
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20, session_id=0,
                        session_epoch=-1, topics=[T(topic_id=tid, partitions=[T.FetchPartition(
                            partition=p, fetch_offset=offset, current_leader_epoch=-1,
                            partition_max_bytes=1 << 20) for p in range(parts)])],
                        forgotten_topics_data=[], rack_id="")


def _bytes(resp, version=VERSION) -> bytes:
    out = []
    for c in encode_response_chunks(7, 1, version, resp):
        if isinstance(c, (bytes, bytearray, memoryview)):
            out.append(bytes(c))
        else:   # the log's file regions: their bytes
            out.append(c.to_bytes())
    return b"".join(out)


def _setup(broker, monkeypatch, parts=40):
    tid = create(broker, "wide", parts).topics[0].topic_id
    for p in range(0, parts, 3):
        produce(broker, "wide", p, batch(2))
    monkeypatch.setattr(fetch_handler, "STEP_PARTITIONS", 4)
    monkeypatch.setattr(fetch_handler, "run_in_slices", functools.partial(run_in_slices, slice_s=0))
    # the one-go answers compared with sliced ones read everything (on a loaded machine 40
    # partitions' reads can pass the 3 ms at which a one-go read stops)
    monkeypatch.setattr(fetch_handler, "READ_WHOLE_S", 60.0)
    server = broker.server
    return tid, server, server.api_specs[1]


def _ctx(server):
    return RequestContext(server, None, 1, VERSION, 7, "test", server.clock.now_ms(), "PLAINTEXT")


def test_sliced_answer_is_the_one_go_answer_and_yields(broker, monkeypatch):
    tid, server, spec = _setup(broker, monkeypatch)
    whole = spec.handle(_ctx(server), _request(tid, 40, 0))       # 40 partitions: one go
    assert isinstance(whole, fetch_handler.FetchResponse)
    monkeypatch.setattr(fetch_handler, "SLICED_FETCH_PARTITIONS", 10)
    out = spec.handle(_ctx(server), _request(tid, 40, 0))
    assert asyncio.iscoroutine(out)
    sliced, ticks = broker.loop.run_until_complete(with_ticker(out))
    assert ticks >= 20           # others ran between the steps (entries, reads, answer)
    assert _bytes(sliced) == _bytes(whole)
    assert sum(1 for p in sliced.responses[0].partitions if p.high_watermark == 2) == 14
    # nothing left watching the partitions: the fetch answered at once
    assert all(not p.waiters for p in server.replicas.topics["wide"].values())


def test_append_during_sliced_read_wakes_the_long_poll(broker, monkeypatch):
    tid, server, spec = _setup(broker, monkeypatch)
    monkeypatch.setattr(fetch_handler, "SLICED_FETCH_PARTITIONS", 10)
    offsets = {p: (2 if p % 3 == 0 else 0) for p in range(40)}
    real_read_steps = fetch_handler._read_steps
    appended = []

    def read_steps(entries, *a, **kw):
        # the first pause comes after partitions 0-3 were read (nothing new there): then an
        # append to partition 0, while the rest is still being read
        steps = real_read_steps(entries, *a, **kw)
        first = True
        try:
            while True:
                next(steps)
                if first and not appended:
                    produce(broker, "wide", 0, batch(1))
                    appended.append(True)
                first = False
                yield
        except StopIteration as done:
            return done.value
    monkeypatch.setattr(fetch_handler, "_read_steps", read_steps)

    async def main():
        # caught up everywhere: a long poll of up to 10 s once the slices are read
        req = _request(tid, 40, 0, max_wait_ms=10_000, min_bytes=1)
        for fp in req.topics[0].partitions:
            fp.fetch_offset = offsets[fp.partition]
        return await asyncio.wait_for(spec.handle(_ctx(server), req), 5)

    resp = broker.loop.run_until_complete(main())
    assert appended
    p0 = resp.responses[0].partitions[0]
    assert p0.high_watermark == 3 and len(p0.records) > 0   # (small records: read inline, bytes)


def test_stitched_encoding_matches_every_version_and_takes_a_later_throttle(broker, monkeypatch):
    tid, server, spec = _setup(broker, monkeypatch)
    resp = spec.handle(_ctx(server), _request(tid, 40, 0))    # records on every third partition
    for v in range(fetch_handler.MIN_VERSION, fetch_handler.MAX_VERSION + 1):
        # v16+ carries leader endpoints in a tagged field after the topics
        resp.node_endpoints = [FetchResponse.NodeEndpoint(node_id=1, host="h", port=9, rack=None)] if v >= 16 else []
        enc = run_to_end(fetch_handler._encode_steps(resp, v))
        assert _bytes(enc, v) == _bytes(resp, v), v
        enc.throttle_time_ms = resp.throttle_time_ms = 250    # a quota, after the handler
        assert _bytes(enc, v) == _bytes(resp, v), v
        resp.throttle_time_ms = 0


def _caught_up(server, tid, max_wait_ms):
    req = _request(tid, 40, 0, max_wait_ms=max_wait_ms, min_bytes=1)
    parts = server.replicas.topics["wide"]
    for fp in req.topics[0].partitions:
        fp.fetch_offset = parts[fp.partition].high_watermark
    return req


def _watched(server):
    return [p.index for p in server.replicas.topics["wide"].values() if p.waiters]


async def _polling(server, spec, tid, max_wait_ms):
    """A caught-up long poll, once its read slices are done and it waits on every partition."""
    task = asyncio.ensure_future(spec.handle(_ctx(server), _caught_up(server, tid, max_wait_ms)))
    for _ in range(200):
        await asyncio.sleep(0)
    assert len(_watched(server)) == 40
    return task


def test_sliced_long_poll_leaves_no_watch_behind(broker, monkeypatch):
    """The long poll's watch on every partition is taken back in slices after the wait (it
    was one pass over all of them, ~1 ms at 10,000): after a timeout, after a wake-up, and
    when the client goes away in the middle of the wait."""
    tid, server, spec = _setup(broker, monkeypatch)
    monkeypatch.setattr(fetch_handler, "SLICED_FETCH_PARTITIONS", 10)

    async def timed_out():
        task = await _polling(server, spec, tid, 50)
        server.clock.advance(100)        # (the broker's clock is a fake: past the deadline)
        return await asyncio.wait_for(task, 5)
    resp = broker.loop.run_until_complete(timed_out())
    assert all(p.high_watermark in (0, 2) and not p.records for p in resp.responses[0].partitions)
    assert _watched(server) == []

    async def woken():
        task = await _polling(server, spec, tid, 10_000)
        produce(broker, "wide", 7, batch(1))
        return await asyncio.wait_for(task, 5)
    resp = broker.loop.run_until_complete(woken())
    assert resp.responses[0].partitions[7].high_watermark == 1
    assert _watched(server) == []

    async def cancelled():
        task = await _polling(server, spec, tid, 10_000)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    broker.loop.run_until_complete(cancelled())
    assert _watched(server) == []


def _pauses(steps) -> int:
    n = 0
    try:
        while True:
            next(steps)
            n += 1
    except StopIteration:
        return n


def test_partitions_with_records_to_read_pause_more_often_than_caught_up_ones(broker, monkeypatch):
    # a read (and its pread for the answer) costs ~8 caught-up partitions: 128 of them with
    # records made a 2-2.5 ms step, past the 2 ms slice
    parts = 64
    tid = create(broker, "dense", parts).topics[0].topic_id
    for p in range(parts):
        produce(broker, "dense", p, batch(1))
    monkeypatch.setattr(fetch_handler, "STEP_PARTITIONS", 16)
    monkeypatch.setattr(fetch_handler, "SLICED_FETCH_PARTITIONS", 10)   # its answer encoded in steps too
    server = broker.server
    reads = _pauses(fetch_handler._handle_steps(_ctx(server), _request(tid, parts, 0)))
    caught_up = _pauses(fetch_handler._handle_steps(_ctx(server), _request(tid, parts, 1)))
    # caught up: 4 pauses in each pass over the 64 partitions; with records about one per
    # two partitions in the reads and again in the encoding (each record set is pread there)
    assert reads - caught_up >= parts // 2, (reads, caught_up)
