"""A large request is decoded in slices (a Fetch naming 10,000 partitions took ~5 ms to
decode in one step): the loop serves others meanwhile, the answer is the one-go answer, and
the connection's later requests are handled after it, in order, as Kafka handles them. One
that decodes quickly, a large Produce of few partitions, is decoded and handled at once."""

import asyncio
import dataclasses
import gc

from kbroker.handlers import dispatcher as dispatcher_mod
from kbroker.handlers.dispatcher import Dispatcher
from kbroker.wire.frame import decode_response, encode_request
from kbroker.wire.generated.fetch_request import FetchRequest
from kbroker.wire.generated.produce_request import ProduceRequest
from kbroker.wire.records import BatchBuilder

from test_handlers import create
from tests.net.test_connection import read_frames, start as start_connection

P = ProduceRequest.TopicProduceData


def _batch(value: bytes):
    b = BatchBuilder()
    b.append(key=None, value=value, timestamp=1_700_000_000_000)
    return b.build()


def _produce(topic, parts, value):
    return ProduceRequest(acks=1, timeout_ms=1000, topic_data=[P(name=topic, partition_data=[
        P.PartitionProduceData(index=p, records=_batch(value)) for p in parts])])


def _fetch(topic_id, parts):
    T = FetchRequest.FetchTopic
    return FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                        topics=[T(topic_id=topic_id, partitions=[T.FetchPartition(
                            partition=p, fetch_offset=0, partition_max_bytes=1024) for p in range(parts)])],
                        forgotten_topics_data=[], rack_id="")


def _answer(chunks, api_key, version):
    body = b"".join(bytes(c) if not hasattr(c, "to_bytes") else c.to_bytes() for c in chunks)
    return decode_response(memoryview(body)[4:], api_key, version)


def test_a_large_fetch_is_decoded_in_slices_and_answered_as_in_one_go(broker, monkeypatch):
    tid = create(broker, "wide", 3000).topics[0].topic_id
    server = broker.server
    frame = memoryview(encode_request(5, "t", _fetch(tid, 3000), 13))[4:]
    assert len(frame) > dispatcher_mod.DECODE_IN_STEPS_BYTES
    handled_at = []
    collector_on = []
    ticks = 0
    real = server.api_specs[1].handle

    def handle(ctx, req):
        handled_at.append(ticks)
        collector_on.append(gc.isenabled())
        return real(ctx, req)
    d = Dispatcher(server, {**server.api_specs, 1: dataclasses.replace(server.api_specs[1], handle=handle)})

    async def main():
        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        start = ticks
        out = d.dispatch(None, frame)
        assert asyncio.iscoroutine(out)          # not decoded yet
        chunks = await out
        await asyncio.sleep(0)
        collector_on.append(gc.isenabled())
        t.cancel()
        return start, chunks

    monkeypatch.setattr("kbroker.slices.SLICE_S", 0)   # a turn per pause
    monkeypatch.setattr(dispatcher_mod, "DECODE_IN_PLACE_S", 0)   # one step in place
    start, sliced = broker.loop.run_until_complete(main())
    # the decode paused after every 128 partitions, and the ticker ran at each pause after
    # the first (in place)
    assert handled_at[0] - start >= 3000 // 128 - 1
    # the collector was quiet while the request's objects lived (kbroker.gc_policy), on after
    assert collector_on == [False, True]
    monkeypatch.setattr(dispatcher_mod, "DECODE_IN_STEPS_BYTES", 1 << 30)
    whole = d.dispatch(None, frame)
    if asyncio.iscoroutine(whole) or isinstance(whole, asyncio.Future):
        whole = broker.loop.run_until_complete(whole)
    assert _answer(sliced, 1, 13) == _answer(whole, 1, 13)
    assert len(_answer(sliced, 1, 13)[1].responses[0].partitions) == 3000


