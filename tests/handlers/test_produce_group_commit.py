"""flush.messages=1: the produce answer waits for an fsync that runs off the loop (in a thread,
or in the kernel through native AIO; the event loop keeps serving), and produces that arrive
while it runs share the next one."""

import asyncio
import os
import threading

from kbroker.handlers.context import RequestContext
from kbroker.handlers.deferred import Deferred
from kbroker.log import aio_fsync, fill_ahead
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.generated.produce_request import ProduceRequest

from test_handlers import batch, create


def _ctx(server, api_key, version):
    return RequestContext(server, None, api_key, version, 1, "test", server.clock.now_ms(), "PLAINTEXT")


def _produce_req(topic, records, acks=1):
    T = ProduceRequest.TopicProduceData
    return ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=records)])])


def test_acks_wait_for_a_shared_fsync_off_the_loop(broker, monkeypatch, fsync_path, submit_held):
    monkeypatch.setattr(fill_ahead, "ZEROS", False)   # its fsyncs are not group commit's
    assert create(broker, "durable", configs={"flush.messages": "1"}).topics[0].error_code == 0
    server = broker.server
    plog = server.log_manager.get("durable", 0)
    gate = threading.Event()
    started = threading.Event()
    calls = []
    real_fdatasync, real_aio = os.fdatasync, aio_fsync.AioFsync.fdatasync

    def slow_fdatasync(fd):   # the first fsync blocks until the test lets it go
        calls.append(threading.current_thread() is threading.main_thread())
        started.set()
        if len(calls) == 1:
            gate.wait(10)
        return real_fdatasync(fd)

    def slow_aio(aio, fd, callback):   # submitted on the loop; the kernel runs it
        calls.append(False)
        started.set()
        if len(calls) > 1:
            return real_aio(aio, fd, callback)
        submit_held(real_aio, aio, fd, callback, gate)   # its end held until the test lets it go

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    monkeypatch.setattr(aio_fsync.AioFsync, "fdatasync", slow_aio)
    spec = server.api_specs[0]

    async def main():
        first = asyncio.ensure_future(spec.handle(_ctx(server, 0, 9), _produce_req("durable", batch(2))))
        while not started.is_set():
            await asyncio.sleep(0.001)
        # the fsync is running: the loop still answers other requests ...
        md = server.api_specs[3].handle(_ctx(server, 3, 12), MetadataRequest(topics=None))
        if asyncio.iscoroutine(md) or isinstance(md, asyncio.Future):
            md = await md
        assert any(t.name == "durable" for t in md.topics)
        # ... and takes more appends, which wait too
        later = [asyncio.ensure_future(spec.handle(_ctx(server, 0, 9), _produce_req("durable", batch(1))))
                 for _ in range(20)]
        await asyncio.sleep(0.05)
        assert not first.done() and not any(f.done() for f in later)
        gate.set()
        return await first, await asyncio.gather(*later)

    first, later = broker.loop.run_until_complete(main())
    assert first.responses[0].partition_responses[0].error_code == 0
    assert all(r.responses[0].partition_responses[0].error_code == 0 for r in later)
    # no fsync ran on the loop's thread; the 20 produces made during the first one shared the next
    assert calls and not any(calls)
    assert len(calls) == 2 and plog.sync_rounds == 2


def test_an_answer_waiting_for_its_fsync_does_not_hold_the_records_buffer(broker):
    """The dispatcher keeps the request until the answer (metrics); the records it carried
    are in the log by then, and keeping their receive buffer for every request in flight
    made each new one fresh memory."""
    import sys

    assert create(broker, "held", configs={"flush.messages": "1"}).topics[0].error_code == 0
    server = broker.server
    spec = server.api_specs[0]
    buf = bytearray(batch(3))
    req = _produce_req("held", memoryview(buf))
    base = sys.getrefcount(buf)

    async def main():
        pending = spec.handle(_ctx(server, 0, 9), req)   # appended; the answer waits
        assert isinstance(pending, Deferred)
        refs = sys.getrefcount(buf)
        resp = await pending
        return refs, resp

    refs, resp = broker.loop.run_until_complete(main())
    assert resp.responses[0].partition_responses[0].error_code == 0
    assert refs < base                              # only the test's own reference is left
    assert len(req.topic_data[0].partition_data[0].records) == len(buf)   # what metrics read


def test_a_produce_waiting_for_its_fsync_is_answered_without_a_task(broker):
    """The dispatcher hands the connection a plain future for it (no Task, no coroutine): the
    fsync round's own callback encodes the answer, with the request's correlation id."""
    from kbroker.handlers.dispatcher import Dispatcher
    from kbroker.wire.frame import decode_response, encode_request

    assert create(broker, "quick", configs={"flush.messages": "1"}).topics[0].error_code == 0
    server = broker.server
    dispatcher = Dispatcher(server, server.api_specs)
    frame = memoryview(encode_request(77, "t", _produce_req("quick", batch(2), acks=-1), 9)[4:])

    async def main():
        out = dispatcher.dispatch(None, frame)
        assert isinstance(out, asyncio.Future) and not isinstance(out, asyncio.Task)
        assert not out.done()                        # the fsync has not run yet
        return await asyncio.wait_for(out, 10)

    chunks = broker.loop.run_until_complete(main())
    body = b"".join(bytes(c) for c in chunks)
    corr, resp = decode_response(memoryview(body)[4:], 0, 9)
    assert corr == 77 and resp.responses[0].partition_responses[0].error_code == 0
    assert server.log_manager.get("quick", 0).sync_rounds >= 1


def test_a_deferred_answer():
    d, seen = Deferred(), []
    d.then(lambda r, e: seen.append((r, e)))
    d.resolve("first")
    d.resolve("second")                              # the first completion wins
    d.then(lambda r, e: seen.append((r, e)))         # subscribing later: called at once
    assert seen == [("first", None), ("first", None)] and d.done()

    async def awaited():
        failing = Deferred()
        asyncio.get_running_loop().call_soon(failing.resolve, None, ValueError("no"))
        try:
            await failing
        except ValueError as e:
            return str(e)
    assert asyncio.run(awaited()) == "no"


def test_a_failed_fsync_answers_that_partition_with_a_storage_error(broker, monkeypatch, fsync_path):
    """The error reaches the partition's answer (KAFKA_STORAGE_ERROR, retriable); the request
    itself is answered, so the connection stays up."""
    from kbroker.handlers.dispatcher import Dispatcher
    from kbroker.wire.errors import Errors
    from kbroker.wire.frame import decode_response, encode_request

    assert create(broker, "failing", configs={"flush.messages": "1"}).topics[0].error_code == 0
    server = broker.server

    def broken(fd):
        raise OSError(5, "Input/output error")

    def broken_aio(aio, fd, callback):   # the kernel reports EIO at the fsync's end
        asyncio.get_running_loop().call_soon(callback, 5)
    monkeypatch.setattr(os, "fdatasync", broken)
    monkeypatch.setattr(os, "fsync", broken)
    monkeypatch.setattr(aio_fsync.AioFsync, "fdatasync", broken_aio)
    frame = memoryview(encode_request(5, "t", _produce_req("failing", batch(1), acks=-1), 9)[4:])

    async def main():
        return await asyncio.wait_for(Dispatcher(server, server.api_specs).dispatch(None, frame), 10)

    chunks = broker.loop.run_until_complete(main())
    _corr, resp = decode_response(memoryview(b"".join(bytes(c) for c in chunks))[4:], 0, 9)
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (Errors.KAFKA_STORAGE_ERROR, -1)
