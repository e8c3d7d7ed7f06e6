"""A produce request naming many partitions appends in slices (one of 1,000 partitions of
10 KiB held the loop ~28 ms), and the produce requests of one connection still append in
the order they came: a later one waits for the sliced one's appends."""

import asyncio
import functools

from kbroker.handlers import produce as produce_handler
from kbroker.handlers.context import RequestContext
from kbroker.slices import run_in_slices
from kbroker.wire.generated.produce_request import ProduceRequest

from test_handlers import batch, create
from tests.loop_ticks import with_ticker

T = ProduceRequest.TopicProduceData
N = 40


def _request(topic, parts, records, acks=1):
    return ProduceRequest(acks=acks, timeout_ms=1000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=p, records=bytearray(records)) for p in parts])])


def _ctx(server, conn):
    return RequestContext(server, conn, 0, 9, 1, "test", server.clock.now_ms(), "PLAINTEXT")


def _setup(broker, monkeypatch):
    create(broker, "many", N)
    monkeypatch.setattr(produce_handler, "SLICED_PRODUCE_PARTITIONS", 8)
    monkeypatch.setattr(produce_handler, "STEP_PARTITIONS", 4)
    monkeypatch.setattr(produce_handler, "run_in_slices", functools.partial(run_in_slices, slice_s=0))
    server = broker.server
    return server, server.api_specs[0]


def _offsets(resp):
    return {p.index: (p.error_code, p.base_offset) for t in resp.responses for p in t.partition_responses}


def test_a_produce_of_many_partitions_appends_in_slices(broker, monkeypatch):
    server, spec = _setup(broker, monkeypatch)

    async def main():
        out = spec.handle(_ctx(server, object()), _request("many", range(N), batch(3)))
        assert asyncio.isfuture(out) or asyncio.iscoroutine(out)
        return await with_ticker(out)
    resp, ticks = broker.loop.run_until_complete(main())
    assert ticks >= N // 4 - 1                    # others ran between the steps
    assert _offsets(resp) == {p: (0, 0) for p in range(N)}
    assert all(server.replicas.topics["many"][p].log.log_end_offset == 3 for p in range(N))


def test_a_connections_later_produce_appends_after_its_sliced_one(broker, monkeypatch):
    server, spec = _setup(broker, monkeypatch)
    conn, other = object(), object()

    async def main():
        big = spec.handle(_ctx(server, conn), _request("many", range(N), batch(3)))
        # the same connection's next request, to the last partition of the big one: it must
        # land after it although it is small enough to be handled at once
        small = spec.handle(_ctx(server, conn), _request("many", [N - 1], batch(2)))
        # another connection is not held back
        elsewhere = spec.handle(_ctx(server, other), _request("many", [N - 2], batch(1)))
        assert not (asyncio.isfuture(elsewhere) or asyncio.iscoroutine(elsewhere))
        return await big, await small, elsewhere
    big, small, elsewhere = broker.loop.run_until_complete(main())
    assert _offsets(big)[N - 1] == (0, 0)
    assert _offsets(small) == {N - 1: (0, 3)}     # after the big request's 3 records
    assert _offsets(elsewhere) == {N - 2: (0, 0)}  # appended before the sliced request got there
    assert _offsets(big)[N - 2] == (0, 1)
    assert produce_handler._appending == {}        # nothing left waiting on the connection


def test_an_idempotent_producers_pipelined_batches_stay_in_sequence(broker, monkeypatch):
    """An idempotent producer sends its next request before the sliced one is answered:
    without the order its batch for a partition the slices had not reached yet came first
    and was refused (OUT_OF_ORDER_SEQUENCE)."""
    server, spec = _setup(broker, monkeypatch)
    pid = broker.call(22, 4, _init_pid()).producer_id
    conn = object()

    async def main():
        first = spec.handle(_ctx(server, conn), _request("many", range(N), batch(2, pid=pid, seq=0)))
        second = spec.handle(_ctx(server, conn), _request("many", [N - 1], batch(2, pid=pid, seq=2)))
        return await first, await second
    first, second = broker.loop.run_until_complete(main())
    assert all(code == 0 for code, _ in _offsets(first).values())
    assert _offsets(second) == {N - 1: (0, 2)}


def _init_pid():
    from kbroker.wire.generated.init_producer_id_request import InitProducerIdRequest
    return InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)


def test_a_cancelled_sliced_produce_releases_its_connection(broker, monkeypatch):
    server, spec = _setup(broker, monkeypatch)
    conn = object()

    async def main():
        big = spec.handle(_ctx(server, conn), _request("many", range(N), batch(1)))
        big.cancel()
        await asyncio.gather(big, return_exceptions=True)
        assert produce_handler._appending == {}
        later = spec.handle(_ctx(server, conn), _request("many", [0], batch(1)))
        return later
    later = broker.loop.run_until_complete(main())
    assert not (asyncio.isfuture(later) or asyncio.iscoroutine(later))   # nothing to wait for
    assert _offsets(later)[0][0] == 0