def test_a_large_produce_of_few_partitions_is_decoded_and_handled_at_once(broker):
    assert create(broker, "few", 2).topics[0].error_code == 0
    server = broker.server
    frame = memoryview(encode_request(4, "t", _produce("few", [0, 1], b"z" * 100_000), 9))[4:]
    assert len(frame) > dispatcher_mod.DECODE_IN_STEPS_BYTES
    out = Dispatcher(server, server.api_specs).dispatch(None, frame)
    assert isinstance(out, list)                     # the answer's chunks, no task
    corr, resp = _answer(out, 0, 9)
    assert corr == 4 and [p.error_code for p in resp.responses[0].partition_responses] == [0, 0]


def test_a_request_after_a_large_one_on_its_connection_is_handled_after_it(broker, monkeypatch):
    """A produce of 300 partitions is decoded in slices; the small produce behind it on the
    same connection, which would decode at once, appends after it (without the connection's
    hold it came first)."""
    monkeypatch.setattr(dispatcher_mod, "DECODE_IN_PLACE_S", 0)
    assert create(broker, "ordered", 300).topics[0].error_code == 0
    server = broker.server
    big = encode_request(1, "t", _produce("ordered", range(300), b"x" * 200), 9)
    small = encode_request(2, "t", _produce("ordered", [0], b"after"), 9)
    assert len(big) > dispatcher_mod.DECODE_IN_STEPS_BYTES > len(small)

    async def main():
        conn, peer = await start_connection(Dispatcher(server, server.api_specs), max_frame=1 << 20)
        await asyncio.get_running_loop().sock_sendall(peer, big + small)
        got = await read_frames(peer, 2, timeout=10)
        conn.close()
        peer.close()
        return got

    answers = [decode_response(memoryview(f), 0, 9) for f in broker.loop.run_until_complete(main())]
    assert [corr for corr, _ in answers] == [1, 2]
    offsets = [{p.index: p.base_offset for t in r.responses for p in t.partition_responses} for _, r in answers]
    assert offsets[0][0] == 0 and offsets[1] == {0: 1}
    assert all(offsets[0][p] == 0 for p in range(300))


def test_a_malformed_large_request_closes_its_connection(broker, monkeypatch):
    monkeypatch.setattr(dispatcher_mod, "DECODE_IN_PLACE_S", 0)
    server = broker.server
    d = Dispatcher(server, server.api_specs)
    frame = bytearray(encode_request(3, "t", _produce("none", range(300), b"y" * 200), 9)[4:])
    del frame[-100:]                                        # cut inside the last partition

    async def main():
        out = d.dispatch(None, memoryview(frame))
        try:
            await out
        except Exception as e:   # noqa: BLE001 - the connection closes on it
            return e
    err = broker.loop.run_until_complete(main())
    assert type(err).__name__ == "CloseConnection" and "malformed Produce v9 request" in str(err)


def test_a_large_fetch_cancelled_in_its_long_poll_leaves_nothing_for_a_collection(broker, monkeypatch):
    """Its client left: the request's partitions, its read results and its entries are gone at
    once, by reference count, while the collector is still quiet; not held by the traceback's
    frames or the sliced runner until a collection walks them (~10 ms for 10,000 partitions)."""
    monkeypatch.setattr(dispatcher_mod, "DECODE_IN_PLACE_S", 0)
    tid = create(broker, "left", 3000).topics[0].topic_id
    server = broker.server
    req = _fetch(tid, 3000)
    req.max_wait_ms, req.min_bytes = 60_000, 1            # caught up at 0: waits for records
    frame = memoryview(encode_request(7, "t", req, 13))[4:]
    del req
    d = Dispatcher(server, server.api_specs)

    def alive(kind):
        return sum(1 for o in gc.get_objects() if type(o) is kind)

    async def main():
        task = asyncio.ensure_future(d.dispatch(None, frame))
        for _ in range(200):
            await asyncio.sleep(0)
        in_poll = alive(FetchRequest.FetchTopic.FetchPartition)
        collector_quiet = not gc.isenabled()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return in_poll, collector_quiet, alive(FetchRequest.FetchTopic.FetchPartition)
    in_poll, quiet, after = broker.loop.run_until_complete(main())
    assert (in_poll, quiet) == (3000, True)                  # in its long poll, quiet
    assert after == 0
